"""Exit codes of `verify` and `schedules regenerate` for files the runtimes refuse or misread (exit 2), files
they load and run wrongly (exit 1), MSCCL++ protocols that silently run as Simple (a warning), and a library
write that fails (exit 2, nothing left behind)."""

from __future__ import annotations

import errno
import json
import logging
import os
import resource
import subprocess
import sys

import pytest
from shared_paths import vectors
from test_msccl_check import direct2, step, xml

from collsynth import fileio
from collsynth.backends import libraries
from collsynth.backends.msccl import XmlFormatError, check_xml_text
from collsynth.backends.mscclpp import read_plan_text
from collsynth.errors import CollsynthError

PLAN = vectors("mscclpp", "mscclpp_test_allreduce.json")


def cli(*argv: object, fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    """Run `collsynth ARGV` in a fresh interpreter (``fsize``: the file-size limit in bytes, like ulimit -f)."""
    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return subprocess.run([sys.executable, "-m", "collsynth.cli", *map(str, argv)], capture_output=True, text=True,
                          preexec_fn=limit, timeout=300)


def exit_2(r: subprocess.CompletedProcess[str], *needles: str) -> None:
    """A one-line error on stderr, nothing on stdout, exit 2."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert r.stdout == "" and "\n" not in err and err.startswith("collsynth: error: "), err
    for n in needles:
        assert n in err, err


@pytest.fixture(scope="module")
def ring4(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The text of a verified 4-GPU ring allreduce in MSCCL XML."""
    path = tmp_path_factory.mktemp("ring") / "r4.xml"
    r = cli("synth", "-a", "ring", "-n", "4", "-f", "msccl-xml", "-o", path)
    assert r.returncode == 0, r.stderr
    return path.read_text()


def verify_text(tmp_path, text: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "bad.xml"
    path.write_text(text)
    return cli("verify", path)


# ------------------------------------------------------------------------------------------ 1. channels, numbering
@pytest.mark.parametrize("value", ["100000", "33", "0"])
def test_nchannels_outside_1_to_32_is_refused_with_exit_2(tmp_path, ring4, value):
    text = ring4.replace('nchannels="1"', f'nchannels="{value}"', 1)
    exit_2(verify_text(tmp_path, text), "<algo>", f"nchannels={value} outside 1..32", "MAXCHANNELS=32")


def test_duplicate_step_number_is_exit_2_naming_the_step(tmp_path, ring4):
    text = ring4.replace('<step s="4"', '<step s="3"', 1)
    exit_2(verify_text(tmp_path, text), "gpu 0 tb 0 step 3 (line 9)", "s=3 is used twice in this thread block",
           "first on line 8", "0,1,2,... in document order")


def test_step_numbers_out_of_document_order_are_a_format_error():
    text = direct2().replace('<step s="1" type="rrc"', '<step s="2" type="rrc"')
    with pytest.raises(XmlFormatError, match=r"gpu 0 tb 0 step 2 \(line \d+\): s=2 but this is step 1 of the "
                                             r"thread block in document order"):
        check_xml_text(text, "t.xml")


def test_a_nop_without_dependency_shifts_the_counter_and_is_a_format_error():
    text = xml([[(1, 1, 0, [step(0, "nop", cnt=0), step(1, "s", ("i", 0), cnt=2),
                            step(2, "rrc", ("i", 0), ("o", 0), cnt=2)])],
                [(0, 0, 0, [step(0, "s", ("i", 0), cnt=2), step(1, "rrc", ("i", 0), ("o", 0), cnt=2)])]])
    with pytest.raises(XmlFormatError, match=r"gpu 0 tb 0 step 1 .*the runtime counts this step as 0; every nop must "
                                             r"carry a dependency"):
        check_xml_text(text, "t.xml")


def test_chan_at_or_above_nchannels_is_a_format_error():
    with pytest.raises(XmlFormatError, match=r"gpu 0 tb 0 \(line \d+\): chan 1 but nchannels=1: the runtime connects "
                                             r"channels 0..nchannels-1 only"):
        check_xml_text(direct2().replace('chan="0"', 'chan="1"'), "t.xml")


# ------------------------------------------------------------------------------------------ 2. cnt=0 and cnt=-1
def test_cnt_zero_loads_and_is_wrong_while_cnt_minus_one_is_refused(tmp_path, ring4):
    """The parser takes 0 <= cnt < 72 (docs/msccl-xml.md 1.2, 2.4) and the kernel's copy loop never runs for 0:
    the file loads and moves nothing (exit 1); -1 is refused at load (exit 2)."""
    r = verify_text(tmp_path, ring4.replace('cnt="1"', 'cnt="0"', 1))
    assert r.returncode == 1 and r.stderr == "", (r.stdout, r.stderr)
    assert r.stdout.startswith("FAIL gpu 0 tb 0 step 0 (line 5): cnt=0 on a 's' step moves nothing: the runtime loads "
                               "it but skips the transfer")
    exit_2(verify_text(tmp_path, ring4.replace('cnt="1"', 'cnt="-1"', 1)), "gpu 0 tb 0 step 0 (line 5)",
           "cnt=-1 outside 0..71: the runtime refuses the file")


def test_cnt_zero_on_a_nop_is_fine():
    text = xml([[(1, 1, 0, [step(0, "s", ("i", 0), cnt=2, hasdep=1),
                            step(1, "rrc", ("i", 0), ("o", 0), cnt=2, hasdep=1)]),
                 (-1, -1, 0, [step(0, "nop", cnt=0, dep=(0, 0)), step(1, "cpy", ("o", 0), ("s", 0), dep=(0, 1))])],
                [(0, 0, 0, [step(0, "s", ("i", 0), cnt=2), step(1, "rrc", ("i", 0), ("o", 0), cnt=2)])]])
    report = check_xml_text(text, "t.xml")
    assert report.ok, report.message


# ------------------------------------------------------------------------------------------ 3. MSCCL++ protocol
def _plan(tmp_path, protocol: str) -> str:
    with open(PLAN, encoding="utf-8") as f:
        obj = json.load(f)
    obj["protocol"] = protocol
    path = tmp_path / f"p-{len(protocol)}.json"
    path.write_text(json.dumps(obj))
    return str(path)


def test_plan_protocol_other_than_ll_or_simple_runs_as_simple_with_a_warning(tmp_path):
    path = _plan(tmp_path, "LL128")
    r = cli("verify", path)
    assert r.returncode == 0 and "protocol Simple" in r.stdout, (r.stdout, r.stderr)
    assert r.stderr == (f'collsynth: warning: {path}: protocol "LL128" is neither "LL" nor "Simple": the MSCCL++ '
                        f'executor runs it as Simple (write "Simple", or "LL" for packets)\n')


@pytest.mark.parametrize("protocol", ["Simple", "LL"])
def test_plan_protocols_ll_and_simple_give_no_warning(tmp_path, caplog, protocol):
    with open(_plan(tmp_path, protocol), encoding="utf-8") as f:
        text = f.read()
    with caplog.at_level(logging.WARNING, logger="collsynth"):
        plan = read_plan_text(text, "p.json")
    assert plan.packets == (protocol == "LL") and caplog.records == []


def test_plan_protocol_warning_is_logged_once_per_read(tmp_path, caplog):
    with open(_plan(tmp_path, "ll"), encoding="utf-8") as f:
        text = f.read()
    with caplog.at_level(logging.WARNING, logger="collsynth"):
        plan = read_plan_text(text, "p.json")
    assert not plan.packets  # the executor's rule: only "LL" is packets, case included
    assert [r.getMessage() for r in caplog.records] == [
        'collsynth: warning: p.json: protocol "ll" is neither "LL" nor "Simple": the MSCCL++ executor runs it as '
        'Simple (write "Simple", or "LL" for packets)']


# ------------------------------------------------------------------------------------------ 4. regenerate, failing
def test_regenerate_removes_the_folder_it_created_when_a_write_fails(tmp_path):
    out = tmp_path / "lib"
    r = cli("schedules", "regenerate", "--out", out, fsize=1024)  # bash's `ulimit -f 1`
    exit_2(r, f"cannot write {out}", "nothing was written", "created by this run, was removed")
    assert not out.exists() and os.listdir(tmp_path) == []


def _failing_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """fileio writes the first file, then fails like a full disk."""
    real, calls = fileio._write, []

    def write(path: str, content: str | bytes) -> None:
        calls.append(path)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, content)

    monkeypatch.setattr(fileio, "_write", write)


FILES = {"MANIFEST.json": b"{}", "json/a.json": b"{}", "msccl/b.xml": b"<algo/>"}


def test_library_write_failure_leaves_no_created_folder(tmp_path, monkeypatch):
    _failing_write(monkeypatch)
    out = tmp_path / "new"
    with pytest.raises(CollsynthError, match=r"No space left on device; nothing was written \(.*new, created by this "
                                             r"run, was removed\)"):
        libraries.write(str(out), FILES)
    assert not out.exists()


def test_library_write_failure_keeps_an_existing_folder(tmp_path, monkeypatch):
    _failing_write(monkeypatch)
    out = tmp_path / "old"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    (out / "json").mkdir()
    (out / "json" / "old.json").write_text("{}")
    with pytest.raises(CollsynthError, match=r"nothing was written: "):
        libraries.write(str(out), FILES)
    assert sorted(os.listdir(out)) == ["json", "keep.txt"] and os.listdir(out / "json") == ["old.json"]
