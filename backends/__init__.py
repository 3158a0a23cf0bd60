"""Backends: compile a verified schedule for a runtime. The format registry lives here.

``emit(source, format, **options)`` renders one of ``FORMATS`` and returns the text (one-file formats)
or ``{relative path: content}`` (folder formats); ``emit_to(source, format, output, force=..., **options)``
also writes it, all or nothing. ``source`` is a Schedule (verified first: an unverified schedule is never
emitted) or, for ``msccl-scheduler`` and ``mscclpp-selector``, a folder of MSCCL XML files or MSCCL++ plans
(each checked). Options are plain keywords, the
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

from collsynth.apitypes import EmitOption, Emitted
from collsynth.backends.cost import check_emit
from collsynth.backends.msccl import emit_xml
from collsynth.backends.mscclpp import emit_plan
from collsynth.backends.mscclpp.selector import render_mscclpp_selector
from collsynth.backends.nccl import render_msccl_scheduler, render_nccl_cuda
from collsynth.errors import CollsynthError
from collsynth.fileio import check_outdir, write_text_atomic, write_tree
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


@overload
def emit(source: Schedule | str, format: Literal["msccl-xml", "mscclpp-plan"], **options: EmitOption) -> str: ...


@overload
def emit(source: Schedule | str, format: str, **options: EmitOption) -> Emitted: ...


def emit(source: Schedule | str, format: str, **options: EmitOption) -> Emitted:
    """Render ``source`` in ``format`` (see the module docstring); returns text or {path: content}."""
    fmt = get_format(format)
    unknown = sorted(set(options) - set(fmt.options()))
    if unknown:
        raise CollsynthError(f"--format {fmt.name} takes no {unknown[0]!r} option (it takes "
                             f"{', '.join(fmt.options()) or 'none'})")
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


__all__ = ["FORMATS", "Format", "emit", "emit_to", "get_format"]
