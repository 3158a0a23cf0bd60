"""The table of `collsynth` commands: name, the module that implements it, and its one-line help.

The CLI lists every command from this table without importing any command module (so `collsynth
--help` stays fast) and imports only the module of the command being run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NamedTuple


class Command(NamedTuple):
    name: str
    module: str  # under collsynth.commands
    help: str


COMMANDS: tuple[Command, ...] = (
    Command("algorithms", "core", "list the algorithms"),
    Command("topologies", "topo_cmds", "list the topology presets (alias of `topology list`)"),
    Command("topology", "topo_cmds", "topologies: list the presets, show one, import NCCL XML or nvidia-smi topo -m"),
    Command("synth", "core", "build and verify a schedule"),
    Command("info", "core", "summarize a schedule file"),
    Command("verify", "core", "prove a schedule (JSON or MSCCL XML) correct"),
    Command("simulate", "core", "time a schedule in the alpha-beta model"),
    Command("compare", "core", "rank algorithms for one setting"),
    Command("bench", "torch_cmds", "time schedules against torch all_reduce with real processes"),
    Command("calibrate", "torch_cmds", "measure alpha and bandwidth of a real process group"),
    Command("reproduce", "stragglar", "reproduce a paper's results from schedules"),
    Command("emit", "emit_cmds", "compile a schedule file for a runtime"),
    Command("schedules", "emit_cmds", "the verified schedule library (list, regenerate)"),
    Command("solve-rounds", "solver_cmds", "fewest rounds of StragglAR's completion collective (MILP)"),
    Command("train-sim", "training_cmds", "simulate training throughput: DDP, bucketed DDP, ZeRO-1, ACCO x algorithms"),
    Command("train-bench", "training_cmds", "real data-parallel training on gloo, measured next to train-sim's "
                                            "prediction"),
)
_HELP = {c.name: c.help for c in COMMANDS}


def add_command_parser(sub: argparse._SubParsersAction[Any], name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """``sub.add_parser(name, ...)`` with the command's help from the table (examples go in ``epilog``)."""
    kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
    parser: argparse.ArgumentParser = sub.add_parser(name, help=_HELP[name], **kwargs)
    return parser


def show_help(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """The command function of a command group run without an action: print the group's help on stdout,
    one line on stderr saying what is missing, exit 2 (bad input)."""

    def run(args: argparse.Namespace) -> int:
        parser.print_help()
        sys.stdout.flush()
        sys.stderr.write(f"collsynth: error: {parser.prog} needs an action (listed above)\n")
        return 2

    return run
