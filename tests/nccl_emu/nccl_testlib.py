"""Helpers shared by tests/test_nccl_*.py: corner-case schedules, toolchain lookup, emulation builds."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess

from collsynth.synth.ir import Schedule, ScheduleBuilder

HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------------------------------------- schedules
def mixed_run_allreduce() -> Schedule:
    """A sender's run whose chunks sit in different locations (one already written, one not): the
    backend must split it into two messages; rank 2 reduces a run into two chunks at once."""
    b = ScheduleBuilder("allreduce", 3, 2, name="mixed_run", ports=2)
    b.new_step(); b.add(0, 1, 0, 1, True)
    b.new_step(); b.add(1, 2, 0, 2, True)
    b.new_step(); b.add(0, 2, 1, 1, True)
    b.new_step(); b.add(2, 0, 0, 2, False); b.add(2, 1, 0, 2, False)
    return b.build()


def split_reducescatter() -> Schedule:
    """ReduceScatter with chunk runs that cross the owned block: partial sums go to the work area and
    the owned chunk to the output, on the receiver of a reduce and of a copy."""
    b = ScheduleBuilder("reducescatter", 2, 2, name="split_rs", owner=[0, 1])
    b.new_step(); b.add(0, 1, 0, 2, True)
    b.new_step(); b.add(1, 0, 0, 2, False)
    return b.build()


def overlapping_reduces() -> Schedule:
    """Two reduces of one step into overlapping chunk ranges of one rank (added one after the other)."""
    b = ScheduleBuilder("allreduce", 3, 2, name="overlap", ports=2)
    b.new_step(); b.add(1, 0, 0, 2, True); b.add(2, 0, 1, 1, True)
    b.new_step(); b.add(2, 0, 0, 1, True)
    b.new_step(); b.add(0, 1, 0, 2, False); b.add(0, 2, 0, 2, False)
    return b.build()


def many_adds() -> Schedule:
    """20 single-chunk reduces in one step (more add operations than one kernel launch takes)."""
    C = 20
    b = ScheduleBuilder("allreduce", 2, C, name="many_adds", ports=C)
    b.new_step()
    for c in range(C):
        b.add(0, 1, c, 1, True)
    b.new_step()
    for c in range(C):
        b.add(1, 0, c, 1, False)
    return b.build()


def gather_runs() -> Schedule:
    """AllGather with runs that cross block boundaries and mix own input with received chunks."""
    b = ScheduleBuilder("allgather", 3, 3, name="gather_runs", ports=2, owner=[0, 1, 2])
    b.new_step(); b.add(0, 1, 0, 1, False)
    b.new_step(); b.add(1, 2, 0, 2, False)
    b.new_step(); b.add(2, 0, 1, 2, False); b.add(2, 1, 2, 1, False)
    return b.build()


CORNER_CASES = {
    "mixed_run": mixed_run_allreduce,
    "split_rs": split_reducescatter,
    "overlap": overlapping_reduces,
    "many_adds": many_adds,
    "gather_runs": gather_runs,
}


# ---------------------------------------------------------------------------------------------- toolchain
def nccl_home() -> str | None:
    """The directory holding include/nccl.h and lib/libnccl.so* from the nvidia-nccl-cu13/cu12 wheel."""
    for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        try:
            d = importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in d.files or ():
            if str(f).replace("\\", "/").endswith("nccl/include/nccl.h"):
                inc = os.path.dirname(str(d.locate_file(f)))
                home = os.path.dirname(inc)
                if os.path.isdir(os.path.join(home, "lib")):
                    return home
    return None


def nvcc() -> str | None:
    return shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc")
                                         if os.path.exists(p)), None)


def cuda_include() -> str | None:
    exe = nvcc()
    if not exe:
        return None
    for root in (os.path.dirname(os.path.dirname(os.path.realpath(exe))), "/usr/local/cuda"):
        if os.path.exists(os.path.join(root, "include", "cuda_runtime.h")):
            return os.path.join(root, "include")
    return None


def gxx() -> str | None:
    return shutil.which("g++")


def gcc() -> str | None:
    return shutil.which("gcc")


# ---------------------------------------------------------------------------------------------- emulation
def _gxx(*args: str) -> None:
    r = subprocess.run([gxx(), "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-DCOLLSYNTH_HOST_EMULATION",
                        f"-I{HERE}", *args], capture_output=True, text=True)
    if r.returncode:
        raise AssertionError(f"emulation build failed:\n{r.stderr[-4000:]}")


def build_driver(gen_dir: str, name: str, out: str) -> None:
    """Compile the test driver alone (an object file) against a generated library's header: the driver calls
    only the library's functions, whose declarations are the same for every schedule of one ``name``."""
    _gxx(f"-DCS_NAME={name}", f"-I{gen_dir}", "-include", f"{name}.h", "-x", "c++", os.path.join(HERE, "driver.cpp"),
         "-c", "-o", out)


def build_emulation(gen_dir: str, name: str, out: str, driver: str | None = None) -> None:
    """Compile the generated library with the host emulation and the test driver (g++); ``driver``: the
    driver's object file from build_driver, linked instead of compiling driver.cpp again."""
    tail = [driver] if driver else ["-x", "c++", os.path.join(HERE, "driver.cpp")]
    _gxx(f"-DCS_NAME={name}", f"-I{gen_dir}", "-include", f"{name}.h", "-x", "c++",
         os.path.join(gen_dir, f"{name}.cu"), *(["-x", "none"] if driver else []), *tail, "-o", out)


def run_emulation(exe: str, mode: str, dtype: str, count: int, inplace: bool,
                  env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([exe, mode, dtype, str(count), "1" if inplace else "0"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})
