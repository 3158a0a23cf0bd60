"""Training-step model: simulator speed, the README scenarios, and real gloo runs against predictions.
Prints JSON.

Run: .venv/bin/python bench/bench_training.py [--no-real] [--real-steps 20] [--scenario-steps 200]

- ``sim_speed``: wall seconds of `train-sim` (in-process, schedules built and verified inside the
  timing) for 1000 steps at n = 8, every method, with ring and StragglAR, and StragglAR alone
  (target: under 10 s).
- ``scenarios``: the settings of the README's "Which one should I use?" table (n = 8, 1.3B parameters
  in bf16 = 2.6 GB of gradients, 10 ms optimizer step, 16 buckets), samples/s per method x algorithm.
- ``real``: `collsynth train-bench` settings on this machine (gloo, loopback): measured throughput,
  the model's prediction from the measured compute trace and from the nominal compute, their errors,
  and the gains of DDP+StragglAR over DDP+ring and of ACCO over both. Needs torch; a few minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from collsynth.synth.topology import make_topology
from collsynth.training.compute import ComputeModel
from collsynth.training.model import TrainingSetup, simulate_training

METHODS = ("ddp", "ddp-bucketed", "zero1", "acco")

# name -> (bandwidth, compute per micro-batch, jitter, slow ranks)
SCENARIOS = {
    "compute-bound (NVSwitch 450 GiB/s, 200 ms)": ("450GiB/s", 0.2, 0.0, {}),
    "communication-bound (25 GB/s, 100 ms)": ("25GB/s", 0.1, 0.0, {}),
    "persistent straggler, communication-bound (25 GB/s, 100 ms, rank 7 30% slower)": ("25GB/s", 0.1, 0.0, {7: 1.3}),
    "persistent straggler, balanced (100 GB/s, 100 ms, rank 7 2x slower)": ("100GB/s", 0.1, 0.0, {7: 2.0}),
    "random jitter (100 GB/s, 100 ms, lognormal sigma 0.2)": ("100GB/s", 0.1, 0.2, {}),
}


def sim_speed() -> dict[str, float]:
    out = {}
    for label, algs in (("ring+stragglar_1000_steps_s", ["ring", "stragglar"]),
                        ("stragglar_1000_steps_s", ["stragglar"])):
        t = time.perf_counter()
        setup = TrainingSetup(ComputeModel(8, 0.1, jitter=0.1, slow={7: 1.3}), make_topology("nvswitch", 8),
                              2.5e9, optimizer_s=0.01, steps=1000)
        simulate_training(setup, METHODS, algs)
        out[label] = round(time.perf_counter() - t, 3)
    return out


def scenarios(steps: int) -> list[dict[str, object]]:
    rows = []
    for name, (bw, tau, jitter, slow) in SCENARIOS.items():
        setup = TrainingSetup(ComputeModel(8, tau, jitter=jitter, slow=slow),
                              make_topology("nvswitch", 8, bandwidth=bw), 2.6e9, optimizer_s=0.01, buckets=16,
                              steps=steps)
        res = simulate_training(setup, METHODS, ["ring", "stragglar"])
        base = res[0].throughput
        rows.append({"scenario": name, "results": [
            {"method": r.method, "algorithm": r.algorithm, "samples_s": round(r.throughput, 2),
             "vs_ddp_ring": round(r.throughput / base, 3), "batch_per_step": round(r.samples_per_step, 1),
             "idle_mean": round(sum(r.idle_fraction) / len(r.idle_fraction), 3)} for r in res]})
    return rows


REAL = [
    # 4 ranks, communication about equal to compute, rank 3 persistently 30% slower
    {"ranks": 4, "compute": "30ms", "slow": {3: 1.3}, "grad_bytes": 4 << 20},
    # 8 ranks (2 cores): latency-heavy communication, rank 7 persistently 30% slower
    {"ranks": 8, "compute": "40ms", "slow": {7: 1.3}, "grad_bytes": 2 << 20},
]


def real(steps: int) -> list[dict[str, object]]:
    from collsynth.training.bench import prepare, run_train_bench
    from collsynth.units import parse_time

    out = []
    for cfg in REAL:
        spec = prepare(cfg["ranks"], (("ddp", "torch"), ("ddp", "ring"), ("ddp", "stragglar"), ("acco", "ring")),
                       grad_bytes=cfg["grad_bytes"], compute_s=parse_time(cfg["compute"]), slow=cfg["slow"],
                       steps=steps, warmup=2)
        t = time.perf_counter()
        res = run_train_bench(spec, progress=False)
        out.append({
            "ranks": cfg["ranks"], "compute": cfg["compute"], "slow": {str(k): v for k, v in cfg["slow"].items()},
            "grad_bytes": res["grad_bytes"],
            "wall_s": round(time.perf_counter() - t, 1), "load_1min": round(os.getloadavg()[0], 2),
            "runs": [{"run": r["run"], "model": f"{r['alpha']}, {r['bandwidth']}",
                      "measured": round(r["measured"]["throughput_samples_s"], 1),
                      "predicted": round(r["predicted"]["throughput_samples_s"], 1), "error": round(r["error"], 3),
                      "predicted_nominal": round(r["predicted_nominal"]["throughput_samples_s"], 1),
                      "error_nominal": round(r["error_nominal"], 3),
                      "compute_mean_ms": round(1e3 * sum(r["measured"]["compute_mean_s"]) / cfg["ranks"], 1),
                      "batch_measured": round(r["measured"]["samples_per_step"], 1),
                      "batch_predicted": round(r["predicted"]["samples_per_step"], 1),
                      "loss": round(r["measured"]["loss"], 4)} for r in res["runs"]],
            "gains": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in g.items()} for g in res["gains"]],
            "worst_error": round(max(abs(r["error"]) for r in res["runs"]), 3),
        })
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-real", action="store_true", help="skip the real gloo runs")
    ap.add_argument("--real-steps", type=int, default=20)
    ap.add_argument("--scenario-steps", type=int, default=200)
    args = ap.parse_args()
    res: dict[str, object] = {"cpus": os.cpu_count(), "sim_speed": sim_speed(),
                              "scenarios": scenarios(args.scenario_steps)}
    if not args.no_real:
        res["real"] = real(args.real_steps)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
