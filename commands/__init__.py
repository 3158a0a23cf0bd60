"""CLI commands: argparse and printing only, one module per feature area; the work is the library's.

Each module in ``MODULES`` defines ``add_commands(sub)``, which adds its subparsers with
``set_defaults(func=handler)``; a handler takes the parsed args and returns the exit code. Handlers
parse, call one library function, and print. User errors raise CollsynthError (exit 2).
"""

from __future__ import annotations

import argparse
from types import ModuleType

from collsynth.commands import core, emit_cmds, solver_cmds, stragglar, torch_cmds, training_cmds

MODULES: tuple[ModuleType, ...] = (core, torch_cmds, stragglar, emit_cmds, solver_cmds, training_cmds)


def add_all_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for mod in MODULES:
        mod.add_commands(sub)
