"""Issue 9 numbers: pipelined StragglAR (K(n-1) chunks). Prints JSON.

    .venv/bin/python bench/bench_pipeline.py [--max-n 64] [--max-k 8] [--gloo] [--ranks 8] [--size 32MiB]

1. model: n = 8, 1 GiB, alpha 3 us, 450 GiB/s, nvswitch, straggler late enough to hide phase 1:
   ring, stragglar (K = 1) and pipelined stragglar (K = auto) after the straggler arrives; criterion
   pipelined >= 1.55x ring (the floor s/B + alpha is reported too).
2. rounds: phase-2 rounds against the bound K(n-1) - 1 + ceil(log2 n) for every n <= --max-n and
   K <= --max-k (the gap per n and K; every build is verified).
3. timing: synthesis + verification of n = 8, K = 8 and n = 64, K = 4 from a cold plan cache;
   criterion under 1 s each.
4. --gloo: real processes (collsynth bench's API): calibrate, then rank n-1 sleeps --delay before
   every call and stragglar K = 1, K = 2, K = 4 and K = auto (from the calibrated alpha and bandwidth)
   take turns each iteration; criterion: the best pipelined median below K = 1's on the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def model_numbers() -> dict:
    from collsynth.synth.registry import build_schedule
    from collsynth.synth.simulate import simulate
    from collsynth.synth.topology import make_topology
    from collsynth.synth.verify import check

    n, size, alpha, bw = 8, 2**30, 3e-6, 450 * 2**30
    topo = make_topology("nvswitch", n, alpha=alpha, bandwidth=bw)
    arr = {n - 1: 0.05}  # 50 ms: phase 1 takes about 2 ms
    ring = simulate(check(build_schedule("ring", n)), size, topo, arr).after_last_arrival_s
    one = simulate(check(build_schedule("stragglar", n)), size, topo, arr).after_last_arrival_s
    s = check(build_schedule("stragglar", n, pipeline="auto", size=size, alpha=alpha, bandwidth=bw))
    piped = simulate(s, size, topo, arr).after_last_arrival_s
    floor = size / bw + alpha
    per_k = {}
    for k in (1, 2, 4, 6, 8, 16):
        sk = check(build_schedule("stragglar", n, pipeline=k))
        per_k[str(k)] = round(ring / simulate(sk, size, topo, arr).after_last_arrival_s, 4)
    return {"n": n, "size_bytes": size, "alpha_s": alpha, "bandwidth_Bps": bw, "straggler_delay_s": 0.05,
            "ring_s": ring, "stragglar_k1_s": one, "pipelined_k": s.meta["pipeline"], "pipelined_s": piped,
            "floor_s": floor, "speedup_k1": ring / one, "speedup_pipelined": ring / piped,
            "pipelined_over_floor": piped / floor, "speedup_by_k": per_k, "pass": ring / piped >= 1.55}


def rounds_table(max_n: int, max_k: int) -> dict:
    from collsynth.synth.algorithms.stragglar.design import lower_bound
    from collsynth.synth.registry import build_schedule
    from collsynth.synth.verify import check

    rows, gaps = [], {}
    t0 = time.perf_counter()
    for n in range(2, max_n + 1):
        row = {"n": n, "rounds": [], "gap": []}
        for k in range(1, max_k + 1):
            s = check(build_schedule("stragglar", n, pipeline=k))
            r = s.meta["phase2_rounds"]
            row["rounds"].append(r)
            row["gap"].append(r - lower_bound(n, k))
            if r != lower_bound(n, k):
                gaps[f"{n},{k}"] = r - lower_bound(n, k)
        row["method"] = s.meta["phase2_method"]
        rows.append(row)
    return {"max_n": max_n, "max_k": max_k, "all_verified": True, "off_bound": gaps,
            "wall_s": round(time.perf_counter() - t0, 2), "rows": rows}


def timing() -> dict:
    from collsynth.synth.algorithms.stragglar.phase2 import phase2_plan
    from collsynth.synth.registry import build_schedule
    from collsynth.synth.verify import check

    check(build_schedule("stragglar", 4))  # imports and first-call costs out of the way
    out = {}
    for n, k in ((8, 8), (64, 4)):
        phase2_plan.cache_clear()
        t = time.perf_counter()
        s = check(build_schedule("stragglar", n, pipeline=k))
        dt = time.perf_counter() - t
        out[f"n{n}_k{k}"] = {"synth_verify_s": round(dt, 4), "transfers": s.ntransfers, "steps": s.nsteps,
                             "pass": dt < 1.0}
    return out


def gloo(ranks: int, size_text: str, delay_text: str, iters: int, progress: bool) -> dict:
    from collsynth.backends.torch.bench import prepare_bench, run_bench, run_calibrate
    from collsynth.synth.registry import build_schedule
    from collsynth.synth.verify import check
    from collsynth.units import parse_size, parse_time

    n, size, delay = ranks, parse_size(size_text), parse_time(delay_text)
    cal = run_calibrate("gloo", n, progress=progress)
    auto = check(build_schedule("stragglar", n, straggler=n - 1, pipeline="auto", size=size,
                                alpha=cal["alpha_s"], bandwidth=cal["bandwidth_Bps"]))
    scheds = [check(build_schedule("stragglar", n, straggler=n - 1, pipeline=k)) for k in (1, 2, 4)]
    if auto.meta["pipeline"] not in (1, 2, 4):
        scheds.append(auto)
    spec = prepare_bench("gloo", n, size, {n - 1: delay}, [], schedules=scheds, iters=iters, progress=progress)
    run = run_bench(spec)
    med = {r["algorithm"]: r["after_last_arrival_s"]["median"] for r in run["results"]}
    k1 = med[scheds[0].name]
    best = min((v, k) for k, v in med.items() if k != scheds[0].name)
    return {"ranks": n, "size_bytes": size, "delay_s": delay, "iters": iters,
            "calibration": {k: cal[k] for k in ("alpha", "bandwidth")}, "auto_k": auto.meta["pipeline"],
            "median_after_arrival_s": med, "best_pipelined": best[1], "best_over_k1": best[0] / k1,
            "all_correct": all(r["correct"] for r in run["results"]), "pass": best[0] < k1,
            "loadavg": os.getloadavg()[0], "run": run}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-n", type=int, default=64)
    ap.add_argument("--max-k", type=int, default=8)
    ap.add_argument("--gloo", action="store_true", help="also the real gloo run (minutes)")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--size", default="32MiB")
    ap.add_argument("--delay", default="1s")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--no-table", action="store_true", help="skip the rounds table")
    ap.add_argument("--progress", action="store_true")
    a = ap.parse_args()
    from collsynth.synth.registry import algorithms

    algorithms()
    out: dict = {"bench": "stragglar_pipeline", "timing": timing(), "model": model_numbers()}
    if not a.no_table:
        out["rounds"] = rounds_table(a.max_n, a.max_k)
    if a.gloo:
        out["gloo"] = gloo(a.ranks, a.size, a.delay, a.iters, a.progress)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
