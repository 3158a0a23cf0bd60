"""Simulator speed, in-process (no file I/O, no interpreter start-up). Prints JSON.

Run: .venv/bin/python bench/bench_simulate.py [--n 1024] [--n-small 256] [--repeat 3]
Each ``*_s`` figure is the best of --repeat runs of ``simulate`` with a freshly built topology (so route
computation is included); schedule construction is timed separately and not included.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from timing import best

from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--n-small", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    size = 2**30
    res: dict[str, object] = {"cpus": os.cpu_count(), "size_bytes": size}
    cases = [
        ("ring", args.n, "nvswitch"), ("ring", args.n_small, "nvswitch"),
        ("rhd", args.n, "nvswitch"), ("twoshot", args.n_small, "nvswitch"),
        ("direct", args.n_small, "full-mesh"), ("ring", args.n_small, "ring"),
        ("ring", args.n, "torus2d"),
    ]
    for alg, n, topo in cases:
        t0 = time.perf_counter()
        s = build_schedule(alg, n)
        build_s = time.perf_counter() - t0
        secs, r = best(lambda: simulate(s, size, make_topology(topo, n)), args.repeat)
        key = f"{alg}_n{n}_{topo}"
        res[key] = {"transfers": s.ntransfers, "steps": s.nsteps, "simulate_s": secs,
                    "build_s": round(build_s, 4), "completion_s": r.completion_s}  # type: ignore[attr-defined]
    s = build_schedule("ring", args.n_small)
    secs, _ = best(lambda: simulate(s, size, make_topology("nvswitch", args.n_small), timeline=True), args.repeat)
    res[f"ring_n{args.n_small}_nvswitch_with_timeline_s"] = secs
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
