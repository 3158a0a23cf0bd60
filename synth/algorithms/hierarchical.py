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
   steps plus the MPICH fold for N not a power of two, M = p = 2^floor(log2 N)), the pipelined
   double binary tree (synth/trees.py, M = 8) or, for N composite and not a power of two, the mixed-radix
   ring stages of ``composition.radix_steps`` (2 sum(f - 1) steps over N's prime factors f, M = N),
   whichever the model prefers;
3. AllGather of the G blocks around the node's ring.

On more than one node the node's phases may instead take the mixed-radix steps (composition.intra_steps:
ring stages over G's prime factors, sum(f - 1) steps where the ring takes G - 1; recursive halving and
doubling where G is a power of two), whichever the model prefers (``plan``; meta "intra"): the ring's G - 1
start-ups per slice and phase are what large nodes pay (two GB200 NVL72 racks as nodes, 1 GiB: 3.162 ->
2.598 ms).

Pipelining: the steps of all slices are emitted in the order a list-scheduling model of one NVLink port
and one NIC per GPU starts them, so that slice k+1's ReduceScatter and slice k-1's AllGather run on
NVLink while slice k crosses the network. With s bytes per rank, B_nv/alpha_nv the intra-node route and
B_net/alpha_net the rail route, the network phase alone takes 2(N-1)/N s/(G B_net) plus latency, the
node-cut lower bound; the intra-node phases add about 2(G-1)/G s/(K B_nv) of pipeline fill and drain.
Slices may differ in size (weights w_k; a ramp 1, 2, 4, ..., 4, 2, 1 keeps the unoverlapped first
ReduceScatter and last AllGather small). K (``pipeline="auto"``), the weights and the inter-node
algorithm are the model's best for ``size`` (default 1 GiB), within 2 million transfers and 2 GiB of
simulator state (16 bytes per rank and chunk). The schedule records its composition
(synth.composition), so large ones are verified by composition. It declares ports 2 (one NVLink and
one NIC message per GPU at a time; every step has at most one message per GPU). Nodes of unequal size:
the rail phase on the first G_min GPUs of every node, the others in their node's rings or folded in
(synth/algorithms/uneven.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collsynth import budget
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.layout import check_topology, cluster_meta, intra_order, node_grid, pair_model
from collsynth.synth.algorithms.uneven import core_and_extras, node_rings, with_extras, with_ring
from collsynth.synth.composition import (
    INTRA,
    KINDS,
    LinkModel,
    NodeSteps,
    chains,
    compose,
    inter_steps,
    intra_blocks,
    list_schedule,
    radix_applies,
)
from collsynth.synth.ir import Schedule
from collsynth.synth.simulate import simulate

DEFAULT_SIZE = float(2**30)
NVSWITCH_ALPHA, NVSWITCH_BW = 3e-6, 450.0 * 2**30  # the nvswitch preset's defaults (no topology given)
PIPELINES = (1, 2, 3, 4, 5, 6, 8, 12, 16)
RING_MAX_NODES = 64  # beyond, the rail ring's 2(N-1) latencies lose to halving-doubling: not modelled
MAX_TRANSFERS = 2_000_000  # pipeline="auto" keeps K(2(G-1) + rail steps) n under this
SIM_BYTES = 2 * 2**30  # ... and the simulator's per-(rank, chunk) state, 16 n chunks bytes, under this
ELEMENT_BYTES = 4


def link_model(topology: Any, grid: np.ndarray) -> LinkModel:
    """The model from the topology's routes: node 0's first ring hop and rail 0's first hop."""
    if topology is None:
        return LinkModel(NVSWITCH_ALPHA, NVSWITCH_BW, NVSWITCH_ALPHA, NVSWITCH_BW)
    N, G = grid.shape
    a_nv, b_nv = pair_model(topology, int(grid[0, 0]), int(grid[0, 1])) if G > 1 else (0.0, np.inf)
    a_net, b_net = pair_model(topology, int(grid[0, 0]), int(grid[1, 0])) if N > 1 else (0.0, np.inf)
    return LinkModel(a_nv, b_nv, a_net, b_net)


def profiles(K: int) -> list[list[int]]:
    """Slice weight profiles with K slices: equal, and ramps 1, 2, 4, ... up to 2^L in the middle and
    back down (small first and last slices shorten the pipeline fill and drain)."""
    out = [[1] * K]
    for L in range(1, 5):
        w = [1 << min(k, K - 1 - k, L) for k in range(K)]
        if w not in out:
            out.append(w)
    return out


def node_steps(G: int, intra: str) -> int:
    """The steps of the intra-node ReduceScatter and AllGather of pattern ``intra`` together."""
    return sum(len(x) for x in intra_blocks(G, intra))


def plan(n: int, grid: np.ndarray, size: float, lm: LinkModel, pipeline: int | str,
         kinds: tuple[str, ...] = KINDS, node: NodeSteps | None = None) -> tuple[list[int], str, float, str]:
    """(slice weights, inter-node algorithm, modelled seconds, intra-node pattern): the model's best among
    ``kinds`` and the intra-node patterns (composition.INTRA: the ring, or the mixed-radix steps, sum(f - 1)
    over G's prime factors, log2 G for a power of two, whose fewer start-ups matter on large nodes; on more
    than one node) for K in PIPELINES (or the given K) and the weight profiles of K; ties keep the ring.
    ``node``: the node phases' steps of nodes of unequal size (composition.chains; then no radix pattern)."""
    N, G = grid.shape
    kinds = kinds[:1] if N <= 2 else tuple(k for k in kinds if (k != "ring" or N <= RING_MAX_NODES)
                                           and (k != "radix" or radix_applies(N))) or kinds[:1]
    best: tuple[float, int, int, int, str, list[int], str] | None = None
    ks = (PIPELINES if N > 1 else (1,)) if pipeline == "auto" else (int(pipeline),)  # one node: nothing to overlap
    intras = INTRA if G > 2 and N > 1 and node is None else INTRA[:1]  # one node: the ring (radix is its own)
    for kind in kinds:
        M = inter_steps(kind, N)[0] if N > 1 else 1
        for pref, intra in enumerate(intras):
            steps = (node_steps(G, intra) if node is None else sum(map(len, node))) + (
                len(inter_steps(kind, N)[1]) if N > 1 else 0)
            for K in ks:
                for w in profiles(K):
                    C = sum(w) * G * M
                    if pipeline == "auto" and K > 1 and (K * steps * n > MAX_TRANSFERS or 16 * n * C > SIM_BYTES
                                                            or size / C < ELEMENT_BYTES):
                        continue
                    if pipeline != "auto" and sum(w) > K and (16 * n * C > SIM_BYTES or size / C < ELEMENT_BYTES):
                        continue
                    _, t = list_schedule(chains(N, G, w, kind, size, lm, intra, node))
                    key = (t, pref, K, sum(w), kind, w, intra)
                    if best is None or key < best:
                        best = key
    assert best is not None
    return best[5], best[4], best[0], best[6]


_PLANS: dict[tuple[Any, ...], tuple[list[int], str, float, str]] = {}


def cached_plan(n: int, grid: np.ndarray, size: float, lm: LinkModel, pipeline: int | str,
                kinds: tuple[str, ...] = KINDS, node: NodeSteps | None = None) -> tuple[list[int], str, float, str]:
    """``plan``, remembered for the same arguments (the budget estimate and the build ask for the same plan;
    up to 64 kept)."""
    key = (n, grid.shape, grid.tobytes(), float(size), lm, str(pipeline), kinds, node)
    got = _PLANS.get(key)
    if got is None:
        if len(_PLANS) >= 64:
            _PLANS.clear()
        got = _PLANS[key] = plan(n, grid, size, lm, pipeline, kinds, node)
    return list(got[0]), got[1], got[2], got[3]


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
             kinds: tuple[str, ...] = KINDS) -> Schedule:
    """The schedule for the model's choice of K and rail algorithm among ``kinds``."""
    s = size
    grid = node_grid(topology, n)
    split = core_and_extras(topology, n) if grid.shape[0] == 1 else None
    if split is not None:
        return _assemble_uneven(n, topology, s, pipeline, kinds, *split)
    N, G = grid.shape
    lm = link_model(topology, grid)
    weights, kind, model_s, intra = cached_plan(n, grid, s, lm, pipeline, kinds)
    K = len(weights)
    M = inter_steps(kind, N)[0] if N > 1 else 1
    transfers = n * (node_steps(G, intra) + (len(inter_steps(kind, N)[1]) if N > 1 else 0)) * K
    # the columns (built and sorted), the simulator's per-(rank, chunk) state; verification is by composition
    # or budget-checked by the flat verifier itself
    hint = "use fewer GPUs" + (" or --pipeline 1" if K > 1 else "")
    budget.check(200 * transfers + 16 * n * sum(weights) * G * M, f"hierarchical on {n} ranks "
                 f"({transfers} transfers, {sum(weights) * G * M} chunks)", hint=hint)
    meta: dict[str, object] = {"algorithm": "hierarchical", "nodes": N, "gpus_per_node": G, "pipeline": K,
                               "inter": kind if N > 1 else "none", "intra": intra, "model_s": model_s,
                               "slice_weights": weights}
    meta.update(cluster_meta(topology, grid))
    return compose(grid, intra_order(topology, grid), weights, kind, lm, s, meta, intra)


def _assemble_uneven(n: int, topology: Any, size: float, pipeline: int | str, kinds: tuple[str, ...],
                     core: np.ndarray, extras: list[tuple[int, int, int]]) -> Schedule:
    """Nodes of unequal size (synth/algorithms/uneven.py): the composition on the core grid with the extras
    folded in slice by slice (in pieces or whole slices), or the ring form (every node's ring through its extras),
    each by its own plan; the fastest in the simulator (ties: the ring form, then the pieces)."""
    N, G = core.shape
    lm = link_model(topology, core)
    local = intra_order(topology, core)
    rings = node_rings(core, local, extras)
    folds = cached_plan(N * G, core, size, lm, pipeline, kinds)
    ring = cached_plan(N * G, core, size, lm, pipeline, kinds, rings.steps())
    need, what = 0, ""
    for (weights, kind, _, _), node, split in ((folds, N * G * node_steps(G, folds[3]) + 2 * len(extras) * G, 1),
                                               (ring, rings.transfers(), rings.split)):  # per slice, in the nodes
        C = sum(weights) * split * G * inter_steps(kind, N)[0]
        transfers = (node + N * G * len(inter_steps(kind, N)[1])) * len(weights)
        # building, and the flat verification that follows (every chunk moved about twice per rank)
        got = max(200 * transfers + 16 * n * C, budget.verify_bytes(n, C, transfers, transfers, 2 * n * C))
        if got > need:
            need, what = got, f"{transfers} transfers, {C} chunks"
    budget.check(need, f"hierarchical on {n} ranks ({what}, verified flat)", hint="use fewer GPUs or --pipeline 1")
    meta: dict[str, object] = {"algorithm": "hierarchical", "nodes": N, "core_gpus_per_node": G,
                               "extras": len(extras)}
    spec = getattr(topology, "spec", None)
    topo_meta = {} if spec is None else {"topology": spec}

    def form_meta(name: str, plan: tuple[list[int], str, float, str]) -> dict[str, object]:
        weights, kind, model_s, intra = plan
        return {**meta, "form": name, "pipeline": len(weights), "inter": kind, "intra": intra, "model_s": model_s,
                "slice_weights": weights, **topo_meta}

    weights, kind, _, intra = folds
    base = compose(np.arange(N * G).reshape(N, G), local, weights, kind, lm, size, {}, intra)
    starts = [int(x) for x in np.concatenate([[0], np.cumsum(weights)]) * G * inter_steps(kind, N)[0]]
    forms = [with_ring(n, core, local, extras, ring[0], ring[1], lm, size, form_meta("ring", ring))]
    forms += [with_extras(base, n, core, extras, starts, form_meta("pieces" if pieces else "slices", folds), pieces)
              for pieces in (True, False)]
    return min(forms, key=lambda s: simulate(s, size, topology).completion_s)  # ties: the first
