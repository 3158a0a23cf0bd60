"""`collsynth emit --format nccl-cuda` and `collsynth emit --format msccl-scheduler` (commands/emit_cmds.py)."""

from __future__ import annotations

import os

from collsynth.backends.msccl.emit import emit_xml
from collsynth.cli import main
from collsynth.synth.ir import ScheduleBuilder, save_schedule
from collsynth.synth.registry import build_schedule


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_emit_nccl_cuda(capsys, tmp_path):
    sched = tmp_path / "s8.json"
    save_schedule(build_schedule("stragglar", 8, straggler=2), str(sched))
    code, _, err = run(capsys, "emit", str(sched), "--format", "nccl-cuda", "-o", str(tmp_path / "out"))
    assert code == 0 and "wrote 4 file(s)" in err
    assert sorted(os.listdir(tmp_path / "out")) == ["Makefile", "bench_stragglar_n8_s2.cu", "stragglar_n8_s2.cu",
                                                     "stragglar_n8_s2.h"]
    code, _, err = run(capsys, "emit", str(sched), "--format", "nccl-cuda", "-o", str(tmp_path / "out"))
    assert code == 2 and "not empty" in err and "--force" in err and err.count("\n") == 1
    code, _, err = run(capsys, "emit", str(sched), "--format", "nccl-cuda", "-o", str(tmp_path / "out"), "--force",
                       "--name", "s8", "--dtypes", "bfloat16")
    assert code == 0 and (tmp_path / "out" / "s8.cu").exists()
    assert "ncclBfloat16" in (tmp_path / "out" / "s8.cu").read_text()


def test_emit_nccl_cuda_bad_input(capsys, tmp_path):
    sched = tmp_path / "r.json"
    save_schedule(build_schedule("ring", 4), str(sched))
    for extra, what in ((["--dtypes", "double"], "unsupported dtype 'double'"),
                        (["--name", "9lives"], "not a C identifier")):
        code, _, err = run(capsys, "emit", str(sched), "--format", "nccl-cuda", "-o", str(tmp_path / "x"), *extra)
        assert code == 2 and what in err and err.startswith("collsynth: error:") and err.count("\n") == 1
        assert not (tmp_path / "x").exists()
    code, _, err = run(capsys, "emit", str(sched), "--format", "nccl-cuda")
    assert code == 2 and "give -o FOLDER" in err
    b = ScheduleBuilder("reducescatter", 2, 2, owner=[1, 0])
    b.new_step(); b.add(0, 1, 0, 1, True); b.add(1, 0, 1, 1, True)
    save_schedule(b.build(), str(tmp_path / "rs.json"))
    code, _, err = run(capsys, "emit", str(tmp_path / "rs.json"), "--format", "nccl-cuda", "-o", str(tmp_path / "y"))
    assert code == 2 and "rank order" in err


def test_emit_msccl_scheduler(capsys, tmp_path):
    xml = tmp_path / "xml"
    xml.mkdir()
    for s in range(4):
        xml_text = emit_xml(build_schedule("stragglar", 4, straggler=s))
        (xml / f"stragglar_n4_straggler{s}_Simple.xml").write_text(xml_text)
    (xml / "ring_n4_Simple.xml").write_text(emit_xml(build_schedule("ring", 4)))
    code, _, err = run(capsys, "emit", "--format", "msccl-scheduler", str(xml), "-o", str(tmp_path / "plug"))
    assert code == 0 and "5 checked MSCCL XML file(s)" in err
    c = (tmp_path / "plug" / "collsynth_msccl_scheduler.c").read_text()
    assert '"stragglar_n4_straggler2_Simple.xml", mscclFuncAllReduce, 4, 3, 0ULL, 0ULL, 1, 1, 2,' in c
    assert len(os.listdir(tmp_path / "plug" / "msccl-algorithms")) == 5
    code, _, err = run(capsys, "emit", "--format", "msccl-scheduler", str(xml), "-o", str(tmp_path / "plug"))
    assert code == 2 and "not empty" in err
    code, _, err = run(capsys, "emit", "--format", "msccl-scheduler", str(xml), "-o", str(tmp_path / "plug"),
                       "--force")
    assert code == 0


def test_emit_msccl_scheduler_bad_input(capsys, tmp_path):
    sched = tmp_path / "r.json"
    save_schedule(build_schedule("ring", 4), str(sched))
    code, _, err = run(capsys, "emit", "--format", "msccl-scheduler", str(sched), "-o", str(tmp_path / "p"))
    assert code == 2 and "reads a folder of MSCCL XML files" in err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a.xml").write_text('<?xml version="1.0"?>\n' + emit_xml(build_schedule("ring", 4)))
    code, _, err = run(capsys, "emit", "--format", "msccl-scheduler", str(bad), "-o", str(tmp_path / "p"))
    assert code == 2 and "a.xml" in err and err.count("\n") == 1
    assert not (tmp_path / "p").exists()
