"""StragglAR benchmark: build+verify time for n = 256 and 1024, and phase-2 rounds against the lower
bound n-2+ceil(log2 n) for n = 2..64, powers of two to 1024 and 96, 128, 192 (prints JSON).

    python bench/bench_stragglar.py [--max-n 64]
"""

from __future__ import annotations

import argparse
import json
import time

from collsynth.synth.algorithms.stragglar.design import lower_bound
from collsynth.synth.algorithms.stragglar.phase2 import phase2_plan
from collsynth.synth.registry import algorithms, build_schedule
from collsynth.synth.verify import check


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-n", type=int, default=64, help="every n from 2 to this (default 64)")
    a = ap.parse_args()
    algorithms()
    timing = {}
    for n in (256, 1024):
        t = time.perf_counter()
        s = check(build_schedule("stragglar", n))
        timing[str(n)] = {"build_verify_s": round(time.perf_counter() - t, 3), "transfers": s.ntransfers,
                          "phase2_rounds": s.meta["phase2_rounds"]}
    ns = sorted(set(range(2, a.max_n + 1)) | {1 << k for k in range(1, 11)} | {96, 128, 192})
    rows = []
    for n in ns:
        t = time.perf_counter()
        plan = phase2_plan(n)
        rows.append({"n": n, "rounds": plan.rounds, "lower_bound": lower_bound(n),
                     "gap": plan.rounds - lower_bound(n), "method": plan.method,
                     "plan_s": round(time.perf_counter() - t, 3)})
    missed = [r["n"] for r in rows if r["gap"]]
    print(json.dumps({"bench": "stragglar", "build_verify": timing, "all_at_lower_bound": not missed,
                      "missed": missed, "rounds": rows}, indent=1))


if __name__ == "__main__":
    main()
