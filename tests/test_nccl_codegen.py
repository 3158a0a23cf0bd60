"""backends/nccl/codegen.py: the generated CUDA/NCCL library, run under a host emulation of CUDA and NCCL.

The emulation (tests/nccl_emu/collsynth_host_emu.h) compiles the generated <name>.cu with g++ and runs
its real host code: NCCL groups match sends and receives one for one per ordered pair (a mismatch or a
deadlock aborts), streams and events are ordered, and the add kernel's body runs for every thread of
its grid. The driver checks every rank's result exactly (small-integer data) and, for AllReduce, that
all ranks agree bitwise.
"""

from __future__ import annotations

import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "nccl_emu"))
import nccl_testlib as lib  # noqa: E402

from collsynth.backends.nccl.codegen import generate_nccl_cuda, render_nccl_cuda  # noqa: E402
from collsynth.errors import CollsynthError  # noqa: E402
from collsynth.synth.ir import ScheduleBuilder  # noqa: E402
from collsynth.synth.registry import build_schedule  # noqa: E402
from collsynth.synth.verify import VerificationError  # noqa: E402


# ---------------------------------------------------------------------------------------------- files
def test_generates_library_benchmark_and_makefile(tmp_path):
    out = tmp_path / "ring"
    paths = generate_nccl_cuda(build_schedule("ring", 4), str(out))
    names = sorted(os.path.basename(p) for p in paths)
    assert names == ["Makefile", "bench_ring_allreduce_n4.cu", "ring_allreduce_n4.cu", "ring_allreduce_n4.h"]
    header = (out / "ring_allreduce_n4.h").read_text()
    assert re.search(r"ncclResult_t collsynth_ring_allreduce_n4\(const void\* sendbuf, void\* recvbuf, size_t count, "
                     r"ncclDataType_t dtype,\s+ncclComm_t comm, cudaStream_t stream\);", header)
    assert "sm_90" in (out / "Makefile").read_text() and "sm_80" in (out / "Makefile").read_text()
    for line in (out / "Makefile").read_text().splitlines():
        if line.startswith("\t"):
            assert line[1:2] in ("$", "r")  # recipe lines are tab-indented commands


def _read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def test_output_is_deterministic(tmp_path):
    s = build_schedule("stragglar", 8, straggler=3)
    a = generate_nccl_cuda(s, str(tmp_path / "a"), name="sa")
    b = generate_nccl_cuda(build_schedule("stragglar", 8, straggler=3), str(tmp_path / "b"), name="sa")
    assert [_read_bytes(p) for p in a] == [_read_bytes(p) for p in b]
    assert render_nccl_cuda(s, name="x") == render_nccl_cuda(s, name="x")


def test_name_defaults_to_the_schedule_name_made_an_identifier():
    s = build_schedule("ring", 4).replace(name="my-ring.v2")
    assert "my_ring_v2.cu" in render_nccl_cuda(s)
    assert "s_8way.cu" in render_nccl_cuda(s.replace(name="8way"))


def test_dtypes_limit_what_is_compiled_in():
    files = render_nccl_cuda(build_schedule("ring", 4), name="r", dtypes="float")
    cu = files["r.cu"]
    assert "csLaunchAdd<csF32>" in cu and "csLaunchAdd<csF16>" not in cu and "ncclBfloat16" not in cu
    assert "bfloat16" not in files["bench_r.cu"].split("static Type typeOf")[1].split("}")[0]


# ---------------------------------------------------------------------------------------------- refusals
def test_refuses_a_non_empty_directory_unless_forced(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(CollsynthError, match="not empty.*--force"):
        generate_nccl_cuda(build_schedule("ring", 4), str(out))
    assert os.listdir(out) == ["keep.txt"]
    paths = generate_nccl_cuda(build_schedule("ring", 4), str(out), force=True)
    assert len(paths) == 4 and sorted(os.listdir(out)) == sorted(os.path.basename(p) for p in paths)
    # --force replaces the folder whole: no file of an earlier emission stays beside the new ones


def test_an_empty_directory_is_fine(tmp_path):
    (tmp_path / "e").mkdir()
    assert len(generate_nccl_cuda(build_schedule("direct", 3), str(tmp_path / "e"))) == 4


def test_unverified_schedule_writes_nothing(tmp_path):
    b = ScheduleBuilder("allreduce", 3, 3, name="broken")
    b.new_step(); b.add(0, 1, 0, 1, True)
    with pytest.raises(VerificationError):
        generate_nccl_cuda(b.build(), str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("bad", ["1abc", "a-b", "", "x" * 65])
def test_bad_name(tmp_path, bad):
    with pytest.raises(CollsynthError, match="C identifier"):
        generate_nccl_cuda(build_schedule("ring", 4), str(tmp_path / "x"), name=bad)


def test_unsupported_dtype(tmp_path):
    with pytest.raises(CollsynthError, match="unsupported dtype 'double'.*float, half, bfloat16"):
        generate_nccl_cuda(build_schedule("ring", 4), str(tmp_path / "x"), dtypes=["float", "double"])
    assert not (tmp_path / "x").exists()


def test_inexpressible_collective(tmp_path):
    b = ScheduleBuilder("reducescatter", 2, 2, owner=[1, 0])
    b.new_step(); b.add(0, 1, 0, 1, True); b.add(1, 0, 1, 1, True)
    with pytest.raises(CollsynthError, match="rank order"):
        generate_nccl_cuda(b.build(), str(tmp_path / "x"))


def test_output_path_that_is_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("")
    with pytest.raises(CollsynthError, match="not a directory"):
        generate_nccl_cuda(build_schedule("ring", 4), str(f), force=True)


# ---------------------------------------------------------------------------------------------- host emulation
needs_gxx = pytest.mark.skipif(lib.gxx() is None, reason="g++ not found: the host emulation needs a C++17 compiler")

EMULATED = {
    "ring4": lambda: build_schedule("ring", 4),
    "ring8": lambda: build_schedule("ring", 8),
    "ring_rs4": lambda: build_schedule("ring", 4, "reducescatter"),
    "ring_ag5": lambda: build_schedule("ring", 5, "allgather"),
    "direct5": lambda: build_schedule("direct", 5),
    "direct_rs3": lambda: build_schedule("direct", 3, "reducescatter"),
    "rhd8": lambda: build_schedule("rhd", 8),
    "twoshot3": lambda: build_schedule("twoshot", 3),
    "stragglar4": lambda: build_schedule("stragglar", 4),
    "stragglar8_s2": lambda: build_schedule("stragglar", 8, straggler=2),
    "stragglar6": lambda: build_schedule("stragglar", 6),
    **{f"corner_{k}": f for k, f in lib.CORNER_CASES.items()},
}


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """Compile each emulated schedule once per test module; returns key -> executable."""
    root = tmp_path_factory.mktemp("emu")
    built: dict[str, str] = {}

    driver = str(root / "driver.o")

    def get(key: str) -> str:
        if key not in built:
            gen = root / key
            generate_nccl_cuda(EMULATED[key](), str(gen), name="t")
            if not os.path.exists(driver):  # compiled once: it calls only the functions every library declares
                lib.build_driver(str(gen), "t", driver)
            exe = str(root / f"{key}.exe")
            lib.build_emulation(str(gen), "t", exe, driver)
            built[key] = exe
        return built[key]

    return get


@needs_gxx
@pytest.mark.parametrize("key", sorted(EMULATED))
def test_emulated_every_mode(emulated, key):
    exe = emulated(key)
    for mode in ("rank", "scratch", "multi", "loopback"):
        for inplace in (False, True):
            for dtype, count in (("float", 1031), ("half", 5), ("bfloat16", 300)):
                r = lib.run_emulation(exe, mode, dtype, count, inplace)
                assert r.returncode == 0 and r.stdout.startswith("OK"), (key, mode, dtype, count, inplace,
                                                                           r.stdout, r.stderr)


@needs_gxx
@pytest.mark.parametrize("count", [1, 2, 63, 64, 65, 1000, 4099])
def test_emulated_uneven_counts(emulated, count):
    for key in ("ring8", "stragglar8_s2", "ring_rs4"):
        for mode in ("rank", "loopback"):
            r = lib.run_emulation(emulated(key), mode, "float", count, False)
            assert r.returncode == 0, (key, mode, count, r.stdout, r.stderr)


@needs_gxx
def test_emulated_unaligned_buffers_take_the_scalar_path(emulated):
    for key in ("ring4", "direct5"):
        r = lib.run_emulation(emulated(key), "rank", "half", 1000, False, env={"CS_MISALIGN": "1"})
        assert r.returncode == 0, r.stdout + r.stderr


@needs_gxx
def test_emulated_message_counts(emulated):
    """Ring on 4 ranks: one group per rank per step (4*6), one add launch per rank in the 3 RS steps."""
    r = lib.run_emulation(emulated("ring4"), "rank", "float", 1024, False)
    assert "groups=24 launches=12" in r.stdout, r.stdout


@needs_gxx
def test_emulation_catches_a_corrupted_table(tmp_path):
    """The oracle can fail: make one copy land on the wrong chunk in the generated table."""
    gen = tmp_path / "g"
    generate_nccl_cuda(build_schedule("ring", 4), str(gen), name="t")
    cu = (gen / "t.cu").read_text()
    old = "  {0, 3, 3, 1, 1, -1},  /* r0 s3 recv from 3 OUT */"
    assert old in cu, "table layout changed: update this test"
    (gen / "t.cu").write_text(cu.replace(old, "  {0, 3, 2, 1, 1, -1},  /* corrupted */", 1))
    exe = str(tmp_path / "t.exe")
    lib.build_emulation(str(gen), "t", exe)
    r = lib.run_emulation(exe, "rank", "float", 1024, False)
    assert r.returncode != 0 and "FAIL" in r.stdout
    r = lib.run_emulation(exe, "loopback", "float", 1024, False)
    assert r.returncode != 0


@needs_gxx
def test_emulation_catches_a_mismatched_message(tmp_path):
    gen = tmp_path / "g"
    generate_nccl_cuda(build_schedule("ring", 4), str(gen), name="t")
    cu = (gen / "t.cu").read_text()
    old = "  {1, 1, 3, 1, 0, -1},  /* r0 s0 send to 1 IN */"
    assert old in cu
    (gen / "t.cu").write_text(cu.replace(old, "  {1, 1, 2, 2, 0, -1},  /* corrupted: two chunks */", 1))
    exe = str(tmp_path / "t.exe")
    lib.build_emulation(str(gen), "t", exe)
    r = lib.run_emulation(exe, "rank", "float", 1024, False)
    assert r.returncode != 0 and "sends" in r.stderr
    r = lib.run_emulation(exe, "loopback", "float", 1024, False)
    assert r.returncode != 0 and "plan tables are corrupt" in r.stdout


@needs_gxx
def test_emulated_library_rejects_wrong_communicator_size(tmp_path):
    gen = tmp_path / "g"
    generate_nccl_cuda(build_schedule("ring", 4), str(gen), name="t")
    src = tmp_path / "wrong.cpp"
    src.write_text('#include <stdio.h>\n#include <string.h>\nint main() {\n'
                   '  ncclComm_t c[3]; ncclCommInitAll(c, 3, NULL);\n'
                   '  float x[8];\n'
                   '  ncclResult_t r = collsynth_t(x, x, 8, ncclFloat32, c[0], NULL);\n'
                   '  printf("%d %s\\n", (int)r, collsynth_t_last_error());\n'
                   '  r = collsynth_t_with_scratch(x, x, 8, ncclFloat64, c[0], NULL, NULL, 0);\n'
                   '  printf("%d %s\\n", (int)r, collsynth_t_last_error());\n  return 0;\n}\n')
    exe = str(tmp_path / "w.exe")
    import subprocess

    cmd = [lib.gxx(), "-std=c++17", "-DCOLLSYNTH_HOST_EMULATION", f"-I{lib.HERE}", f"-I{gen}", "-include", "t.h",
           "-x", "c++", str(gen / "t.cu"), "-x", "c++", str(src), "-o", exe]
    subprocess.run(cmd, check=True, capture_output=True)
    out = subprocess.run([exe], capture_output=True, text=True).stdout.splitlines()
    assert out[0].startswith("4 ") and "has 3 ranks but the schedule is for 4" in out[0]
    assert out[1].startswith("4 ") and "communicator has 3 ranks" in out[1]
