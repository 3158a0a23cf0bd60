"""`collsynth emit --format nccl-cuda` and `collsynth emit --format msccl-scheduler` (backends/nccl).

Both formats are registered in the emit format registry of commands/msccl.py:

    collsynth emit SCHEDULE.json --format nccl-cuda -o DIR [--name C_NAME] [--dtypes float,half] [--force]
    collsynth emit --format msccl-scheduler DIR_OF_XML -o DIR [--force]

msccl-scheduler reads a folder of MSCCL XML files, not a schedule: it registers with reads="path".
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..errors import CollsynthError
from .msccl import register_emit_format


def _need_folder(args: argparse.Namespace, fmt: str) -> str:
    out = getattr(args, "output", None)
    if not out or out == "-":
        raise CollsynthError(f"--format {fmt} writes several files: give -o FOLDER")
    return out


def _emit_nccl_cuda(schedule: Any, args: argparse.Namespace) -> dict[str, str]:
    from ..fileio import check_outdir
    from ..backends.nccl.codegen import render_nccl_cuda

    out = _need_folder(args, "nccl-cuda")
    check_outdir(out, args.force)
    return render_nccl_cuda(schedule, name=getattr(args, "name", None), dtypes=args.dtypes)


def _options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("nccl-cuda and msccl-scheduler output (-o FOLDER; --name sets the C name)")
    g.add_argument("--dtypes", default="float,half,bfloat16",
                   help="nccl-cuda: element types to compile in, comma-separated (default float,half,bfloat16)")
    g.add_argument("--force", action="store_true",
                   help="nccl-cuda, msccl-scheduler: write into an output folder that is not empty")


register_emit_format("nccl-cuda", "CUDA + NCCL library (grouped ncclSend/ncclRecv per step), benchmark and Makefile "
                                  "for any stock NCCL; -o FOLDER", _emit_nccl_cuda, _options)
register_emit_format("msccl-scheduler", "C source of an MSCCL scheduler plugin choosing among a folder of MSCCL "
                                        "XML files (give the folder instead of SCHEDULE); -o FOLDER",
                     lambda path, args: cmd_emit_scheduler(args), reads="path")


def cmd_emit_scheduler(args: argparse.Namespace) -> int:
    from ..backends.nccl.plugin import generate_msccl_scheduler

    out = _need_folder(args, "msccl-scheduler")
    src = args.schedule
    if not os.path.isdir(src):
        raise CollsynthError(f"{src} is not a folder: --format msccl-scheduler reads a folder of MSCCL XML files "
                             "(emit them with --format msccl-xml)")
    paths = generate_msccl_scheduler(src, out, force=args.force)
    nxml = sum(1 for p in paths if p.endswith(".xml"))
    print(f"wrote {len(paths)} file(s) to {out} (msccl-scheduler over {nxml} checked MSCCL XML file(s)); "
          f"build with `make -C {out}`", file=sys.stderr)
    return 0


def add_commands(sub: "argparse._SubParsersAction") -> None:
    """Nothing to add: both formats live in the `emit` registry (registered at import)."""
