"""The MSCCL++ selector picks the cluster form from who is late (issue 15 point 5): on a 2 x 4 cluster family
(clusterstraggler's late-GPU form for every rank, its late-node form for each node), the plans record their late
set, the Python selector chooses the plan whose late set is exactly the one given (``late_ranks``,
``late_rank`` or $COLLSYNTH_STRAGGLER ranges, the MSCCL scheduler plugin's rules) and the C++ selector, built
from the same template code as the plugin, agrees."""

from __future__ import annotations

import importlib.util
import itertools
import json
import shutil
import subprocess

import pytest

from collsynth.backends.mscclpp.emit import emit_plan
from collsynth.backends.mscclpp.selector import render_mscclpp_selector
from collsynth.synth.algorithms.stragglar.family import ClusterFamily
from collsynth.synth.registry import build_schedule
from collsynth.synth.topology import cluster_topology
from collsynth.synth.verify import check


@pytest.fixture(scope="module")
def family_dir(tmp_path_factory):
    """Plans for the 2 x 4 family (8 late-GPU, 2 late-node) and ring for punctual ranks; the selector files."""
    root = tmp_path_factory.mktemp("cluster_plans")
    plans = root / "plans"
    plans.mkdir()
    fam = ClusterFamily(cluster_topology(2, 4))
    for s in fam.build_all().values():
        name = f"{s.name}_Simple"
        (plans / f"{name}.json").write_text(emit_plan(s, proto="Simple", name=name))
    ring = check(build_schedule("ring", 8))
    (plans / "ring_n8.json").write_text(emit_plan(ring, proto="Simple", name="ring_n8"))
    out = root / "sel"
    out.mkdir()
    for rel, content in render_mscclpp_selector(str(plans)).items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return out


@pytest.fixture(scope="module")
def selector(family_dir):
    spec = importlib.util.spec_from_file_location("collsynth_cluster_selector", family_dir / "selector.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _size(selector):
    """A message size every plan serves (a multiple of every granularity)."""
    g = 1
    for e in selector.PLANS:
        g = g * e["granularity"] // __import__("math").gcd(g, e["granularity"])
    return g * (1 << 10)


def test_manifest_records_each_late_set(family_dir):
    entries = json.loads((family_dir / "MANIFEST.json").read_text())["entries"]
    late = sorted(tuple(e["late"]) for e in entries)
    assert late == sorted([()] + [(r,) for r in range(8)] + [(0, 1, 2, 3), (4, 5, 6, 7)])
    for e in entries:
        assert e["straggler"] == (e["late"][0] if len(e["late"]) == 1 else None)


def test_python_selector_picks_the_form_from_who_is_late(selector, monkeypatch):
    monkeypatch.delenv("COLLSYNTH_STRAGGLER", raising=False)
    size = _size(selector)
    pick = selector.select_plan
    assert pick("allreduce", 8, size, True, late_rank=5)["name"] == "clusterstraggler_gpu_n8_l5_Simple"
    assert pick("allreduce", 8, size, True, late_ranks=[7, 6, 5, 4])["name"] == \
        "clusterstraggler_node_n8_node1_Simple"
    assert pick("allreduce", 8, size, True, late_ranks=[0, 1, 2, 3])["name"] == \
        "clusterstraggler_node_n8_node0_Simple"
    assert pick("allreduce", 8, size, True, late_ranks=[4])["name"] == "clusterstraggler_gpu_n8_l4_Simple"
    for other in ([4, 5], [3, 4, 5, 6], [0, 1, 2, 3, 4]):  # no form for these: the punctual plan
        assert pick("allreduce", 8, size, True, late_ranks=other)["name"] == "ring_n8"
    assert pick("allreduce", 8, size, True)["name"] == "ring_n8"
    monkeypatch.setenv("COLLSYNTH_STRAGGLER", "4-7")
    assert pick("allreduce", 8, size, True)["name"] == "clusterstraggler_node_n8_node1_Simple"
    assert selector.late_ranks_from_env() == [4, 5, 6, 7] and selector.late_rank_from_env() is None
    monkeypatch.setenv("COLLSYNTH_STRAGGLER", "0-2,3")
    assert pick("allreduce", 8, size, True)["name"] == "clusterstraggler_node_n8_node0_Simple"
    monkeypatch.setenv("COLLSYNTH_STRAGGLER", "2")
    assert pick("allreduce", 8, size, True)["name"] == "clusterstraggler_gpu_n8_l2_Simple"
    assert pick("allreduce", 8, size, True, late_ranks=[])["name"] == "ring_n8"  # given beats the environment
    for bad in ("x", "3-1", "-1", "none", "4-", ""):
        monkeypatch.setenv("COLLSYNTH_STRAGGLER", bad)
        assert selector.late_ranks_from_env() == [], bad
        assert pick("allreduce", 8, size, True)["name"] == "ring_n8"


DRIVER = r"""
#include "collsynth_mscclpp_selector.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
// argv: bytes, then groups "r,r,r" (or "-" for none, "env" for the environment's set)
int main(int argc, char** argv) {
  unsigned long long bytes = std::strtoull(argv[1], nullptr, 10);
  for (int i = 2; i < argc; i++) {
    int late[64];
    int n = 0;
    if (!std::strcmp(argv[i], "env")) {
      n = collsynth_mscclpp::late_set(late);
    } else if (std::strcmp(argv[i], "-")) {
      for (char* p = argv[i]; *p;) { late[n++] = (int)std::strtol(p, &p, 10); if (*p == ',') p++; }
      collsynth_mscclpp::set_late(late, n);
      n = collsynth_mscclpp::late_set(late);
      collsynth_mscclpp::set_late(nullptr, -1);
    }
    const collsynth_mscclpp::PlanEntry* e = collsynth_mscclpp::select_plan("allreduce", 8, 0, bytes, true, late,
                                                                           n < 0 ? 0 : n);
    std::printf("%s\n", e ? e->name : "-");
  }
  return 0;
}
"""


def test_cpp_selector_agrees(selector, family_dir, tmp_path, monkeypatch):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    (tmp_path / "driver.cc").write_text(DRIVER)
    exe = tmp_path / "driver"
    r = subprocess.run([gxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-I", str(family_dir), "-o", str(exe),
                        str(tmp_path / "driver.cc"), str(family_dir / "collsynth_mscclpp_selector.cc")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    size = _size(selector)
    sets = [[], [5], [4, 5, 6, 7], [7, 6, 5, 4], [0, 1, 2, 3], [4, 5], [0, 1, 2, 3, 4, 5, 6, 7, 0]] + \
        [list(c) for c in itertools.combinations(range(8), 1)]
    args = ["-" if not s else ",".join(map(str, s)) for s in sets]
    monkeypatch.setenv("COLLSYNTH_STRAGGLER", "4-7")
    r = subprocess.run([str(exe), str(size), *args, "env"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    want = [selector.select_plan("allreduce", 8, size, True, late_ranks=s)["name"] for s in sets]
    want.append("clusterstraggler_node_n8_node1_Simple")
    assert r.stdout.split() == want
