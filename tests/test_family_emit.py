"""`collsynth emit FAMILY_FOLDER --format msccl-xml|mscclpp-plan -o FOLDER` (backends.emit_family): every member
of a `synth ... --straggler all` folder, each verified and emitted as `emit` writes it alone, into a folder the
MSCCL scheduler plugin or the MSCCL++ selector reads; a changed member, a malformed manifest or a request too
large is refused in one line (exit 2) with nothing written."""

from __future__ import annotations

import json
import os

import pytest

from collsynth.backends import emit, emit_family, family_file_name
from collsynth.backends.cost import shape_of, text_bytes
from collsynth.backends.mscclpp.selector import selector_manifest
from collsynth.cli import main
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.stragglar.family import read_manifest
from collsynth.synth.ir import load_schedule
from collsynth.synth.registry import build_schedule


@pytest.fixture(scope="module")
def cluster_family(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("fam") / "cluster")
    assert main(["synth", "-a", "clusterstraggler", "-n", "16", "-t", "h100-cluster", "--size", "64MiB",
                 "--straggler", "all", "-o", out]) == 0
    return out


@pytest.fixture()
def small_family(tmp_path) -> str:
    out = str(tmp_path / "s4")
    assert main(["synth", "-a", "stragglar", "-n", "4", "--straggler", "all", "-o", out]) == 0
    return out


def test_cluster_family_as_plans_reaches_the_selector_with_its_late_sets(cluster_family, tmp_path, capsys):
    plans = str(tmp_path / "plans")
    assert main(["emit", cluster_family, "--format", "mscclpp-plan", "-o", plans]) == 0
    assert "next: `collsynth emit --format mscclpp-selector" in capsys.readouterr().err
    manifest = read_manifest(cluster_family)
    assert sorted(os.listdir(plans)) == sorted(e["file"] for e in manifest["schedules"])
    for e in manifest["schedules"][-1:]:  # byte for byte what `emit` writes for the member alone (a late node)
        alone = emit(load_schedule(os.path.join(cluster_family, e["file"])), "mscclpp-plan")
        with open(os.path.join(plans, e["file"]), encoding="utf-8") as fh:
            assert fh.read() == alone
    late = {e["file"]: e["late"] for e in selector_manifest(plans)["entries"]}
    assert late == {e["file"]: e["late"] for e in manifest["schedules"]}
    assert len(late) == 16 + 2 and late["late_8-15.json"] == list(range(8, 16))


def test_cluster_family_as_xml_builds_the_scheduler_plugin(cluster_family, tmp_path):
    xml = str(tmp_path / "xml")
    assert main(["emit", cluster_family, "-f", "msccl-xml", "--proto", "LL128", "-o", xml]) == 0
    names = sorted(os.listdir(xml))
    assert len(names) == 18 and all(n.endswith(".xml") for n in names) and "late_0-7.xml" in names
    assert main(["emit", "--format", "msccl-scheduler", xml, "-o", str(tmp_path / "plugin")]) == 0
    alone = emit(load_schedule(os.path.join(cluster_family, "late_5.json")), "msccl-xml", proto="LL128")
    with open(os.path.join(xml, "late_5.xml"), encoding="utf-8") as fh:
        assert fh.read() == alone


def test_stragglar_family_names(small_family):
    out = emit_family(small_family, "msccl-xml")
    assert list(out) == [f"stragglar_n4_s{r}.xml" for r in range(4)]
    assert family_file_name("late_5.json", "mscclpp-plan") == "late_5.json"


def _refused(argv, capsys, *words):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err


def test_a_member_changed_after_the_family_was_written_is_refused(small_family, tmp_path, capsys):
    member = os.path.join(small_family, "stragglar_n4_s2.json")
    with open(member, encoding="utf-8") as fh:
        s = json.loads(fh.read())
    s["name"] = "edited"
    with open(member, "w", encoding="utf-8") as fh:
        json.dump(s, fh)
    out = tmp_path / "out"
    _refused(["emit", small_family, "-f", "msccl-xml", "-o", str(out)], capsys, "stragglar_n4_s2.json",
             "sha256", "write the family again")
    assert not out.exists()


@pytest.mark.parametrize("manifest, words", [
    ("{", ("not valid JSON",)),
    ('{"algorithm": "stragglar", "schedules": []}', ("not a collsynth family manifest",)),
    ('{"algorithm": "stragglar", "schedules": [{"file": "../x.json", "sha256": "0"}]}', ("no path",)),
    ('{"algorithm": "stragglar", "schedules": [{"file": "a.json", "sha256": "0"}, {"file": "a.json", "sha256": "0"}]}',
     ("listed twice",)),
    ('{"algorithm": "stragglar", "schedules": [{"file": "gone.json", "sha256": "0"}]}', ("gone.json",)),
])
def test_malformed_manifests(small_family, tmp_path, capsys, manifest, words):
    with open(os.path.join(small_family, "manifest.json"), "w", encoding="utf-8") as fh:
        fh.write(manifest)
    out = tmp_path / "out"
    _refused(["emit", small_family, "-f", "mscclpp-plan", "-o", str(out)], capsys, *words)
    assert not out.exists()


def test_requests_that_cannot_be_a_family_emit(small_family, tmp_path, capsys):
    _refused(["emit", str(tmp_path), "-f", "msccl-xml", "-o", str(tmp_path / "o")], capsys,
             "is a directory without manifest.json")
    _refused(["emit", small_family, "-f", "nccl-cuda", "-o", str(tmp_path / "o")], capsys,
             "--format msccl-xml or mscclpp-plan")
    _refused(["emit", small_family, "-f", "msccl-xml", "--name", "x", "-o", str(tmp_path / "o")], capsys, "--name")
    _refused(["emit", small_family, "-f", "msccl-xml"], capsys, "-o FOLDER")
    _refused(["emit", small_family, "-f", "msccl-xml", "-o", small_family, "--force"], capsys, "is the input folder")
    with pytest.raises(CollsynthError, match="does not take a family folder"):
        emit_family(small_family, "mscclpp-selector")
    with pytest.raises(CollsynthError, match="takes no 'dtypes' option"):
        emit_family(small_family, "msccl-xml", dtypes="float")
    assert not (tmp_path / "o").exists()
    assert sorted(os.listdir(small_family)) == ["manifest.json"] + [f"stragglar_n4_s{r}.json" for r in range(4)]


def test_the_work_of_the_whole_family_is_estimated_first(small_family, tmp_path, capsys):
    out = tmp_path / "o"
    _refused(["--max-time", "0.03s", "emit", small_family, "-f", "mscclpp-plan", "-o", str(out)], capsys,
             "emitting the 4 schedules of", "emit the members you need one at a time")
    _refused(["--max-memory", "100KiB", "emit", small_family, "-f", "msccl-xml", "-o", str(out)], capsys,
             "of memory")
    assert not out.exists()


@pytest.mark.parametrize("alg, n, kw", [("stragglar", 8, {}), ("ring", 5, {}),
                                        ("multiring", 16, {"topology": "h100-cluster"}),
                                        ("clusterstraggler", 16, {"topology": "h100-cluster", "arrivals": {3: 1.0},
                                                                  "size": 64 << 20})])
def test_the_text_estimate_bounds_the_text(alg, n, kw):
    """cost.text_bytes, what a family emit counts for each member's file held until the folder is written."""
    s = build_schedule(alg, n, **kw)
    for fmt, opts in (("msccl-xml", {}), ("msccl-xml", {"instances": 2}), ("mscclpp-plan", {})):
        assert len(emit(s, fmt, **opts).encode()) <= text_bytes(fmt, shape_of(s), opts)
