"""`collsynth emit` (schedule -> runtime format, with a format registry) and `collsynth schedules`.

Adding an output format to `emit` (for example nccl-cuda or msccl-scheduler) from another module:

    from .msccl import register_emit_format

    def _emit_cuda(schedule, args):          # a verified Schedule and the parsed arguments
        return text                          # str or bytes for -o FILE, or {relative path: str|bytes}
                                             # for -o DIR (several files)
    def _cuda_options(parser):               # optional: add this format's own options
        parser.add_argument("--cuda-arch", default="sm_90")

    register_emit_format("nccl-cuda", "CUDA + NCCL send/recv program", _emit_cuda, _cuda_options)

Call ``register_emit_format`` at import time of a module listed in ``commands.COMMAND_MODULES`` (its
``add_commands`` may do nothing else); the order of the modules does not matter. Option names must not
clash with the ones already on `emit` (see `collsynth emit --help`).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import CollsynthError
from ..fileio import write_text_atomic, write_tree
from .common import print_json, print_table


@dataclass(frozen=True)
class EmitFormat:
    name: str
    help: str
    emit: Callable[[Any, argparse.Namespace], Any]
    add_options: Callable[[argparse.ArgumentParser], None] | None = None
    reads: str = "schedule"  # "schedule": emit(verified Schedule, args) -> output; "path": emit(path, args) -> exit code


EMIT_FORMATS: dict[str, EmitFormat] = {}
_EMIT_PARSER: list[argparse.ArgumentParser] = []


def register_emit_format(name: str, help: str, emit: Callable[[Any, argparse.Namespace], Any],
                         add_options: Callable[[argparse.ArgumentParser], None] | None = None,
                         reads: str = "schedule") -> None:
    """Make ``collsynth emit --format NAME`` call ``emit(schedule, args)``; see the module docstring.
    With ``reads="path"`` the format takes the input path as given (e.g. a folder of XML files), writes
    its own output and returns the exit code."""
    if name in EMIT_FORMATS:
        raise ValueError(f"emit format {name!r} registered twice")
    EMIT_FORMATS[name] = EmitFormat(name, help, emit, add_options, reads)
    if add_options is not None:
        for p in _EMIT_PARSER:  # the parser exists already: give it the options now
            add_options(p)


def _emit_msccl_xml(schedule: Any, args: argparse.Namespace) -> str:
    from ..backends.msccl_xml import emit_xml, xml_options_from_args
    return emit_xml(schedule, **xml_options_from_args(args))


def _msccl_options(p: argparse.ArgumentParser) -> None:
    from ..backends.msccl_xml import add_xml_options
    add_xml_options(p)


register_emit_format("msccl-xml", "MSCCL algorithm XML for the MSCCL executor and RCCL (or --dialect legacy)",
                     _emit_msccl_xml, _msccl_options)


def add_commands(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "emit", help="compile a schedule file for a runtime",
        description="Verify a schedule (JSON, from `collsynth synth`) and write it in a runtime's format. "
                    "A schedule that does not verify is never written.",
        epilog="examples:\n  collsynth emit ring8.json --format msccl-xml -o ring8.xml\n"
               "  collsynth emit s8.json --format msccl-xml --proto LL128 --max-bytes 64MiB -o s8.xml\n"
               "  collsynth emit ring8.json --format msccl-xml --dialect legacy -o ring8-legacy.xml",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("schedule", help="schedule JSON file")
    p.add_argument("--format", "-f", required=True, metavar="FORMAT",
                   help="output format: " + ", ".join(sorted(EMIT_FORMATS)) + " (more may be registered)")
    p.add_argument("-o", "--output", default=None, help="output file, or folder for multi-file formats "
                                                        "(stdout when omitted)")
    _EMIT_PARSER.append(p)
    for fmt in EMIT_FORMATS.values():
        if fmt.add_options is not None:
            fmt.add_options(p)
    p.set_defaults(func=cmd_emit)

    p = sub.add_parser("schedules", help="the verified schedule library (list, regenerate)",
                       description="The schedule library ships ready-to-load MSCCL XML and JSON schedules for "
                                   "ring, rhd, direct and StragglAR (every straggler rank) at 4, 8 and 16 GPUs.")
    ssub = p.add_subparsers(dest="schedules_command", metavar="ACTION")
    q = ssub.add_parser("list", help="list the library's entries",
                        description="One row per file: algorithm, GPUs, straggler, protocol and the folder to "
                                    "point MSCCL_ALGO_DIR at.")
    q.add_argument("--dir", default=None, help="library folder (default: the installed one)")
    q.add_argument("--json", action="store_true", help="print the manifest")
    q.set_defaults(func=cmd_schedules_list)
    q = ssub.add_parser("regenerate", help="rebuild the library from code",
                        description="Rebuild every library file deterministically (byte-identical for the same "
                                    "code). Only MANIFEST.json, json/ and msccl/ in the folder are replaced.")
    q.add_argument("--out", default=None, help="folder to write (default: the installed library)")
    q.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 and list the differences if the folder is out of date")
    q.set_defaults(func=cmd_schedules_regenerate)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def cmd_emit(args: argparse.Namespace) -> int:
    from ..synth.ir import load_schedule
    from ..synth.verify import check

    fmt = EMIT_FORMATS.get(args.format)
    if fmt is None:
        raise CollsynthError(f"unknown --format {args.format!r}: use one of {', '.join(sorted(EMIT_FORMATS))}")
    if fmt.reads == "path":
        return int(fmt.emit(args.schedule, args) or 0)
    if args.schedule.lower().endswith(".xml"):
        raise CollsynthError(f"{args.schedule}: emit reads a schedule JSON file (to check an MSCCL XML file use "
                             f"`collsynth verify {args.schedule}`)")
    schedule = check(load_schedule(args.schedule))
    out = fmt.emit(schedule, args)
    if isinstance(out, dict):
        if not args.output or args.output == "-":
            raise CollsynthError(f"--format {fmt.name} writes several files: give -o FOLDER")
        write_tree(args.output, out, force=bool(getattr(args, "force", False)))
        print(f"wrote {len(out)} file(s) to {args.output} ({fmt.name}, from verified {schedule.name})",
              file=sys.stderr)
        return 0
    if args.output in (None, "-"):
        if isinstance(out, bytes):
            sys.stdout.buffer.write(out)
        else:
            sys.stdout.write(out)
        return 0
    write_text_atomic(args.output, out)
    print(f"wrote {args.output} ({fmt.name}, from verified {schedule.name}: {schedule.nranks} ranks, "
          f"{schedule.nsteps} steps)", file=sys.stderr)
    return 0


def cmd_schedules_list(args: argparse.Namespace) -> int:
    import json

    from ..backends.msccl_library import default_dir

    root = args.dir or default_dir()
    path = os.path.join(root, "MANIFEST.json")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except OSError:
        raise CollsynthError(f"no library at {root} (missing MANIFEST.json): run `collsynth schedules regenerate "
                             f"--out {root}`") from None
    except json.JSONDecodeError as e:
        raise CollsynthError(f"{path}: not valid JSON ({e.msg})") from None
    if args.json:
        print_json(manifest)
        return 0
    rows = [{**e, "straggler": "" if e["straggler"] is None else e["straggler"],
             "folder": os.path.join(root, e["choice"])} for e in manifest.get("entries", [])]
    print_table(rows, ["algorithm", "n", "straggler", "protocol", "steps", "folder"],
                ["algorithm", "gpus", "straggler", "protocol", "steps", "MSCCL_ALGO_DIR"])
    return 0


def cmd_schedules_regenerate(args: argparse.Namespace) -> int:
    from ..backends.msccl_library import build_files, compare, default_dir, write

    out = args.out or default_dir()
    files, manifest = build_files()
    if args.check:
        diffs = compare(out, files)
        if diffs:
            print(f"{out} is out of date ({len(diffs)} difference(s)); run `collsynth schedules regenerate"
                  f"{' --out ' + args.out if args.out else ''}`:")
            for d in diffs[:20]:
                print(f"  {d}")
            return 1
        print(f"{out} is up to date: {len(files)} files")
        return 0
    info = write(out, files)
    print(f"wrote {info['files']} files ({info['bytes']} bytes) to {out}: {len(manifest['entries'])} MSCCL XML "
          f"files in {len({e['choice'] for e in manifest['entries']})} MSCCL_ALGO_DIR folders", file=sys.stderr)
    return 0
