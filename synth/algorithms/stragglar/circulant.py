"""Round-optimal pipelined broadcast for any node count on a circulant graph (Traeff, "Optimal broadcast
schedules in logarithmic time with applications to broadcast, all-broadcast, reduction and
all-reduction", ACM TOPC 2025, doi 10.1145/3735139; arXiv 2312.11236). Used by ``bcast.broadcast_rounds``
where N is not a power of two.

The communication pattern is the paper's: q = ceil(log2 N) skips, skip[q] = N and skip[k] =
ceil(skip[k + 1] / 2); in round i node r sends to r + skip[i mod q] and receives from r - skip[i mod q]
(mod N), so every round is a permutation and each node sends and receives at most one block. The blocks
are taken in cycles of q rounds; in every cycle each node receives one block of every residue mod q:
its *base block* b(r) (the index of the last skip in the greedy decomposition of r into decreasing
skips) from the current cycle, the q - 1 others from the previous cycle. The root sends block k of the
cycle in round k (to skip[k], whose base block is k). The paper computes each node's receive schedule
in O(log N) steps; we find the schedules instead with a small feasibility MILP over the same conditions
(our formulation: per node and round one block, per node and residue one round, and a block sent in a
round is held by the sender: its own base block of the previous cycle, or received earlier in the
cycle). A first partial cycle aligns the last block, blocks before 0 are not sent, blocks after the
last are the last one (dropped where the receiver has it): nblocks - 1 + q rounds, the one-port optimum
(Bar-Noy & Kipnis 1994). Every expansion is checked block by block before it is returned."""

from __future__ import annotations

import math
from functools import lru_cache

Round = list[tuple[int, int, int]]  # one round's moves: (src node, dst node, block), as bcast.Round

MAX_NODES = 512  # the MILP has about N q^2 binaries (2.5 s at 511 nodes); beyond this the caller's search serves


def skips(N: int) -> list[int]:
    """skip[0..q]: skip[q] = N, each the ceiling of half the next (the paper's roughly doubling skips)."""
    q = max(1, math.ceil(math.log2(N)))
    s = [0] * (q + 1)
    s[q] = N
    for k in range(q - 1, -1, -1):
        s[k] = (s[k + 1] + 1) // 2
    return s


def base_block(r: int, s: list[int]) -> int:
    """The index of the last (smallest) skip in the greedy decomposition of r into decreasing skips; q for
    the root."""
    q = len(s) - 1
    acc = 0
    for i in range(q - 1, -1, -1):
        if acc + s[i] == r:
            return i
        if acc + s[i] < r:
            acc += s[i]
    return q


@lru_cache(maxsize=64)
def receive_schedule(N: int) -> tuple[tuple[int, ...], ...] | None:
    """Per node r (the root's row empty) the block, relative to its cycle, it receives in each of the q
    rounds of a cycle: b(r) or a residue j - q (j != b(r), the previous cycle's). None when the MILP finds
    none (it exists for every N: Traeff's theorem) or N is out of range."""
    if N > MAX_NODES or N & (N - 1) == 0:  # also N < 3
        return None
    import pulp  # heavy: only when a non-power-of-two broadcast is built

    s = skips(N)
    q = len(s) - 1
    b = [base_block(r, s) for r in range(N)]
    allowed = {r: [b[r]] + [j - q for j in range(q) if j != b[r]] for r in range(1, N)}
    prob = pulp.LpProblem("circulant_receive_schedule", pulp.LpMinimize)
    x = {(r, k, v): pulp.LpVariable(f"x_{r}_{k}_{v + q}", cat="Binary")
         for r in range(1, N) for k in range(q) for v in allowed[r]}
    prob += pulp.lpSum([])
    for r in range(1, N):
        for k in range(q):
            prob += pulp.lpSum(x[r, k, v] for v in allowed[r]) == 1
        for v in allowed[r]:
            prob += pulp.lpSum(x[r, k, v] for k in range(q)) == 1
        for k in range(q):
            src = (r - s[k]) % N
            for v in allowed[r]:
                if src == 0:
                    if v != k:  # the root sends block k of the cycle in round k
                        prob += x[r, k, v] == 0
                elif v != b[src] - q:  # else the sender's own block of the previous cycle
                    prob += x[r, k, v] <= pulp.lpSum(x[src, kk, v] for kk in range(k) if (src, kk, v) in x)
    try:
        status = prob.solve(pulp.PULP_CBC_CMD(msg=False, threads=1))
    except pulp.PulpSolverError:  # no CBC binary: bcast.broadcast_rounds falls back to its search
        return None
    if pulp.LpStatus[status] != "Optimal":
        return None
    rows: list[tuple[int, ...]] = [()]
    for r in range(1, N):
        rows.append(tuple(next(v for v in allowed[r] if (x[r, k, v].value() or 0) > 0.5) for k in range(q)))
    return tuple(rows)


def circulant_rounds(N: int, nblocks: int) -> list[Round] | None:
    """The rounds of the circulant broadcast of ``nblocks`` blocks from node 0 (module docstring):
    nblocks - 1 + ceil(log2 N) rounds, each node sending and receiving at most one block per round; None
    where ``receive_schedule`` has none (N a power of two: the hypercube serves). Deterministic."""
    rec = receive_schedule(N)
    if rec is None or nblocks < 1:
        return None
    s = skips(N)
    q = len(s) - 1
    shift = (q - (nblocks - 1) % q) % q  # the first cycle starts at round `shift` so the last block ends one
    have = [0] * N
    have[0] = (1 << nblocks) - 1
    out: list[Round] = []
    for i in range(shift, nblocks - 1 + q + shift):
        cycle, k = divmod(i, q)
        moves: Round = []
        for r in range(1, N):
            j = rec[r][k] + cycle * q - shift
            if j < 0:
                continue
            j = min(j, nblocks - 1)
            if (have[r] >> j) & 1:
                continue
            src = (r - s[k]) % N
            if not (have[src] >> j) & 1:
                raise AssertionError(f"circulant broadcast on {N} nodes: node {src} sends block {j} before it has it")
            moves.append((src, r, j))
        for _, r, j in moves:
            have[r] |= 1 << j
        out.append(moves)
    if any(h != have[0] for h in have):
        raise AssertionError(f"circulant broadcast on {N} nodes, {nblocks} blocks: a node misses a block")
    return out
