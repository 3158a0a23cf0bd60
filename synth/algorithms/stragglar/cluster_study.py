"""`collsynth reproduce cluster` (issue 15 point 6): straggler-aware AllReduce on clusters of 2 to 128 nodes,
from built, verified and simulated schedules (not formulas).

For each node count N (N nodes of G GPUs on a cluster topology, default ``h100-cluster``: G = 8, 1 GiB per
rank; or a topology JSON file of N nodes) and three arrival cases:

- ``gpu``: one late GPU (rank 5, or the last rank of node 0 when G <= 5), late by ``delay``;
- ``node``: one late node (node 1, all its G GPUs), late by ``delay``;
- ``random``: a seeded random arrival vector, 2 to 8 late ranks with delays uniform in 0-10 ms (the issue's
  random case; ``seed`` + N seeds it, so a row does not depend on which other node counts are asked for);

each row has the time after the last arrival of the best synchronous schedule (the fastest of ring,
multiring, hierarchical and tree on the simulator: each waits for every rank), of ours (clusterstraggler
for one late GPU or node; the faster of clusterstraggler and multistraggler for random arrivals, what
`compare` shows) and the proven bound (synth/bounds.py ``allreduce_bound``, the brief's clusters.md
section 4), with the ratios: speedup = synchronous / ours, and each over the bound. The delay (default
50 ms) is long enough to hide the work before the arrival, as in the issue's numbers.

Cost: clusterstraggler's construction grows about as N^2 (seconds at 16 nodes, minutes at 128 today), so
the default node counts stop at 16 (``DEFAULT_NODES``); ``nodes`` takes any list up to 128 and more.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from collsynth import budget, progress
from collsynth.errors import CollsynthError
from collsynth.fileio import save_figure
from collsynth.synth.algorithms.layout import node_grid
from collsynth.synth.bounds import allreduce_bound
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import Topology, load_topology, make_topology
from collsynth.synth.verify import check

DEFAULT_NODES = (2, 4, 8, 16)
ALL_NODES = (2, 4, 8, 16, 32, 64, 128)
CASES = ("gpu", "node", "random")
SYNC = ("ring", "multiring", "hierarchical", "tree")
OURS = {"gpu": ("clusterstraggler",), "node": ("clusterstraggler",), "random": ("clusterstraggler", "multistraggler")}
RANDOM_LATE = (2, 8)  # late ranks per random vector (inclusive)
RANDOM_DELAY_S = 10e-3  # random delays are uniform in [0, this)
_SIZED = ("hierarchical", "tree", "clusterstraggler", "multistraggler")  # algorithms whose plan depends on the size


def study_bytes(n: int) -> int:
    """About the memory of one row at n GPUs: the largest schedule built, multiring's 16 n(n-1) one-chunk
    transfers over 8n chunks (the others stay below it), verified (budget.verify_bytes) and simulated."""
    transfers = 16 * n * (n - 1)
    return budget.verify_bytes(n, 8 * n, 16 * n, transfers) + 3 * 48 * transfers


def study_topology(spec: str, nodes: int, gpus_per_node: int) -> Topology:
    """``spec`` for ``nodes`` x ``gpus_per_node`` GPUs: a cluster preset (default h100-cluster) built for that
    many, or a topology JSON file with that many nodes (e.g. from `collsynth topology import`); CollsynthError
    naming what to change unless it has exactly that shape."""
    is_file = spec.lower().endswith(".json") or os.path.exists(spec)
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


def _time(name: str, n: int, topo: Topology, size: float, arr: dict[int, float]) -> tuple[float, float]:
    """(completion, after the last arrival) of algorithm ``name``, built, verified and simulated."""
    params: dict[str, Any] = {"topology": topo}
    if name in _SIZED:
        params["size"] = size
    if name in ("clusterstraggler", "multistraggler"):
        params["arrivals"] = arr
    res = simulate(check(build_schedule(name, n, **params)), size, topo, arr)
    return res.completion_s, res.after_last_arrival_s


def _best(names: Sequence[str], n: int, topo: Topology, size: float, arr: dict[int, float]) -> tuple[str, float]:
    """(algorithm, after the last arrival) of the one of ``names`` that completes first (name on ties)."""
    got = {a: _time(a, n, topo, size, arr) for a in names}
    a = min(got, key=lambda x: (got[x][0], x))
    return a, got[a][1]


def cluster_row(nodes: int, case: str, size: float = 2**30, topology: str = "h100-cluster", gpus_per_node: int = 8,
                delay: float = 0.05, seed: int = 15) -> dict[str, Any]:
    """One row of the study (module docstring)."""
    topo = study_topology(topology, nodes, gpus_per_node)
    n = topo.nranks
    grid = node_grid(topo, n)
    arr = case_arrivals(case, grid, delay, seed)
    times = np.zeros(n)
    for r, t in arr.items():
        times[r] = t
    bound = allreduce_bound(topo, size, times).after_last_arrival_s
    sync_alg, sync = _best(SYNC, n, topo, size, arr)
    ours_alg, ours = _best(OURS[case], n, topo, size, arr)
    return {"nodes": nodes, "gpus": n, "case": case, "late_ranks": sorted(arr), "last_arrival_s": max(arr.values()),
            "best_sync": sync_alg, "sync_after_s": sync, "ours": ours_alg, "ours_after_s": ours,
            "bound_after_s": bound, "speedup": sync / ours, "ours_x_bound": ours / bound, "sync_x_bound": sync / bound}


def check_study(nodes: Sequence[int], gpus_per_node: int = 8) -> None:
    """Refuse (CollsynthError, exit 2) node counts whose schedules do not fit the memory budget, naming the
    largest that does."""
    for N in nodes:
        n = N * gpus_per_node
        if study_bytes(n) > budget.max_memory():
            fit = budget.largest_fitting(lambda x: float(study_bytes(x * gpus_per_node)), 1, N)
            budget.check(study_bytes(n), f"reproduce cluster at {N} nodes ({n} GPUs)",
                         largest=f"{fit} nodes" if fit >= 2 else "")


def reproduce_cluster(nodes: Sequence[int] = DEFAULT_NODES, cases: Sequence[str] = CASES,
                      **model: Any) -> list[dict[str, Any]]:
    """The study's rows for every node count in ``nodes`` (sorted) and case; progress on stderr."""
    ns = sorted(set(nodes))
    gpn = int(model.get("gpus_per_node", 8))
    check_study(ns, gpn)
    study_topology(str(model.get("topology", "h100-cluster")), ns[0], gpn)  # a bad topology fails before any work
    rows = []
    for i, N in enumerate(ns):
        for case in cases:
            progress.note(f"reproduce cluster [{i + 1}/{len(ns)}] {N} nodes, late {case}")
            rows.append(cluster_row(N, case, **model))
    return rows


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
