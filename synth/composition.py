"""Composed schedules: a two-level AllReduce built from an intra-node pattern and a rail pattern, and
its verification by composition (docs/cluster-algorithms.md, "Verification by composition").

The hierarchical AllReduce (synth/algorithms/hierarchical.py) is generated here: ``compose`` emits, for
an N x G grid of ranks (row: a node, column: a local index / rail), K slices (slice k holds w_k/sum(w)
of the buffer: small first and last slices shorten the pipeline's fill and drain) of (1) a ReduceScatter
of G blocks inside every node (a ring, or the mixed-radix steps of ``intra_steps``), (2) an AllReduce of
each block among the N GPUs of its rail (ring, recursive halving-doubling or the pipelined double binary
tree of synth/trees.py), (3) an AllGather inside every node by the same pattern as (1), in the order a
list-scheduling model starts them. The schedule records the composition in ``meta["composition"]``.

``verify_composed`` proves such a schedule without the flat verifier's n x chunks x n bit sets (about 68 GB
at 8,192 GPUs): (a) it regenerates the transfers from the recorded composition and checks they are identical
to the schedule's columns, so the schedule is exactly the composition; (b) it proves the three patterns with
the flat verifier on their own small rank sets: the intra-node ReduceScatter and AllGather on G ranks with
the recorded ``intra`` pattern (one chunk per block: every transfer of a phase moves whole blocks, so each
chunk of a block follows the same pattern) and the rail AllReduce on N ranks with its M chunks; (c) it
checks that every slice's steps come in phase order (all of its ReduceScatter, then its rail steps, then its
AllGather). Different slices and blocks use disjoint chunks, so they cannot interfere. Then by (b) after
phase 1 GPU (a, g) holds block (k, g) summed exactly once over node a; the rail AllReduce treats these N
node sums as its N contributions and leaves their sum, every rank's contribution exactly once, at every GPU
of rail g; the AllGather copies block (k, g) to every GPU of the node.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from collsynth.synth import trees
from collsynth.synth.ir import Schedule, ScheduleBuilder

KINDS = ("ring", "rhd", "tree", "radix")  # the rail AllReduces a composition can use
INTRA = ("ring", "radix")  # the intra-node ReduceScatter / AllGather patterns (``intra_steps``)
RAIL_TREE_PIPELINE = 4  # pieces per tree of the rail tree (8 chunks a block): few steps, some overlap


@dataclass(frozen=True)
class LinkModel:
    """alpha (s) and bandwidth (B/s) of one intra-node and one rail message."""

    alpha_nv: float
    bw_nv: float
    alpha_net: float
    bw_net: float


def radix_factors(N: int) -> list[int]:
    """The prime factors of N, ascending (the stages of the "radix" rail AllReduce)."""
    out, f, m = [], 2, N
    while f * f <= m:
        while m % f == 0:
            out.append(f)
            m //= f
        f += 1
    return out + ([m] if m > 1 else [])


def radix_applies(N: int) -> bool:
    """Whether the "radix" rail AllReduce differs from the others: N composite and not a power of two (on a
    prime it is the ring, on 2^k it costs what recursive halving-doubling does)."""
    f = radix_factors(N)
    return len(f) > 1 and N & (N - 1) != 0


def inter_steps(kind: str, N: int) -> tuple[int, list[float]]:
    """(M chunks per block, bytes of each step as a fraction of the block) of the rail AllReduce."""
    if kind == "ring":
        return N, [1.0 / N] * (2 * (N - 1))
    if kind == "radix":  # per stage (factor f of N) f - 1 ring steps of 1/(product of the factors so far)
        rs, prod = [], 1
        for f in radix_factors(N):
            prod *= f
            rs += [1.0 / prod] * (f - 1)
        return N, rs + rs[::-1]
    if kind == "tree":
        t = rail_tree(N)
        most = np.zeros(t.nsteps, np.int64)
        np.maximum.at(most, np.asarray(t.step), np.asarray(t.count))
        return t.nchunks, [int(c) / t.nchunks for c in most]
    p = 1 << (N.bit_length() - 1)
    e = N - p
    halving = [(p >> (j + 1)) / p for j in range(p.bit_length() - 1)]
    fold = [1.0] if e else []
    return p, fold + halving + halving[::-1] + fold


@lru_cache(maxsize=32)
def radix_steps(N: int) -> list[tuple[np.ndarray, np.ndarray, int, bool]]:
    """The steps of the "radix" rail AllReduce on N nodes (M = N chunks a block): per step, for every node
    a, the node it sends to, the first chunk it sends, the chunk count and whether it reduces.

    A mixed-radix ReduceScatter then AllGather (the generalised recursive halving of Thakur, Rabenseifner
    & Gropp, IJHPCA 2005, with rings inside each stage; our arrangement): node a and chunk c are written in
    the mixed radix of N's prime factors f_1 <= f_2 <= ..., digit 1 the most significant, so S_l = N /
    (f_1 ... f_l) is the weight of digit l. Stage l of the ReduceScatter is a ring ReduceScatter among the
    f_l nodes that differ only in digit l, over the f_l runs of S_l chunks that share a's digits 1..l-1;
    afterwards node a holds chunk a summed over every node. The AllGather runs the stages back. Steps:
    2 sum(f_l - 1) (22 -> 8 on 12 nodes), bytes per node 2 (N-1)/N of a block, as the ring."""
    nodes = np.arange(N, dtype=np.int64)
    stages = []
    S = N
    for f in radix_factors(N):
        S //= f
        stages.append((f, S))
    rs, ag = [], []
    for f, S in stages:
        digit = (nodes // S) % f
        start = (nodes // (S * f)) * (S * f)
        to = nodes + (((digit + 1) % f) - digit) * S
        for t in range(f - 1):
            rs.append((to, start + ((digit - t - 1) % f) * S, S, True))
    for f, S in reversed(stages):
        digit = (nodes // S) % f
        start = (nodes // (S * f)) * (S * f)
        to = nodes + (((digit + 1) % f) - digit) * S
        for t in range(f - 1):
            ag.append((to, start + ((digit - t) % f) * S, S, False))
    return rs + ag


IntraStep = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # per position: dst, first block, blocks, reduce


@lru_cache(maxsize=32)
def intra_steps(G: int, intra: str) -> tuple[list[IntraStep], list[IntraStep]]:
    """The steps of the intra-node ReduceScatter and AllGather of pattern ``intra`` on G positions (position
    g: local index g, ending with / starting from block g): "radix" is ``radix_steps`` on the node's GPUs
    (ring stages over G's prime factors, one contiguous run of blocks per message: sum(f - 1) steps where
    the ring takes G - 1, 7 instead of 71 on 72 GPUs; recursive halving and doubling where G is a power of
    two). "ring" has no table here (``Emitter`` shifts along the ring order)."""
    if intra != "radix":
        raise ValueError(f"no step table for the intra-node pattern {intra!r}")
    steps = [(to, first, np.full(G, run, np.int64), np.full(G, up)) for to, first, run, up in radix_steps(G)]
    half = len(steps) // 2
    return steps[:half], steps[half:]


@lru_cache(maxsize=32)
def rail_tree(N: int) -> Schedule:
    """The rail pattern of kind "tree": NCCL's double binary tree AllReduce on N ranks, pipelined in
    RAIL_TREE_PIPELINE pieces per tree (synth/trees.py; one message per rank and step)."""
    b = ScheduleBuilder("allreduce", N, 2 * RAIL_TREE_PIPELINE, name=f"rail-tree_n{N}")
    trees.add_steps(b, np.arange(N, dtype=np.int64), RAIL_TREE_PIPELINE)
    return b.build()


@dataclass(frozen=True)
class Sub:
    """One step of one phase of one slice: the resource it holds and for how long."""

    slice: int
    phase: int  # 0 intra-node ReduceScatter, 1 rail AllReduce, 2 intra-node AllGather
    index: int  # step within the phase
    resource: int  # 0 NVLink, 1 NIC
    dur: float


def intra_blocks(G: int, intra: str) -> tuple[list[int], list[int]]:
    """The most blocks one message carries in each step of the intra-node ReduceScatter and AllGather of
    pattern ``intra`` (``intra_steps``; the ring: one block in each of its G - 1 steps)."""
    if intra == "ring" or G < 2:
        return [1] * (G - 1), [1] * (G - 1)
    rs, ag = intra_steps(G, intra)
    return [int(st[2].max()) for st in rs], [int(st[2].max()) for st in ag]


NodeSteps = tuple[tuple[float, ...], tuple[float, ...]]  # the node phases' steps: the largest message in blocks


def chains(N: int, G: int, weights: list[int], kind: str, size: float, lm: LinkModel,
           intra: str = "ring", node: NodeSteps | None = None) -> list[list[Sub]]:
    """Per slice, its steps in dependency order (the model's view); slice k holds weights[k]/sum of the
    buffer. ``node``: the steps of the node phases where they are not pattern ``intra``'s on G GPUs (nodes of
    unequal size, synth/algorithms/uneven.py)."""
    fracs = inter_steps(kind, N)[1] if N > 1 else []
    rs, ag = intra_blocks(G, intra) if node is None else node
    W = sum(weights)
    out = []
    for k, w in enumerate(weights):
        block = size * w / (W * G)
        out.append([Sub(k, 0, t, 0, lm.alpha_nv + c * block / lm.bw_nv) for t, c in enumerate(rs)]
                   + [Sub(k, 1, t, 1, lm.alpha_net + f * block / lm.bw_net) for t, f in enumerate(fracs)]
                   + [Sub(k, 2, t, 0, lm.alpha_nv + c * block / lm.bw_nv) for t, c in enumerate(ag)])
    return out


class Emitter:
    """Adds the transfers of one Sub to a builder (vectorised over every node or rail)."""

    def __init__(self, grid: np.ndarray, local: list[int], kind: str, M: int, weights: list[int],
                 intra: str = "ring") -> None:
        N, G = grid.shape
        self.grid, self.kind, self.M, self.N, self.G = grid, kind, M, N, G
        self.intra = intra_steps(G, intra) if intra != "ring" and G > 1 else None
        self.w = [int(x) for x in weights]  # slice k: blocks of w[k] M chunks from chunk start[k]
        self.start = np.concatenate([[0], np.cumsum(self.w)]) * G * M
        self.loc = np.asarray(local, np.int64)
        self.ring_src = grid[:, self.loc].ravel()
        self.ring_dst = grid[:, np.roll(self.loc, -1)].ravel()
        if N > 1 and kind == "ring":
            a = np.repeat(np.arange(N), G)
            self.a, self.g = a, np.tile(np.arange(G), N)
            self.src, self.dst = grid[a, self.g], grid[(a + 1) % N, self.g]
        elif N > 1 and kind == "rhd":
            p = M
            e = N - p
            active = np.array([2 * i + 1 for i in range(e)] + list(range(2 * e, N)), np.int64)
            self.p, self.e = p, e
            self.g = np.tile(np.arange(G), p)
            self.v = np.repeat(np.arange(p), G)
            self.vsrc = grid[active[self.v], self.g]
            ge = np.tile(np.arange(G), e)
            self.fold_src = grid[np.repeat(np.arange(0, 2 * e, 2), G), ge]
            self.fold_dst = grid[np.repeat(np.arange(1, 2 * e, 2), G), ge]
            self.fold_g = ge
            self.active = active
        if N > 1 and kind == "radix":
            a = np.repeat(np.arange(N), G)
            self.a, self.g = a, np.tile(np.arange(G), N)
            self.src = grid[a, self.g]
            self.radix = radix_steps(N)
        if N > 1 and kind == "tree":
            t = rail_tree(N)
            cut = np.searchsorted(np.asarray(t.step), np.arange(t.nsteps + 1))
            cols = [np.asarray(getattr(t, c)) for c in ("src", "dst", "chunk", "count", "reduce")]
            self.tree_steps = [tuple(c[cut[j]:cut[j + 1]] for c in cols) for j in range(t.nsteps)]

    def __call__(self, b: ScheduleBuilder, sub: Sub) -> None:
        k, t, G, M = sub.slice, sub.index, self.G, self.M
        w, s0 = self.w[k], int(self.start[k])
        bm = w * M  # chunks per block of this slice; a rail "chunk" m is the run of w chunks s0 + g bm + m w
        if sub.phase != 1 and self.intra is not None:  # a step of intra_steps in every node
            dst, blk, runs, ups = self.intra[sub.phase // 2][t]
            b.add_many(self.grid.ravel(), self.grid[:, dst].ravel(), np.tile(s0 + blk * bm, self.N),
                       np.tile(runs * bm, self.N), np.tile(ups, self.N))
            return
        if sub.phase != 1:  # intra-node ring: member i sends the block of member i-t-1 (RS) or i-t (AG)
            shift = t + 1 if sub.phase == 0 else t
            owner = self.loc[(np.arange(G) - shift) % G]
            b.add_many(self.ring_src, self.ring_dst, np.tile(s0 + owner * bm, self.N), bm, sub.phase == 0)
            return
        if self.kind == "tree":  # rail tree step t on every rail g: positions are node indices
            src, dst, chunk, count, red = self.tree_steps[t]
            g = np.tile(np.arange(G), len(src))
            rep = np.repeat(np.arange(len(src)), G)
            b.add_many(self.grid[src[rep], g], self.grid[dst[rep], g], s0 + g * bm + chunk[rep] * w,
                       count[rep] * w, red[rep])
            return
        base = s0 + self.g * bm  # first chunk of block (k, g) per row
        N = self.N
        if self.kind == "radix":
            to, first, run, up = self.radix[t]
            b.add_many(self.src, self.grid[to[self.a], self.g], base + first[self.a] * w, run * w, up)
            return
        if self.kind == "ring":
            if t < N - 1:  # ReduceScatter: node a sends chunk a-t-1 of its block
                b.add_many(self.src, self.dst, base + ((self.a - t - 1) % N) * w, w, True)
            else:  # AllGather: node a sends chunk a-t'
                b.add_many(self.src, self.dst, base + ((self.a - (t - N + 1)) % N) * w, w, False)
            return
        p, e = self.p, self.e
        levels = p.bit_length() - 1
        if e and t == 0:
            b.add_many(self.fold_src, self.fold_dst, s0 + self.fold_g * bm, bm, True)
            return
        j = t - (1 if e else 0)
        if j >= 2 * levels:  # unfold
            b.add_many(self.fold_dst, self.fold_src, s0 + self.fold_g * bm, bm, False)
            return
        halving = j < levels
        lev = j if halving else 2 * levels - 1 - j
        d = p >> (lev + 1)
        partner = self.v ^ d
        dst = self.grid[self.active[partner], self.g]
        if halving:
            b.add_many(self.vsrc, dst, base + (partner & ~(d - 1)) * w, d * w, True)
        else:
            b.add_many(self.vsrc, dst, base + (self.v & ~(d - 1)) * w, d * w, False)


def list_schedule(chains: list[list[Sub]]) -> tuple[list[Sub], float]:
    """Steps in the order one NVLink port and one NIC per GPU would start them (earliest start first;
    ties: lower slice), and the modelled completion time."""
    free = [0.0, 0.0]
    ready = [0.0] * len(chains)
    pos = [0] * len(chains)
    heap = [(0.0, k) for k, c in enumerate(chains) if c]
    heapq.heapify(heap)
    order: list[Sub] = []
    end = 0.0
    while heap:
        key, k = heapq.heappop(heap)
        sub = chains[k][pos[k]]
        start = max(ready[k], free[sub.resource])
        if start > key:  # stale: the resource got busier since this chain was queued
            heapq.heappush(heap, (start, k))
            continue
        finish = start + sub.dur
        free[sub.resource] = finish
        ready[k] = finish
        end = max(end, finish)
        order.append(sub)
        pos[k] += 1
        if pos[k] < len(chains[k]):
            heapq.heappush(heap, (max(finish, free[chains[k][pos[k]].resource]), k))
    return order, end


def compose(grid: np.ndarray, local: list[int], weights: list[int], kind: str, lm: LinkModel, size: float,
            meta: Mapping[str, object] | None = None, intra: str = "ring") -> Schedule:
    """The hierarchical AllReduce of ``grid`` (see the module docstring), ``meta`` added to its own; the
    intra-node phases by pattern ``intra`` (INTRA)."""
    N, G = grid.shape
    n = N * G
    M = inter_steps(kind, N)[0] if N > 1 else 1
    order, _ = list_schedule(chains(N, G, weights, kind, size, lm, intra))
    emit = Emitter(grid, local, kind, M, weights, intra)
    standard = bool(np.array_equal(grid, np.arange(n).reshape(N, G)))
    desc = {"grid": None if standard else grid.tolist(), "local": [int(x) for x in local],
            "slices": [int(w) for w in weights], "inter": kind if N > 1 else "none",
            **({"intra": intra} if intra != "ring" else {}),
            "model": {"size": size, "alpha_nv": lm.alpha_nv, "bw_nv": _finite(lm.bw_nv),
                      "alpha_net": lm.alpha_net, "bw_net": _finite(lm.bw_net)}}
    b = ScheduleBuilder("allreduce", n, sum(weights) * G * M, name=f"hierarchical_allreduce_n{n}",
                        ports=2 if N > 1 and G > 1 else 1, meta={**(meta or {}), "composition": desc})
    for sub in order:
        b.new_step()
        emit(b, sub)
    return b.build()


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _from_meta(s: Schedule) -> tuple[np.ndarray, list[int], list[int], str, LinkModel, float, str] | None:
    """The composition a schedule records, or None when it records none (or a malformed one)."""
    d = s.meta.get("composition")
    if not isinstance(d, dict):
        return None
    try:
        G = int(s.meta["gpus_per_node"])  # type: ignore[call-overload]
        N = int(s.meta["nodes"])  # type: ignore[call-overload]
        grid = np.arange(N * G).reshape(N, G) if d["grid"] is None else np.asarray(d["grid"], np.int64)
        m = d["model"]
        inf = float("inf")
        lm = LinkModel(float(m["alpha_nv"]), inf if m["bw_nv"] is None else float(m["bw_nv"]),
                       float(m["alpha_net"]), inf if m["bw_net"] is None else float(m["bw_net"]))
        kind = "ring" if d["inter"] == "none" else str(d["inter"])
        intra = str(d.get("intra", "ring"))  # files from before the intra-node patterns: the ring
        local = [int(x) for x in d["local"]]
        if (grid.shape != (N, G) or sorted(grid.ravel().tolist()) != list(range(s.nranks))
                or sorted(local) != list(range(G)) or kind not in KINDS or intra not in INTRA):
            return None
        weights = [int(w) for w in d["slices"]]
        if not weights or min(weights) < 1:
            return None
        return grid, local, weights, kind, lm, float(m["size"]), intra
    except (KeyError, TypeError, ValueError):
        return None


def patterns(N: int, G: int, local: list[int], kind: str, intra: str = "ring") -> list[tuple[str, Schedule]]:
    """The three patterns a composition is made of, as schedules on their own ranks: the intra-node
    ReduceScatter and AllGather of pattern ``intra`` on G ranks (chunk j owned by local j), the rail
    AllReduce on N ranks."""
    out: list[tuple[str, Schedule]] = []
    if G > 1:
        grid = np.arange(G).reshape(1, G)
        emit = Emitter(grid, local, kind, 1, [1], intra)
        counts = [len(x) for x in intra_blocks(G, intra)]
        for phase, coll in ((0, "reducescatter"), (2, "allgather")):
            b = ScheduleBuilder(coll, G, G, name=f"node-{coll}", owner=list(range(G)))
            for t in range(counts[phase // 2]):
                b.new_step()
                emit(b, Sub(0, phase, t, 0, 0.0))
            out.append((f"intra-node {coll} on {G} ranks", b.build()))
    if N > 1:
        M, fracs = inter_steps(kind, N)
        emit = Emitter(np.arange(N).reshape(N, 1), [0], kind, M, [1])
        b = ScheduleBuilder("allreduce", N, M, name=f"rail-{kind}")
        for t in range(len(fracs)):
            b.new_step()
            emit(b, Sub(0, 1, t, 1, 0.0))
        out.append((f"rail {kind} allreduce on {N} ranks", b.build()))
    return out


def verify_composed(s: Schedule, flat: Callable[[Schedule], tuple[bool, str]]) -> tuple[bool, str] | None:
    """(ok, message) by composition (module docstring), or None when ``s`` is not exactly the composition
    it records (then only the flat verifier can decide). ``flat`` proves one small schedule."""
    got = _from_meta(s)
    if got is None or s.collective != "allreduce":
        return None
    grid, local, weights, kind, lm, size, intra = got
    N, G = grid.shape
    want = compose(grid, local, weights, kind, lm, size, intra=intra)
    same = (want.nranks == s.nranks and want.nchunks == s.nchunks and want.nsteps == s.nsteps
            and not s.phases and all(np.array_equal(getattr(want, c), getattr(s, c))
                                     for c in ("step", "src", "dst", "chunk", "count", "reduce")))
    if not same:
        return None
    order, _ = list_schedule(chains(N, G, weights, kind, size, lm, intra))
    last: dict[int, tuple[int, int]] = {}
    for sub in order:  # (c): every slice in phase order
        key = (sub.phase, sub.index)
        if sub.slice in last and key <= last[sub.slice]:
            return False, f"FAIL slice {sub.slice}: step ({sub.phase}, {sub.index}) out of phase order"
        last[sub.slice] = key
    for what, p in patterns(N, G, local, kind, intra):
        ok, msg = flat(p)
        if not ok:
            return False, f"FAIL {what}: {msg}"
    return True, (f"by composition: {N} nodes x {G} GPUs, {len(weights)} slices; intra-node {intra} "
                  f"ReduceScatter/AllGather and rail {kind} AllReduce each proved exactly, transfers identical to "
                  "their composition")
