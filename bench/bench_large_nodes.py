"""clusterstraggler on nodes of many GPUs (docs/stragglar.md section 9, "How far the search goes" and "Large
NVLink domains as nodes"): N nodes of G GPUs as a topology JSON (bench_cluster_straggler.json_topology: an
NVSwitch per node, one NIC per GPU into its rail switch), one GPU late; per case the build and verify time,
the form and block count, the time after the arrival, the fastest synchronous schedule's, and the proven
bound (synth.bounds). Default: two GB200 NVL72 racks as nodes (G = 72, 900 GB/s NVLink), 1 GiB, rank 5
late by 5 and 50 ms (with --late-node also node 1 late by the longest delay). Prints JSON.

    python bench/bench_large_nodes.py [--nodes 2] [--gpus-per-node 72] [--nvlink 900GB/s] [--size 1GiB]
                                      [--delays 5,50] [--late-node]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

from bench_cluster_straggler import json_topology, one_late

from collsynth.synth.bounds import allreduce_bound
from collsynth.synth.topology import load_topology
from collsynth.units import parse_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--gpus-per-node", type=int, default=72)
    ap.add_argument("--nvlink", default="900GB/s")
    ap.add_argument("--size", default="1GiB")
    ap.add_argument("--delays", default="5,50", help="ms, comma-separated")
    ap.add_argument("--late-node", action="store_true", help="also node 1 (all its GPUs) late by the longest delay")
    a = ap.parse_args()
    N, G = a.nodes, a.gpus_per_node
    n, size = N * G, float(parse_size(a.size))
    with tempfile.TemporaryDirectory() as tmp:
        topo = load_topology(json_topology(n, os.path.join(tmp, "t.json"), G=G, nvlink=a.nvlink, name="large"))
    rows = {}
    delays = [float(x) for x in a.delays.split(",") if x.strip()]
    cases = [(f"late_{ms:g}ms", {5: ms * 1e-3}) for ms in delays]
    if a.late_node and delays:
        cases.append((f"late_node_{max(delays):g}ms", {r: max(delays) * 1e-3 for r in range(G, 2 * G)}))
    for key, arr in cases:
        bound = allreduce_bound(topo, size, [arr.get(r, 0.0) for r in range(n)]).after_last_arrival_s
        rows[key] = one_late(topo, n, arr, size, bound)
    print(json.dumps({"bench": "large_nodes", "nodes": N, "gpus_per_node": G, "nvlink": a.nvlink,
                      "size_bytes": size, **rows}, indent=1))


if __name__ == "__main__":
    main()
