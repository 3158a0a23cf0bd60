"""About the work of building one algorithm's schedule, before building it (issue 13, Scale): the
transfers, chunk moves, steps and chunks (budget.Work) each algorithm produces for n ranks, so that
synth.registry can refuse a size beyond the memory or time budget with the largest n that fits.

The counts are upper-bound style, from each algorithm's construction (the docstrings of its module;
tests/test_estimate.py checks them against built schedules):
- ring: n(n-1) one-chunk transfers per ReduceScatter or AllGather, n-1 steps each; multiring splits
  the same moves over its rings.
- rhd: at most 2 n log2 n transfers, the same 2n(n-1) chunk moves as ring.
- direct: n(n-1) transfers in one step (n^2 reduces into n locations: the verifier's rounds).
- twoshot: direct ReduceScatter then AllGather, 2n(n-1).
- stragglar with K(n-1) chunks: phase 1, a ring ReduceScatter among n-1 ranks ((n-1)(n-2)
  transfers of K chunks), then K(n-1) - 1 + ceil(log2 n) completion rounds of at most n transfers;
  n neither a power of two nor stored (stragglar/tables.py) adds the phase-2 design program, about
  SEARCH_S_PER_N2 x n^2 seconds (measured: n = 400 in 10 s, n = 1000 in 65 s, one core).
- multistraggler (and clusterstraggler on one node): StragglAR's completion plus the late ranks'
  streams, each form built and simulated (3 per late rank, two orders each) when a size is given.
- clusterstraggler on N nodes of G: the AllReduce before the arrival, 2nG chunk moves of M units per
  part, then per block at most 2GN + nG transfers (``_cluster``).
- hierarchical: K slices of a ring-shaped ReduceScatter/AllGather inside nodes and rails across them
  (its auto K keeps the transfers under hierarchical.MAX_TRANSFERS).
- tree: two trees, K slices each reduced and broadcast over n-1 edges: 4K(n-1) transfers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collsynth.budget import Work
from collsynth.synth.algorithms import hierarchical, tree
from collsynth.synth.algorithms.stragglar import pipeline as stragglar_pipeline
from collsynth.synth.algorithms.stragglar.cluster import MAX_CHUNKS, UNITS
from collsynth.synth.algorithms.stragglar.tables import stored_sizes

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


def _cluster(n: int, nodes: int, pipeline: Any) -> Work:
    """clusterstraggler on N nodes of G (stragglar/cluster.py): the AllReduce before the arrival (parts of
    M units: ReduceScatter and AllGather in every node, a ring per rail), then per block the wave's
    reduces, the rail broadcasts (with two-way exchanges) and every node's spread."""
    G = n // nodes
    auto = max(m for m in UNITS if G * m <= MAX_CHUNKS) if any(G * m <= MAX_CHUNKS for m in UNITS) else 1
    M = _pipeline_k(n, pipeline, auto)
    pre_t = 2 * n * (G - 1) + 2 * n * nodes
    pre_m = 2 * n * G * M
    per_t = 2 * G * nodes + n * G
    per_m = 2 * G * nodes + 2 * n * G
    steps = 2 * (G + nodes) + M * (nodes + 2 * G + 8)
    return Work(n, G * M, steps, pre_t + M * per_t, pre_m + M * per_m)


def work(name: str, n: int, collective: str = "allreduce", params: Mapping[str, Any] | None = None,
         always: bool = False) -> Work:
    """About the work of ``build_schedule(name, n, collective, **params)`` (budget.Work); ``always``:
    count StragglAR's design search for every n (a bound non-decreasing in n, to find the largest n)."""
    params = params or {}
    n = max(int(n), 2)
    pipe = params.get("pipeline", "auto")
    if name in ("ring", "multiring"):
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
        topo = params.get("topology")
        if isinstance(topo, str):  # a preset or file: registry checks again once the Topology is built
            return _ring(n, collective)
        nodes = int(getattr(topo, "node_count", 1) or 1)
        if nodes > 1 and n % nodes == 0 and n // nodes > 1:
            return _cluster(n, nodes, pipe)
    if name in ("multistraggler", "clusterstraggler"):
        kmax = min(stragglar_pipeline.AUTO_MAX, stragglar_pipeline.max_pipeline_for_build(n))
        base = _stragglar(n, _pipeline_k(n, pipe, kmax), always)
        arrivals = params.get("arrivals")
        late = max(len(arrivals) if isinstance(arrivals, (Mapping, list, tuple)) else 1, 1)
        streams = 2 * late * n * max(base.nchunks, 1)
        copies = 6 * (late + 1) if params.get("size") is not None else 1
        return Work(n, base.nchunks * 2, base.nsteps * 2, base.transfers + streams, base.moves + streams,
                    base.search_s, copies)
    if name == "hierarchical":
        nodes = int(getattr(params.get("topology"), "node_count", 1) or 1)
        k = _pipeline_k(n, pipe, max(hierarchical.PIPELINES) if nodes > 1 else 1)
        wsum = max(sum(w) for w in hierarchical.profiles(k))  # slice weights: ramps up to 16
        m = 1 if nodes <= 1 else max(nodes, 8)  # chunks per block: the rail algorithm's (ring N, rhd, tree 8)
        r = _ring(n, collective)
        t = min(k * r.transfers, max(hierarchical.MAX_TRANSFERS, r.transfers)) if pipe == "auto" else k * r.transfers
        per = -(-wsum // k) * m  # chunks one transfer moves, at most
        return Work(n, wsum * max(n // max(nodes, 1), 1) * m, k * r.nsteps * m, t, t * per)
    if name == "tree":
        k = _pipeline_k(n, pipe, max(tree.PIPELINES))
        t = 4 * k * (n - 1)
        return Work(n, 2 * k, 8 * k + 8 * _log2(n) + 8, t, t)
    return _ring(n, collective)  # the solver and anything new: ring-shaped


__all__ = ["SEARCH_HINT", "SEARCH_S_PER_N2", "needs_search", "stragglar_search_seconds", "work"]
