"""Set-up and start-up numbers (issue 12): a fresh clone's `make run` (time, .venv size), `make test`
(time, test count), `collsynth --help` and `import collsynth` (median of several runs).

Run: .venv/bin/python bench/bench_setup.py [--no-test] [--repeat 7]
The clone is made from this checkout's HEAD into a temporary folder (committed work only).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _du(path: str) -> int:
    total = 0
    for dp, _, fns in os.walk(path):
        for f in fns:
            p = os.path.join(dp, f)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total


def _timed(cmd: list[str], cwd: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - t, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-test", action="store_true", help="skip the fresh clone's `make test` (minutes)")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        clone = os.path.join(tmp, "collsynth")
        subprocess.run(["git", "clone", "-q", ROOT, clone], check=True)
        t, r = _timed(["make", "run"], clone)
        out["make_run_s"] = round(t, 1)
        out["make_run_ok"] = r.returncode == 0 and "stragglar" in r.stdout
        out["make_run_warnings"] = [ln for ln in (r.stdout + r.stderr).splitlines() if "warning" in ln.lower()]
        out["venv_mb_after_run"] = round(_du(os.path.join(clone, ".venv")) / 2**20, 1)
        exe = os.path.join(clone, ".venv", "bin")
        helps, imports = [], []
        for _ in range(args.repeat):
            helps.append(_timed([os.path.join(exe, "collsynth"), "--help"], clone)[0])
            imports.append(_timed([os.path.join(exe, "python"), "-c", "import collsynth"], clone)[0])
        out["help_s_median"] = round(statistics.median(helps), 3)
        out["import_s_median"] = round(statistics.median(imports), 3)
        if not args.no_test:
            t, r = _timed(["make", "test"], clone)
            out["make_test_s"] = round(t, 1)
            out["make_test_ok"] = r.returncode == 0
            m = re.search(r"(\d+) passed.*? in ([\d.]+)s", r.stdout + r.stderr)
            if m:
                out["tests_passed"], out["pytest_s"] = int(m.group(1)), float(m.group(2))
            out["venv_mb_after_test"] = round(_du(os.path.join(clone, ".venv")) / 2**20, 1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
