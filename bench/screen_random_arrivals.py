"""Screening for bench_random_arrivals.py (issue 15, point 3): per vector, the ratio of each funnel candidate
of waves.FUNNEL_CHOICES, of the synchronous hierarchical schedule and, where choose.last_alone weighs it (the
others all in long before the last rank), of the late-GPU form for the last rank ("gpu"), without the waves
candidates and multistraggler (about 3 s per vector instead of 9). One JSON line per vector, then a summary
line.

    python bench/screen_random_arrivals.py [--first 0] [--vectors 100]

Ratio: (completion - last arrival) / max(late-GPU bound, synchronous bound - last arrival), as the bench;
"gap_ms" is the time between the last two arrivals, "nodes" the nodes with a late rank.
"""

from __future__ import annotations

import argparse
import json
import statistics

from bench_cluster_straggler import GiB, late_gpu_bound, sync_bound
from bench_random_arrivals import G, arrival_vectors

from collsynth.synth.algorithms import hierarchical
from collsynth.synth.algorithms.stragglar import choose, funnel, waves
from collsynth.synth.arrivals import arrival_vector
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--vectors", type=int, default=100)
    a = ap.parse_args()
    n = 64
    topo = make_topology("h100-cluster", n)
    T = funnel.rail_time(topo, n, GiB)
    sync = hierarchical.build(n, topology=topo, size=GiB)
    best_ratios = []
    for i, arr in enumerate(arrival_vectors(n, a.first + a.vectors)):
        if i < a.first:
            continue
        ts = sorted(arr.values())
        last = ts[-1]
        denom = max(late_gpu_bound(GiB), sync_bound(n // G, GiB) - last)
        res = {}
        for c, choice in enumerate(waves.FUNNEL_CHOICES):
            f = waves.funnel_candidate(n, arr, GiB, topo, choice, T)
            res[f"f{c}"] = round((simulate(f, GiB, topo, arr).completion_s - last) / denom, 4)
        res["sync"] = round((simulate(sync, GiB, topo, arr).completion_s - last) / denom, 4)
        gpu = choose.last_alone(n, arrival_vector(arr, n), GiB, topo)
        if gpu is not None:
            res["gpu"] = round((simulate(gpu, GiB, topo, arr).completion_s - last) / denom, 4)
        best = min(res, key=lambda k: (res[k], k))
        best_ratios.append(res[best])
        print(json.dumps({"i": i, "k": len(arr), "nodes": len({r // G for r in arr}), "last_ms": round(last * 1e3, 3),
                          "gap_ms": round((ts[-1] - ts[-2]) * 1e3, 3), "best": best, "ratio": res[best], **res}),
              flush=True)
    print(json.dumps({"vectors": len(best_ratios), "median_ratio": round(statistics.median(best_ratios), 4),
                      "sum": round(sum(best_ratios), 4)}))


if __name__ == "__main__":
    main()
