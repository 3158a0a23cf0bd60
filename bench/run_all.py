"""Run every benchmark in bench/ and print one JSON object {script: its JSON output} (`make bench`).

Each bench_*.py prints JSON on stdout; their own options set sizes (see each script's --help).
`--quick` passes each script's short form where it has one; `--only a,b` runs a subset.
Progress goes to stderr. Exit 1 if a benchmark failed (its entry then holds the error).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
QUICK = {"bench_solver.py": ["--quick"], "bench_training.py": ["--no-real"], "bench_nccl.py": ["--sizes", "8,64"],
         "bench_setup.py": ["--no-test"], "bench_cluster_study.py": ["--quick"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the short form of the benchmarks that have one")
    ap.add_argument("--only", default=None, help="comma-separated script names (e.g. bench_msccl,bench_setup)")
    args = ap.parse_args()
    scripts = sorted(f for f in os.listdir(HERE) if f.startswith("bench_") and f.endswith(".py"))
    if args.only:
        want = {w if w.endswith(".py") else w + ".py" for w in args.only.split(",")}
        scripts = [s for s in scripts if s in want]
    out: dict[str, object] = {}
    failed = False
    for s in scripts:
        extra = QUICK.get(s, []) if args.quick else []
        print(f"bench: {s} {' '.join(extra)}", file=sys.stderr, flush=True)
        t = time.perf_counter()
        r = subprocess.run([sys.executable, os.path.join(HERE, s), *extra], capture_output=True, text=True)
        try:
            out[s] = json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr.strip()[-2000:]}
        except json.JSONDecodeError:
            out[s] = {"error": "no JSON on stdout", "stdout": r.stdout[-2000:]}
        failed = failed or r.returncode != 0 or "error" in out[s]  # type: ignore[operator]
        print(f"bench: {s} done in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
