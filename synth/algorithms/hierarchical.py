"""Hierarchical AllReduce for clusters of N nodes x G GPUs, pipelined in K slices.

Sources: the two-level scheme of NCCL's multi-node rings and of Thakur, Rabenseifner & Gropp,
"Optimization of collective communication operations in MPICH" (IJHPCA 2005) for the recursive
halving-doubling across nodes; costs and bounds in docs/cluster-algorithms.md.

The buffer is cut into K slices; slice k into G blocks (one per local index g), block (k, g) into M
chunks. For every slice, in every node:

1. ReduceScatter of the G blocks around the node's ring (G-1 steps over NVLink): GPU g of every node
   ends with block (k, g) summed over its node;
2. AllReduce of block (k, g) among the N GPUs with local index g (the rail g GPUs, one leaf hop apart
   on a rail-optimized fabric): a ring (2(N-1) steps, M = N) or recursive halving-doubling (2 log2 p
   steps plus the MPICH fold for N not a power of two, M = p = 2^floor(log2 N)), whichever the model
   prefers;
3. AllGather of the G blocks around the node's ring.

Pipelining: the steps of all slices are emitted in the order a list-scheduling model of one NVLink port
and one NIC per GPU starts them, so that slice k+1's ReduceScatter and slice k-1's AllGather run on
NVLink while slice k crosses the network. With s bytes per rank, B_nv/alpha_nv the intra-node route and
B_net/alpha_net the rail route, the network phase alone takes 2(N-1)/N s/(G B_net) plus latency, the
node-cut lower bound; the intra-node phases add about 2(G-1)/G s/(K B_nv) of pipeline fill and drain.
K (``pipeline="auto"``) and the inter-node algorithm are the model's best for ``size`` (default 1 GiB),
K limited so the schedule stays verifiable in memory. The schedule declares ports 2 (one NVLink and one
NIC message per GPU at a time; every step has at most one message per GPU).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np

from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.layout import check_topology, intra_order, node_grid, pair_model
from collsynth.synth.ir import Schedule, ScheduleBuilder

DEFAULT_SIZE = float(2**30)
NVSWITCH_ALPHA, NVSWITCH_BW = 3e-6, 450.0 * 2**30  # the nvswitch preset's defaults (no topology given)
PIPELINES = (1, 2, 4, 8, 16, 32)
VERIFY_BYTES = 2 * 2**30  # the flat verifier's bit sets (n * chunks * ceil(n/64) * 8 bytes) stay under this
ELEMENT_BYTES = 4


@dataclass(frozen=True)
class LinkModel:
    """alpha (s) and bandwidth (B/s) of one intra-node and one rail message."""

    alpha_nv: float
    bw_nv: float
    alpha_net: float
    bw_net: float


def link_model(topology: Any, grid: np.ndarray) -> LinkModel:
    """The model from the topology's routes: node 0's first ring hop and rail 0's first hop."""
    if topology is None:
        return LinkModel(NVSWITCH_ALPHA, NVSWITCH_BW, NVSWITCH_ALPHA, NVSWITCH_BW)
    N, G = grid.shape
    a_nv, b_nv = pair_model(topology, int(grid[0, 0]), int(grid[0, 1])) if G > 1 else (0.0, np.inf)
    a_net, b_net = pair_model(topology, int(grid[0, 0]), int(grid[1, 0])) if N > 1 else (0.0, np.inf)
    return LinkModel(a_nv, b_nv, a_net, b_net)


def inter_steps(kind: str, N: int) -> tuple[int, list[float]]:
    """(M chunks per block, bytes of each step as a fraction of the block) of the rail AllReduce."""
    if kind == "ring":
        return N, [1.0 / N] * (2 * (N - 1))
    p = 1 << (N.bit_length() - 1)
    e = N - p
    halving = [(p >> (j + 1)) / p for j in range(p.bit_length() - 1)]
    fold = [1.0] if e else []
    return p, fold + halving + halving[::-1] + fold


@dataclass(frozen=True)
class _Sub:
    """One step of one phase of one slice: the resource it holds and for how long."""

    slice: int
    phase: int  # 0 intra-node ReduceScatter, 1 rail AllReduce, 2 intra-node AllGather
    index: int  # step within the phase
    resource: int  # 0 NVLink, 1 NIC
    dur: float


def _chains(N: int, G: int, K: int, kind: str, size: float, lm: LinkModel) -> list[list[_Sub]]:
    """Per slice, its steps in dependency order (the model's view)."""
    fracs = inter_steps(kind, N)[1] if N > 1 else []
    block = size / (K * G)
    nv = lm.alpha_nv + block / lm.bw_nv
    net = [lm.alpha_net + f * block / lm.bw_net for f in fracs]
    return [[_Sub(k, 0, t, 0, nv) for t in range(G - 1)]
            + [_Sub(k, 1, t, 1, d) for t, d in enumerate(net)]
            + [_Sub(k, 2, t, 0, nv) for t in range(G - 1)] for k in range(K)]


class _Emitter:
    """Adds the transfers of one _Sub to a builder (vectorised over every node or rail)."""

    def __init__(self, grid: np.ndarray, local: list[int], kind: str, M: int) -> None:
        N, G = grid.shape
        self.grid, self.kind, self.M, self.N, self.G = grid, kind, M, N, G
        self.loc = np.asarray(local, np.int64)
        self.ring_src = grid[:, self.loc].ravel()
        self.ring_dst = grid[:, np.roll(self.loc, -1)].ravel()
        if N > 1 and kind == "ring":
            a = np.repeat(np.arange(N), G)
            self.a, self.g = a, np.tile(np.arange(G), N)
            self.src, self.dst = grid[a, self.g], grid[(a + 1) % N, self.g]
        elif N > 1:
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

    def __call__(self, b: ScheduleBuilder, sub: _Sub) -> None:
        k, t, G, M = sub.slice, sub.index, self.G, self.M
        if sub.phase != 1:  # intra-node ring: member i sends the block of member i-t-1 (RS) or i-t (AG)
            shift = t + 1 if sub.phase == 0 else t
            owner = self.loc[(np.arange(G) - shift) % G]
            b.add_many(self.ring_src, self.ring_dst, np.tile((k * G + owner) * M, self.N), M, sub.phase == 0)
            return
        base = (k * G + self.g) * M  # first chunk of block (k, g) per row
        N = self.N
        if self.kind == "ring":
            if t < N - 1:  # ReduceScatter: node a sends chunk a-t-1 of its block
                b.add_many(self.src, self.dst, base + (self.a - t - 1) % N, 1, True)
            else:  # AllGather: node a sends chunk a-t'
                b.add_many(self.src, self.dst, base + (self.a - (t - N + 1)) % N, 1, False)
            return
        p, e = self.p, self.e
        levels = p.bit_length() - 1
        if e and t == 0:
            b.add_many(self.fold_src, self.fold_dst, self.fold_g * M + k * G * M, p, True)
            return
        j = t - (1 if e else 0)
        if j >= 2 * levels:  # unfold
            b.add_many(self.fold_dst, self.fold_src, self.fold_g * M + k * G * M, p, False)
            return
        halving = j < levels
        lev = j if halving else 2 * levels - 1 - j
        d = p >> (lev + 1)
        partner = self.v ^ d
        dst = self.grid[self.active[partner], self.g]
        if halving:
            b.add_many(self.vsrc, dst, base + (partner & ~(d - 1)), d, True)
        else:
            b.add_many(self.vsrc, dst, base + (self.v & ~(d - 1)), d, False)


def _list_schedule(chains: list[list[_Sub]]) -> tuple[list[_Sub], float]:
    """Steps in the order one NVLink port and one NIC per GPU would start them (earliest start first;
    ties: lower slice), and the modelled completion time."""
    free = [0.0, 0.0]
    ready = [0.0] * len(chains)
    pos = [0] * len(chains)
    heap = [(0.0, k) for k, c in enumerate(chains) if c]
    heapq.heapify(heap)
    order: list[_Sub] = []
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


def plan(n: int, grid: np.ndarray, size: float, lm: LinkModel, pipeline: int | str,
         kinds: tuple[str, ...] = ("ring", "rhd")) -> tuple[int, str, float]:
    """(K, inter-node algorithm, modelled seconds): the model's best among ``kinds``, or the given K."""
    N, G = grid.shape
    kinds = kinds[:1] if N <= 2 else kinds
    words = (n + 63) // 64
    best: tuple[float, int, str] | None = None
    ks = PIPELINES if pipeline == "auto" else (int(pipeline),)
    for kind in kinds:
        M = inter_steps(kind, N)[0] if N > 1 else 1
        for K in ks:
            C = K * G * M
            if pipeline == "auto" and K > 1 and (n * C * words * 8 > VERIFY_BYTES or size / C < ELEMENT_BYTES):
                continue
            _, t = _list_schedule(_chains(N, G, K, kind, size, lm))
            if best is None or (t, K, kind) < best:
                best = (t, K, kind)
    assert best is not None
    return best[1], best[2], best[0]


def build(n: int, collective: str = "allreduce", topology: Any = None, size: float | None = None,
          pipeline: int | str = "auto") -> Schedule:
    """Hierarchical AllReduce on ``topology``'s nodes (one node of all GPUs without a topology)."""
    check_topology(topology, n, "hierarchical")
    if collective != "allreduce":
        raise CollsynthError(f"hierarchical builds allreduce, not {collective!r}")
    if pipeline != "auto" and (isinstance(pipeline, bool) or not isinstance(pipeline, (int, np.integer))
                               or pipeline < 1):
        raise CollsynthError(f"--pipeline must be a positive integer or auto, got {pipeline!r}")
    s = DEFAULT_SIZE if size is None else float(size)
    if not s > 0:
        raise CollsynthError(f"--size must be positive, got {size!r}")
    return assemble(n, topology, s, pipeline)


def assemble(n: int, topology: Any, size: float, pipeline: int | str = "auto",
             kinds: tuple[str, ...] = ("ring", "rhd")) -> Schedule:
    """The schedule for the model's choice of K and rail algorithm among ``kinds``."""
    s = size
    grid = node_grid(topology, n)
    N, G = grid.shape
    lm = link_model(topology, grid)
    K, kind, model_s = plan(n, grid, s, lm, pipeline, kinds)
    M = inter_steps(kind, N)[0] if N > 1 else 1
    order, _ = _list_schedule(_chains(N, G, K, kind, s, lm))
    emit = _Emitter(grid, intra_order(topology, grid), kind, M)
    meta: dict[str, object] = {"algorithm": "hierarchical", "nodes": N, "gpus_per_node": G, "pipeline": K,
                               "inter": kind if N > 1 else "none", "model_s": model_s}
    b = ScheduleBuilder("allreduce", n, K * G * M, name=f"hierarchical_allreduce_n{n}",
                        ports=2 if N > 1 and G > 1 else 1, meta=meta)
    for sub in order:
        b.new_step()
        emit(b, sub)
    return b.build()
