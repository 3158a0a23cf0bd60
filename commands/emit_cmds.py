"""`collsynth emit` (a schedule in a runtime's format, through the backends' format registry) and
`collsynth schedules` (the shipped library). Argument parsing and printing only."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from collsynth.api import file_kind
from collsynth.backends import FORMATS, emit, emit_family, emit_to, family_format, get_format
from collsynth.backends.libraries import build_files, compare_folder, write
from collsynth.backends.msccl.library import default_dir
from collsynth.backends.msccl.model import DIALECTS, PROTOCOLS
from collsynth.commands.catalog import add_command_parser, show_help
from collsynth.commands.common import print_json, print_table
from collsynth.errors import CollsynthError
from collsynth.fileio import check_outdir, check_output, json_loads, read_text, write_text_atomic, write_tree
from collsynth.synth.algorithms.stragglar.family import read_manifest
from collsynth.synth.ir import load_schedule
from collsynth.synth.topology.gpus import MAX_SMS
from collsynth.synth.verify import check
from collsynth.units import parse_count, parse_size

XML_PLAN = ("msccl-xml", "mscclpp-plan")
# dest -> (the formats that take the flag, its default, flag by the value it sets: None for any value)
_FLAGS: dict[str, tuple[tuple[str, ...], Any, dict[Any, str]]] = {}


def _flag(g: Any, formats: tuple[str, ...], *names: str, **kw: Any) -> None:
    """``g.add_argument(*names, **kw)``, noting which formats take the flag (check_format_flags)."""
    a = g.add_argument(*names, **kw)
    formats, default, flags = _FLAGS.setdefault(a.dest, (formats, a.default, {}))
    flags[a.const if kw.get("action") in ("store_true", "store_false") else None] = names[0]


def check_format_flags(args: argparse.Namespace, fmt: str) -> None:
    """Refuse an output flag given (not at its default) that ``fmt`` does not take: it would be ignored."""
    for dest, (formats, default, flags) in _FLAGS.items():
        if fmt in formats or not hasattr(args, dest) or getattr(args, dest) == default:
            continue
        value = getattr(args, dest)
        flag = flags.get(value, flags.get(None, f"--{dest}"))
        raise CollsynthError(f"{flag} applies to --format {' or '.join(formats)}, not {fmt}: drop it or choose "
                             f"such a format")


def add_msccl_xml_options(p: argparse.ArgumentParser) -> None:
    """The options ``synth --format msccl-xml`` and ``emit --format msccl-xml`` share."""
    g = p.add_argument_group("MSCCL XML output")
    x = ("msccl-xml",)
    _flag(g, x, "--dialect", default="executor", choices=DIALECTS,
          help="executor (MSCCL executor and RCCL, default) or legacy (microsoft/msccl)")
    _flag(g, XML_PLAN, "--proto", default="Simple", choices=PROTOCOLS, help="NCCL protocol (default Simple)")
    _flag(g, XML_PLAN, "--min-bytes", default="0", help="smallest call size the file serves (default 0)")
    _flag(g, XML_PLAN, "--max-bytes", default="0",
          help="largest call size it serves, inclusive (default 0: no limit)")
    _flag(g, XML_PLAN, "--inplace", dest="inplace", action="store_true", default=True,
          help="serve in-place calls (default)")
    _flag(g, XML_PLAN, "--no-inplace", dest="inplace", action="store_false", help="do not serve in-place calls")
    _flag(g, x, "--outofplace", dest="outofplace", action="store_true", default=True,
          help="serve out-of-place calls (default; the legacy dialect serves one mode)")
    _flag(g, x, "--no-outofplace", dest="outofplace", action="store_false", help="do not serve out-of-place calls")
    _flag(g, x, "--instances", default="1", help="replicate over K times the channels for bandwidth (default 1)")
    _flag(g, (*XML_PLAN, "nccl-cuda"), "--name", default=None,
          help="algorithm name written in the file (default: the schedule's); nccl-cuda: the C name")
    _flag(g, x, "--nchunksperloop", default=None,
          help="MSCCL chunks per buffer: the schedule's (default), a larger number, or pow2 (a power of two when "
               "the schedule's count is not one; the runtime only runs calls whose element count is a multiple of "
               "it). Schedule chunks then get floor/ceiling shares")


def add_mscclpp_options(p: argparse.ArgumentParser) -> None:
    """The options only ``--format mscclpp-plan`` takes (it shares --proto Simple|LL, --inplace/--no-inplace,
    --min-bytes, --max-bytes and --name with msccl-xml)."""
    g = p.add_argument_group("MSCCL++ plan output (--format mscclpp-plan; also --proto Simple|LL, --inplace/"
                             "--no-inplace, --min-bytes, --max-bytes, --name)")
    x = ("mscclpp-plan",)
    _flag(g, x, "--pipeline-unit", default=None, metavar="BYTES",
          help="pipeline form for large messages: every thread block runs its ops once per unit of this many bytes "
               "of each chunk, e.g. 1MiB (Simple only; default: no pipeline)")
    _flag(g, x, "--gpus-per-node", default=None, metavar="N",
          help="consecutive ranks per node: memory channels inside a node, port channels across nodes (default: "
               "the schedule's, else one node)")
    _flag(g, x, "--plan-chunks", default=None, metavar="N|pow2",
          help="chunks the plan cuts each buffer into: the schedule's (default), a larger number, or pow2 (so that "
               "power-of-two messages are eligible: the executor needs the size to be a multiple of 16 bytes times "
               "this). Schedule chunks then get floor/ceiling shares")
    _flag(g, x, "--sms", default=None, metavar="N",
          help="the GPU's SM count, which caps the thread blocks per rank (they wait on each other, one per SM; "
               "default: the GPU the schedule's topology names, e.g. 132 for h100-cluster or an imported H200 "
               "dump, else an A100's 108)")


def mscclpp_plan_options(args: argparse.Namespace) -> dict[str, Any]:
    """emit_plan keywords from the parsed flags (sizes accept units, e.g. 1MiB)."""
    gpn = getattr(args, "gpus_per_node", None)
    if gpn is not None:
        try:
            gpn = parse_count(str(gpn), flag="--gpus-per-node")
        except CollsynthError:
            raise CollsynthError(f"--gpus-per-node must be an integer >= 1, got {gpn!r}") from None
    unit = getattr(args, "pipeline_unit", None)
    chunks: int | str | None = getattr(args, "plan_chunks", None)
    if chunks is not None and chunks != "pow2":
        try:
            chunks = parse_count(str(chunks), flag="--plan-chunks")
        except CollsynthError:
            raise CollsynthError(f"--plan-chunks must be an integer or pow2, got {chunks!r}") from None
    sms = getattr(args, "sms", None)
    if sms is not None:
        sms = parse_count(str(sms), flag="--sms", lo=1, hi=MAX_SMS)
    return {"proto": args.proto, "inplace": bool(args.inplace), "min_bytes": _bytes("--min-bytes", args.min_bytes),
            "max_bytes": _bytes("--max-bytes", args.max_bytes), "name": args.name,
            "pipeline": None if unit is None else _bytes("--pipeline-unit", unit), "gpus_per_node": gpn,
            "chunks": chunks, "sms": sms}


def _bytes(flag: str, text: Any) -> int:
    t = str(text).strip()
    if t.isascii() and t.isdigit() and int(t) == 0:
        return 0
    return parse_size(t, flag=flag)


def msccl_xml_options(args: argparse.Namespace) -> dict[str, Any]:
    """emit_xml keywords from the parsed MSCCL XML options (sizes accept units, e.g. 1MiB)."""
    try:
        instances = parse_count(str(args.instances), flag="--instances")
    except CollsynthError:
        raise CollsynthError(f"--instances must be an integer >= 1, got {args.instances!r}") from None
    loop: int | str | None = getattr(args, "nchunksperloop", None)
    if loop is not None and loop != "pow2":
        try:
            loop = parse_count(str(loop), flag="--nchunksperloop")
        except CollsynthError:
            raise CollsynthError(f"--nchunksperloop must be an integer or pow2, got {loop!r}") from None
    return {"dialect": args.dialect, "proto": args.proto, "min_bytes": _bytes("--min-bytes", args.min_bytes),
            "max_bytes": _bytes("--max-bytes", args.max_bytes), "inplace": bool(args.inplace),
            "outofplace": bool(args.outofplace), "instances": instances, "name": args.name, "nchunksperloop": loop}


def _format_options(fmt: str, args: argparse.Namespace) -> dict[str, Any]:
    """The keyword options of format ``fmt`` from the parsed `emit` flags."""
    if fmt == "msccl-xml":
        return msccl_xml_options(args)
    if fmt == "mscclpp-plan":
        return mscclpp_plan_options(args)
    if fmt == "nccl-cuda":
        return {"name": args.name, "dtypes": args.dtypes}
    return {}


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = add_command_parser(sub, "emit", description="Verify a schedule (JSON, from `collsynth synth`) and write it in "
                    "a runtime's format. A schedule that does not verify is never written. Formats: "
                    + "; ".join(f"{f.name}: {f.help}" for f in FORMATS) + ".",
        epilog="examples:\n  collsynth emit ring8.json --format msccl-xml -o ring8.xml\n"
               "  collsynth emit s8.json --format msccl-xml --proto LL128 --max-bytes 64MiB -o s8.xml\n"
               "  collsynth emit ring8.json --format msccl-xml --dialect legacy -o ring8-legacy.xml\n"
               "  collsynth emit s8.json --format nccl-cuda --name s8 -o s8cuda\n"
               "  collsynth emit --format msccl-scheduler algos -o plugin\n"
               "  collsynth emit s8.json --format mscclpp-plan -o s8.plan.json\n"
               "  collsynth emit s8.json --format mscclpp-plan --proto LL --max-bytes 1MiB --no-inplace -o s8.ll.json\n"
               "  collsynth emit --format mscclpp-selector plans -o selector\n"
               "  collsynth emit family --format msccl-xml -o family-xml   # every member of `synth --straggler all`",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("schedule", help="schedule JSON file (msccl-xml and mscclpp-plan: or a family folder from `synth "
                                    "--straggler all`, every member into the -o folder; msccl-scheduler: a folder "
                                    "of MSCCL XML files; mscclpp-selector: a folder of MSCCL++ plans)")
    p.add_argument("--format", "-f", required=True, metavar="FORMAT",
                   help="output format: " + ", ".join(f.name for f in FORMATS))
    p.add_argument("-o", "--output", default=None, help="output file, or folder for multi-file formats "
                                                        "(stdout when omitted)")
    add_msccl_xml_options(p)
    add_mscclpp_options(p)
    g = p.add_argument_group("nccl-cuda, msccl-scheduler and mscclpp-selector output (-o FOLDER; nccl-cuda: --name "
                             "sets the C name)")
    _flag(g, ("nccl-cuda",), "--dtypes", default="float,half,bfloat16",
          help="nccl-cuda: element types to compile in, comma-separated (default float,half,bfloat16)")
    g.add_argument("--force", action="store_true",
                   help="folder formats: replace an output folder that is not empty")
    p.set_defaults(func=cmd_emit)

    p = add_command_parser(sub, "schedules", description="The schedule library ships ready-to-load MSCCL XML and JSON "
                           "schedules for ring, rhd, direct and StragglAR (every straggler rank) at 4, 8 and 16 GPUs, "
                           "and MSCCL++ execution plans with their selectors (schedules/mscclpp).",
                           epilog="examples:\n  collsynth schedules list\n  collsynth schedules list --json\n"
                                  "  collsynth schedules list --mscclpp\n  collsynth schedules regenerate --check")
    ssub = p.add_subparsers(dest="schedules_command", metavar="ACTION")
    q = ssub.add_parser("list", help="list the library's entries",
                        description="One row per file: algorithm, GPUs, straggler, protocol and the folder to "
                                    "point MSCCL_ALGO_DIR at; with --mscclpp the MSCCL++ plans instead.")
    q.epilog = "examples:\n  collsynth schedules list\n  collsynth schedules list --mscclpp"
    q.formatter_class = argparse.RawDescriptionHelpFormatter
    q.add_argument("--dir", default=None, help="library folder (default: the installed one)")
    q.add_argument("--json", action="store_true", help="print the manifest")
    q.add_argument("--mscclpp", action="store_true", help="list the MSCCL++ plan library (schedules/mscclpp)")
    q.set_defaults(func=cmd_schedules_list)
    q = ssub.add_parser("regenerate", help="rebuild the library from code",
                        description="Rebuild every library file deterministically (byte-identical for the same "
                                    "code). Only MANIFEST.json, json/, msccl/ and mscclpp/ in the folder are "
                                    "replaced.")
    q.epilog = "examples:\n  collsynth schedules regenerate --check\n  collsynth schedules regenerate --out mylib"
    q.formatter_class = argparse.RawDescriptionHelpFormatter
    q.add_argument("--out", default=None, help="folder to write (default: the installed library)")
    q.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 and list the differences if the folder is out of date")
    q.set_defaults(func=cmd_schedules_regenerate)
    p.set_defaults(func=show_help(p))


def _need_folder(args: argparse.Namespace, fmt: str) -> str:
    out = args.output
    if not out or out == "-":
        raise CollsynthError(f"--format {fmt} writes several files: give -o FOLDER")
    return str(out)


def cmd_emit(args: argparse.Namespace) -> int:
    fmt = get_format(args.format)
    check_format_flags(args, fmt.name)
    if fmt.reads == "schedule" and os.path.isdir(args.schedule):
        return _emit_family(args, fmt.name)
    check_output(args.output, flag="-o", inputs=[args.schedule], folder=fmt.writes == "folder")
    if fmt.reads == "xml-folder":
        out = _need_folder(args, fmt.name)
        paths = emit_to(args.schedule, fmt.name, out, force=args.force)
        nxml = sum(1 for p in paths if p.endswith(".xml"))
        print(f"wrote {len(paths)} file(s) to {out} (msccl-scheduler over {nxml} checked MSCCL XML file(s)); "
              f"build with `make -C {out}`", file=sys.stderr)
        return 0
    if fmt.reads == "plan-folder":
        out = _need_folder(args, fmt.name)
        paths = emit_to(args.schedule, fmt.name, out, force=args.force)
        nplans = sum(1 for p in paths if os.sep + "plans" + os.sep in p)
        print(f"wrote {len(paths)} file(s) to {out} (selectors over {nplans} checked MSCCL++ plan(s))",
              file=sys.stderr)
        return 0
    if file_kind(args.schedule) != "schedule":
        raise CollsynthError(f"{args.schedule}: emit reads a schedule JSON file (to check an MSCCL XML file or an "
                             f"MSCCL++ plan use `collsynth verify {args.schedule}`)")
    if fmt.writes == "folder":
        check_outdir(_need_folder(args, fmt.name), args.force)
    schedule = check(load_schedule(args.schedule), source=args.schedule)
    result = emit(schedule, fmt.name, **_format_options(fmt.name, args))
    if isinstance(result, dict):
        write_tree(args.output, result, force=args.force)
        print(f"wrote {len(result)} file(s) to {args.output} ({fmt.name}, from verified {schedule.name})",
              file=sys.stderr)
        return 0
    if args.output in (None, "-"):
        sys.stdout.write(result)
        return 0
    write_text_atomic(args.output, result)
    print(f"wrote {args.output} ({fmt.name}, from verified {schedule.name}: {schedule.nranks} ranks, "
          f"{schedule.nsteps} steps)", file=sys.stderr)
    return 0


def _emit_family(args: argparse.Namespace, fmt: str) -> int:
    """`emit FAMILY_FOLDER --format msccl-xml|mscclpp-plan -o FOLDER`: every member, into one folder."""
    family_format(fmt)
    read_manifest(args.schedule)  # a family folder, before the output is looked at
    if getattr(args, "name", None):
        raise CollsynthError("--name names one schedule: drop it for a family folder (each member keeps its name)")
    check_output(args.output, flag="-o", inputs=[args.schedule], folder=True)
    out = _need_folder(args, fmt)
    check_outdir(out, args.force, inputs=[args.schedule])
    files = emit_family(args.schedule, fmt, **_format_options(fmt, args))
    write_tree(out, files, force=args.force)
    after = "msccl-scheduler" if fmt == "msccl-xml" else "mscclpp-selector"
    print(f"wrote {len(files)} {fmt} file(s) to {out} from the verified schedules of {args.schedule}; next: "
          f"`collsynth emit --format {after} {out} -o FOLDER`", file=sys.stderr)
    return 0


def cmd_schedules_list(args: argparse.Namespace) -> int:
    root = args.dir or default_dir()
    path = os.path.join(root, "mscclpp", "MANIFEST.json") if args.mscclpp else os.path.join(root, "MANIFEST.json")
    if not os.path.exists(path):
        raise CollsynthError(f"no library at {root} (missing {os.path.relpath(path, root)}): run `collsynth schedules "
                             f"regenerate --out {root}`")
    try:
        manifest = json_loads(read_text(path))
    except json.JSONDecodeError as e:
        raise CollsynthError(f"{path}: not valid JSON ({e.msg})") from None
    if args.json:
        print_json(manifest)
        return 0
    try:
        return _print_manifest(args, root, manifest)
    except (KeyError, TypeError, AttributeError) as e:
        what = f"missing field {e}" if isinstance(e, KeyError) else "an entry or field of the wrong type"
        raise CollsynthError(f"{path}: malformed manifest ({what}): run `collsynth schedules regenerate"
                             f"{' --out ' + root if args.dir else ''}`") from None


def _print_manifest(args: argparse.Namespace, root: str, manifest: Any) -> int:
    if not isinstance(manifest, dict) or not isinstance(manifest.get("entries", []), list):
        raise TypeError("entries")
    if args.mscclpp:
        rows = [{**e, "straggler": "" if e["straggler"] is None else e["straggler"],
                 "mode": "in-place" if e["inplace"] else "out-of-place",
                 "sizes": f"{e['min_bytes']}..{e['max_bytes']}", "path": os.path.join(root, "mscclpp", e["file"])}
                for e in manifest.get("entries", [])]
        print_table(rows, ["algorithm", "world_size", "straggler", "protocol", "mode", "sizes", "path"],
                    ["algorithm", "gpus", "straggler", "protocol", "mode", "bytes", "plan"])
        return 0
    rows = [{**e, "straggler": "" if e["straggler"] is None else e["straggler"],
             "folder": os.path.join(root, e["choice"])} for e in manifest.get("entries", [])]
    print_table(rows, ["algorithm", "n", "straggler", "protocol", "steps", "folder"],
                ["algorithm", "gpus", "straggler", "protocol", "steps", "MSCCL_ALGO_DIR"])
    return 0


def cmd_schedules_regenerate(args: argparse.Namespace) -> int:
    out = default_dir() if args.out is None else args.out
    if not args.check:
        check_output(out, flag="--out", folder=True)
    elif not os.path.isdir(out):  # nothing to compare: bad input (exit 2), not an out-of-date folder (exit 1)
        what = "is not a directory" if os.path.lexists(out) else "does not exist"
        raise CollsynthError(f"--out {out} {what}: give the schedule folder to check, or drop --check to write it")
    files, manifest = build_files()
    if args.check:
        diffs = compare_folder(out, files)
        if diffs:
            print(f"{out} is out of date ({len(diffs)} difference(s)); run `collsynth schedules regenerate"
                  f"{' --out ' + args.out if args.out else ''}`:")
            for d in diffs[:20]:
                print(f"  {d}")
            return 1
        print(f"{out} is up to date: {len(files)} files")
        return 0
    info = write(out, files)
    xml = manifest["msccl"]["entries"]
    print(f"wrote {info['files']} files ({info['bytes']} bytes) to {out}: {len(xml)} MSCCL XML files in "
          f"{len({e['choice'] for e in xml})} MSCCL_ALGO_DIR folders, {len(manifest['mscclpp']['entries'])} MSCCL++ "
          f"plans with their selectors", file=sys.stderr)
    return 0
