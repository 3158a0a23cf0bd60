"""Issue 6 numbers: NCCL code backend generation cost, nvcc build time, and (on a GPU) the loopback check.

Run: .venv/bin/python bench/bench_nccl.py [--sizes 8,64,256] [--no-compile] [--gpu]
     .venv/bin/python bench/bench_nccl.py --prepare DIR      (here: build loopback binaries, no NCCL needed)
     python3 bench/bench_nccl.py --run-prepared DIR          (on the GPU machine: stdlib only)
Prints JSON:
- per algorithm and n: render time (verify + plan + templates), generated .cu bytes, NCCL ops in the
  plan tables, scratch slots;
- nvcc: wall time of `make` (library object, shared library, benchmark; sm_90) for ring and stragglar
  at n = 8, when nvcc and the nvidia-nccl wheel are present;
- --gpu (only where a GPU is visible): builds ring and stragglar at n = 8 without NCCL
  (`bench_<name>_loopback`) and runs them with --loopback (all 8 ranks on one GPU, send/recv = device
  copies), reporting the numeric check per size and the add kernel's bandwidth against a plain
  device-to-device copy of the same bytes. --prepare/--run-prepared split this in two so that the
  binaries (about 1 MB each) can be built here and carried to a device machine.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "nccl_emu"))


def _toolchain() -> tuple[str | None, str | None]:
    try:
        import nccl_testlib as lib
    except ImportError:  # pragma: no cover - tests folder missing in an installed copy
        return shutil.which("nvcc"), None
    return lib.nvcc(), lib.nccl_home()


def generation(sizes: list[int]) -> list[dict]:
    from collsynth.backends.nccl.codegen import render_nccl_cuda
    from collsynth.backends.nccl.plan import build_plan
    from collsynth.synth.registry import build_schedule

    rows = []
    for algo in ("ring", "stragglar", "direct"):
        for n in sizes:
            s = build_schedule(algo, n)
            t = time.perf_counter()
            files = render_nccl_cuda(s, name="b")
            dt = time.perf_counter() - t
            plan = build_plan(s)
            rows.append({"algorithm": algo, "n": n, "steps": s.nsteps, "transfers": s.ntransfers,
                         "render_s": round(dt, 3), "cu_bytes": len(files["b.cu"]), "nccl_ops": plan.nops,
                         "scratch_slots": plan.scratch_slots})
    return rows


def _build(schedule, d: str, name: str, nvcc: str, home: str) -> float:
    from collsynth.backends.nccl.codegen import generate_nccl_cuda

    generate_nccl_cuda(schedule, d, name=name)
    env = {**os.environ, "PATH": os.path.dirname(nvcc) + os.pathsep + os.environ.get("PATH", "")}
    t = time.perf_counter()
    subprocess.run(["make", "-C", d, "-j2", f"NCCL_HOME={home}", f"NVCC={nvcc}", "ARCH=sm_90"], check=True,
                   capture_output=True, env=env)
    return time.perf_counter() - t


def compile_times(nvcc: str, home: str) -> dict:
    from collsynth.synth.registry import build_schedule

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for algo in ("ring", "stragglar"):
            seconds = _build(build_schedule(algo, 8), os.path.join(tmp, algo), algo, nvcc, home)
            out[f"make_{algo}8_s"] = round(seconds, 2)
    return out


def prepare_loopback(nvcc: str, outdir: str) -> list[str]:
    """Build the loopback-only benchmarks (no NCCL needed) for ring and stragglar at n = 8 into outdir."""
    from collsynth.backends.nccl.codegen import generate_nccl_cuda
    from collsynth.synth.registry import build_schedule

    os.makedirs(outdir, exist_ok=True)
    env = {**os.environ, "PATH": os.path.dirname(nvcc) + os.pathsep + os.environ.get("PATH", "")}
    exes = []
    with tempfile.TemporaryDirectory() as tmp:
        for algo in ("ring", "stragglar"):
            d = os.path.join(tmp, algo)
            generate_nccl_cuda(build_schedule(algo, 8), d, name=f"{algo}8")
            subprocess.run(["make", "-C", d, f"NVCC={nvcc}", "ARCH=sm_90", f"bench_{algo}8_loopback"], check=True,
                           capture_output=True, env=env)
            exe = os.path.join(outdir, f"bench_{algo}8_loopback")
            shutil.copy(os.path.join(d, f"bench_{algo}8_loopback"), exe)
            exes.append(exe)
    return exes


def run_loopback(outdir: str) -> dict:
    """Run every prepared bench_*_loopback in outdir (1 MiB .. 256 MiB); stdlib only, for a GPU machine."""
    out: dict = {}
    for exe in sorted(f for f in os.listdir(outdir) if f.startswith("bench_") and f.endswith("_loopback")):
        r = subprocess.run([os.path.join(outdir, exe), "--loopback", "-b", "1M", "-e", "256M", "-f", "4", "-n", "10",
                            "-w", "3"], capture_output=True, text=True, timeout=300)
        name = exe[len("bench_"):-len("_loopback")]
        res: dict = {"exit": r.returncode, "stderr": r.stderr.strip()[-500:], "sizes": []}
        by: dict = {}
        for row in csv.DictReader(io.StringIO(r.stdout)):
            by.setdefault(int(row["bytes"]), {})[row["algorithm"]] = row
        for nbytes in sorted(by):
            e = by[nbytes]
            item: dict = {"bytes": nbytes}
            if name in e:
                item.update(check=e[name]["check"], time_us=float(e[name]["time_us"]))
            if "add_kernel" in e and "d2d_copy" in e:
                add, cp = float(e["add_kernel"]["algbw_GBps"]), float(e["d2d_copy"]["algbw_GBps"])
                item.update(add_GBps=add, copy_GBps=cp, add_vs_copy=round(add / cp, 3) if cp else None,
                            add_membw_GBps=float(e["add_kernel"]["membw_GBps"]),
                            copy_membw_GBps=float(e["d2d_copy"]["membw_GBps"]))
            res["sizes"].append(item)
        out[name] = res
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="8,64,256")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--gpu", action="store_true", help="build and run the loopback check (needs a GPU)")
    ap.add_argument("--prepare", metavar="DIR", help="only build the loopback-only benchmarks into DIR")
    ap.add_argument("--run-prepared", metavar="DIR", help="only run the benchmarks in DIR (stdlib only)")
    args = ap.parse_args()
    if args.run_prepared:
        print(json.dumps({"loopback": run_loopback(args.run_prepared)}, indent=1))
        return
    nvcc, home = _toolchain()
    if args.prepare:
        if not nvcc:
            sys.exit("bench_nccl: nvcc not found")
        print(json.dumps({"prepared": prepare_loopback(nvcc, args.prepare)}, indent=1))
        return
    out: dict = {"cpus": os.cpu_count(), "generation": generation([int(x) for x in args.sizes.split(",")])}
    if args.no_compile:
        out["nvcc"] = "skipped (--no-compile)"
    elif nvcc and home:
        out["nvcc"] = compile_times(nvcc, home)
    else:
        out["nvcc"] = "skipped: nvcc or the nvidia-nccl wheel not found"
    if args.gpu:
        smi = shutil.which("nvidia-smi")
        visible = bool(smi) and subprocess.run([smi, "-L"], capture_output=True).returncode == 0
        if visible and nvcc:
            with tempfile.TemporaryDirectory() as tmp:
                prepare_loopback(nvcc, tmp)
                out["loopback"] = run_loopback(tmp)
        else:
            out["loopback"] = "skipped: no GPU visible (or no nvcc)"
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
