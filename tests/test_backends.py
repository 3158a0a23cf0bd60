"""The backends' format registry: emit(source, format, **options) and emit_to."""

from __future__ import annotations

import os

import pytest

from collsynth.backends import FORMATS, emit, emit_to, get_format
from collsynth.errors import CollsynthError
from collsynth.synth.registry import build_schedule
from collsynth.synth.verify import VerificationError


@pytest.fixture(scope="module")
def s8():
    return build_schedule("stragglar", 8, straggler=3)


def test_every_format_is_listed_with_its_options():
    names = [f.name for f in FORMATS]
    assert names[:3] == ["msccl-xml", "nccl-cuda", "msccl-scheduler"]
    assert {"proto", "dialect", "max_bytes", "nchunksperloop"} <= set(get_format("msccl-xml").options())
    assert set(get_format("nccl-cuda").options()) == {"name", "dtypes"}
    with pytest.raises(CollsynthError, match="unknown --format 'pdf'"):
        get_format("pdf")


def test_emit_takes_plain_keyword_options(s8):
    text = emit(s8, "msccl-xml", proto="LL128", max_bytes=1 << 20)
    assert 'proto="LL128"' in text and 'maxBytes="1048576"' in text
    with pytest.raises(CollsynthError, match="takes no 'colour' option"):
        emit(s8, "msccl-xml", colour="red")
    files = emit(s8, "nccl-cuda", name="s8")
    assert sorted(files) == ["Makefile", "bench_s8.cu", "s8.cu", "s8.h"]


def test_emit_refuses_an_unverified_schedule(s8):
    bad = s8.replace(dst=s8.dst[::-1].copy())
    with pytest.raises(VerificationError):
        emit(bad, "msccl-xml")


def test_emit_to_writes_whole_files_and_folders(s8, tmp_path):
    out = tmp_path / "s8.xml"
    assert emit_to(s8, "msccl-xml", str(out)) == [str(out)]
    assert "<algo name=\"stragglar_n8_s3\"" in out.read_text()
    folder = tmp_path / "cuda"
    emit_to(s8, "nccl-cuda", str(folder), name="s8")
    (folder / "stray.txt").write_text("old")
    with pytest.raises(CollsynthError, match="not empty"):
        emit_to(s8, "nccl-cuda", str(folder), name="s8")
    emit_to(s8, "nccl-cuda", str(folder), force=True, name="s8")
    assert sorted(os.listdir(folder)) == ["Makefile", "bench_s8.cu", "s8.cu", "s8.h"]  # replaced whole


def test_msccl_scheduler_reads_a_folder(s8, tmp_path):
    with pytest.raises(CollsynthError, match="is not a folder"):
        emit(str(tmp_path / "missing"), "msccl-scheduler")
    (tmp_path / "algos").mkdir()
    emit_to(s8, "msccl-xml", str(tmp_path / "algos" / "stragglar_n8_s3.xml"))
    files = emit(str(tmp_path / "algos"), "msccl-scheduler")
    assert "msccl-algorithms/stragglar_n8_s3.xml" in files
