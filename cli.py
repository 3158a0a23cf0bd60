"""The `collsynth` command: thin argument parsing; every command lives in collsynth.commands.*."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .commands import add_all_commands
from .errors import CollsynthError


class _Parser(argparse.ArgumentParser):
    """argparse with the project's one-line error and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"collsynth: error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="collsynth",
        description="Synthesize, verify, simulate and compile straggler-aware collective schedules.",
        epilog="Start with: collsynth compare --gpus 8 --size 1GiB --alpha 3us --bandwidth 450GiB/s "
               "--arrival 7=5ms",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    add_all_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except CollsynthError as e:
        sys.stderr.write(f"collsynth: error: {e}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("collsynth: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
