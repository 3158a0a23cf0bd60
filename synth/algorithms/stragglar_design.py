"""StragglAR phase 2 (the completion collective): cyclic designs, tail planning, round counts.

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

import functools
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...errors import CollsynthError

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


@dataclass(frozen=True, eq=False)
class Phase2Plan:
    """The completion collective for n GPUs in local labels (S = n-1) over k(n-1) chunks (chunk c is
    reduced in round c by GPU c mod (n-1) and S): parallel arrays of moves (round, src, dst, chunk,
    reduce), sorted by round."""

    n: int
    rounds: int
    round: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    chunk: np.ndarray
    reduce: np.ndarray
    method: str
    design: Design | None = None
    k: int = 1

    @classmethod
    def from_parts(cls, n: int, rounds: int, parts: Sequence[np.ndarray], method: str,
                   design: Design | None = None, k: int = 1) -> "Phase2Plan":
        m = np.concatenate([np.asarray(x, np.int64).reshape(-1, 5) for x in parts])
        m = m[np.lexsort((m[:, 2], m[:, 1], m[:, 0]))]
        cols = [np.ascontiguousarray(m[:, i]) for i in range(5)]
        for col in cols:
            col.flags.writeable = False
        return cls(n, rounds, cols[0], cols[1], cols[2], cols[3], cols[4].astype(bool), method, design, k)

    @property
    def nchunks(self) -> int:
        return self.k * (self.n - 1)

    @property
    def gap(self) -> int:
        """Rounds above the lower bound k(n-1) - 1 + ceil(log2 n)."""
        return self.rounds - lower_bound(self.n, self.k)

    def moves(self) -> list[Move]:
        """The moves as tuples (round, src, dst, chunk, reduce)."""
        return [(int(t), int(s), int(d), int(c), bool(r))
                for t, s, d, c, r in zip(self.round, self.src, self.dst, self.chunk, self.reduce)]


# ---------------------------------------------------------------------------------------- designs
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
    return Design(p, K, tuple(age), _pair_senders(p, K, age, idle={(K, K)} if K < p else set()))


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
def _exchanges(p: int, nchunks: int | None = None) -> np.ndarray:
    """X(c mod p, c) in round c for every chunk c < nchunks (default p): GPU c mod p and S swap chunk c
    and both reduce."""
    C = p if nchunks is None else nchunks
    c = np.arange(C)
    g = c % p
    s = np.full(C, p)
    one = np.ones(C, np.int64)
    return np.concatenate([np.stack([c, g, s, c, one], 1), np.stack([c, s, g, c, one], 1)])


def _tree_moves(d: Design, chunk: np.ndarray, root: np.ndarray, start: np.ndarray, depth: int) -> np.ndarray:
    """Chunk ``chunk[i]`` spread from GPU ``root[i]`` (holding it after round ``start[i]``) along the
    design's ages 1..depth; vectorised over i."""
    p = d.p
    ys = np.array([y for y in range(1, p) if d.age[y] <= depth], np.int64)
    if not len(ys) or not len(chunk):
        return np.zeros((0, 5), np.int64)
    age = np.asarray(d.age, np.int64)[ys]
    snd = np.asarray(d.sender, np.int64)[ys]
    R, Y = np.broadcast_arrays(root[:, None], ys[None, :])
    return np.stack([(start[:, None] + age[None, :]).ravel(), ((R + snd[None, :]) % p).ravel(),
                     ((R + Y) % p).ravel(), np.broadcast_to(chunk[:, None], R.shape).ravel(),
                     np.zeros(R.size, np.int64)], 1)


def _design_moves(d: Design, nchunks: int) -> np.ndarray:
    """Chunks 0..nchunks-1, chunk c born at GPU c mod p in round c, each spread by the whole design."""
    c = np.arange(nchunks)
    return _tree_moves(d, c, c % d.p, c, d.K)


def _pow2_plan(n: int, k: int = 1) -> Phase2Plan:
    K = n.bit_length() - 1
    p = n - 1
    C = k * p
    d = pow2_design(K)
    last = C - 1  # born at GPU p-1 whatever k is
    # tail: chunk C-1 by its own tree (ages < K) and by virtual trees: S hands it to GPU i-1 in round
    # C-1+i (i = 1..K-1), which spreads it to ages <= K-1-i along the cells of the nonexistent chunk
    # C-1+i (born at GPU (C-1+i) mod p = i-1); every condition is a residue mod p, so this is the
    # k = 1 construction shifted by (k-1)p rounds
    parts = [_exchanges(p, C), _design_moves(d, C - 1),
             _tree_moves(d, np.array([last]), np.array([p - 1]), np.array([last]), K - 1)]
    for i in range(1, K):
        parts.append(np.array([[last + i, p, i - 1, last, 0]]))
        parts.append(_tree_moves(d, np.array([last]), np.array([i - 1]), np.array([last + i]), K - 1 - i))
    return Phase2Plan.from_parts(n, lower_bound(n, k), parts, "pow2-closed-form", d, k)


def _three_plan(k: int) -> Phase2Plan:
    """n = 3, k >= 2 chunks per punctual GPU (no cyclic design exists for p = 2). A rotation keeps all
    six ports busy: in round t S reduces its raw chunk t into its owner a = t mod 2 (one-way), the other
    GPU b (owner of chunk t-1, complete since round t-1) copies chunk t-1 to S, and a copies chunk t-2
    (its own, complete since round t-2) to b. The last chunks drain in two more rounds: 2k + 2 rounds,
    one above the lower bound 2k + 1 (which the exchange pattern would miss by k - 1)."""
    C = 2 * k
    m: list[tuple[int, int, int, int, int]] = []
    for t in range(C):
        a, b = t % 2, 1 - t % 2
        m.append((t, 2, a, t, 1))
        if t >= 1:
            m.append((t, b, 2, t - 1, 0))
        if t >= 2:
            m.append((t, a, b, t - 2, 0))
    a = (C - 1) % 2
    b = 1 - a
    m += [(C, a, 2, C - 1, 0), (C, b, a, C - 2, 0), (C + 1, 2, b, C - 1, 0)]
    return Phase2Plan.from_parts(3, C + 2, [np.array(m, np.int64)], "n3-rotation", None, k)


def _free_ports(d: Design | None, p: int, R: int, first_tail: int, nchunks: int | None = None) -> tuple[dict, dict]:
    """For rounds after ``first_tail``: which GPUs' receive and send ports the design leaves free
    (S exchanges in rounds 0..nchunks-1, nchunks = p by default)."""
    C = p if nchunks is None else nchunks
    recv_age = {0: 0}
    send_age = {0: 0}
    if d is not None:
        for y in range(1, p):
            recv_age[(d.age[y] - y) % p] = d.age[y]
            send_age[(d.age[y] - d.sender[y]) % p] = d.age[y]
    fr: dict[int, list[int]] = {}
    fs: dict[int, list[int]] = {}
    for t in range(first_tail + 1, R):
        fr[t], fs[t] = [], []
        for g in range(p):
            rho = (t - g) % p
            if rho == 0 and t < C:
                continue  # GPU g exchanges with S in round t
            # a port is free when the chunk the design puts there is a tail (or nonexistent) chunk;
            # without a design (every chunk is a tail chunk) every port is free
            if d is None or not 0 <= t - recv_age[rho] < first_tail:
                fr[t].append(g)
            if d is None or not 0 <= t - send_age[rho] < first_tail:
                fs[t].append(g)
    return fr, fs


def plan_tail(p: int, R: int, d: Design | None, first_tail: int, time_limit: float = 120.0,
              nchunks: int | None = None) -> np.ndarray | None:
    """Copies that spread chunks first_tail..C-1 (C = nchunks, default p; chunk c is born at GPU c mod
    p) to every GPU by round R-1 on the free ports and S's send port (rounds >= C), by integer
    programming; None if infeasible (or not found in time)."""
    import pulp

    n = p + 1
    C = p if nchunks is None else nchunks
    tails = list(range(first_tail, C))
    fr, fs = _free_ports(d, p, R, first_tail, C)
    prob = pulp.LpProblem("stragglar_tail", pulp.LpMinimize)
    recv, send, sends = {}, {}, {}
    for t in fr:
        for c in tails:
            if c >= t:
                continue
            for g in fr[t]:
                if g != c % p:
                    recv[t, c, g] = pulp.LpVariable(f"r_{t}_{c}_{g}", cat="Binary")
            for g in fs[t]:
                send[t, c, g] = pulp.LpVariable(f"s_{t}_{c}_{g}", cat="Binary")
            if t >= C:
                sends[t, c] = pulp.LpVariable(f"S_{t}_{c}", cat="Binary")
    prob += 0
    port_r: dict = defaultdict(list)
    port_s: dict = defaultdict(list)
    flow_in: dict = defaultdict(list)
    flow_out: dict = defaultdict(list)
    got: dict = defaultdict(list)
    for (t, c, g), v in recv.items():
        port_r[t, g].append(v)
        flow_in[t, c].append(v)
        got[c, g].append((t, v))
    for (t, c, g), v in send.items():
        port_s[t, g].append(v)
        flow_out[t, c].append(v)
    for (t, c), v in sends.items():
        port_s[t, n].append(v)
        flow_out[t, c].append(v)
    for vs in list(port_r.values()) + list(port_s.values()):
        if len(vs) > 1:
            prob += pulp.lpSum(vs) <= 1
    for key in set(flow_in) | set(flow_out):
        prob += pulp.lpSum(flow_out.get(key, [])) == pulp.lpSum(flow_in.get(key, []))
    for (t, c, g), v in send.items():
        if g != c % p:
            prob += v <= pulp.lpSum(w for tt, w in got[c, g] if tt < t)
    for c in tails:
        for g in range(p):
            if g != c % p:
                if not got[c, g]:
                    return None
                prob += pulp.lpSum(w for _, w in got[c, g]) == 1
    status = prob.solve(pulp.PULP_CBC_CMD(msg=0, timeLimit=time_limit, threads=1))
    if pulp.LpStatus[status] != "Optimal":
        return None
    moves: list[tuple[int, int, int, int, int]] = []
    for t in sorted(fr):
        for c in tails:
            if c >= t:
                continue
            dst = sorted(g for g in fr[t] if (t, c, g) in recv and recv[t, c, g].value() > 0.5)
            src = sorted(g for g in fs[t] if send[t, c, g].value() > 0.5)
            if (t, c) in sends and sends[t, c].value() > 0.5:
                src.append(p)
            assert len(src) == len(dst)
            moves += [(t, s, g, c, 0) for s, g in zip(src, dst)]
    return np.array(moves, np.int64).reshape(-1, 5)


def _search_plan(n: int, time_limit: float, given: Design | None = None, k: int = 1) -> Phase2Plan:
    p = n - 1
    C = k * p
    L = ceil_log2(n)
    K = given.K if given is not None else L + 1
    for R in range(lower_bound(n, k), lower_bound(n, k) + n + L + 3):
        first_tail = max(0, R - K)
        d = None
        if first_tail > 0:
            d = given if given is not None and given.K == K else search_design(p, K, time_limit)
            if d is None:
                K += 1
                continue
        tail = plan_tail(p, R, d, first_tail, time_limit, C)
        if tail is not None:
            parts = [_exchanges(p, C), tail] + ([_design_moves(d, first_tail)] if d else [])
            return Phase2Plan.from_parts(n, R, parts, f"design-K{K}+tail-ilp" if d else "ilp", d, k)
    raise CollsynthError(f"stragglar: no phase-2 schedule found for n={n}")  # pragma: no cover


@functools.lru_cache(maxsize=128)
def phase2_plan(n: int, time_limit: float = 120.0, k: int = 1) -> Phase2Plan:
    """The completion collective for n GPUs over k(n-1) chunks (local labels, straggler = n-1)."""
    if n < 2:
        raise CollsynthError(f"stragglar needs at least 2 GPUs, got {n}")
    if k < 1:
        raise CollsynthError(f"--pipeline must be at least 1, got {k}")
    if n == 2:
        return Phase2Plan.from_parts(2, k, [_exchanges(1, k)], "swap", None, k)
    if is_pow2(n):
        return _pow2_plan(n, k)
    if n == 3 and k > 1:
        return _three_plan(k)
    from .stragglar_tables import cached_design

    return _search_plan(n, time_limit, cached_design(n), k)
