"""The schedule library never drifts from the code: regenerating gives the committed files byte for byte,
every choice folder holds only XML algorithm files, and the manifest's hashes match."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from collsynth.backends.libraries import MANAGED
from collsynth.backends.msccl import check_xml_file, xml_to_schedule
from collsynth.backends.msccl.library import compare_folder, default_dir, write
from collsynth.cli import main

LIB = default_dir()


def _tree(root):
    out = {}
    for d, _, names in os.walk(root):
        for nm in names:
            p = os.path.join(d, nm)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root).replace(os.sep, "/")] = f.read()
    return out


@pytest.fixture(scope="module")
def files():
    """The committed library (test_regenerate_matches_the_committed_library proves it is current)."""
    return {rel: data for rel, data in _tree(LIB).items() if rel.split("/")[0] in MANAGED}


def test_regenerate_matches_the_committed_library(files, tmp_path):
    assert main(["schedules", "regenerate", "--out", str(tmp_path / "lib")]) == 0
    fresh = _tree(tmp_path / "lib")
    stale = sorted(set(fresh) ^ set(files)) + sorted(k for k in fresh if k in files and fresh[k] != files[k])
    assert stale == [], "schedules/ is stale: run `collsynth schedules regenerate`"


def test_check_reports_drift(tmp_path, capsys, monkeypatch):
    from collsynth.commands import emit_cmds

    small = {"MANIFEST.json": b'{"entries": []}\n', "msccl/ring-Simple/a.xml": b"<algo/>\n"}
    empty = {"msccl": {"entries": []}, "mscclpp": {"entries": []}}
    monkeypatch.setattr(emit_cmds, "build_files", lambda: (small, empty))
    out = str(tmp_path / "lib")
    assert main(["schedules", "regenerate", "--out", out]) == 0
    assert main(["schedules", "regenerate", "--out", out, "--check"]) == 0
    (tmp_path / "lib" / "msccl" / "ring-Simple" / "stray.xml").write_text("<algo/>")
    (tmp_path / "lib" / "MANIFEST.json").write_text("{}")
    assert main(["schedules", "regenerate", "--out", out, "--check"]) == 1
    text = capsys.readouterr().out
    assert "extra msccl/ring-Simple/stray.xml" in text and "changed MANIFEST.json" in text
    assert compare_folder(out, small) == ["changed MANIFEST.json", "extra msccl/ring-Simple/stray.xml"]


def test_layout_and_manifest(files):
    manifest = json.loads(files["MANIFEST.json"])
    entries = manifest["entries"]
    assert {(e["algorithm"], e["n"], e["protocol"]) for e in entries if e["straggler"] is None} == {
        (a, n, p) for a in ("ring", "rhd", "direct") for n in (4, 8, 16) for p in ("Simple", "LL128")}
    assert {(e["n"], e["straggler"]) for e in entries if e["algorithm"] == "stragglar"} == {
        (n, r) for n in (4, 8, 16) for r in range(n)}
    for e in entries:
        assert hashlib.sha256(files[e["xml"]]).hexdigest() == e["xml_sha256"]
        assert hashlib.sha256(files[e["json"]]).hexdigest() == e["json_sha256"]
        assert e["nchunksperloop"] & (e["nchunksperloop"] - 1) == 0  # power-of-two buffers are eligible
    folders = {}
    for rel in files:
        if rel.startswith("msccl/"):
            folder = rel.rsplit("/", 1)[0]
            assert rel.endswith(".xml")
            folders.setdefault(folder, []).append(rel)
    for folder, members in folders.items():
        # one algorithm per GPU count in a folder: the executor takes the first match, so no two may compete
        ngpus = [json.loads(json.dumps(e["n"])) for e in entries if e["choice"] == folder]
        assert len(ngpus) == len(set(ngpus)) == len(members)


@pytest.mark.parametrize("rel", ["msccl/stragglar-straggler5-LL128/stragglar_n16_straggler5_LL128.xml",
                                 "msccl/direct-Simple/direct_n16_Simple.xml",
                                 "msccl/rhd-LL128/rhd_n8_LL128.xml"])
def test_library_files_verify(rel):
    path = os.path.join(LIB, rel)
    assert check_xml_file(path).ok
    assert xml_to_schedule(path).nranks == int(rel.split("_n")[1].split("_")[0])


def test_list(capsys):
    assert main(["schedules", "list"]) == 0
    out = capsys.readouterr().out
    assert "stragglar" in out and os.path.join(LIB, "msccl", "stragglar-straggler3-Simple") in out
    assert main(["schedules", "list", "--dir", "/nonexistent"]) == 2


def test_write_replaces_only_managed_paths(tmp_path):
    keep = tmp_path / "README.txt"
    keep.write_text("mine")
    write(str(tmp_path), {"MANIFEST.json": b"{}\n", "msccl/x/a.xml": b"<a/>\n"})
    write(str(tmp_path), {"MANIFEST.json": b"{}\n", "msccl/y/b.xml": b"<b/>\n"})
    assert keep.read_text() == "mine"
    assert not (tmp_path / "msccl" / "x").exists() and (tmp_path / "msccl" / "y" / "b.xml").exists()
