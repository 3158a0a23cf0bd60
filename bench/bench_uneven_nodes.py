"""`hierarchical` on nodes of unequal size (docs/cluster-algorithms.md, "Nodes of unequal size"): rail-optimized
nodes as a topology JSON (an NVSwitch per node, 450 GB/s and 3.4 us a route; one NIC per GPU into its rail
switch, 50 GB/s and 14 us a route, as h100-cluster), 1 GiB per rank, every rank at 0. Prints JSON, per node
layout: the form kept (ring, pieces, slices) and its simulated completion, the proven lower bound
(synth.bounds.allreduce_bound) and the ratio, the flat ring over every GPU (what ran before session 59), the
same number of nodes of G_min GPUs alone (the extras taken away), and the build seconds (the three forms
built and simulated). Then one late GPU (rank 5, ``--delay`` late): clusterstraggler's time after the arrival
(on nodes of unequal size the late-GPU form of the N x G_min core with the other GPUs added around it,
choose.unequal_nodes), its form, the waiting ``hierarchical``'s, the proven bound after the arrival and the
ratio, the core alone (the same nodes of G_min GPUs, the same late rank) and the build seconds.

    python bench/bench_uneven_nodes.py [--layouts 8+7,8+8+8+7] [--big] [--delay 10ms]
    (--big adds 127 x 8 + 7 = 1,023 GPUs to the first table)
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import collsynth as cs
from collsynth.synth.bounds import allreduce_bound
from collsynth.units import parse_time

GiB = float(2**30)
LAYOUTS = "8+7,8+8+8+7,15x8+7,16+8,12+4"


def parse_layout(text: str) -> list[int]:
    """"15x8+7" -> fifteen 8s and a 7."""
    out: list[int] = []
    for part in text.split("+"):
        count, _, g = part.rpartition("x")
        out += [int(g)] * (int(count) if count else 1)
    return out


def write_topology(sizes: list[int], path: str) -> str:
    """The machine of the module docstring for nodes of ``sizes`` GPUs (per link half the route's alpha)."""
    links, nodes, r = [], [], 0
    for b, g in enumerate(sizes):
        nodes.append(list(range(r, r + g)))
        for h in range(g):
            links.append({"src": r + h, "dst": f"nvsw{b}", "class": "nvlink", "alpha": "1.7us", "bandwidth": "450GB/s"})
            links.append({"src": r + h, "dst": f"rail{h}", "class": "net", "alpha": "7us", "bandwidth": "50GB/s"})
        r += g
    d = {"name": f"uneven-{'-'.join(map(str, sizes))}"[:60], "gpus": r, "ports": {"nvlink": 1, "net": 1},
         "nodes": nodes, "fabric": "rail", "links": links,
         "switches": [f"nvsw{b}" for b in range(len(sizes))] + [f"rail{h}" for h in range(max(sizes))]}
    with open(path, "w") as f:
        json.dump(d, f)
    return path


def completion(algorithm: str, sizes: list[int], tmp: str) -> tuple[float, float, object, object]:
    """(simulated seconds, build seconds, schedule, topology) of ``algorithm`` on nodes of ``sizes``."""
    n = sum(sizes)
    topo = cs.make_topology(write_topology(sizes, os.path.join(tmp, f"t{n}-{len(sizes)}.json")), n)
    t0 = time.perf_counter()
    s = cs.build_schedule(algorithm, n, topology=topo, **({"size": GiB} if algorithm == "hierarchical" else {}))
    built = time.perf_counter() - t0
    return cs.simulate(s, GiB, topo).completion_s, built, s, topo


def row(layout: str, tmp: str) -> dict[str, object]:
    sizes = parse_layout(layout)
    t, built, s, topo = completion("hierarchical", sizes, tmp)
    bound = allreduce_bound(topo, GiB).value_s  # type: ignore[arg-type]
    alone, _, _, _ = completion("hierarchical", [min(sizes)] * len(sizes), tmp)
    out: dict[str, object] = {"layout": layout, "gpus": sum(sizes), "form": s.meta.get("form", "pieces or slices"),  # type: ignore[attr-defined]
                              "ms": round(t * 1e3, 3), "bound_ms": round(bound * 1e3, 3),
                              "x_bound": round(t / bound, 3), "nodes_of_g_min_alone_ms": round(alone * 1e3, 3),
                              "build_s": round(built, 2)}
    if sum(sizes) <= 256:
        out["flat_ring_ms"] = round(completion("ring", sizes, tmp)[0] * 1e3, 3)
    return out


def late_row(layout: str, tmp: str, delay: float) -> dict[str, object]:
    sizes = parse_layout(layout)
    n = sum(sizes)
    arr = {5: delay}
    topo = cs.make_topology(write_topology(sizes, os.path.join(tmp, f"late{n}-{len(sizes)}.json")), n)
    t0 = time.perf_counter()
    s = cs.build_schedule("clusterstraggler", n, topology=topo, arrivals=arr, size=GiB)
    built = time.perf_counter() - t0
    ours = cs.simulate(s, GiB, topo, arr).after_last_arrival_s
    hier = cs.simulate(cs.build_schedule("hierarchical", n, topology=topo, size=GiB), GiB, topo, arr)
    bound = allreduce_bound(topo, GiB, [arr.get(r, 0.0) for r in range(n)]).after_last_arrival_s
    m = len(sizes) * min(sizes)
    alone_t = cs.make_topology(write_topology([min(sizes)] * len(sizes), os.path.join(tmp, f"alone{m}.json")), m)
    alone = cs.simulate(cs.build_schedule("clusterstraggler", m, topology=alone_t, arrivals=arr, size=GiB), GiB,
                        alone_t, arr).after_last_arrival_s
    return {"layout": layout, "gpus": n, "late": 5, "delay_ms": delay * 1e3, "form": s.meta.get("form"),
            "after_arrival_ms": round(ours * 1e3, 3), "hierarchical_ms": round(hier.after_last_arrival_s * 1e3, 3),
            "speedup": round(hier.after_last_arrival_s / ours, 3), "bound_ms": round(bound * 1e3, 3),
            "x_bound": round(ours / bound, 3), "core_alone_ms": round(alone * 1e3, 3), "build_s": round(built, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layouts", default=LAYOUTS, help=f"node sizes, comma-separated (default {LAYOUTS})")
    ap.add_argument("--big", action="store_true", help="also 127 x 8 + 7 = 1,023 GPUs")
    ap.add_argument("--delay", default="10ms", help="how late rank 5 is in the late-GPU rows (default 10ms)")
    args = ap.parse_args()
    layouts = args.layouts.split(",")
    delay = parse_time(args.delay)
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps({"size": "1GiB", "rows": [row(x, tmp) for x in layouts + (["127x8+7"] if args.big else [])],
                          "late_gpu": [late_row(x, tmp, delay) for x in layouts]}, indent=1))


if __name__ == "__main__":
    main()
