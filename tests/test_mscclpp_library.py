"""The MSCCL++ plan library: the manifest matches the plans, every plan verifies and reads back to its
Schedule, the generated Python selector picks plans by collective, GPUs, size, buffer mode and late rank,
the C++ selector compiles (alone, and against MSCCL++'s API) and agrees with the Python one, and the GPU
script lists its runs without GPUs. (tests/test_msccl_library.py regenerates the whole schedules/ folder,
this library included, and compares it byte for byte.)"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys

import pytest

from collsynth.backends.msccl.library import default_dir
from collsynth.backends.mscclpp import check_plan_file, plan_file_to_schedule
from collsynth.cli import main
from collsynth.synth.registry import build_schedule

LIB = os.path.join(default_dir(), "mscclpp")
STUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mscclpp_stub")


@pytest.fixture(scope="module")
def manifest():
    with open(os.path.join(LIB, "MANIFEST.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def selector():
    spec = importlib.util.spec_from_file_location("collsynth_test_selector", os.path.join(LIB, "selector.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_manifest_lists_every_plan_with_its_hash(manifest):
    entries = manifest["entries"]
    assert manifest["mscclpp_version"] == "0.9.0"
    assert {(e["algorithm"], e["world_size"], e["straggler"]) for e in entries if e["algorithm"] == "stragglar"} == {
        ("stragglar", n, r) for n in (4, 8) for r in range(n)}
    files = sorted(os.listdir(os.path.join(LIB, "plans")))
    assert files == sorted(os.path.basename(e["file"]) for e in entries)
    for e in entries:
        with open(os.path.join(LIB, e["file"]), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == e["sha256"]


def test_every_plan_verifies_and_reads_back(manifest):
    for e in manifest["entries"]:
        path = os.path.join(LIB, e["file"])
        report = check_plan_file(path)
        assert report.ok, (e["name"], report.message)
        if e["inplace"]:
            params = {"straggler": e["straggler"]} if e["straggler"] is not None else {}
            s = build_schedule(e["algorithm"], e["world_size"], **params)
            back = plan_file_to_schedule(path)
            assert (back.name, back.nsteps, back.ntransfers, back.phases) == (s.name, s.nsteps, s.ntransfers,
                                                                               s.phases)


def test_python_selector(selector, monkeypatch):
    monkeypatch.delenv("COLLSYNTH_STRAGGLER", raising=False)
    pick = selector.select_plan
    assert pick("allreduce", 8, 64 << 20, True, late_rank=7)["name"] == "stragglar_n8_s7_Simple_inplace"
    assert pick("allreduce", 8, 64 << 20, True)["name"] == "ring_n8_Simple_inplace"
    assert pick("allreduce", 8, 4096, False)["name"] == "direct_n8_LL_outofplace"
    assert pick("allreduce", 8, 512 << 10, False, late_rank=3)["name"] == "stragglar_n8_s3_LL_outofplace"
    assert pick("allreduce", 4, 256 << 10, True)["name"] == "rhd_n4_LL_inplace"
    assert pick("allreduce", 8, 100, True) is None  # not a multiple of the plans' granularity
    assert pick("allreduce", 16, 1 << 20, True) is None  # no plan for 16 GPUs
    assert pick("allgather", 8, 1 << 20, True) is None
    monkeypatch.setenv("COLLSYNTH_STRAGGLER", "2")
    assert pick("allreduce", 4, 8 << 20, False)["name"] == "stragglar_n4_s2_Simple_outofplace"
    assert pick("allreduce", 4, 8 << 20, False, late_rank=1)["name"] == "stragglar_n4_s1_Simple_outofplace"
    assert selector.plan_path(pick("allreduce", 4, 8 << 20, False)).startswith(LIB)


def _gxx():
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    return gxx


DRIVER = r"""
#include "collsynth_mscclpp_selector.h"
#include <cstdio>
#include <cstdlib>
int main(int argc, char** argv) {
  for (int i = 1; i + 4 < argc; i += 5) {
    const collsynth_mscclpp::PlanEntry* e = collsynth_mscclpp::select_plan(
        argv[i], std::atoi(argv[i + 1]), 0, std::strtoull(argv[i + 2], nullptr, 10), argv[i + 3][0] == '1',
        std::atoi(argv[i + 4]));
    std::printf("%s\n", e ? e->name : "-");
  }
  return 0;
}
"""


def test_cpp_selector_compiles_and_agrees_with_python(selector, tmp_path, monkeypatch):
    gxx = _gxx()
    monkeypatch.delenv("COLLSYNTH_STRAGGLER", raising=False)
    (tmp_path / "driver.cc").write_text(DRIVER)
    exe = tmp_path / "driver"
    r = subprocess.run([gxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-I", LIB, "-o", str(exe),
                        str(tmp_path / "driver.cc"), os.path.join(LIB, "collsynth_mscclpp_selector.cc")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    queries = list(itertools.product(["allreduce", "allgather"], [4, 8, 16], [1024, 65536, 65552, 1 << 20,
                                                                             (1 << 20) + 1024, 64 << 20, 100],
                                     [True, False], [-1, 0, 3, 7]))
    args = [str(x) if not isinstance(x, bool) else str(int(x)) for q in queries for x in q]
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    want = []
    for coll, n, size, inplace, late in queries:
        e = selector.select_plan(coll, n, size, inplace, late_rank=None if late < 0 else late)
        want.append(e["name"] if e else "-")
    assert r.stdout.split() == want


def test_cpp_registration_compiles_against_the_mscclpp_api(tmp_path):
    gxx = _gxx()
    r = subprocess.run([gxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-DCOLLSYNTH_WITH_MSCCLPP", "-I", LIB,
                        "-I", STUB, "-c", os.path.join(LIB, "collsynth_mscclpp_selector.cc"), "-o",
                        str(tmp_path / "sel.o")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def test_gpu_script_lists_its_runs_without_gpus():
    r = subprocess.run([sys.executable, os.path.join(LIB, "run_plans.py"), "--dry-run", "--world-size", "4",
                        "--sizes", "64KiB,64MiB", "--late-rank", "2"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    runs = [json.loads(line) for line in r.stdout.splitlines()]
    assert {(x["plan"], x["bytes"]) for x in runs} == {
        (f"{a}_n4{s}_{p}_{m}", size) for m in ("inplace", "outofplace")
        for a, s, p, size in (("direct", "", "LL", 65536), ("ring", "", "Simple", 64 << 20),
                              ("stragglar", "_s2", "LL", 65536), ("stragglar", "_s2", "Simple", 64 << 20))}


def test_selector_format_for_any_folder_of_plans(tmp_path, capsys):
    plans = tmp_path / "plans"
    plans.mkdir()
    for name in ("stragglar_n8_s7_Simple_inplace.json", "ring_n8_Simple_inplace.json"):
        shutil.copy(os.path.join(LIB, "plans", name), plans / name)
    out = tmp_path / "sel"
    assert main(["emit", "--format", "mscclpp-selector", str(plans), "-o", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["MANIFEST.json", "collsynth_mscclpp_selector.cc", "collsynth_mscclpp_selector.h",
                                       "plans", "run_plans.py", "selector.py"]
    assert main(["emit", "--format", "mscclpp-selector", str(tmp_path / "nope"), "-o", str(tmp_path / "x")]) == 2
    assert "reads a folder of MSCCL++ plans" in capsys.readouterr().err


def test_schedules_list_mscclpp(capsys):
    assert main(["schedules", "list", "--mscclpp"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["algorithm", "gpus", "straggler", "protocol", "mode", "bytes", "plan"]
    assert len(lines) == 2 + 60
