"""Thread blocks per rank of collsynth's MSCCL++ plans (the count that must stay within the GPU's SMs), beside
another tree's count for the same schedules. Prints JSON.

    .venv/bin/python bench/bench_mscclpp_blocks.py [--old FOLDER] [--cases clusterstraggler:64:h100-cluster,...]

``--old``: a folder holding the other tree as ``collsynth`` (it goes first on PYTHONPATH). Each case builds
its schedule (clusterstraggler: rank 5 late by 10 ms, 1 GiB, its automatic block count; ``h200x4``: the
H200 NCCL dump of ../shared/vectors imported as 4 nodes on a rail fabric, rank 5 late by 2 s, 256 MiB)
and lowers it as `emit --format mscclpp-plan` does (``emit.thread_blocks``), in a process
of its own per tree. Rows: the rank needing the most, how many, the seconds of the lowering.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

DEFAULT_CASES = ("h200x4,clusterstraggler:32:h100-cluster,clusterstraggler:64:h100-cluster,"
                 "clusterstraggler:128:h100-cluster,multiring:64:h100-cluster,hierarchical:128:h100-cluster,"
                 "ring:128,clusterstraggler:256:h100-cluster,clusterstraggler:512:h100-cluster")

_CHILD = r"""
import json, os, sys, tempfile, time
from collsynth.backends.mscclpp.emit import thread_blocks
from collsynth.synth.registry import build_schedule
from collsynth.synth.topology import make_topology
case = sys.argv[1]
if case == "h200x4":
    from collsynth.synth.topology_import import dumps_topology, import_topology
    xml = os.path.join(sys.argv[2], "vectors", "topologies", "nccl-xml", "vastai-hgx-h200-8x-container.xml")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "h200x4.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(dumps_topology(import_topology(xml, nodes=4, fabric="rail").topology))
        topo = make_topology(path, 32)
    s = build_schedule("clusterstraggler", 32, arrivals={5: 2.0}, size=2**28, topology=topo)
else:
    alg, n, *rest = case.split(":")
    params = {"topology": rest[0]} if rest else {}
    if alg == "clusterstraggler":
        params.update(arrivals={5: 0.01}, size=float(2**30))
    s = build_schedule(alg, int(n), "allreduce", **params)
t = time.perf_counter()
worst, need = thread_blocks(s)
print(json.dumps({"rank": worst, "thread_blocks": need, "lower_s": round(time.perf_counter() - t, 1),
                  "blocks_per_part": s.meta.get("pipeline")}))
"""


def run(case: str, pythonpath: str | None, shared: str) -> dict:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    p = subprocess.run([sys.executable, "-c", _CHILD, case, shared], capture_output=True, text=True, env=env)
    if p.returncode:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(p.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", help="a folder holding the other tree as `collsynth` (for PYTHONPATH)")
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
    args = ap.parse_args()
    rows = []
    for case in args.cases.split(","):
        row = {"case": case, **run(case, None, args.shared)}
        if args.old:
            row["old"] = run(case, args.old, args.shared)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
