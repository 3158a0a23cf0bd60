"""Several late ranks at scale (issue 15, point 3 beyond 64 GPUs): for each node count (h100-cluster, nodes
of 8, 1 GiB per rank), V seeded random arrival vectors of the cluster study (2 to 8 late ranks, delays
uniform in 0-10 ms; ``cluster_study.case_arrivals`` with seeds 1..V), the time after the last arrival of
ours (the study's: clusterstraggler, and multistraggler up to 16 nodes) against the best synchronous
schedule and the proven bound; every schedule built, verified and simulated. Prints JSON: per node count
the median speedup (synchronous / ours), the vectors where ours is faster, the median ours / bound, the
algorithm and form chosen and the seconds per vector; ``--rows`` adds every vector's row.

    python bench/bench_cluster_scale.py [--nodes 16,32,64,128] [--vectors 8] [--rows]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from collsynth import workers
from collsynth.synth.algorithms.stragglar import cluster_study


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="16,32,64,128", help="comma-separated node counts (8 GPUs each)")
    ap.add_argument("--vectors", type=int, default=8, help="random arrival vectors per node count (seeds 1..V)")
    ap.add_argument("--rows", action="store_true", help="also print every vector's row")
    ap.add_argument("--jobs", type=int, default=1,
                    help="worker processes for clusterstraggler's candidates (collsynth.workers; 0: one per core); "
                         "the schedules are the same, the seconds shorter")
    a = ap.parse_args()
    workers.set_jobs(a.jobs)
    if a.vectors < 1:
        ap.error("--vectors must be at least 1")
    size = 2**30
    out: dict[str, object] = {"bench": "cluster_scale", "size_bytes": size, "topology": "h100-cluster",
                              "jobs": workers.jobs()}
    for N in (int(x) for x in a.nodes.split(",") if x.strip()):
        topo = cluster_study.study_topology("h100-cluster", N, 8)
        sync = cluster_study.best_sync(topo.nranks, topo, size)
        rows, forms, t0 = [], {}, time.perf_counter()
        for seed in range(1, a.vectors + 1):
            row = cluster_study.cluster_row(N, "random", size, seed=seed, sync=sync)
            key = f"{row['ours']}:{row['ours_form']}"
            forms[key] = forms.get(key, 0) + 1
            rows.append(row)
        res: dict[str, object] = {
            "vectors": len(rows), "best_sync": sync["best_sync"], "sync_after_ms": round(sync["sync_after_s"] * 1e3, 3),
            "median_speedup": round(statistics.median(r["speedup"] for r in rows), 4),
            "faster_than_sync": sum(r["speedup"] > 1 + 1e-9 for r in rows),
            "median_ours_x_bound": round(statistics.median(r["ours_x_bound"] for r in rows), 4),
            "chosen": dict(sorted(forms.items())),
            "seconds_per_vector": round((time.perf_counter() - t0) / len(rows), 1)}
        if a.rows:
            res["rows"] = [{"seed": i + 1, "late_ranks": len(r["late_ranks"]), "ours": r["ours"],
                            "ours_after_ms": round(r["ours_after_s"] * 1e3, 3), "speedup": round(r["speedup"], 4)}
                           for i, r in enumerate(rows)]
        out[f"{N}_nodes"] = res
        print(json.dumps({f"{N}_nodes": res}), flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
