"""Topology model speed at cluster scale, in-process. Prints JSON.

Run: .venv/bin/python bench/bench_topology.py [--gpus 1024,8192] [--pairs 100000] [--repeat 3]
Per GPU count: building ``h100-cluster`` (and its fat-tree variant), routing --pairs random GPU pairs
(``pair_table``), the per-class route classes of those pairs, and ``allreduce_bound``; the best of
--repeat runs, seconds. Also the switch and link counts (rail switches, not per-pair links).
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
from timing import best

from collsynth.synth.bounds import allreduce_bound
from collsynth.synth.topology import make_topology


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="1024,8192")
    ap.add_argument("--pairs", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    res: dict[str, object] = {"cpus": os.cpu_count(), "pairs": args.pairs, "cases": []}
    rng = np.random.default_rng(0)
    for n in (int(x) for x in args.gpus.split(",")):
        for spec in ("h100-cluster", "h100-cluster:fabric=fat-tree,oversubscription=2"):
            build_s, t = best(lambda: make_topology(spec, n), args.repeat)
            pairs = rng.integers(0, n, size=(args.pairs, 2))
            route_s, (links, _) = best(lambda: t.pair_table(pairs), args.repeat)  # type: ignore[misc]
            cls_s, _ = best(lambda: t.route_classes(pairs[:, 0], pairs[:, 1]), args.repeat)  # type: ignore[union-attr]
            bound_s, b = best(lambda: allreduce_bound(t, 2**30), args.repeat)  # type: ignore[arg-type]
            res["cases"].append({  # type: ignore[union-attr]
                "topology": spec, "gpus": n, "nodes": t.node_count, "switches": len(t.switches),  # type: ignore[union-attr]
                "links": t.nlinks, "build_s": build_s, "route_pairs_s": route_s, "route_classes_s": cls_s,  # type: ignore[union-attr]
                "max_hops": int(links.shape[1]), "bound_s": bound_s,
                "bound_1GiB_ms": round(b.value_s * 1e3, 4), "bound_kind": b.kind})  # type: ignore[union-attr]
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
