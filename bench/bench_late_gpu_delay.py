"""One late GPU on a cluster for delays short and long (issue 15 point 1: "choose by the model and the expected
delay"): h100-cluster, 1 GiB, rank 5 late. Per (nodes, delay): the form clusterstraggler returns (late-GPU form,
funnel, synchronous), its time after the arrival, the late-GPU form's own (cluster.build), the synchronous
hierarchical schedule's, and the ratio to the late-GPU bound max(s/(B_nv+B_net), s/(G B_net)) (the brief's
clusters.md section 4). Prints JSON.

    python bench/bench_late_gpu_delay.py [--nodes 4,8,16] [--delays 1,2,3,4,6,10]   (delays in ms)
"""

from __future__ import annotations

import argparse
import json
import time

from bench_cluster_straggler import GiB, late_gpu_bound

from collsynth import workers
from collsynth.synth.algorithms import hierarchical
from collsynth.synth.algorithms.stragglar import cluster
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import verify


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="4,8,16")
    ap.add_argument("--delays", default="1,2,3,4,6,10")
    ap.add_argument("--jobs", type=int, default=1,
                    help="worker processes for clusterstraggler's candidates (collsynth.workers; 0: one per core); "
                         "the schedules are the same, the seconds shorter")
    a = ap.parse_args()
    workers.set_jobs(a.jobs)
    rows = []
    bound = late_gpu_bound(GiB)
    for N in (int(x) for x in a.nodes.split(",")):
        n = 8 * N
        topo = make_topology("h100-cluster", n)
        hier = hierarchical.build(n, topology=topo, size=GiB)
        for d in (float(x) * 1e-3 for x in a.delays.split(",")):
            arr = {5: d}
            t = time.perf_counter()
            s = build_schedule("clusterstraggler", n, arrivals=arr, size=GiB, topology=topo)
            build_s = time.perf_counter() - t
            assert verify(s, topology=topo).ok
            ours = simulate(s, GiB, topo, arr).after_last_arrival_s
            sync = simulate(hier, GiB, topo, arr).after_last_arrival_s
            form = cluster.build(n, arrivals=arr, size=GiB, topology=topo)
            late = simulate(form, GiB, topo, arr).after_last_arrival_s
            rows.append({"nodes": N, "delay_ms": round(d * 1e3, 3), "form": s.meta.get("form"),
                         "after_arrival_ms": round(ours * 1e3, 4), "late_gpu_form_ms": round(late * 1e3, 4),
                         "synchronous_ms": round(sync * 1e3, 4), "x_bound": round(ours / bound, 4),
                         "speedup_vs_synchronous": round(sync / ours, 3), "build_s": round(build_s, 2)})
            print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"bench": "late_gpu_delay", "jobs": workers.jobs(), "bound_ms": round(bound * 1e3, 4),
                      "rows": rows}))


if __name__ == "__main__":
    main()
