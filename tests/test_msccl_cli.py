"""CLI for MSCCL XML: `emit`, `synth --format msccl-xml`, `verify FILE.xml` exit codes, `simulate FILE.xml`,
and the emit format registry."""

from __future__ import annotations

import json

import pytest
from shared_paths import vectors

from collsynth.cli import main

VECTOR = vectors("msccl", "msccl-tools-azure_allreduce_ring_simple_4gpu_1inst.xml")


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def s8(tmp_path, capsys):
    path = tmp_path / "s8.json"
    code, _, _ = run(capsys, "synth", "-a", "stragglar", "-n", "8", "--straggler", "3", "-o", path)
    assert code == 0
    return path


def test_emit_verify_simulate(capsys, tmp_path, s8):
    xml = tmp_path / "s8.xml"
    code, _, err = run(capsys, "emit", s8, "--format", "msccl-xml", "--proto", "LL128", "-o", xml)
    assert code == 0 and "wrote" in err
    assert 'proto="LL128"' in xml.read_text()
    code, out, _ = run(capsys, "verify", xml)
    assert code == 0 and out.startswith("OK allreduce on 8 GPUs")
    model = ["--size", "1GiB", "--alpha", "3us", "--bandwidth", "450GiB/s", "--arrival", "3=5ms", "--json"]
    code, out, _ = run(capsys, "simulate", xml, *model)
    assert code == 0
    from_xml = json.loads(out)["completion_s"]
    code, out, _ = run(capsys, "simulate", s8, *model)
    from_json = json.loads(out)["completion_s"]
    assert abs(from_xml - from_json) <= 0.01 * from_json


def test_synth_format_msccl_xml(capsys, tmp_path):
    xml = tmp_path / "r.xml"
    code, _, _ = run(capsys, "synth", "-a", "ring", "-n", "4", "--format", "msccl-xml", "--dialect", "legacy",
                     "--no-inplace", "-o", xml)
    assert code == 0
    text = xml.read_text()
    assert 'inplace="0"' in text and "minBytes" not in text
    assert run(capsys, "verify", xml)[0] == 0


def test_verify_exit_codes(capsys, tmp_path):
    assert run(capsys, "verify", VECTOR)[0] == 0
    with open(VECTOR) as f:
        text = f.read()
    tab = tmp_path / "tab.xml"
    tab.write_text(text.replace("    <tb", "\t<tb", 1))
    code, out, err = run(capsys, "verify", tab)
    assert code == 2 and out == "" and err.count("\n") == 1 and "TAB" in err and "tab.xml:3" in err
    wrong = tmp_path / "wrong.xml"
    # gpu 0's thread block waits on a step that never publishes
    wrong.write_text(text.replace('<step s="1" type="rrs" srcbuf="i" srcoff="3" dstbuf="i" dstoff="3" cnt="1" '
                                  'depid="-1" deps="-1"', '<step s="1" type="rrs" srcbuf="i" srcoff="3" dstbuf="i" '
                                  'dstoff="3" cnt="1" depid="0" deps="0"', 1))
    code, out, _ = run(capsys, "verify", wrong)
    assert code == 1 and out.startswith("FAIL gpu 0 tb 0 step 1") and out.count("\n") == 1
    code, out, _ = run(capsys, "verify", wrong, "--json")
    assert code == 1 and json.loads(out)["ok"] is False


def test_emit_bad_input_writes_nothing(capsys, tmp_path, s8):
    out = tmp_path / "o.xml"
    bad = tmp_path / "bad.json"
    d = json.loads(s8.read_text())
    d["transfers"]["reduce"][0] = 0  # a reduce turned into a copy: loses a contribution
    bad.write_text(json.dumps(d))
    code, _, err = run(capsys, "emit", bad, "--format", "msccl-xml", "-o", out)
    assert code == 2 and "collsynth: error:" in err and not out.exists()
    code, _, err = run(capsys, "emit", s8, "--format", "nope", "-o", out)
    assert code == 2 and "unknown --format 'nope'" in err and not out.exists()
    code, _, err = run(capsys, "emit", VECTOR, "--format", "msccl-xml", "-o", out)
    assert code == 2 and "collsynth verify" in err
    code, _, err = run(capsys, "emit", s8, "--format", "msccl-xml", "--instances", "x", "-o", out)
    assert code == 2 and "--instances" in err and not out.exists()
    code, _, err = run(capsys, "emit", s8, "--format", "msccl-xml", "--min-bytes", "-3", "-o", out)
    assert code == 2 and not out.exists()


def test_simulate_refuses_a_wrong_xml(capsys, tmp_path):
    with open(VECTOR) as f:
        text = f.read().replace('type="rrcs"', 'type="rcs"', 1)
    p = tmp_path / "w.xml"
    p.write_text(text)
    code, _, err = run(capsys, "simulate", p, "--size", "1MiB", "--alpha", "1us", "--bandwidth", "100GB/s")
    assert code == 2 and "does not verify" in err
