"""StragglAR phase 1: a ReduceScatter among the m = n-1 punctual ranks over m chunks, ports = 1.

Each builder returns the steps in *member* labels (members 0..m-1) and ``owner[c]``, the member left
holding chunk c reduced over all members; the StragglAR builder places member owner[c] at local rank c
(the rank the straggler meets in round c), so any owner map works.

- ring: Patarasuk & Yuan (JPDC 2009), m-1 steps, (m-1)/m s per rank; member i reduces chunk i-k-1 into
  member i+1 in step k (the same pattern as synth/algorithms/patterns.add_ring_reducescatter).
- direct: pairwise shifted exchange, m-1 steps; in step k member i reduces chunk i+k straight into its
  owner i+k (each chunk goes to its owner in one hop; one port per rank per step, unlike the one-step
  all-to-all of the `direct` algorithm).
- rhd: recursive halving (Thakur, Rabenseifner & Gropp 2005) with the MPICH fold: with m' the largest
  power of two <= m and e = m - m', members m'+i first reduce their whole buffer into member i (i < e);
  m' members then halve over contiguous chunk blocks (member j's block has 2 chunks if j < e, else 1);
  finally member i copies the second chunk of its block to member m'+i. log2 m' + 2 steps (+0 if e = 0).
"""

from __future__ import annotations

from collsynth.errors import CollsynthError

# (src, dst, first chunk, count, reduce) in member labels
Step = list[tuple[int, int, int, int, bool]]
PHASE1 = ("ring", "direct", "rhd")


def reducescatter_steps(kind: str, m: int) -> tuple[list[Step], list[int]]:
    """Steps and chunk owners of a ReduceScatter of ``kind`` among m members over m chunks."""
    if kind == "ring":
        steps = [[(i, (i + 1) % m, (i - k - 1) % m, 1, True) for i in range(m)] for k in range(m - 1)]
        return steps, list(range(m))
    if kind == "direct":
        steps = [[(i, (i + k) % m, (i + k) % m, 1, True) for i in range(m)] for k in range(1, m)]
        return steps, list(range(m))
    if kind == "rhd":
        return _rhd(m)
    raise CollsynthError(f"unknown --phase1 {kind!r}: use one of {', '.join(PHASE1)}")


def _rhd(m: int) -> tuple[list[Step], list[int]]:
    mp = 1 << (m.bit_length() - 1)
    e = m - mp
    size = [2 if j < e else 1 for j in range(mp)]
    start = [sum(size[:j]) for j in range(mp + 1)]
    steps: list[Step] = []
    if e:
        steps.append([(mp + i, i, 0, m, True) for i in range(e)])
    d = mp // 2
    while d >= 1:
        step: Step = []
        for j in range(mp):
            q = j ^ d
            lo = q & ~(d - 1)
            step.append((j, q, start[lo], start[lo + d] - start[lo], True))
        steps.append(step)
        d //= 2
    owner = [0] * m
    for j in range(mp):
        owner[start[j]] = j
    if e:
        steps.append([(i, mp + i, start[i] + 1, 1, False) for i in range(e)])
        for i in range(e):
            owner[start[i] + 1] = mp + i
    return steps, owner
