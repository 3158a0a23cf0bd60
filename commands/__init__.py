"""CLI commands: argparse and printing only, one module per feature area; the work is the library's.

``catalog.COMMANDS`` lists every command with the module that implements it. Each such module defines
``add_commands(sub)``, which adds its subparsers (``catalog.add_command_parser``) with
``set_defaults(func=handler)``; a handler takes the parsed args and returns the exit code. Handlers
parse, call one library function, and print. User errors raise CollsynthError (exit 2).
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from collsynth.commands.catalog import COMMANDS


def add_commands_for(sub: argparse._SubParsersAction[Any], command: str | None) -> None:
    """Add the parsers of ``command``'s module in full (its arguments, handler and examples) and a
    one-line entry for every other command, so that `collsynth --help` imports no command module."""
    module = next((c.module for c in COMMANDS if c.name == command), None)
    if module is not None:
        importlib.import_module(f"collsynth.commands.{module}").add_commands(sub)
    for c in COMMANDS:
        if c.module != module:
            sub.add_parser(c.name, help=c.help, add_help=False)
