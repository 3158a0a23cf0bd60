"""Topology import speed, in-process. Prints JSON.

Run: .venv/bin/python bench/bench_topology_import.py [--nodes 128,1024] [--repeat 3]
For the DGX H100 fixture (tests/fixtures/topologies/dgx_h100_8nic.xml) replicated to each node count on a
rail fabric: ``import_s`` (read, parse, replicate), ``dump_s`` (JSON text), ``load_s`` (topology_from_dict),
``route_s`` (routes of 10,000 random GPU pairs, fixed seed), ``describe_s`` (with the bisection max flow),
best of --repeat runs; plus the JSON size and the bisection bandwidth.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
from timing import best

from collsynth.synth.topology import topology_from_dict
from collsynth.synth.topology_import import dumps_topology, import_topology
from collsynth.synth.topology_view import describe

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fixtures",
                       "topologies", "dgx_h100_8nic.xml")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="128,1024", help="comma-separated node counts (8 GPUs each)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    res: dict[str, object] = {"cpus": os.cpu_count(), "fixture": "tests/fixtures/topologies/dgx_h100_8nic.xml"}
    for nodes in (int(x) for x in args.nodes.split(",")):
        imp_s, r = best(lambda nodes=nodes: import_topology(FIXTURE, nodes=nodes, fabric="rail"), args.repeat)
        topo_dict = r.topology
        dump_s, text = best(lambda: dumps_topology(topo_dict), args.repeat)
        load_s, topo = best(lambda: topology_from_dict(topo_dict), args.repeat)
        n = topo.nranks
        pairs = np.random.default_rng(0).integers(0, n, size=(10_000, 2))
        route_s, _ = best(lambda: topology_from_dict(topo_dict).pair_table(pairs), args.repeat)
        desc_s, d = best(lambda: describe(topo), 1)
        res[f"rail_{nodes}x8"] = {"gpus": n, "links": len(topo_dict["links"]), "json_bytes": len(text),
                                  "import_s": imp_s, "dump_s": dump_s, "load_s": load_s,
                                  "route_10k_pairs_incl_load_s": route_s, "describe_s": desc_s,
                                  "bisection_GBps": d["bisection_Bps"] / 1e9}
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
