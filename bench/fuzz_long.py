"""The fuzz suite's long run (issue 13, Numbers: at least 20,000 generated cases): runs
tests/test_fuzz_*.py with COLLSYNTH_FUZZ_EXAMPLES random examples per test and counts every case the
harness ran (tests/fuzzkit.py records one line per case).

    python bench/fuzz_long.py --examples 500

Prints JSON: cases, clean, not clean (each with its whole argument vector, its problems and a copy of its
input folder beside the stats file), exit codes, per test, the pytest summary and wall time; pytest's
own report (the failing examples, shrunk) is kept beside the per-case lines (STATS.pytest.txt).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=500, help="hypothesis examples per fuzz test (default 500)")
    ap.add_argument("--stats", default=None, help="keep the per-case lines in this file (default: a temp file)")
    args = ap.parse_args()
    stats = args.stats or os.path.join(tempfile.mkdtemp(prefix="collsynth-fuzz-stats-"), "cases.jsonl")
    os.makedirs(os.path.dirname(os.path.abspath(stats)), exist_ok=True)  # before the run, not after it
    env = dict(os.environ, COLLSYNTH_FUZZ_EXAMPLES=str(args.examples), COLLSYNTH_FUZZ_STATS=stats)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf",
                        "tests/test_fuzz_cli.py", "tests/test_fuzz_files.py"], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    with open(stats + ".pytest.txt", "w") as f:  # the failing examples, shrunk, with their stderr
        f.write(r.stdout + r.stderr)
    cases = []
    if os.path.exists(stats):
        with open(stats) as f:
            cases = [json.loads(ln) for ln in f if ln.strip()]
    codes = collections.Counter(f"{c['kind']} {c['code']}" for c in cases)
    per_test = collections.Counter(c["test"] for c in cases)
    bad = [c for c in cases if not c["clean"]]
    out = {"examples_per_test": args.examples, "cases": len(cases), "clean": len(cases) - len(bad),
           "not_clean": len(bad), "exit_codes": dict(sorted(codes.items())), "per_test": dict(sorted(per_test.items())),
           "not_clean_cases": [{k: c[k] for k in ("test", "argv", "problems", "inputs") if k in c} for c in bad[:20]],
           "pytest_exit": r.returncode,
           "pytest_failures": [ln for ln in r.stdout.splitlines() if ln.startswith("FAILED")],
           "wall_s": round(wall)}
    print(json.dumps(out, indent=1))
    return 0 if r.returncode == 0 and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
