"""backends/nccl/plugin.py: the generated MSCCL scheduler, compiled with gcc and driven by a stand-in executor.

tests/nccl_emu/sched_harness.c plays the MSCCL executor: it dlopen()s the scheduler, calls init,
selectAlgo for each query and teardown, and provides mscclLoadAlgo/mscclUnloadAlgo (loading fails on
request, to test the fallback to the next candidate).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "nccl_emu"))
import nccl_testlib as lib  # noqa: E402
from shared_paths import vectors  # noqa: E402

from collsynth.backends.msccl.emit import emit_xml  # noqa: E402
from collsynth.backends.nccl.plugin import (  # noqa: E402
    generate_msccl_scheduler,
    late_set_of,
    render_msccl_scheduler,
    straggler_of,
)
from collsynth.errors import CollsynthError  # noqa: E402
from collsynth.synth.registry import build_schedule  # noqa: E402

GCC = lib.gcc()
needs_gcc = pytest.mark.skipif(GCC is None, reason="gcc not found: the scheduler plugin is C")
VECTORS = vectors("msccl")
AR, RS, AG = 2, 3, 4  # mscclFunc_t
FLOAT, AVG = 7, 4


@pytest.fixture(scope="module")
def xml_dir(tmp_path_factory):
    """ring, StragglAR for every straggler (n = 4, 3 chunks per loop), and a size-limited direct, as collsynth
    emits them. Queries use counts divisible by 12 unless they test divisibility."""
    d = tmp_path_factory.mktemp("xml")
    for s in range(4):
        sched = build_schedule("stragglar", 4, straggler=s)
        (d / f"stragglar_n4_straggler{s}_Simple.xml").write_text(emit_xml(sched))
    (d / "ring_n4_Simple.xml").write_text(emit_xml(build_schedule("ring", 4)))
    (d / "direct_n4_Simple.xml").write_text(emit_xml(build_schedule("direct", 4), max_bytes=4096, outofplace=False))
    (d / "ring_rs_n4_Simple.xml").write_text(emit_xml(build_schedule("ring", 4, "reducescatter")))
    (d / "README.md").write_text("not an algorithm: ignored\n")
    return d


@pytest.fixture(scope="module")
def plugin(xml_dir, tmp_path_factory):
    """The generated scheduler built with gcc -Wall -Werror -shared -fPIC, and the harness."""
    if GCC is None:
        pytest.skip("gcc not found")
    out = tmp_path_factory.mktemp("sched") / "plugin"
    generate_msccl_scheduler(str(xml_dir), str(out))
    so = out / "libmsccl-scheduler.so"
    subprocess.run([GCC, "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-fvisibility=hidden",
                    str(out / "collsynth_msccl_scheduler.c"), "-o", str(so), "-ldl", "-lpthread"],
                   check=True, capture_output=True)
    harness = out / "harness"
    subprocess.run([GCC, "-Wall", "-Werror", "-rdynamic", f"-I{out}", os.path.join(lib.HERE, "sched_harness.c"),
                    "-o", str(harness), "-ldl"], check=True, capture_output=True)
    return out


def _build(xml_dir, out):
    """The scheduler for ``xml_dir`` built with gcc -Wall -Werror -shared -fPIC, and the harness, in ``out``."""
    generate_msccl_scheduler(str(xml_dir), str(out))
    so = out / "libmsccl-scheduler.so"
    subprocess.run([GCC, "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-fvisibility=hidden",
                    str(out / "collsynth_msccl_scheduler.c"), "-o", str(so), "-ldl", "-lpthread"],
                   check=True, capture_output=True)
    subprocess.run([GCC, "-Wall", "-Werror", "-rdynamic", f"-I{out}", os.path.join(lib.HERE, "sched_harness.c"),
                    "-o", str(out / "harness"), "-ldl"], check=True, capture_output=True)
    return out


def _ask(plugin, queries, env=None, cwd=None):
    """Run the harness; returns the chosen file per query ('-' = NCCL fallback), the summary line, stderr."""
    text = "".join(" ".join(map(str, q)) + "\n" for q in queries)
    clean = {k: v for k, v in os.environ.items()
             if k not in ("COLLSYNTH_STRAGGLER", "COLLSYNTH_MSCCL_ALGO_DIR", "CS_FAIL_LOAD", "CS_SET_LATE")}
    r = subprocess.run([str(plugin / "harness"), str(plugin / "libmsccl-scheduler.so")], input=text,
                       capture_output=True, text=True, env={**clean, **(env or {})}, timeout=60, cwd=cwd)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "name collsynth"
    return lines[1:-1], lines[-1], r.stderr


def q(func=AR, nranks=4, rank=0, count=12288, dtype=FLOAT, op=0, inplace=1, straggler=-2):
    return (func, nranks, rank, count, dtype, op, inplace, straggler)


# ---------------------------------------------------------------------------------------------- selection
@needs_gcc
def test_exports_the_scheduler_symbol(plugin):
    nm = subprocess.run(["nm", "-D", "--defined-only", str(plugin / "libmsccl-scheduler.so")], capture_output=True,
                        text=True).stdout
    exported = {line.split()[-1] for line in nm.splitlines()}
    assert {"mscclScheduler", "collsynth_msccl_set_straggler", "collsynth_msccl_set_late"} <= exported
    assert not any(s.startswith("cs") for s in exported)  # helpers stay hidden


@needs_gcc
def test_selects_by_collective_size_mode_and_rank_count(plugin):
    got, summary, _ = _ask(plugin, [
        q(count=256),                         # 1 KiB in place: direct (first in file order, <= 4096 bytes)
        q(count=1024),                        # exactly 4096 bytes: maxBytes is inclusive
        q(count=1028),                        # 4112 bytes: too big for direct -> ring
        q(count=256, inplace=0),              # direct is in-place only -> ring
        q(count=1030),                        # too big for direct, not divisible by the ring's 4 chunks -> NCCL
        q(nranks=8, count=1024),              # no 8-GPU file -> NCCL
        q(count=1024, op=AVG),                # avg is not an MSCCL op -> NCCL
        q(count=1024, dtype=42),              # unknown type -> NCCL
        q(func=RS, count=1024, inplace=0),    # reducescatter
        q(func=AG, count=1024),               # no allgather file -> NCCL
        q(count=0),                           # empty call -> NCCL
    ])
    assert got == ["direct_n4_Simple.xml", "direct_n4_Simple.xml", "ring_n4_Simple.xml", "ring_n4_Simple.xml", "-",
                   "-", "-", "-", "ring_rs_n4_Simple.xml", "-", "-"]
    assert summary == "loads 3 unloads 3 teardown 0"  # each file loaded once for rank 0, all unloaded


@needs_gcc
def test_reducescatter_in_place_is_recognised(plugin):
    # in place: recvbuff == sendbuff + rank*count*4 (the harness sets it so)
    got, _, _ = _ask(plugin, [q(func=RS, rank=2, count=1024, inplace=1)])
    assert got == ["ring_rs_n4_Simple.xml"]


@needs_gcc
def test_straggler_from_the_environment(plugin):
    for late in range(4):
        got, _, _ = _ask(plugin, [q(count=12288), q(count=240)], env={"COLLSYNTH_STRAGGLER": str(late)})
        assert got == [f"stragglar_n4_straggler{late}_Simple.xml"] * 2  # StragglAR first when its rank is late
    got, _, _ = _ask(plugin, [q(count=12288)], env={"COLLSYNTH_STRAGGLER": "7"})
    assert got == ["ring_n4_Simple.xml"]  # no family member for rank 7: the general files
    got, _, _ = _ask(plugin, [q(count=12288)], env={"COLLSYNTH_STRAGGLER": "oops"})
    assert got == ["ring_n4_Simple.xml"]


@needs_gcc
def test_straggler_set_at_run_time(plugin):
    got, summary, _ = _ask(plugin, [q(straggler=1), q(straggler=3), q(straggler=-1), q(straggler=1),
                                    q(rank=2, straggler=1)])
    assert got == ["stragglar_n4_straggler1_Simple.xml", "stragglar_n4_straggler3_Simple.xml", "ring_n4_Simple.xml",
                   "stragglar_n4_straggler1_Simple.xml", "stragglar_n4_straggler1_Simple.xml"]
    assert summary == "loads 4 unloads 4 teardown 0"  # straggler1 loaded once per rank (0 and 2)


@needs_gcc
def test_a_file_that_fails_to_load_falls_back_to_the_next(plugin):
    got, summary, err = _ask(plugin, [q(count=256), q(count=256)], env={"CS_FAIL_LOAD": "direct"})
    assert got == ["ring_n4_Simple.xml"] * 2
    assert "cannot load" in err and err.count("cannot load") == 1  # not retried
    assert summary == "loads 1 unloads 1 teardown 0"


@needs_gcc
def test_algorithm_folder_from_the_environment(plugin, tmp_path):
    alt = tmp_path / "alt"
    shutil.copytree(plugin / "msccl-algorithms", alt)
    os.remove(alt / "ring_n4_Simple.xml")
    got, _, err = _ask(plugin, [q(count=12288)], env={"COLLSYNTH_MSCCL_ALGO_DIR": str(alt)})
    assert got == ["-"] and "ring_n4_Simple.xml" in err  # the missing file cannot be loaded


@needs_gcc
def test_folder_next_to_the_library_is_found_from_another_directory(plugin, tmp_path):
    got, _, _ = _ask(plugin, [q(count=12288)], cwd=str(tmp_path))
    assert got == ["ring_n4_Simple.xml"]


@needs_gcc
def test_compiles_with_nccl_types_from_nccl_h(plugin, tmp_path):
    home, inc = lib.nccl_home(), lib.cuda_include()
    if home is None or inc is None:
        pytest.skip("nccl.h (pip install nvidia-nccl-cu13) or the CUDA headers not found")
    r = subprocess.run([GCC, "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-DCOLLSYNTH_USE_NCCL_H",
                        f"-I{home}/include", f"-I{inc}", str(plugin / "collsynth_msccl_scheduler.c"),
                        "-o", str(tmp_path / "x.so"), "-ldl", "-lpthread"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@needs_gcc
def test_makefile_builds(plugin, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(plugin, d)
    os.remove(d / "libmsccl-scheduler.so")
    r = subprocess.run(["make", "-C", str(d), f"CC={GCC}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (d / "libmsccl-scheduler.so").exists()


# ---------------------------------------------------------------------------------------------- generation
def test_files_and_copies(xml_dir, tmp_path):
    paths = generate_msccl_scheduler(str(xml_dir), str(tmp_path / "o"))
    rel = sorted(os.path.relpath(p, tmp_path / "o") for p in paths)
    assert "collsynth_msccl_scheduler.c" in rel and "msccl_scheduler_interface.h" in rel and "Makefile" in rel
    xmls = [r for r in rel if r.endswith(".xml")]
    assert len(xmls) == 7 and all(r.startswith("msccl-algorithms/") for r in xmls)
    for r in xmls:
        assert (tmp_path / "o" / r).read_bytes() == (xml_dir / os.path.basename(r)).read_bytes()
    assert render_msccl_scheduler(str(xml_dir)) == render_msccl_scheduler(str(xml_dir))


def test_straggler_names():
    assert straggler_of("stragglar_n8_straggler5_LL128.xml", "stragglar_n8_straggler5") == 5
    assert straggler_of("a.xml", "stragglar_n16_s13") == 13
    assert straggler_of("ring_n8_Simple.xml", "ring_n8") == -1


def test_explicit_straggler_map(xml_dir):
    c = render_msccl_scheduler(str(xml_dir), stragglers={"ring_n4_Simple.xml": 2})["collsynth_msccl_scheduler.c"]
    assert '{"ring_n4_Simple.xml", mscclFuncAllReduce, 4, 4, 0ULL, 0ULL, 1, 1, 2,' in c
    with pytest.raises(CollsynthError, match="outside 0..3"):
        render_msccl_scheduler(str(xml_dir), stragglers={"ring_n4_Simple.xml": 4})
    with pytest.raises(CollsynthError, match="not an .xml file"):
        render_msccl_scheduler(str(xml_dir), stragglers={"nope.xml": 1})


def test_third_party_files_are_accepted(tmp_path):
    d = tmp_path / "v"
    d.mkdir()
    for f in ("msccl-tools-azure_allreduce_ring_simple_8gpu_1inst.xml", "msccl-scheduler_ndv4_ag-1m.xml"):
        if not os.path.exists(os.path.join(VECTORS, f)):
            pytest.skip("shared MSCCL vectors not present")
        shutil.copy(os.path.join(VECTORS, f), d / f)
    c = render_msccl_scheduler(str(d))["collsynth_msccl_scheduler.c"]
    assert "mscclFuncAllGather, 8, 32, 1048576ULL, 2097151ULL, 1, 0, -1, 0, 0, 0}" in c


# ---------------------------------------------------------------------------------------------- refusals
def test_refusals(xml_dir, tmp_path):
    with pytest.raises(CollsynthError, match="not a directory"):
        generate_msccl_scheduler(str(tmp_path / "missing"), str(tmp_path / "o"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CollsynthError, match="no .xml files"):
        generate_msccl_scheduler(str(tmp_path / "empty"), str(tmp_path / "o"))
    out = tmp_path / "full"
    out.mkdir()
    (out / "x").write_text("")
    with pytest.raises(CollsynthError, match="not empty.*--force"):
        generate_msccl_scheduler(str(xml_dir), str(out))
    assert len(generate_msccl_scheduler(str(xml_dir), str(out), force=True)) == 10


def _dir_with(tmp_path, name, text):
    d = tmp_path / name
    d.mkdir()
    (d / "a.xml").write_text(text)
    return d


def test_malformed_and_wrong_files_are_refused(tmp_path):
    good = emit_xml(build_schedule("ring", 4))
    with pytest.raises(CollsynthError, match=r"a\.xml:\d+.*TAB"):
        generate_msccl_scheduler(str(_dir_with(tmp_path, "tab", good.replace("\n  <gpu", "\n\t<gpu", 1))),
                                 str(tmp_path / "o1"))
    # a receive that never gets its data: the checker reports it, nothing is written
    broken = good.replace('type="rrc"', 'type="r"', 1) if 'type="rrc"' in good else good.replace('type="rrs"',
                                                                                                 'type="rcs"', 1)
    assert broken != good
    with pytest.raises(CollsynthError, match=r"a\.xml"):
        generate_msccl_scheduler(str(_dir_with(tmp_path, "bad", broken)), str(tmp_path / "o2"))
    assert not (tmp_path / "o2").exists()
    legacy = emit_xml(build_schedule("ring", 4), dialect="legacy")
    with pytest.raises(CollsynthError, match="legacy"):
        generate_msccl_scheduler(str(_dir_with(tmp_path, "leg", legacy)), str(tmp_path / "o3"))
    d = tmp_path / "names"
    d.mkdir()
    (d / 'we"ird.xml').write_text(good)
    with pytest.raises(CollsynthError, match="rename the file"):
        generate_msccl_scheduler(str(d), str(tmp_path / "o4"))


def test_straggler_from_the_phase_comment(tmp_path):
    """A StragglAR file renamed beyond recognition still maps to its late rank through the phase comment."""
    d = tmp_path / "p"
    d.mkdir()
    text = emit_xml(build_schedule("stragglar", 4, straggler=2), name="x")
    if "collsynth phases:" not in text:
        pytest.skip("this emitter writes no phase comment")
    (d / "mystery.xml").write_text(text)
    (d / "plain.xml").write_text(emit_xml(build_schedule("ring", 4), name="stragglar_fake_s1"))
    c = render_msccl_scheduler(str(d))["collsynth_msccl_scheduler.c"]
    assert '{"mystery.xml", mscclFuncAllReduce, 4, 3, 0ULL, 0ULL, 1, 1, 2,' in c
    assert '{"plain.xml", mscclFuncAllReduce, 4, 4, 0ULL, 0ULL, 1, 1, -1,' in c  # "phases: none" wins over the name


# ---------------------------------------------------------------------------------------------- cluster forms
CLUSTER_FILES = {"cs_gpu5.xml": {5: 1.0}, "cs_gpu1.xml": {1: 1.0}, "cs_node0.xml": {r: 1.0 for r in range(4)},
                 "cs_node1.xml": {r: 1.0 for r in range(4, 8)}}


@pytest.fixture(scope="module")
def cluster_plugin(tmp_path_factory):
    """clusterstraggler on 2 nodes x 4 (late GPU 5, late GPU 1, late node 0, late node 1; files renamed so
    only the phase comment names the late set) and ring, all for 8 ranks and 8 chunks per loop."""
    from collsynth.synth.topology import cluster_topology

    if GCC is None:
        pytest.skip("gcc not found")
    d = tmp_path_factory.mktemp("cxml")
    topo = cluster_topology(2, 4)
    for f, arrivals in CLUSTER_FILES.items():
        sched = build_schedule("clusterstraggler", 8, topology=topo, arrivals=arrivals, pipeline=2)
        (d / f).write_text(emit_xml(sched, name=f[:-4]))
    (d / "ring_n8.xml").write_text(emit_xml(build_schedule("ring", 8)))
    return _build(d, tmp_path_factory.mktemp("csched") / "plugin")


@needs_gcc
def test_cluster_form_follows_who_is_late(cluster_plugin):
    for late, want in (("5", "cs_gpu5.xml"), ("1", "cs_gpu1.xml"), ("4-7", "cs_node1.xml"),
                       ("0,1,2,3", "cs_node0.xml"), ("3,0-2", "cs_node0.xml"), ("4-6", "ring_n8.xml"),
                       ("6", "ring_n8.xml"), ("0-7", "ring_n8.xml"), ("4-7x", "ring_n8.xml"), ("none", "ring_n8.xml")):
        got, _, _ = _ask(cluster_plugin, [q(nranks=8, count=8192)], env={"COLLSYNTH_STRAGGLER": late})
        assert got == [want], late
    for late, want in (("7,6,5,4", "cs_node1.xml"), ("5,5", "cs_gpu5.xml"), ("0,1,2,3,4", "ring_n8.xml")):
        got, _, _ = _ask(cluster_plugin, [q(nranks=8, count=8192), q(nranks=8, rank=3, count=8192)],
                         env={"CS_SET_LATE": late, "COLLSYNTH_STRAGGLER": "1"})  # the call wins over the env
        assert got == [want] * 2, late
    got, _, _ = _ask(cluster_plugin, [q(nranks=8, count=8192, straggler=1), q(nranks=8, count=8192, straggler=-3)],
                     env={"CS_SET_LATE": "4,5,6,7", "COLLSYNTH_STRAGGLER": "0-3"})
    assert got == ["cs_gpu1.xml", "cs_node0.xml"]  # set_straggler replaces the set; below -1 restores the env


def test_cluster_late_sets_from_the_phase_comment(cluster_plugin):
    c = (cluster_plugin / "collsynth_msccl_scheduler.c").read_text()
    assert '{"cs_node1.xml", mscclFuncAllReduce, 8, 8, 0ULL, 0ULL, 1, 1, 4, 4,' in c
    assert '{"cs_gpu5.xml", mscclFuncAllReduce, 8, 8, 0ULL, 0ULL, 1, 1, 5, 1,' in c
    assert '{"ring_n8.xml", mscclFuncAllReduce, 8, 8, 0ULL, 0ULL, 1, 1, -1, 0,' in c
    text = (cluster_plugin / "msccl-algorithms" / "cs_node0.xml").read_text()
    assert late_set_of("x.xml", "x", [text.split("<!-- ")[1].split(" -->")[0]], 8) == (0, 1, 2, 3)
    assert late_set_of("clusterstraggler_gpu_n16_l9.xml", None) == (9,)


def test_explicit_late_set(xml_dir):
    c = render_msccl_scheduler(str(xml_dir), stragglers={"ring_n4_Simple.xml": [3, 1]})["collsynth_msccl_scheduler.c"]
    assert '{"ring_n4_Simple.xml", mscclFuncAllReduce, 4, 4, 0ULL, 0ULL, 1, 1, 1, 2,' in c
    with pytest.raises(CollsynthError, match="a rank or a list of ranks"):
        render_msccl_scheduler(str(xml_dir), stragglers={"ring_n4_Simple.xml": "1"})
    with pytest.raises(CollsynthError, match="outside 0..3"):
        render_msccl_scheduler(str(xml_dir), stragglers={"ring_n4_Simple.xml": [0, 9]})
