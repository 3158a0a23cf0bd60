"""CLI commands, one module per feature area.

Each module listed in COMMAND_MODULES defines ``add_commands(sub)`` that adds its subparsers with
``set_defaults(func=handler)``; a handler takes the parsed args and returns the exit code. Handlers
stay thin: parse, call one library function, print. User errors raise CollsynthError.
"""

from __future__ import annotations

import argparse
import importlib

COMMAND_MODULES = ("core", "torch_cmds", "stragglar", "msccl", "nccl_cmds", "solver_cmds", "training_cmds")


def add_all_commands(sub: "argparse._SubParsersAction") -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}").add_commands(sub)
