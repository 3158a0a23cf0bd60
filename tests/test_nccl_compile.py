"""The generated library and benchmark compile with nvcc against the NCCL wheel (compile only: no GPU here).

Ring and StragglAR at n = 4 and 8 are generated and built with their own Makefile (ARCH=sm_90: the
library object, the shared library and the benchmark), plus one build for sm_80 and one of the MPI
variant's object against a stub mpi.h. Skips, with the reason, when nvcc or the nvidia-nccl wheel is
missing. Each `make` takes a few seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "nccl_emu"))
import nccl_testlib as lib  # noqa: E402

from collsynth.backends.nccl.codegen import generate_nccl_cuda  # noqa: E402
from collsynth.synth.registry import build_schedule  # noqa: E402

NVCC = lib.nvcc()
NCCL_HOME = lib.nccl_home()
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not found: install the CUDA toolkit to compile the "
                                                     "generated code")
needs_nccl = pytest.mark.skipif(NCCL_HOME is None, reason="NCCL headers not found: pip install nvidia-nccl-cu13 "
                                                          "(or nvidia-nccl-cu12)")

SCHEDULES = {
    "ring4": lambda: build_schedule("ring", 4),
    "ring8": lambda: build_schedule("ring", 8),
    "stragglar4": lambda: build_schedule("stragglar", 4),
    "stragglar8": lambda: build_schedule("stragglar", 8),
}


def _make(d: str, *targets: str, **var: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": os.path.dirname(NVCC) + os.pathsep + os.environ.get("PATH", "")}
    home = [f"NCCL_HOME={NCCL_HOME}"] if NCCL_HOME else []
    args = ["make", "-C", d, *home, f"NVCC={NVCC}", *(f"{k}={v}" for k, v in var.items()), *targets]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("nvcc")
    out = {}
    for key, make_schedule in SCHEDULES.items():
        d = root / key
        generate_nccl_cuda(make_schedule(), str(d), name=key)
        r = _make(str(d), "-j2", ARCH="sm_90")
        out[key] = (str(d), r)
    return out


@needs_nccl
@pytest.mark.parametrize("key", sorted(SCHEDULES))
def test_library_and_benchmark_compile_for_sm90(built, key):
    d, r = built[key]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "warning" not in (r.stdout + r.stderr).lower(), r.stderr[-3000:]
    for f in (f"{key}.o", f"lib{key}.so", f"bench_{key}"):
        assert os.path.getsize(os.path.join(d, f)) > 0
    nm = subprocess.run(["nm", "-D", "--defined-only", os.path.join(d, f"lib{key}.so")], capture_output=True,
                        text=True).stdout
    for sym in ("", "_with_scratch", "_multi", "_loopback", "_reduce", "_scratch_bytes", "_last_error"):
        assert f" collsynth_{key}{sym}\n" in nm


@needs_nccl
def test_benchmark_runs_without_a_gpu_as_far_as_its_options(built):
    d, r = built["stragglar8"]
    assert r.returncode == 0
    exe = os.path.join(d, "bench_stragglar8")
    h = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert h.returncode == 0 and "--loopback" in h.stdout and "--straggler" in h.stdout
    bad = subprocess.run([exe, "--straggler", "8"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--straggler must be a rank in 0..7" in bad.stderr
    bad = subprocess.run([exe, "-d", "double"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown dtype double" in bad.stderr


@needs_nccl
def test_sm80_build(tmp_path):
    d = tmp_path / "r"
    generate_nccl_cuda(build_schedule("ring", 4, "reducescatter"), str(d), name="rs", dtypes="half,bfloat16")
    r = _make(str(d), "rs.o", "bench_rs", "-j2", ARCH="sm_80")
    assert r.returncode == 0, r.stderr[-3000:]


@needs_nccl
def test_mpi_variant_compiles_against_a_stub_mpi_header(tmp_path):
    """No MPI here: a stub header with the few declarations the benchmark uses checks its MPI code path."""
    inc = tmp_path / "mpi" / "include"
    inc.mkdir(parents=True)
    (inc / "mpi.h").write_text(
        "#pragma once\ntypedef int MPI_Comm; typedef int MPI_Datatype; typedef int MPI_Op; typedef int MPI_Info;\n"
        "#define MPI_COMM_WORLD 0\n#define MPI_COMM_TYPE_SHARED 1\n#define MPI_INFO_NULL 0\n#define MPI_BYTE 1\n"
        "#define MPI_DOUBLE 2\n#define MPI_UNSIGNED_LONG_LONG 3\n#define MPI_MAX 1\n#define MPI_SUM 2\n"
        "#define MPI_IN_PLACE ((void*)1)\n"
        "int MPI_Init(int*, char***); int MPI_Finalize(void); int MPI_Comm_rank(MPI_Comm, int*);\n"
        "int MPI_Comm_size(MPI_Comm, int*); int MPI_Abort(MPI_Comm, int); int MPI_Barrier(MPI_Comm);\n"
        "int MPI_Comm_split_type(MPI_Comm, int, int, MPI_Info, MPI_Comm*);\n"
        "int MPI_Bcast(void*, int, MPI_Datatype, int, MPI_Comm);\n"
        "int MPI_Allreduce(const void*, void*, int, MPI_Datatype, MPI_Op, MPI_Comm);\n")
    d = tmp_path / "g"
    generate_nccl_cuda(build_schedule("stragglar", 4), str(d), name="sg")
    r = _make(str(d), "bench_sg.o", ARCH="sm_90", MPI="1", MPI_HOME=str(tmp_path / "mpi"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "-DCOLLSYNTH_MPI" in r.stdout


def test_loopback_only_benchmark_needs_no_nccl(tmp_path):
    """`make bench_<name>_loopback` builds without NCCL (so that the binary can be carried to a GPU machine)."""
    d = tmp_path / "l"
    generate_nccl_cuda(build_schedule("ring", 8), str(d), name="r8")
    env = {**os.environ, "PATH": os.path.dirname(NVCC) + os.pathsep + os.environ.get("PATH", "")}
    r = subprocess.run(["make", "-C", str(d), f"NVCC={NVCC}", "NCCL_HOME=/nonexistent", "bench_r8_loopback"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "warning" not in (r.stdout + r.stderr).lower()
    exe = str(d / "bench_r8_loopback")
    ldd = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    assert "libnccl" not in ldd
    r = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "run it with --loopback" in r.stderr
