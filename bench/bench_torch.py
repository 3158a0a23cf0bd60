"""Issue 5 numbers: real gloo processes against torch.distributed.all_reduce. Prints JSON.

Run: .venv/bin/python bench/bench_torch.py [--ranks 8] [--size 32MiB] [--delay 1s] [--iters 5]

1. straggler: rank n-1 sleeps --delay before every collective (well past the punctual ranks'
   ReduceScatter); ring, stragglar, torch and auto (run-time detection) take turns each iteration.
   Criterion: stragglar's median time after the straggler arrives <= 0.85 x torch's.
2. no straggler: ring executor vs torch. Criterion: ring median <= 1.3 x torch's.
3. first: calibrate (pattern ring) -> alpha, bandwidth -> the simulator (synth.compare, nvswitch
   topology, the same arrivals) predicts ring and stragglar; criterion: within 30% of run 1/run 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> None:
    from collsynth.backends.torch.bench import prepare_bench, run_bench, run_calibrate
    from collsynth.synth.compare import compare as compare_rows
    from collsynth.synth.topology import make_topology
    from collsynth.units import parse_size, parse_time

    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--size", default="32MiB")
    ap.add_argument("--delay", default="1s", help="how late rank n-1 arrives in run 1")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args()
    n, size, delay = args.ranks, parse_size(args.size), parse_time(args.delay)
    late = n - 1
    t0 = time.perf_counter()
    out: dict = {"cpus": os.cpu_count(), "ranks": n, "size_bytes": size, "delay_s": delay,
                 "loadavg_before": os.getloadavg()[0]}

    # the user's order: calibrate, predict, then bench (the load of a shared machine drifts: see loadavg)
    cal = run_calibrate("gloo", n, progress=args.progress)
    out["loadavg_after_calibrate"] = os.getloadavg()[0]
    spec = prepare_bench("gloo", n, size, {late: delay}, ["ring", "stragglar", "torch", "auto"],
                         iters=args.iters, progress=args.progress)
    run1 = run_bench(spec)
    out["loadavg_after_run1"] = os.getloadavg()[0]
    spec = prepare_bench("gloo", n, size, {}, ["ring", "torch"], iters=args.iters, progress=args.progress)
    run2 = run_bench(spec)

    def med(run: dict, alg: str, key: str = "after_last_arrival_s") -> float:
        return next(r for r in run["results"] if r["algorithm"] == alg)[key]["median"]

    topo = make_topology("nvswitch", n, alpha=cal["alpha_s"], bandwidth=cal["bandwidth_Bps"])
    pred_late = {r["algorithm"]: r["after_last_arrival_s"]
                 for r in compare_rows(n, size, topo, {late: delay}, ["ring", "stragglar"])}
    pred_none = {r["algorithm"]: r["after_last_arrival_s"] for r in compare_rows(n, size, topo, {}, ["ring"])}
    preds = [
        {"case": "straggler", "algorithm": a, "predicted_s": pred_late[a], "measured_s": med(run1, a)}
        for a in ("ring", "stragglar")
    ] + [{"case": "no straggler", "algorithm": "ring", "predicted_s": pred_none["ring"],
          "measured_s": med(run2, "ring")}]
    for p in preds:
        p["error"] = p["predicted_s"] / p["measured_s"] - 1.0

    ratio1 = med(run1, "stragglar") / med(run1, "torch")
    ratio2 = med(run2, "ring") / med(run2, "torch")
    out.update({
        "straggler_run": run1, "no_straggler_run": run2,
        "calibration": {k: cal[k] for k in ("alpha", "bandwidth", "alpha_s", "bandwidth_Bps", "points")},
        "predictions": preds,
        "criteria": {
            "stragglar_over_torch_after_arrival": ratio1, "stragglar_pass": ratio1 <= 0.85,
            "ring_over_torch_no_straggler": ratio2, "ring_pass": ratio2 <= 1.3,
            "worst_prediction_error": max(abs(p["error"]) for p in preds),
            "prediction_pass": all(abs(p["error"]) <= 0.30 for p in preds),
            "all_correct": all(r["correct"] for run in (run1, run2) for r in run["results"]),
        },
        "loadavg_after": os.getloadavg()[0],
        "wall_s": time.perf_counter() - t0,
    })
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
