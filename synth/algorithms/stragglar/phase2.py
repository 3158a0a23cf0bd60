"""StragglAR phase 2, the completion collective: a whole plan (exchanges, design copies, tail) for
n GPUs and k(n-1) chunks, in local labels (punctual GPUs 0..p-1, the straggler S = p; the builder
relabels).

Source: Devraj et al., "Efficient AllReduce with Stragglers", arXiv 2505.23523; the construction and
its round counts are described in stragglar/design.py and docs/stragglar.md. Powers of two use the
closed-form design and the "virtual trees" tail; other n the stored (stragglar/tables.py) or searched
design of depth ceil(log2 n) + 1 and a tail found by a small integer program.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.stragglar.design import (
    Design,
    Move,
    ceil_log2,
    is_pow2,
    lower_bound,
    pow2_design,
    search_design,
)
from collsynth.synth.algorithms.stragglar.tables import cached_design


@dataclass(frozen=True, eq=False)
class Phase2Plan:
    """The completion collective for n GPUs in local labels (S = n-1) over k(n-1) chunks (chunk c is
    reduced in round c by GPU c mod (n-1) and S): parallel arrays of moves (round, src, dst, chunk,
    reduce), sorted by round, then source, then destination."""

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
                   design: Design | None = None, k: int = 1) -> Phase2Plan:
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

    return _search_plan(n, time_limit, cached_design(n), k)
