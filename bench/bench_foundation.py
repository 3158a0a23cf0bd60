"""Issue 2 numbers: CLI wall time of synth/verify/simulate for large rings. Prints JSON.

Run: .venv/bin/python bench/bench_foundation.py [--n 1024] [--n-small 256]
Each figure is the wall time of one `collsynth` process (interpreter start-up included).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

BIN = [sys.executable, "-m", "collsynth.cli"]
MODEL = ["--size", "1GiB", "--alpha", "3us", "--bandwidth", "450GiB/s"]


def timed(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(BIN + argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--n-small", type=int, default=256)
    args = ap.parse_args()
    out: dict[str, object] = {"cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as d:
        for n in (args.n, args.n_small):
            path = os.path.join(d, f"ring{n}.json")
            out[f"synth_ring_n{n}_s"] = round(timed(["synth", "-a", "ring", "-n", str(n), "-o", path]), 3)
            out[f"verify_ring_n{n}_s"] = round(timed(["verify", path]), 3)
            out[f"simulate_ring_n{n}_s"] = round(timed(["simulate", path, *MODEL]), 3)
            out[f"file_mb_n{n}"] = round(os.path.getsize(path) / 1e6, 1)
        from collsynth.synth.registry import build_schedule
        s = build_schedule("ring", args.n)
        out[f"transfers_n{args.n}"] = s.ntransfers
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
