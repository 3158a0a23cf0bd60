"""Generate an MSCCL external scheduler (``mscclScheduler``) that chooses among MSCCL XML files.

``generate_msccl_scheduler(xml_dir, outdir)`` checks every ``*.xml`` file in ``xml_dir`` with
collsynth's MSCCL checker (backends/msccl/check.py; a file that would hang, race or compute the wrong
result is refused), reads its selection attributes and writes:

- ``collsynth_msccl_scheduler.c`` and ``msccl_scheduler_interface.h``: the scheduler, with the files'
  metadata compiled in (rules in the C file's header comment);
- ``msccl-algorithms/*.xml``: the files, copied byte for byte (the scheduler loads them from there, or
  from ``$COLLSYNTH_MSCCL_ALGO_DIR``);
- ``Makefile``: ``make`` builds ``libmsccl-scheduler.so`` with ``gcc -Wall -Werror -shared -fPIC``.

StragglAR files are tied to one late rank; the rank comes from ``stragglers`` (file name -> rank), from
the phase comment collsynth's emitter writes (the rank the first phase does not wait for) or, failing
that, from the file's ``name`` attribute or file name (``stragglar..._s<RANK>`` or
``stragglar..._straggler<RANK>``, the names collsynth gives its StragglAR schedules and library files).
The interface is documented in docs/msccl-xml.md section 5 (Azure/msccl-executor-nccl's
``msccl_scheduler.h``); the C declaration is written here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from collsynth.backends.msccl.check import check_xml_text
from collsynth.backends.msccl.parse import parse_xml_text
from collsynth.backends.render import render
from collsynth.errors import CollsynthError
from collsynth.fileio import check_outdir, read_text, write_tree

__all__ = ["generate_msccl_scheduler", "render_msccl_scheduler", "straggler_of"]

_FUNC = {"allreduce": "mscclFuncAllReduce", "reducescatter": "mscclFuncReduceScatter",
         "reduce_scatter": "mscclFuncReduceScatter", "allgather": "mscclFuncAllGather",
         "alltoall": "mscclFuncAllToAll", "alltoallv": "mscclFuncAllToAllv", "reduce": "mscclFuncReduce",
         "broadcast": "mscclFuncBroadcast", "gather": "mscclFuncGather", "scatter": "mscclFuncScatter",
         "send": "mscclFuncSend", "recv": "mscclFuncRecv"}
_FILE_OK = re.compile(r"^[A-Za-z0-9._+-]+\.xml$")
_STRAGGLAR = re.compile(r"stragglar.*?_s(?:traggler)?(\d+)(?![0-9])", re.I)


def _phase_straggler(comments: list[str], ngpus: int) -> int | None:
    """The one rank that a phase of collsynth's ``<!-- collsynth phases: ... -->`` comment does not wait
    for (StragglAR's punctual ReduceScatter); -1 when every phase waits for everyone; None if absent."""
    text = next((c for c in comments if c.startswith("collsynth phases:")), None)
    if text is None:
        return None
    body = text[len("collsynth phases:"):].strip()
    missing: set[int] = set()
    try:
        for part in ([] if body == "none" else body.split(";")):
            who = part.split()[3]
            if who == "all":
                continue
            ranks = {r for rg in who.split(",") for r in range(int(rg.split("-")[0]), int(rg.split("-")[-1]) + 1)}
            missing |= set(range(ngpus)) - ranks
    except (IndexError, ValueError):
        return None
    return missing.pop() if len(missing) == 1 else (-1 if not missing else None)


def straggler_of(file: str, algo_name: str | None, comments: list[str] | None = None, ngpus: int = 0) -> int:
    """The late rank a StragglAR file is built for, else -1: from collsynth's phase comment when present,
    otherwise from its name attribute or file name."""
    late = _phase_straggler(comments or [], ngpus)
    if late is not None:
        return late
    for text in (algo_name or "", os.path.basename(file)):
        m = _STRAGGLAR.search(text)
        if m:
            return int(m.group(1))
    return -1


def _files(xml_dir: str) -> list[str]:
    if not os.path.isdir(xml_dir):
        raise CollsynthError(f"{xml_dir} is not a directory: give the folder that holds the MSCCL XML files")
    names = sorted(f for f in os.listdir(xml_dir)
                   if f.endswith(".xml") and os.path.isfile(os.path.join(xml_dir, f)))
    if not names:
        raise CollsynthError(f"{xml_dir} holds no .xml files: emit some with `collsynth emit ... --format msccl-xml`")
    for f in names:
        if not _FILE_OK.match(f):
            raise CollsynthError(f"{os.path.join(xml_dir, f)}: rename the file to letters, digits and ._+- "
                                 "(it is compiled into the scheduler as a string)")
    return names


def render_msccl_scheduler(xml_dir: str, *, stragglers: Mapping[str, int] | None = None) -> dict[str, str | bytes]:
    """The generated files (relative path -> content); every XML file is checked first."""

    stragglers = dict(stragglers or {})
    names = _files(xml_dir)
    unknown = sorted(set(stragglers) - set(names))
    if unknown:
        raise CollsynthError(f"straggler given for {unknown[0]}, which is not an .xml file in {xml_dir}")
    rows, files = [], {}
    slot = 0
    for f in names:
        path = os.path.join(xml_dir, f)
        text = read_text(path)
        algo = parse_xml_text(text, path)  # XmlFormatError (a CollsynthError) names line and element
        report = check_xml_text(text, path)
        if not report.ok:
            raise CollsynthError(f"{path}: {report.message}")
        if algo.dialect != "executor":
            raise CollsynthError(f"{path}: a legacy microsoft/msccl file; the MSCCL executor that loads schedulers "
                                 "needs the executor dialect: re-emit it without --dialect legacy")
        func = _FUNC.get(algo.coll)
        if func is None:
            raise CollsynthError(f"{path}: collective {algo.coll!r} is not supported by the scheduler")
        late = stragglers.get(f, straggler_of(f, algo.name, list(getattr(algo, "comments", [])), algo.ngpus))
        if not -1 <= late < algo.ngpus:
            raise CollsynthError(f"{path}: straggler rank {late} is outside 0..{algo.ngpus - 1}")
        rows.append(f'  {{"{f}", {func}, {algo.ngpus}, {algo.nchunksperloop}, {algo.min_bytes}ULL, '
                    f'{algo.max_bytes}ULL, {algo.inplace}, {algo.outofplace}, {late}, {slot}}},')
        slot += algo.ngpus
        files[f"msccl-algorithms/{f}"] = text.encode("utf-8")  # byte-identical: text is valid UTF-8
    ctx = dict(algo_rows="\n".join(rows), nalgos=len(names), nslots=slot)
    out: dict[str, str | bytes] = {
        "collsynth_msccl_scheduler.c": render("nccl/msccl_scheduler.c.j2", **ctx),
        "msccl_scheduler_interface.h": render("nccl/msccl_scheduler_interface.h.j2", **ctx),
        "Makefile": render("nccl/Makefile.scheduler.j2", **ctx),
    }
    out.update(files)
    return out


def generate_msccl_scheduler(xml_dir: str, outdir: str, *, force: bool = False,
                             stragglers: Mapping[str, int] | None = None) -> list[str]:
    """Check the XML files in ``xml_dir`` and write the scheduler's source, Makefile and file copies
    into ``outdir`` (must not exist or be empty unless ``force``). Returns the written paths."""
    check_outdir(outdir, force)
    files = render_msccl_scheduler(xml_dir, stragglers=stragglers)
    return write_tree(outdir, files, force=force)
