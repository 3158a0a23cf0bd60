"""About the work of building one algorithm's schedule, before building it (issue 13, Scale): the
transfers, chunk moves, steps and chunks (budget.Work) each algorithm produces for n ranks, so that
synth.registry can refuse a size beyond the memory or time budget with the largest n that fits.

The counts are upper-bound style, from each algorithm's construction (the docstrings of its module;
tests/test_estimate.py checks them against built schedules):
- ring: n(n-1) one-chunk transfers per ReduceScatter or AllGather, n-1 steps each; multiring runs
  that for each of its rings (G of them on a cluster of G-GPU nodes: G times the transfers).
- rhd: at most 2 n log2 n transfers, the same 2n(n-1) chunk moves as ring.
- direct: n(n-1) transfers in one step (n^2 reduces into n locations: the verifier's rounds).
- twoshot: direct ReduceScatter then AllGather, 2n(n-1).
- stragglar with K(n-1) chunks: phase 1, a ring ReduceScatter among n-1 ranks ((n-1)(n-2)
  transfers of K chunks), then K(n-1) - 1 + ceil(log2 n) completion rounds of at most n transfers;
  n neither a power of two nor stored (stragglar/tables.py) adds the phase-2 design program, about
  SEARCH_S_PER_N2 x n^2 seconds (measured: n = 400 in 10 s, n = 1000 in 65 s, one core).
- multistraggler: StragglAR's completion at the depth its pipeline model picks, plus the late ranks'
  streams, each candidate form built, retimed and simulated when a size is given (measured: n = 64 with
  4 late ranks in 2 s), and its builder's Python moves (``MULTI_BUILD_BYTES`` per transfer).
- clusterstraggler: the punctual AllReduce, then the late buffer in at most cluster_cost.MAX_CHUNKS blocks
  streamed to every rank (measured: 16 nodes x 8 GPUs with one late GPU, 18,672 transfers in 1.8 s).
  With several late ranks on a topology with nodes (its waves form) it builds and simulates the schedules
  waves.build tries (``_waves_copies``: three beyond waves.searched, not multistraggler's 20 per late
  rank, which refused 64 nodes with 5 late ranks at ~1,650 s, built in 4 s). With the last rank late alone in
  one NVLink domain it also builds domain.py's broadcast form (``_domain_copies``), within the same counts (72 and 256
  GPUs: tests/test_estimate.py).
  clusterstraggler for one late GPU or one whole late node on a topology with nodes (issue 15) builds
  one plan of G M blocks (M <= max(cluster_cost.UNITS) for auto) in C = G M k chunks (k = prephase.pre_units,
  so that the rail rings before the arrival cut even pieces): the present ranks' AllReduce and the late
  data's rail chains move each chunk about 3 times per rank (measured 2.9-3.0 C per rank at 16 nodes): at
  most 4 n C moves, 4 n G max(M, N) transfers (a ring piece per node) and at most the sends its ports
  allow (``_cluster_one_late``), 4 C + 4 N steps; with pipeline
  "auto" up to 256 GPUs it builds
  and simulates up to 3 more block counts and the funnel forms (one late GPU) or two more broadcasts (a late
  node on N not a power of two), each counted as a copy.
- hierarchical: K slices of a ring-shaped ReduceScatter/AllGather inside nodes and rails across them
  (its auto K keeps the transfers under hierarchical.MAX_TRANSFERS); verified by composition where the flat
  verifier's bit sets would pass synth.verify.FLAT_BYTES (``Work.composed``: measured 1,024 GPUs, 10,240
  chunks: 0.25 GB and 0.8 s to build, verify and simulate, where the flat count said 3.6 GiB and 42 s).
- tree: two trees, K slices each reduced and broadcast over n-1 edges: 4K(n-1) transfers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from collsynth import budget
from collsynth.budget import Work
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms import hierarchical, multiring, tree
from collsynth.synth.algorithms.layout import node_grid
from collsynth.synth.algorithms.stragglar import cluster as stragglar_cluster
from collsynth.synth.algorithms.stragglar import cluster_cost, prephase
from collsynth.synth.algorithms.stragglar import domain as stragglar_domain
from collsynth.synth.algorithms.stragglar import pipeline as stragglar_pipeline
from collsynth.synth.algorithms.stragglar import waves as stragglar_waves
from collsynth.synth.algorithms.stragglar.tables import stored_sizes
from collsynth.synth.arrivals import arrival_vector
from collsynth.synth.composition import inter_steps, intra_blocks
from collsynth.synth.verify import FLAT_BYTES, flat_table_bytes

SEARCH_S_PER_N2 = 8e-5  # StragglAR's phase-2 design search: about this many seconds x n^2


def _log2(n: int) -> int:
    return max((n - 1).bit_length(), 1)


def needs_search(n: int) -> bool:
    """Whether StragglAR's phase 2 for n ranks runs the design program (not a power of two, not stored)."""
    return not (n <= 4 or n & (n - 1) == 0 or n in _stored())


def stragglar_search_seconds(n: int, always: bool = False) -> float:
    """About the seconds of StragglAR's phase-2 design program for n ranks (0 when none is needed;
    ``always``: as if every n needed one, a bound that grows with n)."""
    return SEARCH_S_PER_N2 * n * n if n > 4 and (always or needs_search(n)) else 0.0


SEARCH_HINT = "powers of two and n <= 255 need no design search and build fast at any n that fits memory"


_STORED: frozenset[int] | None = None


def _stored() -> frozenset[int]:
    global _STORED
    if _STORED is None:
        _STORED = frozenset(stored_sizes())
    return _STORED


def _ring(n: int, collective: str) -> Work:
    halves = 2 if collective == "allreduce" else 1
    t = halves * n * (n - 1)
    return Work(n, n, halves * (n - 1), t, t)


def _multiring(n: int, topology: Any) -> Work:
    """What multiring.build makes: C rings (``multiring.ring_shape`` of the topology as given) of the ring
    AllReduce, ring c over n w_c chunks moving w_c chunks a transfer; the rings advance together (2(n-1)
    steps) or one after another (2C(n-1) steps). On one node the rings are searched for (seconds at 8,192
    GPUs, and memory that grows with n^2) only where one plain ring of the topology's size fits the budget:
    beyond it the plain ring's count, a lower bound, is refused anyway."""
    t = 2 * n * (n - 1)
    C, weights, together = 1, 1, True
    if topology is not None and not isinstance(topology, str):
        m = int(topology.nranks)
        plain = _ring(m, "allreduce")
        find = plain.nbytes() <= budget.max_memory() and plain.seconds() <= budget.max_seconds()
        C, weights, together = multiring.ring_shape(m, topology, find) or (C, weights, together)
    return Work(n, n * weights, 2 * (n - 1) * (1 if together else C), C * t, weights * t)


def _hierarchical(n: int, pipe: Any, topology: Any, size: Any) -> Work:
    """What hierarchical.build makes (synth/algorithms/hierarchical.py): its own cheap model (``plan``) picks
    the slice weights w and the rail kind; K = len(w) slices of 2(G-1) node steps and the rail steps, n
    transfers a step; a node step moves a block (w_k M chunks), a rail step its fraction of the block."""
    nodes = int(getattr(topology, "node_count", 1) or 1)
    if nodes <= 1 or n % nodes:
        K = 1 if pipe == "auto" else _pipeline_k(n, pipe, 1)
        w = max(hierarchical.profiles(K), key=sum)
        t = K * 2 * (n - 1) * n
        return Work(n, n * sum(w), K * 2 * (n - 1), t, t * max(w),
                    composed=flat_table_bytes(n, n * sum(w)) > FLAT_BYTES)
    grid = node_grid(topology, n)
    N, G = grid.shape
    s_bytes = hierarchical.DEFAULT_SIZE if size is None else float(size)
    w, kind, _, intra = hierarchical.cached_plan(n, grid, s_bytes, hierarchical.link_model(topology, grid), pipe)
    M, fracs = inter_steps(kind, N)
    per = hierarchical.node_steps(G, intra) + len(fracs)
    t = len(w) * per * n
    moves = n * M * sum(w) * (2 * (G - 1)) + int(n * M * sum(w) * sum(fracs)) + t
    chunks = sum(w) * G * M
    # an intra-node step of the radix pattern moves up to G / f_1 blocks per transfer, where the ring moves one:
    # the simulator's per-step temporaries grow with them (hierarchical at 1,024 GPUs on h100-cluster, 1 GiB:
    # 2.1 million chunk moves in its largest step, 59 MB traced above the ring's estimate: 28 bytes each)
    run = max(max(intra_blocks(G, intra)[0], default=1), 1)
    extra = STEP_MOVE_BYTES * n * (run - 1) * max(w) * M
    return Work(n, chunks, len(w) * per, t, moves, extra_bytes=extra,
                composed=flat_table_bytes(n, chunks) > FLAT_BYTES)


def _pipeline_k(n: int, pipeline: Any, kmax: int) -> int:
    """An explicit depth, else the most "auto" can choose."""
    if isinstance(pipeline, int) and not isinstance(pipeline, bool) and pipeline >= 1:
        return pipeline
    return kmax


def _stragglar(n: int, k: int, always: bool = False) -> Work:
    p = n - 1
    rounds = k * p - 1 + _log2(n) + 1
    phase1 = p * max(p - 1, 0)
    transfers = phase1 + n * rounds
    return Work(n, k * p, max(p - 1, 0) + rounds, transfers, phase1 * k + n * rounds,
                stragglar_search_seconds(n, always))


STEP_MOVE_BYTES = 40  # hierarchical: bytes per chunk move of its largest intra-node step beyond one block (28 traced)
PER_FORM_S = 0.01  # multistraggler: the fixed cost of one candidate form (build, retime, simulate)
# multistraggler's builder holds its forms' moves as Python objects (the best form, the one being built and
# its retimed order): measured 780-830 bytes per transfer of the result at 64-256 ranks with 4 late ranks,
# imports left out (bench/bench_estimate.py; the verifier's and simulator's counts said 2.9x too little)
MULTI_BUILD_BYTES = 1000


def _late(params: Mapping[str, Any]) -> int:
    arrivals = params.get("arrivals")
    return max(len(arrivals) if isinstance(arrivals, (Mapping, list, tuple)) else 1, 1)


def _resolved_k(n: int, pipeline: Any, params: Mapping[str, Any]) -> int:
    """The phase-2 depth StragglAR's pipeline model picks (stragglar/pipeline.py), or its largest."""
    try:
        return stragglar_pipeline.resolve_pipeline(n, pipeline, size=params.get("size"), alpha=params.get("alpha"),
                                                   bandwidth=params.get("bandwidth")).k
    except (CollsynthError, TypeError, ValueError):  # the build refuses it with its own message
        return min(stragglar_pipeline.AUTO_MAX, stragglar_pipeline.max_pipeline_for_build(n))


def _cluster_one_late(n: int, params: Mapping[str, Any]) -> Work | None:
    """clusterstraggler's one-plan forms (one late GPU, one whole late node) on a topology with nodes (module
    docstring), and its several-late-rank candidates beyond waves.searched (a funnel and choose.py's
    forms, each about one such plan: 1,024 GPUs with 3 late ranks, 537,620 transfers, against 537,634 for
    one late GPU), else None (the flat form or the waves search: the multistraggler estimate)."""
    topo = params.get("topology")
    if topo is None or isinstance(topo, str) or getattr(topo, "nranks", None) != n:
        return None
    grid = node_grid(topo, n)
    N, G = grid.shape
    if N < 2 or G < 2:
        return None
    arrivals = params.get("arrivals")
    try:
        times = arrival_vector(arrivals, n)
    except CollsynthError:
        return None  # build_schedule refuses it with the reason
    late = {int(r) for r in np.flatnonzero(times > times.min())}
    pipe = params.get("pipeline", "auto")
    several = len(late) > 1 and not any(late == {int(x) for x in row} for row in grid)
    if several and not (pipe == "auto" and not stragglar_waves.searched(n, G)):
        return None
    fixed = isinstance(pipe, int) and not isinstance(pipe, bool) and pipe >= 1
    m = min(pipe if fixed else max(cluster_cost.UNITS), cluster_cost.MAX_CHUNKS // G)
    # the chunks, cut finer for the rings (prephase.pre_units); with "auto" the most that any block count cuts
    # (not the most blocks: 33 nodes cut 40 blocks in 640 chunks, 64 blocks in 512)
    c = max(G * u * prephase.pre_units(grid, late, u, cluster_cost.MAX_CHUNKS)
            for u in ([m] if fixed else [u for u in cluster_cost.UNITS if u <= m]))
    blocks = G * max(m, N)  # the rings cut each part into one piece per node
    # steps: the merge's 4 C + 4 N, and the AllReduce before it (prephase.py): in-node rounds of G - 1 shifts,
    # at most 2 LOCAL_ROUNDS pieces deep, twice, and the rail ring's 2 (N - 1) steps
    pre = 2 * (G - 1) * min(N, 2 * prephase.LOCAL_ROUNDS) + 2 * N + 8
    # transfers: a rank sends at most one NVLink and one NIC message per step before the arrival, and per
    # block after it one NIC message and G + 1 NVLink ones (reductions, spreads), plus the broadcast's extra
    # rounds (measured 146-414 per rank on 2-64 nodes, where 4 G max(M, N) said 2,048-8,192)
    transfers = n * min(4 * blocks, (G + 2) * m + 2 * pre + 4 * N)
    copies = 2  # and the synchronous one (choose.py)
    if several:  # above the search's limit: one funnel, choose.py's late-GPU or late-node form, the synchronous one
        return Work(n, c, 4 * c + 4 * N + pre, transfers, 4 * n * c, copies=3)
    if pipe == "auto" and len(late) == 1:  # choose.reduce_only's funnel forms (one above the search's limit)
        copies += len(stragglar_waves.funnel_choices(n, N))
    if len(late) == 1 and n <= stragglar_cluster.BALANCED_MAX_GPUS:  # cluster.late_gpu_plan: beside the star form
        copies += cluster_cost.late_gpu_builds(N, G, cluster_cost.link_model(topo, grid)) - 1
    if pipe == "auto" and n <= stragglar_cluster.BALANCED_MAX_GPUS:
        if len(late) == 1:  # fit_delay's probe and smaller block counts
            copies += 1 + stragglar_cluster.SPILL_TRIES
        elif N & (N - 1):  # a late node's two other broadcast rules
            copies += 2
    return Work(n, c, 4 * c + 4 * N + pre, transfers, 4 * n * c, copies=copies)


def _waves_copies(n: int, params: Mapping[str, Any]) -> int | None:
    """The schedules clusterstraggler's waves form (several late ranks on a topology with nodes) builds and
    simulates (waves.build): where waves.searched, with pipeline "auto", two (as built, retimed) per
    cutoff (none, and each late arrival time), two more pairs at the best cutoff, one funnel form per
    waves.funnel_choices, the synchronous hierarchical
    and choose.last_alone's late-GPU form (with fit_delay's probe and smaller block counts); above it
    three (one funnel, choose.py's late-GPU or late-node form, the synchronous one); with a fixed pipeline
    one. None when the arrivals or topology do not make that form."""
    topo = params.get("topology")
    if topo is None or isinstance(topo, str) or getattr(topo, "nranks", None) != n:
        return None
    grid = node_grid(topo, n)
    N, G = grid.shape
    if N < 2 or G < 2:
        return None
    try:
        times = arrival_vector(params.get("arrivals"), n)
    except CollsynthError:
        return None
    late = {float(t) for t in times if t > times.min()}
    if len(late) < 1:
        return None
    if params.get("pipeline", "auto") != "auto":
        return 1
    if not stragglar_waves.searched(n, G):  # one funnel, at most one of choose.py's alternatives, synchronous
        return 3
    # choose.last_alone where the last rank arrives alone: the late-GPU form, fit_delay's probe and block counts
    alone = 1 + stragglar_cluster.SPILL_TRIES + cluster_cost.late_gpu_builds(N, G, cluster_cost.link_model(topo, grid))
    return 2 * (len(late) + 1) + 4 + len(stragglar_waves.funnel_choices(n, N)) + 1 + alone


def _domain_copies(n: int, params: Mapping[str, Any]) -> int:
    """The plans of domain.py's broadcast form that clusterstraggler builds and simulates in one NVLink domain
    (the last rank late alone, pipeline "auto"): one, and two more copy-back broadcasts on n not a power of two;
    else 0."""
    try:
        times = arrival_vector(params.get("arrivals"), n)
    except CollsynthError:
        return 0
    if params.get("pipeline", "auto") != "auto" or not stragglar_domain.applies(n, times):
        return 0
    return 3 if n & (n - 1) else 1


def size_knobs(params: Iterable[Mapping[str, Any]]) -> list[str]:
    """The build options given that scale the work besides n ("--pipeline 64"), for budget errors."""
    return sorted({f"--pipeline {p['pipeline']}" for p in params
                   if isinstance(p.get("pipeline"), int) and not isinstance(p.get("pipeline"), bool)})


def work(name: str, n: int, collective: str = "allreduce", params: Mapping[str, Any] | None = None,
         always: bool = False) -> Work:
    """About the work of ``build_schedule(name, n, collective, **params)`` (budget.Work); ``always``:
    count StragglAR's design search for every n (a bound non-decreasing in n, to find the largest n)."""
    params = params or {}
    n = max(int(n), 2)
    pipe = params.get("pipeline", "auto")
    if name == "multiring":
        return _multiring(n, params.get("topology"))
    if name == "ring":
        return _ring(n, collective)
    if name == "rhd":
        t = 2 * n * (_log2(n) + 2)
        return Work(n, n, 2 * _log2(n) + 2, t, 2 * n * (n - 1) + t)
    if name == "direct":
        t = n * (n - 1)
        return Work(n, n, 1, t, t)
    if name == "twoshot":
        t = 2 * n * (n - 1)
        return Work(n, n, 2, t, t)
    if name == "stragglar":
        kmax = min(stragglar_pipeline.AUTO_MAX, stragglar_pipeline.max_pipeline_for_build(n))
        return _stragglar(n, _pipeline_k(n, params.get("pipeline", 1), kmax), always)
    if name == "clusterstraggler":
        one = _cluster_one_late(n, params)
        if one is not None:
            return one
    if name in ("multistraggler", "clusterstraggler"):  # StragglAR's completion at the depth it resolves
        late = _late(params)  # phase 2 may run among the n - late punctual ranks, at their depth
        base = _stragglar(n, max(_resolved_k(m, pipe, params) for m in {n, max(n - late, 2)}), always)
        streams = 2 * late * base.nchunks
        forms = 20 * (late + 1) if params.get("size") is not None else 1  # forms x orders, each simulated
        multi = Work(n, base.nchunks, 2 * base.nsteps + 40 * late, base.transfers + streams, base.moves + streams,
                     base.search_s + PER_FORM_S * forms + 0.05 * (late + 1), forms,
                     extra_bytes=MULTI_BUILD_BYTES * (base.transfers + streams))
        if name == "multistraggler":
            return multi
        # the other cluster forms: the punctual AllReduce, then the late buffer in at most MAX_CHUNKS blocks
        chunks = min(cluster_cost.MAX_CHUNKS, 4 * n + 256)
        t = 2 * n * (n - 1) + n * chunks
        copies = _waves_copies(n, params)
        copies = max(2, multi.copies) + _domain_copies(n, params) if copies is None else copies
        return Work(n, max(chunks, multi.nchunks), max(2 * (n + chunks), multi.nsteps), max(t, multi.transfers),
                    max(4 * t, multi.moves), multi.search_s, copies, extra_bytes=multi.extra_bytes)
    if name == "hierarchical":
        return _hierarchical(n, pipe, params.get("topology"), params.get("size"))
    if name == "tree":
        k = _pipeline_k(n, pipe, max(tree.PIPELINES))
        t = 4 * k * (n - 1)
        return Work(n, 2 * k, 8 * k + 8 * _log2(n) + 8, t, t)
    return _ring(n, collective)  # the solver and anything new: ring-shaped


__all__ = ["SEARCH_HINT", "SEARCH_S_PER_N2", "needs_search", "size_knobs", "stragglar_search_seconds", "work"]
