"""`collsynth reproduce cluster` (issue 15 point 6): straggler-aware AllReduce on clusters of 2 to 128 nodes,
from built, verified and simulated schedules (not formulas).

For each node count N (N nodes of G GPUs on a cluster topology, default ``h100-cluster``: G = 8, 1 GiB per
rank; or a topology JSON file of N nodes) and three arrival cases:

- ``gpu``: one late GPU (rank 5, or the last rank of node 0 when G <= 5), late by ``delay``;
- ``node``: one late node (node 1, all its G GPUs), late by ``delay``;
- ``random``: a seeded random arrival vector, 2 to 8 late ranks with delays uniform in 0-10 ms (the issue's
  random case; ``seed`` + N seeds it, so a row does not depend on which other node counts are asked for);

each row has the time after the last arrival of the best synchronous schedule (the fastest of ring,
multiring, hierarchical, tree, rhd, radix, direct and twoshot on the simulator: each waits for every
rank), of ours (clusterstraggler for one late GPU or node; the faster of clusterstraggler and
multistraggler for random arrivals, what `compare` shows, multistraggler up to FLAT_MAX_NODES nodes) and
the proven bound (synth/bounds.py ``allreduce_bound``, the brief's clusters.md section 4), with the
ratios: speedup = synchronous / ours, and each over the bound. The delay (default 50 ms) is long enough
to hide the work before the arrival, as in the issue's numbers.

Cost (the default node counts are 2, 4, ..., 128; bench/bench_cluster_study.py prints the seconds of each
node count and case): measured 104 s of CPU (207 s wall on 2 cores shared with other jobs; main 5597c06),
of which the random case at 32 nodes (clusterstraggler's search over its several-late-rank forms, 32 s)
and the late GPU and late node at 128 nodes (11 s, 7 s) are the largest; the synchronous schedules take
1-4 s per node count. Three things keep it short; the first two change no row:

- the synchronous schedules have no phases, so every step waits for every rank (synth/simulate.py) and
  their time after the last arrival does not depend on the arrivals: each is built, verified and
  simulated once per node count (everyone on time) and its time serves the three cases (checked: a
  schedule with phases is refused);
- ring and multiring (2 n(n-1) and 2 G n(n-1) transfers: 16.7 million at 1,024 GPUs), direct and twoshot
  (n(n-1) and 2 n(n-1)) are built only when their proven lower bound (``synchronous.port_bound``: the
  messages each rank sends hold one of its send slots of that port class for at least alpha + bytes /
  bandwidth of the route) is below the best of hierarchical, tree, rhd and radix; otherwise the row names
  them in ``sync_pruned`` with the bound, which is above the best synchronous time, so they could not have
  been the best;
- multistraggler (the flat form: no nodes, a ring ReduceScatter of (n-1)(n-2) transfers, several forms
  each simulated; at 32 nodes 87 s wall to build and 13x slower than clusterstraggler after the last
  arrival) is tried for random arrivals up to ``FLAT_MAX_NODES`` nodes only (``ours_tried`` lists the
  candidates of each row); above, ours is clusterstraggler alone. This can only make ours slower, never
  faster than what was built.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from collsynth import budget, progress
from collsynth.budget import Work
from collsynth.errors import CollsynthError
from collsynth.fileio import save_figure
from collsynth.synth.algorithms import synchronous
from collsynth.synth.algorithms.estimate import work
from collsynth.synth.algorithms.layout import node_grid
from collsynth.synth.algorithms.stragglar import waves
from collsynth.synth.bounds import allreduce_bound
from collsynth.synth.registry import algorithm_params, build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import Topology, load_topology, make_topology
from collsynth.synth.verify import check
from collsynth.workers import imap_ordered

ALL_NODES = (2, 4, 8, 16, 32, 64, 128)
DEFAULT_NODES = ALL_NODES
CASES = ("gpu", "node", "random")
FLAT_MAX_NODES = 16  # multistraggler (flat) is one of ours for random arrivals up to this many nodes
OURS = {"gpu": ("clusterstraggler",), "node": ("clusterstraggler",), "random": ("clusterstraggler", "multistraggler")}
RANDOM_LATE = (2, 8)  # late ranks per random vector (inclusive)
RANDOM_DELAY_S = 10e-3  # random delays are uniform in [0, this)
_SIZED = ("hierarchical", "tree", "clusterstraggler", "multistraggler")  # algorithms whose plan depends on the size


def study_works(nodes: int, cases: Sequence[str] = CASES, **model: Any) -> tuple[list[Work], list[Work]]:
    """The work estimates (synth.algorithms.estimate) of what one node count of the study builds: (the
    schedules every such count builds: hierarchical, tree, rhd, radix and ours for each case; ring,
    multiring, direct and twoshot, built only where their bound does not prune them, e.g. never on
    h100-cluster)."""
    gpn = int(model.get("gpus_per_node", 8))
    size = float(model.get("size", 2**30))
    topo = study_topology(str(model.get("topology", "h100-cluster")), nodes, gpn)
    n = topo.nranks
    grid = node_grid(topo, n)
    built = [work(a, n, "allreduce", _params(a, topo, size, None)) for a in synchronous.SYNC
             if a not in synchronous.BOUNDED]
    for case in cases:
        arr = case_arrivals(case, grid, float(model.get("delay", 0.05)), int(model.get("seed", 15)))
        built += [work(a, n, "allreduce", _params(a, topo, size, arr)) for a in ours_names(case, nodes)]
    bounded = [work(a, n, "allreduce", _params(a, topo, size, None)) for a in synchronous.BOUNDED]
    return built, bounded


def is_topology_file(spec: str) -> bool:
    """Whether the study's ``--topology`` names a topology JSON file (of a fixed node count), not a preset."""
    return spec.lower().endswith(".json") or os.path.exists(spec)


def study_topology(spec: str, nodes: int, gpus_per_node: int) -> Topology:
    """``spec`` for ``nodes`` x ``gpus_per_node`` GPUs: a cluster preset (default h100-cluster) built for that
    many, or a topology JSON file with that many nodes (e.g. from `collsynth topology import`); CollsynthError
    naming what to change unless it has exactly that shape."""
    is_file = is_topology_file(spec)
    topo = load_topology(spec) if is_file else make_topology(spec, nodes * gpus_per_node)
    shape = node_grid(topo, topo.nranks).shape
    if shape != (nodes, gpus_per_node):
        fix = (f"use --nodes {shape[0]} --gpus-per-node {shape[1]}" if is_file and min(shape) >= 2 else
               "the cluster study needs nodes of 2 or more GPUs: a cluster preset such as h100-cluster or a topology "
               "file with nodes")
        raise CollsynthError(f"topology {spec!r} has {shape[0]} node(s) of {shape[1]} GPUs, not {nodes} of "
                             f"{gpus_per_node}: {fix}")
    return topo


def case_arrivals(case: str, grid: np.ndarray, delay: float, seed: int) -> dict[int, float]:
    """The arrivals of one case (module docstring) on the N x G ``grid`` of ranks."""
    N, G = grid.shape
    if case == "gpu":
        return {int(grid[0, min(5, G - 1)]): delay}
    if case == "node":
        return {int(r): delay for r in grid[1]}
    rng = np.random.default_rng([seed, N])
    k = int(rng.integers(RANDOM_LATE[0], RANDOM_LATE[1] + 1))
    ranks = rng.choice(grid.size, size=min(k, grid.size - 1), replace=False)
    return {int(r): float(rng.uniform(0, RANDOM_DELAY_S)) for r in sorted(ranks)}


def _params(name: str, topo: Topology, size: float, arr: dict[int, float] | None) -> dict[str, Any]:
    params: dict[str, Any] = {"topology": topo} if "topology" in algorithm_params(name) else {}
    if name in _SIZED:
        params["size"] = size
    if arr is not None and name in ("clusterstraggler", "multistraggler"):
        params["arrivals"] = arr
    return params


def _time(name: str, n: int, topo: Topology, size: float, arr: dict[int, float]) -> tuple[float, float, str | None]:
    """(completion, after the last arrival, the schedule's meta form) of algorithm ``name``, built, verified
    and simulated."""
    s = check(build_schedule(name, n, **_params(name, topo, size, arr)))
    res = simulate(s, size, topo, arr)
    form = s.meta.get("form")
    return res.completion_s, res.after_last_arrival_s, None if form is None else str(form)


def _best(names: Sequence[str], n: int, topo: Topology, size: float,
          arr: dict[int, float]) -> tuple[str, float, str | None]:
    """(algorithm, after the last arrival, its form) of the one of ``names`` that completes first (name on
    ties)."""
    got = {a: _time(a, n, topo, size, arr) for a in names}
    a = min(got, key=lambda x: (got[x][0], x))
    return a, got[a][1], got[a][2]


def best_sync(n: int, topo: Topology, size: float) -> dict[str, Any]:
    """The best synchronous schedule (module docstring; synchronous.fastest, each candidate built through the
    registry and verified): ``best_sync`` (its name), ``sync_after_s`` (its time after the last arrival,
    whatever the arrivals) and ``sync_pruned`` ({ring or multiring: its lower bound} for those not built
    because the bound exceeds the best of the others)."""
    got = synchronous.fastest(n, topo, size, keep=False,
                              build=lambda a: check(build_schedule(a, n, **_params(a, topo, size, None))))
    return {"best_sync": got.name, "sync_after_s": got.completion_s, "sync_pruned": got.pruned}


def ours_names(case: str, nodes: int) -> tuple[str, ...]:
    """The algorithms ours is the fastest of (OURS; multistraggler up to FLAT_MAX_NODES nodes)."""
    return tuple(a for a in OURS[case] if a != "multistraggler" or nodes <= FLAT_MAX_NODES)


def cluster_row(nodes: int, case: str, size: float = 2**30, topology: str = "h100-cluster", gpus_per_node: int = 8,
                delay: float = 0.05, seed: int = 15, sync: dict[str, Any] | None = None) -> dict[str, Any]:
    """One row of the study (module docstring); ``sync``: ``best_sync`` of this node count when known."""
    ours = ours_row(nodes, case, size, topology, gpus_per_node, delay, seed)
    if sync is None:
        topo = study_topology(topology, nodes, gpus_per_node)
        sync = best_sync(topo.nranks, topo, size)
    return with_sync(ours, sync)


def ours_row(nodes: int, case: str, size: float = 2**30, topology: str = "h100-cluster", gpus_per_node: int = 8,
             delay: float = 0.05, seed: int = 15) -> dict[str, Any]:
    """The part of a row that depends on the arrivals: ours (built, verified, simulated) and the bound."""
    topo = study_topology(topology, nodes, gpus_per_node)
    n = topo.nranks
    grid = node_grid(topo, n)
    arr = case_arrivals(case, grid, delay, seed)
    times = np.zeros(n)
    for r, t in arr.items():
        times[r] = t
    bound = allreduce_bound(topo, size, times).after_last_arrival_s
    names = ours_names(case, nodes)
    ours_alg, ours, form = _best(names, n, topo, size, arr)
    return {"nodes": nodes, "gpus": n, "case": case, "late_ranks": sorted(arr), "last_arrival_s": max(arr.values()),
            "ours": ours_alg, "ours_form": form, "ours_tried": list(names), "ours_after_s": ours,
            "bound_after_s": bound}


def with_sync(ours: dict[str, Any], sy: dict[str, Any]) -> dict[str, Any]:
    """A row from ``ours_row``'s part and its node count's ``best_sync``, with the ratios."""
    sync_after, mine, bound = sy["sync_after_s"], ours["ours_after_s"], ours["bound_after_s"]
    head = {k: ours[k] for k in ("nodes", "gpus", "case", "late_ranks", "last_arrival_s")}
    tail = {k: ours[k] for k in ("ours", "ours_form", "ours_tried", "ours_after_s", "bound_after_s")}
    return {**head, "best_sync": sy["best_sync"], "sync_after_s": sync_after, "sync_pruned": sy["sync_pruned"],
            **tail, "speedup": sync_after / mine, "ours_x_bound": mine / bound, "sync_x_bound": sync_after / bound}


def check_study(nodes: Sequence[int], cases: Sequence[str] = CASES,
                **model: Any) -> dict[int, tuple[list[Work], list[Work]]]:
    """Refuse (CollsynthError, exit 2) node counts whose schedules do not fit the memory budget, naming the
    largest that does; ring and multiring are checked when they are built. Returns ``study_works`` of each
    node count."""
    gpn = int(model.get("gpus_per_node", 8))

    def need(x: int, works: tuple[list[Work], list[Work]] | None = None) -> int:
        return max(w.nbytes() for w in (works or study_works(x, cases, **model))[0])

    got = {N: study_works(N, cases, **model) for N in nodes}
    for N, works in got.items():
        if need(N, works) > budget.max_memory():
            is_preset = not is_topology_file(str(model.get("topology", "h100-cluster")))
            fit = budget.largest_fitting(lambda x: float(need(x)), 2, N) if is_preset else 0
            budget.check(need(N, works), f"reproduce cluster at {N} nodes ({N * gpn} GPUs)",
                         largest=f"{fit} nodes" if fit >= 2 else "")
    return got


def reproduce_cluster(nodes: Sequence[int] = DEFAULT_NODES, cases: Sequence[str] = CASES,
                      **model: Any) -> list[dict[str, Any]]:
    """The study's rows for every node count in ``nodes`` (sorted) and case; progress on stderr (the
    synchronous schedules once per node count, then each case, with the seconds each took). With worker
    processes (collsynth.workers) the node counts beyond waves.searched, where clusterstraggler
    builds one candidate, share out their synchronous schedules and cases as whole tasks, while the others
    share out their search's candidates; the rows are the same."""
    ns = sorted(set(nodes))
    gpn = int(model.get("gpus_per_node", 8))
    spec = str(model.get("topology", "h100-cluster"))
    size = float(model.get("size", 2**30))
    study_topology(spec, ns[0], gpn)  # a bad topology fails before any work
    works = check_study(ns, cases, **model)
    whole = [N for N in ns if not waves.searched(N * gpn, gpn)]
    # tasks at once (>= 1): each in its own process, counting ring and multiring as if built
    task = max((w.share_bytes() for N in whole for ws in works[N] for w in ws), default=1)
    fit = budget.max_memory() // max(task, 1)
    pending = imap_ordered(study_task, [call for N in whole for call in
                                        [("sync", (spec, N, gpn, size))] + [("ours", (N, c, model)) for c in cases]],
                           at_once=max(1, fit))
    rows = []
    for i, N in enumerate(ns):
        progress.note(f"reproduce cluster [{i + 1}/{len(ns)}] {N} nodes: synchronous schedules")
        t0 = time.perf_counter()
        sync = next(pending) if N in whole else study_task(("sync", (spec, N, gpn, size)))
        for case in cases:
            progress.note(f"reproduce cluster [{i + 1}/{len(ns)}] {N} nodes, late {case} "
                          f"(previous stage {time.perf_counter() - t0:.1f}s)")
            t0 = time.perf_counter()
            ours = next(pending) if N in whole else study_task(("ours", (N, case, model)))
            rows.append(with_sync(ours, sync))
        progress.note(f"reproduce cluster [{i + 1}/{len(ns)}] {N} nodes done (last case "
                      f"{time.perf_counter() - t0:.1f}s)")
    return rows


def study_task(call: tuple[str, tuple[Any, ...]]) -> dict[str, Any]:
    """("sync", (topology spec, nodes, GPUs per node, size)) -> ``best_sync``; ("ours", (nodes, case,
    model options)) -> ``ours_row`` (run here or in a worker process)."""
    kind, args = call
    if kind == "sync":
        spec, N, gpn, size = args
        topo = study_topology(spec, N, gpn)
        return best_sync(topo.nranks, topo, size)
    N, case, model = args
    return ours_row(N, case, **model)


def plot_cluster(rows: Sequence[dict[str, Any]], path: str) -> None:
    """Time after the last arrival against the node count, one panel per case: best synchronous, ours and
    the bound; written to ``path`` (PNG) atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [c for c in CASES if any(r["case"] == c for r in rows)]
    fig, axes = plt.subplots(1, len(cases), figsize=(4.2 * len(cases), 3.8), squeeze=False)
    titles = {"gpu": "one late GPU", "node": "one late node", "random": "random arrivals"}
    for ax, case in zip(axes[0], cases):
        pts = [r for r in rows if r["case"] == case]
        xs = [r["nodes"] for r in pts]
        ax.plot(xs, [r["sync_after_s"] * 1e3 for r in pts], "s--", label="best synchronous")
        ax.plot(xs, [r["ours_after_s"] * 1e3 for r in pts], "o-", label="ours")
        ax.plot(xs, [r["bound_after_s"] * 1e3 for r in pts], ":", color="grey", label="bound")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("nodes")
        ax.set_title(titles[case])
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("time after the last arrival (ms)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)
