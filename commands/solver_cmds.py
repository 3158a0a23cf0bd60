"""Solver commands: ``solve-rounds`` (round-optimality of StragglAR's completion collective). The solver
itself is ``collsynth synth -a solver`` (options in commands/core.py)."""

from __future__ import annotations

import argparse
import sys

from collsynth import progress
from collsynth.commands.catalog import add_command_parser
from collsynth.commands.common import print_json, print_table
from collsynth.errors import CollsynthError
from collsynth.fileio import check_output, write_text_atomic
from collsynth.synth.algorithms.stragglar.rounds import rounds_row
from collsynth.units import parse_count, parse_time


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = add_command_parser(sub, "solve-rounds", description="Decide with a MILP how many rounds the completion "
                    "collective of StragglAR needs after the ReduceScatter among the punctual GPUs (one port, one "
                    "chunk per transfer): search a schedule with n-2+ceil(log2 n) rounds (the lower bound), verify it "
                    "as a whole AllReduce, and try one round fewer.",
        epilog="examples:\n  collsynth solve-rounds --gpus 8\n  collsynth solve-rounds --gpus 4,6,8,10,12 --json\n"
               "  collsynth solve-rounds --gpus 8 -o rounds8.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", "-n", required=True, action="append",
                   help="GPU count (3..16); repeat or give a comma-separated list")
    p.add_argument("--time-limit", default="60s", help="solver time limit per question (default 60s)")
    p.add_argument("--solver", default="cbc", choices=["cbc", "highs"], help="MILP solver (default cbc)")
    p.add_argument("--no-below", action="store_true",
                   help="do not ask the solver whether one round fewer is possible")
    p.add_argument("-o", "--output", default=None,
                   help="write the verified schedule (ring ReduceScatter + found rounds) as JSON; one --gpus only")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_solve_rounds)


def _gpu_list(items: list[str]) -> list[int]:
    out: list[int] = []
    for item in items:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            try:
                out.append(parse_count(part, flag="--gpus"))
            except CollsynthError:
                raise CollsynthError(f"--gpus must be integers such as 8 or 4,6,8, got {part!r}") from None
    if not out:
        raise CollsynthError("--gpus needs at least one GPU count, e.g. --gpus 8")
    for n in out:
        if n < 3 or n > 16:
            raise CollsynthError(f"--gpus {n}: solve-rounds covers 3..16 GPUs (StragglAR needs a straggler and "
                                 "two punctual GPUs; larger n is beyond the exact model)")
    return out


def cmd_solve_rounds(args: argparse.Namespace) -> int:
    ns = _gpu_list(args.gpus)
    check_output(args.output, flag="-o")
    limit = parse_time(args.time_limit, allow_zero=False, flag="--time-limit")
    if args.output is not None and len(ns) != 1:
        raise CollsynthError("-o writes one schedule: give a single --gpus with it")
    rows = []
    for i, n in enumerate(ns):
        progress.note(f"solve-rounds [{i + 1}/{len(ns)}] n={n}")
        row, sched = rounds_row(n, limit, args.solver, check_below=not args.no_below)
        rows.append(row)
        if args.output is not None:
            if sched is None:
                raise CollsynthError(f"no {row['lower_bound']}-round schedule found for {n} GPUs within "
                                     f"{args.time_limit}: raise --time-limit (nothing written)")
            write_text_atomic(args.output, sched.to_json())
    if args.json:
        print_json({"solver": args.solver, "time_limit_s": limit, "rows": rows})
    else:
        table = [{**r, "below": r.get("below_status", "-")} for r in rows]
        print_table(table, ["gpus", "lower_bound", "rounds", "status", "below", "seconds"],
                    ["gpus", "lower bound", "rounds found", "status", "one fewer", "seconds"])
    if args.output is not None:
        print(f"wrote {args.output} (verified)", file=sys.stderr)
    return 0
