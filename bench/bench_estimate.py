"""How close the work estimates (synth.algorithms.estimate, budget.Work) are to what building, verifying and
simulating each algorithm really takes: each case runs in a fresh interpreter, which builds the same
algorithm on 16 ranks first (so the modules it imports count as its start) and reports the peak resident
memory above that start and the seconds, beside the estimate's bytes and seconds.

    python bench/bench_estimate.py [--quick]

Prints one JSON line per case (``x_bytes`` and ``x_seconds``: the estimate over the measurement; the
estimates are meant to be upper-bound style, so below 1 is an underestimate that lets work past the budget,
far above 1 refuses work that fits) and a summary line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

# (algorithm, topology preset, ranks, extra build parameters)
CASES: list[tuple[str, str, int, dict[str, object]]] = [
    ("ring", "nvswitch", 1024, {}),
    ("rhd", "nvswitch", 1024, {}),
    ("radix", "nvswitch", 1000, {}),
    ("direct", "nvswitch", 512, {}),
    ("twoshot", "nvswitch", 512, {}),
    ("stragglar", "nvswitch", 256, {"straggler": 255}),
    ("multistraggler", "nvswitch", 64, {"arrivals": {1: 1e-3, 9: 2e-3, 17: 3e-3, 33: 4e-3}, "size": 2**30}),
    ("multistraggler", "nvswitch", 256, {"arrivals": {1: 1e-3, 9: 2e-3, 17: 3e-3, 33: 4e-3}, "size": 2**30}),
    ("ring", "h100-cluster", 1024, {}),
    ("multiring", "h100-cluster", 512, {}),
    ("multiring", "h100-cluster", 1024, {}),
    ("hierarchical", "h100-cluster", 512, {"size": 2**30}),
    ("hierarchical", "h100-cluster", 1024, {"size": 2**30}),
    ("tree", "h100-cluster", 1024, {"size": 2**30}),
    ("clusterstraggler", "h100-cluster", 1024, {"arrivals": {5: 0.05}, "size": 2**30}),
    ("clusterstraggler", "h100-cluster", 1024, {"arrivals": {r: 0.05 for r in range(8, 16)}, "size": 2**30}),
    ("clusterstraggler", "h100-cluster", 1024, {"arrivals": {3: 0.01, 100: 0.02, 700: 0.03}, "size": 2**30}),
]
QUICK = {0, 9, 11}

CHILD = r"""
import json, resource, sys, time
import collsynth as cs
from collsynth.synth.algorithms.estimate import work
from collsynth.synth.registry import algorithms
a, topo_name, n, params = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
if "arrivals" in params:
    params["arrivals"] = {int(r): t for r, t in params["arrivals"].items()}
if "topology" in algorithms()[a].params():
    params["topology"] = cs.make_topology(topo_name, n)
w = work(a, n, "allreduce", params)
small = {k: v for k, v in params.items() if k != "topology"}  # the same build on 16 ranks first: the modules
if "arrivals" in small:                                       # it imports on first use are not its work
    small["arrivals"] = {r: t for r, t in small["arrivals"].items() if r < 16} or {1: 1e-3}
if "straggler" in small:
    small["straggler"] = 15
if "topology" in params:
    small["topology"] = cs.make_topology(topo_name, 16)
cs.simulate(cs.build_schedule(a, 16, **small), 2**20, small.get("topology") or cs.make_topology(topo_name, 16),
            small.get("arrivals"))
cs.verify(cs.build_schedule(a, 16, **small))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
s = cs.build_schedule(a, n, **params)
report = cs.verify(s)
assert report.ok, report.message
sim_topo = params.get("topology") or cs.make_topology(topo_name, n)
cs.simulate(s, params.get("size", 2**30), sim_topo, params.get("arrivals"))
seconds = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"est_bytes": w.nbytes(), "est_seconds": w.seconds(), "bytes": (peak - base) * 1024,
                  "seconds": seconds, "transfers": s.ntransfers, "method": report.stats.get("method", "flat")}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="three cases only")
    args = ap.parse_args()
    start = time.perf_counter()
    worst_under, rows = 1e9, 0
    for i, (a, topo, n, params) in enumerate(CASES):
        if args.quick and i not in QUICK:
            continue
        out = subprocess.run([sys.executable, "-c", CHILD, a, topo, str(n), json.dumps(params)],
                             capture_output=True, text=True, check=True).stdout
        got = json.loads(out.strip().splitlines()[-1])
        row = {"algorithm": a, "topology": topo, "ranks": n,
               "late": len(params.get("arrivals", {})) if isinstance(params.get("arrivals"), dict) else 0,
               "est_GiB": round(got["est_bytes"] / 2**30, 3), "measured_GiB": round(got["bytes"] / 2**30, 3),
               "x_bytes": round(got["est_bytes"] / max(got["bytes"], 1), 2),
               "est_s": round(got["est_seconds"], 2), "measured_s": round(got["seconds"], 2),
               "x_seconds": round(got["est_seconds"] / max(got["seconds"], 1e-9), 2),
               "transfers": got["transfers"], "verified": got["method"]}
        worst_under = min(worst_under, row["x_bytes"])
        rows += 1
        print(json.dumps(row), flush=True)
    print(json.dumps({"bench": "estimate", "cases": rows, "least_x_bytes": worst_under,
                      "wall_s": round(time.perf_counter() - start, 1)}))


if __name__ == "__main__":
    main()
