"""Benchmark the straggler-aware solver and the round-optimality search; prints JSON.

Cases (issue 7): n=8 nvswitch 1 GiB with one straggler 5 ms late (target: within 2% of stragglar, < 60 s);
n=8 with ranks 6 and 7 late by 4.5 ms and 5 ms (target: >= 10% faster after the last arrival than ring and
stragglar, < 120 s); n=4 and n=6 with one straggler (target: proven optimal, gap 0, < 60 s); n=6 with two
late ranks (no target); the MILP on its own (fixed chunk count, greedy warm start only); then
`solve-rounds` for n = 4..12.

    .venv/bin/python bench/bench_solver.py [--quick] [--solver cbc|highs] [--rounds-max 12]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from collsynth.synth.algorithms.stragglar.rounds import rounds_row
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.solver.solve import solve
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import verify

GiB = 1 << 30
MS = 1e-3


def baseline(name: str, n: int, arrivals: dict[int, float], topo, **params) -> float:
    return simulate(build_schedule(name, n, **params), GiB, topo, arrivals).after_last_arrival_s


def case(label: str, n: int, arrivals: dict[int, float], limit: float, solver: str, chunks: int | None = None,
         constructive: bool = True) -> dict:
    topo = make_topology("nvswitch", n)
    t0 = time.monotonic()
    s = solve(n, arrivals=arrivals, size=GiB, time_limit=limit, solver=solver, topology="nvswitch", chunks=chunks,
              constructive_starts=constructive)
    wall = time.monotonic() - t0
    info = s.meta["solver"]
    late = max(arrivals, key=lambda r: (arrivals[r], r))
    ring = baseline("ring", n, arrivals, topo)
    strag = baseline("stragglar", n, arrivals, topo, straggler=late)
    strag_best = min(baseline("stragglar", n, arrivals, topo, straggler=late, pipeline=k) for k in (1, 2, 4, "auto"))
    mine = simulate(s, GiB, topo, arrivals).after_last_arrival_s
    return {"case": label, "gpus": n, "arrivals_ms": {str(k): v / MS for k, v in arrivals.items()},
            "time_limit_s": limit, "wall_s": round(wall, 1), "verified": verify(s).ok,
            "status": info["status"], "source": info["source"], "chunks": info["chunks"],
            "after_last_arrival_ms": mine / MS, "ring_ms": ring / MS, "stragglar_ms": strag / MS,
            "stragglar_best_pipeline_ms": strag_best / MS,
            "vs_ring": 1 - mine / ring, "vs_stragglar": 1 - mine / strag, "vs_stragglar_best": 1 - mine / strag_best,
            "lower_bound_after_last_ms": (info["lower_bound_s"] - max(arrivals.values())) / MS,
            "gap": info["gap"], "model_bound_s": info["model_bound_s"], "model_gap": info["model_gap"],
            "note": info.get("note", "")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="short time limits, rounds up to n=8")
    ap.add_argument("--solver", default="cbc")
    ap.add_argument("--rounds-max", type=int, default=12)
    args = ap.parse_args()
    q = args.quick
    out: dict = {"solver": args.solver, "cases": [], "model_only": [], "rounds": []}
    specs = [
        ("n8 one straggler (target: within 2% of stragglar, < 60 s)", 8, {7: 5 * MS}, 60),
        ("n8 two late 4.5/5 ms (target: >= 10% vs ring and stragglar, < 120 s)", 8, {6: 4.5 * MS, 7: 5 * MS}, 120),
        ("n4 one straggler (target: proven optimal, < 60 s)", 4, {3: 5 * MS}, 60),
        ("n6 one straggler (target: proven optimal, < 60 s)", 6, {5: 5 * MS}, 60),
        ("n6 two late 4.5/5 ms (no target)", 6, {4: 4.5 * MS, 5: 5 * MS}, 60),
    ]
    for label, n, arr, limit in specs:
        out["cases"].append(case(label, n, arr, 10 if q else limit, args.solver))
        print(json.dumps(out["cases"][-1]), file=sys.stderr)
    # the MILP on its own: fixed chunk count, greedy warm start only (no constructive schedules)
    for label, n, arr, C in [("n4 one straggler, C=3", 4, {3: 5 * MS}, 3), ("n6 one straggler, C=5", 6, {5: 5 * MS}, 5),
                             ("n5 two late, C=3", 5, {3: 4.5 * MS, 4: 5 * MS}, 3),
                             ("n8 one straggler, C=7", 8, {7: 5 * MS}, 7),
                             ("n8 two late, C=6", 8, {6: 4.5 * MS, 7: 5 * MS}, 6)]:
        out["model_only"].append(case(label, n, arr, 10 if q else 60, args.solver, chunks=C, constructive=False))
        print(json.dumps(out["model_only"][-1]), file=sys.stderr)
    for n in range(4, (8 if q else args.rounds_max) + 1):
        row, _ = rounds_row(n, 30 if q else 120, args.solver)
        out["rounds"].append(row)
        print(json.dumps(row), file=sys.stderr)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
