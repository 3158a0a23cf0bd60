"""StragglAR phase 2 building blocks: the lower bound, cyclic designs and their search (plans: phase2.py).

Source: Devraj et al., "Efficient AllReduce with Stragglers", arXiv 2505.23523, restated with the
lower bound and the cyclic-design idea in docs/stragglar.md. Everything here is in *local* labels:
punctual GPUs 0..p-1 (p = n-1) and the straggler S = p; chunk c (p chunks) is owned by GPU c and is
reduced in round c by the exchange X(c, c) between GPU c and S. The builder relabels.

Lower bound (stragglar.md): phase 2 needs at least n - 2 + ceil(log2 n) rounds for every n >= 2.

A cyclic design of depth K gives every offset y in 1..p-1 a receive age a(y) in 1..K and a sender
offset s(y) (0, the born GPU, or an offset with a smaller age): GPU c+y receives chunk c from GPU
c+s(y) in round c+a(y). The receive residues (a(y)-y) mod p and the send residues (a(y)-s(y)) mod p
must each be distinct and nonzero; then every chunk can follow the same pattern without a port
conflict (residue 0 is the GPU exchanging with S). Chunks whose pattern would run past the last
round (the "tail") are planned separately on the ports the design leaves free, including S's.

Power of two, n = 2^K (p = 2^K - 1), closed form, no search. Write the receive round of offset y as
the point z(y) = y + K - a(y) of Z_p; z must be a permutation and the send cells (y, w) (w = y + K - b
for a send at age b) must cover Z_p once. Take the non-leaf offsets on one cycle 0 -> K -> ... -> 0
that winds once around Z_p, with gaps g (row y's gap is the step to the next cycle element, its age
is K - g); gap K for row 0, and gap g in 1..K-1 used 2^(K-1-g) times (the gaps sum to p). Every
other offset is a leaf of age K. Each non-leaf sends at every age after its own, except row K, idle
at age K where row 0's exchange sits; the send ranges [y, z(y)-1] then tile Z_p, and the counts
per age match (holders double). The last chunk p-1 is the tail: it follows its own design up to age
K-1, and in round p-1+i (i = 1..K-1) S hands it to GPU i-1, which spreads it along the design cells
the nonexistent chunk p-1+i would have used (a "virtual tree"). Row y of the cycle with gap g
contributes the g consecutive GPUs y-1 .. y+g-2 to these trees, so the trees partition the GPUs:
n - 2 + log2 n rounds, the lower bound.

Other n (even and odd): the design (depth ceil(log2 n) + 1) and the tail (the last two chunks, on
the free ports and S) are found by two small integer programs (pulp/CBC), each a few hundred to a
few thousand binaries; the round count starts at the lower bound and grows only if a program is
infeasible. Odd n works the same way: the model allows one-way sends, so the parity problem of the
paper's pairwise swaps never arises.

Pipelining (k(n-1) chunks, issue 9): chunk c is born at GPU c mod p in round c, and the same design
is copied for every chunk; the port conditions are residues mod p, so the steady state is unchanged
and only the tail differs. Powers of two: the virtual-tree tail of the last chunk k p - 1 (born at
GPU p-1 like chunk p-1) shifted by (k-1)p rounds. Other n: the tail program over the last two chunks
with the exchanges running to round k p - 1. Both reach the bound k(n-1) - 1 + ceil(log2 n) for every
n <= 64 and k <= 8 tried except n = 3, where no design exists (p = 2) and a rotation (_three_plan)
takes one round more.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

# A phase-2 transfer in local labels: (round, src, dst, chunk, reduce). S = p.
Move = tuple[int, int, int, int, bool]


def ceil_log2(n: int) -> int:
    return (n - 1).bit_length()


def lower_bound(n: int, k: int = 1) -> int:
    """Phase-2 rounds no schedule can beat with k(n-1) chunks: k(n-1) - 1 + ceil(log2 n) (stragglar.md:
    S sends each of its k(n-1) raw chunks at least once, one per round, and the last one then needs
    ceil(log2 n) - 1 doubling rounds); n - 2 + ceil(log2 n) for k = 1."""
    return k * (n - 1) - 1 + ceil_log2(n)


def is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


@dataclass(frozen=True)
class Design:
    """A cyclic design on Z_p: ``age[y]`` and ``sender[y]`` for offsets y = 1..p-1 (index 0 unused)."""

    p: int
    K: int
    age: tuple[int, ...]
    sender: tuple[int, ...]

    def problems(self) -> list[str]:
        """Every violated condition (empty when the design is valid)."""
        p, out = self.p, []
        recv: dict[int, int] = {}
        send: dict[int, int] = {}
        for y in range(1, p):
            a, s = self.age[y], self.sender[y]
            if not 1 <= a <= self.K:
                out.append(f"offset {y}: age {a} outside 1..{self.K}")
            if s != 0 and not (1 <= s < p and self.age[s] < a):
                out.append(f"offset {y}: sender {s} does not hold the chunk at age {a}")
            for table, r, what in ((recv, (a - y) % p, "receive"), (send, (a - s) % p, "send")):
                if r == 0:
                    out.append(f"offset {y}: {what} residue 0 collides with the exchange")
                elif r in table:
                    out.append(f"offsets {table[r]} and {y}: same {what} residue {r}")
                table[r] = y
        return out


def pow2_design(K: int) -> Design:
    """The closed-form design for n = 2^K (see the module docstring)."""
    p = (1 << K) - 1
    age = [K] * p
    age[0] = 0
    gaps = [g for g in range(K - 1, 0, -1) for _ in range(1 << (K - 1 - g))]
    y = K
    for g in gaps:
        age[y] = K - g
        y += g
    assert y == p, (K, y)
    return Design(p, K, tuple(age), _pair_senders(p, K, age, idle={(K, K)} if p > K else set()))


def _pair_senders(p: int, K: int, age: Sequence[int], idle: set[tuple[int, int]]) -> tuple[int, ...]:
    """Saturated senders: every holder sends at every later age except the (row, age) cells in
    ``idle``; per age, receivers and senders are paired in increasing order."""
    sender = [-1] * p
    by_age: dict[int, list[int]] = defaultdict(list)
    for y in range(1, p):
        by_age[age[y]].append(y)
    holders = [0]
    for a in range(1, K + 1):
        senders = [h for h in holders if (h, a) not in idle]
        recv = by_age.get(a, [])
        if len(senders) < len(recv):
            raise AssertionError(f"design p={p}: age {a} has {len(recv)} receivers, {len(senders)} senders")
        for r, s in zip(recv, senders):
            sender[r] = s
        holders = sorted(holders + recv)
    return tuple(sender)


def search_design(p: int, K: int, time_limit: float = 120.0, attempts: int = 8,
                  max_nodes: int = 500) -> Design | None:
    """A design of depth K on Z_p found by integer programming (None if none was found).

    Feasibility only; CBC's branch and bound is erratic on it, so each attempt minimises a different
    pseudo-random cost (seeded by the attempt number) and stops at the first feasible point or after
    ``max_nodes`` nodes (deterministic); a last attempt runs under ``time_limit`` seconds."""
    import random

    import pulp

    for attempt in range(1, attempts + 2):
        last = attempt == attempts + 1
        rng = random.Random(attempt)
        prob = pulp.LpProblem("stragglar_design", pulp.LpMinimize)
        r = {(y, a): pulp.LpVariable(f"r_{y}_{a}", cat="Binary")
             for y in range(1, p) for a in range(1, K + 1) if (a - y) % p}
        q = {(y, a): pulp.LpVariable(f"q_{y}_{a}", cat="Binary")
             for y in range(p) for a in range(1, K + 1) if (a - y) % p and (y == 0 or a >= 2)}
        prob += pulp.lpSum(rng.randint(0, 3) * v for v in r.values())
        rows: dict[int, list] = defaultdict(list)
        rres: dict[int, list] = defaultdict(list)
        sres: dict[int, list] = defaultdict(list)
        rcol: dict[int, list] = defaultdict(list)
        scol: dict[int, list] = defaultdict(list)
        for (y, a), v in r.items():
            rows[y].append(v)
            rres[(a - y) % p].append(v)
            rcol[a].append(v)
        for (y, a), v in q.items():
            sres[(a - y) % p].append(v)
            scol[a].append(v)
        for y in range(1, p):
            prob += pulp.lpSum(rows[y]) == 1
        for rho in range(1, p):
            prob += pulp.lpSum(rres[rho]) == 1
            prob += pulp.lpSum(sres[rho]) == 1
        for a in range(1, K + 1):
            prob += pulp.lpSum(scol[a]) == pulp.lpSum(rcol[a])
        for (y, a), v in q.items():
            if y:
                prob += v <= pulp.lpSum(r[y, b] for b in range(1, a) if (y, b) in r)
        solver = pulp.PULP_CBC_CMD(msg=0, threads=1, gapRel=1.0, timeLimit=time_limit if last else None,
                                   maxNodes=None if last else max_nodes)
        status = prob.solve(solver)
        if pulp.LpStatus[status] == "Optimal" and all(v.value() is not None for v in r.values()):
            break
    else:
        return None
    age = [0] * p
    for (y, a), v in r.items():
        if v.value() > 0.5:
            age[y] = a
    sends: dict[int, list[int]] = defaultdict(list)
    for (y, a), v in q.items():
        if v.value() > 0.5:
            sends[a].append(y)
    sender = [-1] * p
    for a in range(1, K + 1):
        recv = sorted(y for y in range(1, p) if age[y] == a)
        for y, s in zip(recv, sorted(sends[a])):
            sender[y] = s
    d = Design(p, K, tuple(age), tuple(sender))
    if d.problems():  # pragma: no cover - the program encodes exactly these conditions
        raise AssertionError(f"integer program returned an invalid design: {d.problems()[0]}")
    return d


def design_from_ages(p: int, K: int, age: Sequence[int]) -> Design | None:
    """Complete an age assignment into a design: choose, for each send residue, one holder sending at
    one age so that every age has as many sends as receives (a max-flow); None if impossible."""
    import networkx as nx

    need = [0] * (K + 1)
    for y in range(1, p):
        need[age[y]] += 1
    g = nx.DiGraph()
    for rho in range(1, p):
        g.add_edge("src", ("r", rho), capacity=1)
    for a in range(1, K + 1):
        if need[a]:
            g.add_edge(("a", a), "snk", capacity=need[a])
        for y in range(p):
            rho = (a - y) % p
            if rho and need[a] and (y == 0 or age[y] < a):
                g.add_edge(("r", rho), ("a", a), capacity=1)
    value, flow = nx.maximum_flow(g, "src", "snk")
    if value != p - 1:
        return None
    sends: dict[int, list[int]] = defaultdict(list)
    for rho in range(1, p):
        for node, f in flow[("r", rho)].items():
            if f:
                a = node[1]
                sends[a].append((a - rho) % p)
    sender = [-1] * p
    for a in range(1, K + 1):
        for y, s in zip(sorted(y for y in range(1, p) if age[y] == a), sorted(sends[a])):
            sender[y] = s
    d = Design(p, K, tuple(age), tuple(sender))
    return None if d.problems() else d

# ---------------------------------------------------------------------------------------- plans
