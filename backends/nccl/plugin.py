"""Generate an MSCCL external scheduler (``mscclScheduler``) that chooses among MSCCL XML files.

``generate_msccl_scheduler(xml_dir, outdir)`` checks every ``*.xml`` file in ``xml_dir`` with
collsynth's MSCCL checker (backends/msccl/check.py; a file that would hang, race or compute the wrong
result is refused), reads its selection attributes and writes:

- ``collsynth_msccl_scheduler.c`` and ``msccl_scheduler_interface.h``: the scheduler, with the files'
  metadata compiled in (rules in the C file's header comment);
- ``msccl-algorithms/*.xml``: the files, copied byte for byte (the scheduler loads them from there, or
  from ``$COLLSYNTH_MSCCL_ALGO_DIR``);
- ``Makefile``: ``make`` builds ``libmsccl-scheduler.so`` with ``gcc -Wall -Werror -shared -fPIC``.

Straggler-aware files are tied to a late set: one rank (StragglAR, clusterstraggler's late-GPU form) or
several (clusterstraggler's late-node form: a whole node; multistraggler). The set comes from
``stragglers`` (file name -> rank or list of ranks), from the phase comment collsynth's emitter writes
(the ranks some phase does not wait for) or, failing that, from the file's ``name`` attribute or file
name (``stragglar..._s<RANK>``, ``stragglar..._straggler<RANK>`` or ``clusterstraggler_gpu_..._l<RANK>``,
the names collsynth gives these schedules and library files). At run time the scheduler picks the file
whose late set is exactly the set named by ``$COLLSYNTH_STRAGGLER`` ("5", "4-7", "0,4-7") or by
``collsynth_msccl_set_straggler(rank)`` / ``collsynth_msccl_set_late(ranks, count)`` (issue 15 point 5:
the cluster form follows who is late, a GPU or a whole node).
The interface is documented in docs/msccl-xml.md section 5 (Azure/msccl-executor-nccl's
``msccl_scheduler.h``); the C declaration is written here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from collsynth.backends.msccl.check import check_xml_text
from collsynth.backends.msccl.parse import parse_xml_text
from collsynth.backends.render import render
from collsynth.errors import CollsynthError
from collsynth.fileio import check_outdir, read_text, write_tree

__all__ = ["generate_msccl_scheduler", "late_set_of", "render_msccl_scheduler", "straggler_of"]

_FUNC = {"allreduce": "mscclFuncAllReduce", "reducescatter": "mscclFuncReduceScatter",
         "reduce_scatter": "mscclFuncReduceScatter", "allgather": "mscclFuncAllGather",
         "alltoall": "mscclFuncAllToAll", "alltoallv": "mscclFuncAllToAllv", "reduce": "mscclFuncReduce",
         "broadcast": "mscclFuncBroadcast", "gather": "mscclFuncGather", "scatter": "mscclFuncScatter",
         "send": "mscclFuncSend", "recv": "mscclFuncRecv"}
_FILE_OK = re.compile(r"^[A-Za-z0-9._+-]+\.xml$")
_STRAGGLAR = re.compile(r"stragglar.*?_s(?:traggler)?(\d+)(?![0-9])", re.I)
_CLUSTER_GPU = re.compile(r"clusterstraggler_gpu_n\d+_l(\d+)(?![0-9])", re.I)


def _phase_late(comments: list[str], ngpus: int) -> tuple[int, ...] | None:
    """The ranks that some phase of collsynth's ``<!-- collsynth phases: ... -->`` comment does not wait for
    (StragglAR's punctual ReduceScatter: its straggler; a late node's schedule: the node), sorted; () when
    every phase waits for everyone; None if absent or unreadable."""
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
    return tuple(sorted(missing))


def late_set_of(file: str, algo_name: str | None, comments: list[str] | None = None,
                ngpus: int = 0) -> tuple[int, ...]:
    """The late ranks a straggler-aware file is built for, sorted, else (): from collsynth's phase comment
    when present, otherwise from its name attribute or file name (one rank)."""
    late = _phase_late(comments or [], ngpus)
    if late is not None:
        return late
    for text in (algo_name or "", os.path.basename(file)):
        m = _STRAGGLAR.search(text) or _CLUSTER_GPU.search(text)
        if m:
            return (int(m.group(1)),)
    return ()


def straggler_of(file: str, algo_name: str | None, comments: list[str] | None = None, ngpus: int = 0) -> int:
    """The one late rank a StragglAR file is built for, else -1 (``late_set_of`` with one rank)."""
    late = late_set_of(file, algo_name, comments, ngpus)
    return late[0] if len(late) == 1 else -1


def _given_late(value: int | Sequence[int], path: str) -> tuple[int, ...]:
    """A ``stragglers`` entry (a rank, -1 for none, or a list of ranks) as a sorted late set."""
    if isinstance(value, int) and not isinstance(value, bool):
        return () if value == -1 else (value,)
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or \
            not all(isinstance(r, int) and not isinstance(r, bool) for r in value):
        raise CollsynthError(f"straggler given for {path} must be a rank or a list of ranks, got {value!r}")
    return tuple(sorted(set(value)))


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


def render_msccl_scheduler(xml_dir: str, *,
                           stragglers: Mapping[str, int | Sequence[int]] | None = None) -> dict[str, str | bytes]:
    """The generated files (relative path -> content); every XML file is checked first."""

    stragglers = dict(stragglers or {})
    names = _files(xml_dir)
    unknown = sorted(set(stragglers) - set(names))
    if unknown:
        raise CollsynthError(f"straggler given for {unknown[0]}, which is not an .xml file in {xml_dir}")
    rows, files = [], {}
    late_ranks: list[int] = []
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
        if f in stragglers:
            late = _given_late(stragglers[f], path)
        else:
            late = late_set_of(f, algo.name, list(getattr(algo, "comments", [])), algo.ngpus)
        bad = [r for r in late if not 0 <= r < algo.ngpus]
        if bad:
            raise CollsynthError(f"{path}: straggler rank {bad[0]} is outside 0..{algo.ngpus - 1}")
        rows.append(f'  {{"{f}", {func}, {algo.ngpus}, {algo.nchunksperloop}, {algo.min_bytes}ULL, '
                    f'{algo.max_bytes}ULL, {algo.inplace}, {algo.outofplace}, {late[0] if late else -1}, '
                    f'{len(late)}, {len(late_ranks)}, {slot}}},')
        late_ranks.extend(late)
        slot += algo.ngpus
        files[f"msccl-algorithms/{f}"] = text.encode("utf-8")  # byte-identical: text is valid UTF-8
    ctx = dict(algo_rows="\n".join(rows), nalgos=len(names), nslots=slot,
               late_ranks=", ".join(map(str, late_ranks)) or "-1", nlate=max(len(late_ranks), 1))
    out: dict[str, str | bytes] = {
        "collsynth_msccl_scheduler.c": render("nccl/msccl_scheduler.c.j2", **ctx),
        "msccl_scheduler_interface.h": render("nccl/msccl_scheduler_interface.h.j2", **ctx),
        "Makefile": render("nccl/Makefile.scheduler.j2", **ctx),
    }
    out.update(files)
    return out


def generate_msccl_scheduler(xml_dir: str, outdir: str, *, force: bool = False,
                             stragglers: Mapping[str, int | Sequence[int]] | None = None) -> list[str]:
    """Check the XML files in ``xml_dir`` and write the scheduler's source, Makefile and file copies
    into ``outdir`` (must not exist or be empty unless ``force``). Returns the written paths."""
    check_outdir(outdir, force)
    files = render_msccl_scheduler(xml_dir, stragglers=stragglers)
    return write_tree(outdir, files, force=force)
