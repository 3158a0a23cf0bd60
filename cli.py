"""The `collsynth` command: thin argument parsing; every command lives in collsynth.commands.*."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

from collsynth.commands import add_all_commands
from collsynth.errors import CollsynthError


class _Parser(argparse.ArgumentParser):
    """argparse with the project's one-line error and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"collsynth: error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="collsynth",
        description="Synthesize, verify, simulate and compile straggler-aware collective schedules.",
        epilog="start with:\n  collsynth compare --gpus 8 --size 1GiB --alpha 3us --bandwidth 450GiB/s --arrival 7=5ms\n"
               "  collsynth synth -a stragglar -n 8 --straggler 7 -o s8.json && collsynth verify s8.json\n"
               "every command has --help",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    add_all_commands(sub)
    return parser


def _join_negative_values(argv: list[str]) -> list[str]:
    """`--size -1GiB` would read as two options; pass it as `--size=-1GiB` so the value gets checked."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if tok.startswith("--") and "=" not in tok and re.match(r"-[0-9.]", nxt):
            out.append(f"{tok}={nxt}")
            i += 2
            continue
        out.append(tok)
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_join_negative_values(list(sys.argv[1:] if argv is None else argv)))
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
