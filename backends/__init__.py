"""Backends: compile a verified schedule for a runtime. The format registry lives here.

``emit(source, format, **options)`` renders one of ``FORMATS`` and returns the text (one-file formats)
or ``{relative path: content}`` (folder formats); ``emit_to(source, format, output, force=..., **options)``
also writes it, all or nothing. ``source`` is a Schedule (verified first: an unverified schedule is never
emitted) or, for ``msccl-scheduler`` and ``mscclpp-selector``, a folder of MSCCL XML files or MSCCL++ plans
(each checked). ``emit_family(folder, format, **options)`` emits every member of a family folder (what
``collsynth synth ... --straggler all -o FOLDER`` writes) in a one-file format. Options are plain keywords, the
render function's own (e.g. ``proto="LL128"`` for msccl-xml, ``dtypes="float,half"`` for nccl-cuda).

Adding a format: write the backend package (its own ``templates/``, rendered through backends.render),
add one ``Format`` row below, add the CLI flags for its options in commands/emit_cmds.py, and tests.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, overload

from collsynth import budget, progress
from collsynth.apitypes import EmitOption, Emitted
from collsynth.backends.cost import check_emit, shape_of, text_bytes
from collsynth.backends.cost import cost as emit_cost
from collsynth.backends.msccl import emit_xml
from collsynth.backends.mscclpp import emit_plan
from collsynth.backends.mscclpp.selector import render_mscclpp_selector
from collsynth.backends.nccl import render_msccl_scheduler, render_nccl_cuda
from collsynth.errors import CollsynthError
from collsynth.fileio import check_outdir, write_text_atomic, write_tree
from collsynth.synth.algorithms.stragglar.family import load_member, read_manifest
from collsynth.synth.ir import Schedule
from collsynth.synth.verify import check


@dataclass(frozen=True)
class Format:
    """One output format: what it reads, whether it writes one file or a folder, how it renders."""

    name: str
    help: str
    render: Callable[..., str | Mapping[str, str | bytes]]  # text, or {relative path: content}
    reads: str = "schedule"  # "schedule", "xml-folder" or "plan-folder"
    writes: str = "file"  # "file" or "folder"

    def options(self) -> tuple[str, ...]:
        """The keyword options ``render`` accepts."""
        params = list(inspect.signature(self.render).parameters.values())[1:]
        return tuple(p.name for p in params if p.kind == inspect.Parameter.KEYWORD_ONLY and p.name != "check")


FORMATS: tuple[Format, ...] = (
    Format("msccl-xml", "MSCCL algorithm XML for the MSCCL executor and RCCL (or --dialect legacy)", emit_xml),
    Format("nccl-cuda", "CUDA + NCCL library (grouped ncclSend/ncclRecv per step), benchmark and Makefile for any "
                        "stock NCCL; -o FOLDER", render_nccl_cuda, writes="folder"),
    Format("msccl-scheduler", "C source of an MSCCL scheduler plugin choosing among a folder of MSCCL XML files "
                              "(give the folder instead of SCHEDULE); -o FOLDER", render_msccl_scheduler,
           reads="xml-folder", writes="folder"),
    Format("mscclpp-plan", "MSCCL++ execution plan (JSON, format 0.9.0) for its executor and NCCL-compatible "
                           "library", emit_plan),
    Format("mscclpp-selector", "Python and C++ selectors choosing among a folder of MSCCL++ plans by collective, "
                               "GPUs, size, buffer mode and late rank (give the folder instead of SCHEDULE); -o FOLDER",
           render_mscclpp_selector, reads="plan-folder", writes="folder"),
)
_BY_NAME = {f.name: f for f in FORMATS}


def get_format(name: str) -> Format:
    """The registry row of ``name``; CollsynthError naming the choices when there is none."""
    if name not in _BY_NAME:
        raise CollsynthError(f"unknown --format {name!r}: use one of {', '.join(_BY_NAME)}")
    return _BY_NAME[name]


def _check_options(fmt: Format, options: Mapping[str, EmitOption]) -> None:
    unknown = sorted(set(options) - set(fmt.options()))
    if unknown:
        raise CollsynthError(f"--format {fmt.name} takes no {unknown[0]!r} option (it takes "
                             f"{', '.join(fmt.options()) or 'none'})")


@overload
def emit(source: Schedule | str, format: Literal["msccl-xml", "mscclpp-plan"], **options: EmitOption) -> str: ...


@overload
def emit(source: Schedule | str, format: str, **options: EmitOption) -> Emitted: ...


def emit(source: Schedule | str, format: str, **options: EmitOption) -> Emitted:
    """Render ``source`` in ``format`` (see the module docstring); returns text or {path: content}."""
    fmt = get_format(format)
    _check_options(fmt, options)
    if fmt.reads == "schedule":
        if not isinstance(source, Schedule):
            raise CollsynthError(f"--format {fmt.name} reads a schedule, not {source!r}")
        check_emit(fmt.name, source, options)  # the estimate, before verifying and lowering
        check(source)
    elif not (isinstance(source, str) and os.path.isdir(source)):
        what = "MSCCL XML files" if fmt.reads == "xml-folder" else "MSCCL++ plans"
        how = "msccl-xml" if fmt.reads == "xml-folder" else "mscclpp-plan"
        raise CollsynthError(f"{source} is not a folder: --format {fmt.name} reads a folder of {what} (emit them "
                             f"with --format {how})")
    out = fmt.render(source, **options)
    return out if isinstance(out, str) else dict(out)


def emit_to(source: Schedule | str, format: str, output: str, *, force: bool = False,
            **options: EmitOption) -> list[str]:
    """``emit`` and write the result to ``output`` (a file, or a folder for folder formats), all or
    nothing; a non-empty output folder is replaced only with ``force``. Returns the written paths."""
    fmt = get_format(format)
    if fmt.writes == "folder":
        check_outdir(output, force)
    out = emit(source, format, **options)
    if isinstance(out, dict):
        return write_tree(output, out, force=force)
    write_text_atomic(output, out)
    return [output]


def family_format(format: str) -> Format:
    """The registry row of ``format`` when a family folder can be emitted in it (a one-file format that reads a
    schedule: msccl-xml, mscclpp-plan); CollsynthError naming those otherwise."""
    fmt = get_format(format)
    if fmt.reads != "schedule" or fmt.writes != "file":
        raise CollsynthError(f"--format {fmt.name} does not take a family folder (`synth ... --straggler all`): "
                             f"emit it with --format msccl-xml or mscclpp-plan, then give that folder to --format "
                             f"msccl-scheduler or mscclpp-selector")
    return fmt


def family_file_name(member: str, format: str) -> str:
    """The name a family member's file (``late_5.json``) gets in ``format``: ``late_5.xml`` for msccl-xml, the
    same name for mscclpp-plan (plans are JSON)."""
    return os.path.splitext(member)[0] + (".xml" if format == "msccl-xml" else ".json")


def emit_family(folder: str, format: str, **options: EmitOption) -> dict[str, str]:
    """Every member of a family folder (its manifest.json: stragglar's or clusterstraggler's ``--straggler
    all``) in ``format``, a one-file format (msccl-xml, mscclpp-plan), as {file name: text} in manifest order,
    for the folder the MSCCL scheduler plugin (``--format msccl-scheduler``) or the MSCCL++ selector
    (``--format mscclpp-selector``) reads. Every member must still have the sha256 its manifest records, and
    each is verified before it is emitted. The work is estimated first, every member loaded once for it: the
    seconds of all the emits add up, and so do the texts held until the folder is written, beside the largest
    emit's peak; one that does not fit is refused (CollsynthError, nothing emitted)."""
    fmt = family_format(format)
    _check_options(fmt, options)
    entries = read_manifest(folder)["schedules"]
    seconds = held = peak = 0.0
    for i, e in enumerate(entries):
        progress.note(f"emit: estimating family member {i + 1} of {len(entries)} ({e['file']})")
        s = load_member(folder, e)
        check_emit(fmt.name, s, options)  # one member alone too large: refused naming it
        shape = shape_of(s)
        nbytes, t = emit_cost(fmt.name, shape, options)
        seconds, peak, held = seconds + t, max(peak, nbytes), held + text_bytes(fmt.name, shape, options)
    what = f"emitting the {len(entries)} schedules of {folder} as {fmt.name}"
    hint = f"emit the members you need one at a time (collsynth emit {folder}/FILE --format {fmt.name})"
    budget.check(peak + held, what, hint=hint)
    budget.check_seconds(seconds, what, hint=hint)
    out: dict[str, str] = {}
    for i, e in enumerate(entries):
        progress.note(f"emit: family member {i + 1} of {len(entries)} ({e['file']}) as {fmt.name}")
        text = emit(load_member(folder, e), fmt.name, **options)
        assert isinstance(text, str)  # a one-file format
        out[family_file_name(e["file"], fmt.name)] = text
    return out


__all__ = ["FORMATS", "Format", "emit", "emit_family", "emit_to", "family_file_name", "family_format",
           "get_format"]
