"""`collsynth reproduce cluster` (issue 15 point 6): wall-clock seconds of the study per node count, split
into the synchronous schedules (built, verified, simulated once per node count) and each case (one late
GPU, one late node, random arrivals), with each row's times after the last arrival, bound and ratios.
``seconds`` are wall clock, ``cpu_s`` this process's CPU time (the honest figure on a shared machine).
Prints JSON; progress on stderr. The study is the library's (synth/algorithms/stragglar/cluster_study.py);
this only times its parts.

    python bench/bench_cluster_study.py [--nodes 2,4,8,16,32,64,128] [--cases gpu,node,random]

``--quick``: 2 and 4 nodes (make bench --quick).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from collsynth.synth.algorithms.stragglar import cluster_study as cs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default=",".join(map(str, cs.DEFAULT_NODES)), help="comma-separated node counts")
    ap.add_argument("--cases", default=",".join(cs.CASES), help="comma-separated cases (gpu, node, random)")
    ap.add_argument("--quick", action="store_true", help="2 and 4 nodes only")
    args = ap.parse_args()
    nodes = [2, 4] if args.quick else [int(x) for x in args.nodes.split(",")]
    cases = args.cases.split(",")
    cs.check_study(nodes)
    out: dict[str, object] = {"topology": "h100-cluster", "size_bytes": 2**30, "gpus_per_node": 8,
                              "flat_max_nodes": cs.FLAT_MAX_NODES, "per_nodes": []}
    total, total_cpu = time.perf_counter(), time.process_time()
    for N in nodes:
        t0, c0 = time.perf_counter(), time.process_time()
        topo = cs.study_topology("h100-cluster", N, 8)
        sync = cs.best_sync(topo.nranks, topo, 2**30)
        entry: dict[str, object] = {"nodes": N, "gpus": topo.nranks, "sync_s": round(time.perf_counter() - t0, 2),
                                    "sync_cpu_s": round(time.process_time() - c0, 2),
                                    "best_sync": sync["best_sync"], "sync_pruned": sorted(sync["sync_pruned"])}
        rows = {}
        for case in cases:
            t, c = time.perf_counter(), time.process_time()
            r = cs.cluster_row(N, case, sync=sync)
            rows[case] = {"seconds": round(time.perf_counter() - t, 2), "cpu_s": round(time.process_time() - c, 2),
                          "ours": r["ours"],
                          "ours_after_ms": round(r["ours_after_s"] * 1e3, 4),
                          "sync_after_ms": round(r["sync_after_s"] * 1e3, 4),
                          "bound_after_ms": round(r["bound_after_s"] * 1e3, 4), "speedup": round(r["speedup"], 3),
                          "ours_x_bound": round(r["ours_x_bound"], 3), "sync_x_bound": round(r["sync_x_bound"], 3)}
        entry["cases"] = rows
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        entry["cpu_s"] = round(time.process_time() - c0, 2)
        out["per_nodes"].append(entry)  # type: ignore[attr-defined]
        print(f"bench_cluster_study: {N} nodes in {entry['seconds']} s ({entry['cpu_s']} s CPU)", file=sys.stderr,
              flush=True)
    out["total_s"] = round(time.perf_counter() - total, 2)
    out["total_cpu_s"] = round(time.process_time() - total_cpu, 2)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
