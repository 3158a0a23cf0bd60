"""Several late ranks with random arrivals on a cluster (issue 15, point 3): model numbers, 1 GiB per rank.
Prints JSON.

- random: V arrival vectors at 64 GPUs (``h100-cluster`` 8 x 8, or the same machine as a topology JSON:
  bench_cluster_straggler.json_topology), 2 to 8 late ranks, delays uniform in 0-10 ms (seeded): the
  median (and quartiles, p90, max, the count at most 1.3) of (completion - last arrival) / max(late-GPU
  bound, synchronous bound - last arrival) of the best of clusterstraggler and multistraggler (what
  `compare` shows), the same for the best synchronous schedule (synchronous.SYNC),
  and which form won how often;
- synthesis_1024: build and verify time of clusterstraggler at 1,024 GPUs (128 x 8) for one random
  arrival vector (8 late ranks), the waves form (the funnel form is searched up to 256 GPUs).

    python bench/bench_random_arrivals.py [--vectors 100] [--topology h100-cluster|json] [--skip-1024]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np
from bench_cluster_straggler import GiB, best_sync, json_topology, late_gpu_bound, sync_bound

from collsynth import workers
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import check

G = 8


def arrival_vectors(n: int, count: int, seed: int = 15) -> list[dict[int, float]]:
    """The bench's seeded vectors: 2 to 8 late ranks, delays uniform in 0-10 ms."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        k = int(rng.integers(2, 9))
        ranks = rng.choice(n, size=k, replace=False)
        out.append({int(r): float(rng.uniform(0, 10e-3)) for r in ranks})
    return out


def random_vectors(topo: object, n: int, size: float, count: int, seed: int = 15) -> dict[str, object]:
    N = n // G
    ratios, sync_ratios, forms = [], [], []
    t_build = 0.0
    for arr in arrival_vectors(n, count, seed):
        last = max(arr.values())
        denom = max(late_gpu_bound(size), sync_bound(N, size) - last)
        cands = {}
        for a in ("clusterstraggler", "multistraggler"):
            t0 = time.perf_counter()
            s = check(build_schedule(a, n, arrivals=arr, size=size, topology=topo))
            t_build += time.perf_counter() - t0
            label = f"{a}:{s.meta.get('form', '')}".rstrip(":")
            cands[label] = simulate(s, size, topo, arr).completion_s
        best = min(cands, key=lambda x: (cands[x], x))
        ratios.append((cands[best] - last) / denom)
        forms.append(best)
        _, comp, _ = best_sync(n, topo, arr, size)
        sync_ratios.append((comp - last) / denom)
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    p90 = statistics.quantiles(ratios, n=10)[-1] if len(ratios) > 1 else ratios[0]
    return {"vectors": count, "median_ratio": round(statistics.median(ratios), 4),
            "quartiles": [round(x, 4) for x in q], "p90_ratio": round(p90, 4), "max_ratio": round(max(ratios), 4),
            "vectors_within_1_3": sum(r <= 1.3 for r in ratios),
            "best_sync_median_ratio": round(statistics.median(sync_ratios), 4),
            "vectors_better_than_best_sync": sum(r < s * (1 - 1e-9) for r, s in zip(ratios, sync_ratios)),
            "chosen": {f: forms.count(f) for f in sorted(set(forms))},
            "build_verify_s_per_vector": round(t_build / count, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vectors", type=int, default=100, help="random arrival vectors at 64 GPUs (0: only the "
                    "1,024-GPU synthesis)")
    ap.add_argument("--topology", choices=("h100-cluster", "json"), default="h100-cluster")
    ap.add_argument("--skip-1024", action="store_true")
    ap.add_argument("--jobs", type=int, default=1,
                    help="worker processes for clusterstraggler's candidates (collsynth.workers; 0: one per core); "
                         "the schedules are the same, the seconds shorter")
    a = ap.parse_args()
    workers.set_jobs(a.jobs)
    if a.vectors < 0 or (a.vectors == 0 and a.skip_1024):
        ap.error("--vectors must be at least 1, or 0 without --skip-1024 (then only the 1,024-GPU synthesis runs)")
    out: dict[str, object] = {"bench": "random_arrivals", "size_bytes": GiB, "topology": a.topology,
                              "jobs": workers.jobs()}
    if a.vectors:
        with tempfile.TemporaryDirectory() as tmp:
            topo = (make_topology("h100-cluster", 64) if a.topology == "h100-cluster"
                    else make_topology(json_topology(64, os.path.join(tmp, "h100-64.json")), 64))
            out["random_64_gpus"] = random_vectors(topo, 64, GiB, a.vectors)
    if not a.skip_1024:
        topo = make_topology("h100-cluster", 1024)
        rng = np.random.default_rng(1024)
        ranks = rng.choice(1024, size=8, replace=False)
        arr = {int(r): float(rng.uniform(0, 10e-3)) for r in ranks}
        t0 = time.perf_counter()
        s = build_schedule("clusterstraggler", 1024, arrivals=arr, size=GiB, topology=topo)
        t1 = time.perf_counter()
        check(s)
        t2 = time.perf_counter()
        res = simulate(s, GiB, topo, arr)
        out["synthesis_1024"] = {"form": s.meta.get("form"), "build_s": round(t1 - t0, 2),
                                 "verify_s": round(t2 - t1, 2), "simulate_s": round(time.perf_counter() - t2, 2),
                                 "transfers": s.ntransfers,
                                 "after_last_arrival_ms": round(res.after_last_arrival_s * 1e3, 3)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
