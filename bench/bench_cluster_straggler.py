"""Straggler-aware AllReduce on clusters (issue 15): model numbers on ``h100-cluster`` and on a topology
JSON written for the same machine (an NVSwitch per node, one 400 Gb/s NIC per GPU into its rail
switch), 1 GiB per rank, delays long enough to hide the work before the arrival. Prints JSON.

- late_gpu: one late GPU at 16 nodes (128 GPUs): time after its arrival of clusterstraggler, of the
  best synchronous schedule (synchronous.SYNC, the fastest simulated), the late-GPU bound
  max(s/(B_nv+B_net), s/(G B_net)) (the brief's clusters.md section 4), ratios;
- late_node: one late node at 16 nodes, likewise (bound max(s/(G B_net), (G-1)/G s/B_nv));
- both rows also carry the largest proven bound of synth.bounds (``proven_bound_ms``, its kind and
  ``x_proven_bound``): for the late node the late-set bound 2 s / (B_nv + 2 B_net), tighter than the
  issue's;
- three_late_together_8_nodes: GPU 5 of nodes 0, 1 and 2 late together at 64 GPUs, likewise (a case the
  straggler forms do not win yet: the synchronous schedule is returned; its proven bound is the late-gossip
  bound, docs/stragglar.md section 11);
- random: V arrival vectors at 64 GPUs (8 nodes), 2 to 8 late ranks, delays uniform in 0-10 ms (seeded):
  the median of (completion - last arrival) / max(late-GPU bound, synchronous bound - last arrival) of
  the best of clusterstraggler and multistraggler (what `compare` shows), and of the best synchronous;
- synthesis: build (and verify) time of clusterstraggler at 1,024 GPUs (128 nodes), GPU and node form;
- with ``--nodes 6,12,24``: the late-GPU and late-node rows on those node counts too (h100-cluster only;
  node counts that are not powers of two use the broadcasts of bcast.py's placement search);
- with ``--sizes 1MiB,4MiB``: the 16-node late-GPU and late-node rows at those buffer sizes too
  (h100-cluster only; their ``bound_ms`` is the issue's formula at that size).

    python bench/bench_cluster_straggler.py [--vectors 100] [--skip-1024] [--nodes 6,12,24] [--sizes 1MiB,4MiB]
    (--vectors 0 skips the random vectors)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np

from collsynth import workers
from collsynth.synth.algorithms import synchronous
from collsynth.synth.arrivals import arrival_vector
from collsynth.synth.bounds import allreduce_bound
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import check
from collsynth.units import parse_size

GiB = 2**30
B_NV, B_NET, G = 450e9, 50e9, 8


def json_topology(n: int, path: str, G: int = G, nvlink: str = "450GB/s", net: str = "50GB/s",
                  name: str = "h100-json") -> str:
    """The h100-cluster machine as a topology JSON (per link: half the route alpha of the preset); other G
    and bandwidths give the same shape (an NVSwitch per node, one NIC per GPU into its rail switch)."""
    N = n // G
    links = []
    for r in range(n):
        links.append({"src": r, "dst": f"nvsw{r // G}", "class": "nvlink", "alpha": "1.7us", "bandwidth": nvlink})
        links.append({"src": r, "dst": f"rail{r % G}", "class": "net", "alpha": "7us", "bandwidth": net})
    d = {"name": f"{name}-{N}x{G}", "gpus": n,
         "switches": [f"nvsw{a}" for a in range(N)] + [f"rail{g}" for g in range(G)], "links": links,
         "ports": {"nvlink": 1, "net": 1}, "nodes": [list(range(a * G, (a + 1) * G)) for a in range(N)],
         "fabric": "rail"}
    with open(path, "w") as f:
        json.dump(d, f)
    return path


def late_gpu_bound(size: float) -> float:
    return max(size / (B_NV + B_NET), size / (G * B_NET))


def late_node_bound(size: float) -> float:
    return max(size / (G * B_NET), (G - 1) / G * size / B_NV)


def sync_bound(N: int, size: float) -> float:
    return 2 * (N - 1) / N * size / (G * B_NET)


def best_sync(n: int, topo: object, arr: dict[int, float], size: float) -> tuple[str, float, float]:
    """(algorithm, completion, after last arrival) of the fastest synchronous schedule (synchronous.fastest:
    the one clusterstraggler falls back to and the study reports)."""
    times = np.zeros(n)
    for r, t in arr.items():
        times[r] = t
    got = synchronous.fastest(n, topo, size, times, keep=False)
    return got.name, got.completion_s, got.completion_s - float(times.max())


def one_late(topo: object, n: int, arr: dict[int, float], size: float, bound: float) -> dict[str, object]:
    t0 = time.perf_counter()
    s = check(build_schedule("clusterstraggler", n, arrivals=arr, size=size, topology=topo))
    build_s = time.perf_counter() - t0
    ours = simulate(s, size, topo, arr).after_last_arrival_s
    alg, _, sync = best_sync(n, topo, arr, size)
    proven = allreduce_bound(topo, size, arrival_vector(arr, n))  # type: ignore[arg-type]
    return {"form": s.meta["form"], "wide": s.meta.get("wide"), "node_bcast": s.meta.get("node_bcast"),
            "fan": s.meta.get("fan"), "pipeline": s.meta["pipeline"],
            "after_arrival_ms": round(ours * 1e3, 4),
            "best_sync": alg, "best_sync_after_arrival_ms": round(sync * 1e3, 4), "bound_ms": round(bound * 1e3, 4),
            "x_bound": round(ours / bound, 4), "speedup_vs_best_sync": round(sync / ours, 4),
            "proven_bound_ms": round(proven.after_last_arrival_s * 1e3, 4), "proven_bound_kind": proven.kind,
            "x_proven_bound": round(ours / proven.after_last_arrival_s, 4), "build_verify_s": round(build_s, 2)}


def late_rows(topo: object, n: int, size: float) -> dict[str, object]:
    """Rank 5 late, and node 1 (ranks 8-15) late, by 50 ms: ``one_late`` rows against the issue's bounds."""
    return {"late_gpu": one_late(topo, n, {5: 0.05}, size, late_gpu_bound(size)),
            "late_node": one_late(topo, n, {r: 0.05 for r in range(8, 16)}, size, late_node_bound(size))}


def random_vectors(topo: object, n: int, size: float, count: int, seed: int = 15) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    N = n // G
    ratios, sync_ratios, wins = [], [], []
    for _ in range(count):
        k = int(rng.integers(2, 9))
        ranks = rng.choice(n, size=k, replace=False)
        arr = {int(r): float(rng.uniform(0, 10e-3)) for r in ranks}
        last = max(arr.values())
        denom = max(late_gpu_bound(size), sync_bound(N, size) - last)
        cands = {}
        for a in ("clusterstraggler", "multistraggler"):
            s = build_schedule(a, n, arrivals=arr, size=size, topology=topo)
            cands[a] = simulate(s, size, topo, arr).completion_s
        a_best = min(cands, key=lambda x: (cands[x], x))
        ratios.append((cands[a_best] - last) / denom)
        wins.append(a_best)
        _, comp, _ = best_sync(n, topo, arr, size)
        sync_ratios.append((comp - last) / denom)
    return {"vectors": count, "median_ratio": round(statistics.median(ratios), 4),
            "best_sync_median_ratio": round(statistics.median(sync_ratios), 4),
            "max_ratio": round(max(ratios), 4), "chosen": {a: wins.count(a) for a in sorted(set(wins))}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vectors", type=int, default=100)
    ap.add_argument("--skip-1024", action="store_true")
    ap.add_argument("--nodes", default="", help="comma-separated extra node counts (8 GPUs each) for the late rows")
    ap.add_argument("--sizes", default="",
                    help="comma-separated extra buffer sizes (e.g. 1MiB,4MiB,16MiB) for the 16-node late rows "
                         "(h100-cluster only)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="worker processes for clusterstraggler's candidates (collsynth.workers; 0: one per core); "
                         "the schedules are the same, the seconds shorter")
    a = ap.parse_args()
    workers.set_jobs(a.jobs)
    out: dict[str, object] = {"bench": "cluster_straggler", "size_bytes": GiB, "jobs": workers.jobs()}
    with tempfile.TemporaryDirectory() as tmp:
        for label in ("h100-cluster", "json"):
            n = 128
            topo = (make_topology("h100-cluster", n) if label == "h100-cluster"
                    else make_topology(json_topology(n, os.path.join(tmp, "h100.json")), n))
            rows = late_rows(topo, n, GiB)
            res: dict[str, object] = {"late_gpu_16_nodes": rows["late_gpu"], "late_node_16_nodes": rows["late_node"]}
            topo64 = (make_topology("h100-cluster", 64) if label == "h100-cluster"
                      else make_topology(json_topology(64, os.path.join(tmp, "h100-64.json")), 64))
            res["three_late_together_8_nodes"] = one_late(topo64, 64, {5: 0.05, 13: 0.05, 21: 0.05}, GiB,
                                                          late_gpu_bound(GiB))
            if a.vectors > 0:
                res["random_64_gpus"] = random_vectors(topo64, 64, GiB, a.vectors)
            out[label] = res
    for N in (int(x) for x in a.nodes.split(",") if x.strip()):
        n = N * G
        topo = make_topology("h100-cluster", n)
        out[f"h100-cluster_{N}_nodes"] = late_rows(topo, n, GiB)
    for size_s in (x.strip() for x in a.sizes.split(",") if x.strip()):
        size = float(parse_size(size_s))
        out[f"h100-cluster_16_nodes_{size_s}"] = late_rows(make_topology("h100-cluster", 128), 128, size)
    if not a.skip_1024:
        topo = make_topology("h100-cluster", 1024)
        syn = {}
        for form, arr in (("gpu", {5: 0.05}), ("node", {r: 0.05 for r in range(8, 16)})):
            t0 = time.perf_counter()
            s = build_schedule("clusterstraggler", 1024, arrivals=arr, size=GiB, topology=topo)
            t1 = time.perf_counter()
            check(s)
            syn[form] = {"build_s": round(t1 - t0, 2), "verify_s": round(time.perf_counter() - t1, 2),
                         "transfers": s.ntransfers}
        out["synthesis_1024"] = syn
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
