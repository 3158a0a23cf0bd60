"""Issue 13 Scale, emit: time and peak memory of `collsynth emit` per format at a few n, beside the estimate
that `emit` and `synth --format` check before any work (backends/cost.py). Prints JSON.

Run: .venv/bin/python bench/bench_emit.py [--cases direct:50,ring:128,hierarchical:128:h100-cluster]
     [--formats msccl-xml,mscclpp-plan]
Each case runs in a fresh process (so that its peak RSS is its own): build the schedule, then time
``backends.emit`` (which checks the estimate, verifies, lowers and checks its own output); ``peak_mib`` is
the process's peak RSS, ``base_mib`` the peak before emitting. ``refused`` is the one-line error of a
case the budget (or a runtime limit) refuses, with the seconds it took to refuse.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

DEFAULT_CASES = "direct:20,direct:50,direct:100,direct:300,ring:64,ring:128,rhd:128,stragglar:32"
DEFAULT_FORMATS = "msccl-xml,mscclpp-plan,nccl-cuda"

_CHILD = r"""
import json, resource, sys, time
from collsynth.backends import cost, emit
from collsynth.errors import CollsynthError
from collsynth.synth.registry import build_schedule
alg, n, fmt, topo = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
params = {"topology": topo} if topo else {}
if alg == "clusterstraggler":  # one late GPU, long enough late to hide the work before its arrival
    params.update(arrivals={5: 0.01}, size=float(2**30))
s = build_schedule(alg, n, "allreduce", **params)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
est_b, est_s = cost.cost(fmt, cost.shape_of(s))
row = {"algorithm": alg, "n": n, "topology": topo or None, "format": fmt, "transfers": int(s.ntransfers),
       "estimate_mib": round(est_b / 2**20, 1), "estimate_s": round(est_s, 2)}
t = time.perf_counter()
try:
    out = emit(s, fmt)
    row["emit_s"] = round(time.perf_counter() - t, 3)
    row["output_kib"] = round(sum(len(v) for v in out.values()) / 1024 if isinstance(out, dict) else len(out) / 1024)
except CollsynthError as e:
    row["refused"] = str(e)
    row["refused_after_s"] = round(time.perf_counter() - t, 3)
row["base_mib"] = round(base / 1024, 1)
row["peak_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
if fmt == "mscclpp-plan" and "refused" not in row:  # what the plan checker's own estimate reads
    plan = json.loads(out)
    tbs = [tb for g in plan["gpus"] for tb in g["threadblocks"]]
    row["thread_blocks"] = len(tbs)
    row["ops"] = sum(len(tb["ops"]) + sum(len(o.get("ops", [])) for o in tb["ops"]) for tb in tbs)
    row["port_channels"] = sum(len(c["connected_to"]) for g in plan["gpus"] for c in g.get("channels", [])
                               if c["channel_type"] == "port")
print(json.dumps(row))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=DEFAULT_CASES,
                    help="algorithm:n[:topology],... (default %(default)s); clusterstraggler gets rank 5 late by "
                         "10 ms and 1 GiB")
    ap.add_argument("--formats", default=DEFAULT_FORMATS)
    ap.add_argument("--timeout", type=float, default=900, help="seconds per case")
    args = ap.parse_args()
    rows = []
    for case in args.cases.split(","):
        alg, n, topo = (case.split(":") + [""])[:3]
        for fmt in args.formats.split(","):
            try:
                p = subprocess.run([sys.executable, "-c", _CHILD, alg, n, fmt, topo], capture_output=True, text=True,
                                   timeout=args.timeout, check=False)
                row = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else \
                    {"algorithm": alg, "n": int(n), "format": fmt, "error": p.stderr.strip().splitlines()[-1:]}
            except subprocess.TimeoutExpired:
                row = {"algorithm": alg, "n": int(n), "format": fmt, "error": f"over {args.timeout} s"}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    print(json.dumps({"bench": "emit", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
