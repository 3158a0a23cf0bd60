"""The `collsynth` command: argument parsing and exit codes; every command lives in collsynth.commands.*.

Exit codes: 0 success; 1 checked and wrong (`verify` found a violation, a run gave a wrong result);
2 bad input (one line `collsynth: error: ...` that says what to change); 3 internal error (one line
`collsynth: internal error: ...`; rerun with --debug or COLLSYNTH_DEBUG=1 for the traceback).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from collsynth import __version__, budget, fileio, progress, workers
from collsynth.commands import add_commands_for
from collsynth.errors import CollsynthError
from collsynth.units import parse_size, parse_time

EPILOG = """start with:
  collsynth compare --gpus 8 --size 1GiB --alpha 3us --bandwidth 450GiB/s --arrival 7=5ms
  collsynth synth -a stragglar -n 8 --straggler 7 -o s8.json && collsynth verify s8.json
every command has --help with examples

exit codes: 0 success, 1 checked and wrong (verify found a violation), 2 bad input (one line
that says what to change), 3 internal error (a bug: rerun as `collsynth --debug COMMAND ...` for the traceback)"""


class _Parser(argparse.ArgumentParser):
    """argparse with the project's one-line error and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"collsynth: error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """A command's parser refuses what it does not know itself, so that the error names its --help
        (`collsynth compare --help`), not the top level's."""
        ns, extras = super().parse_known_args(args, namespace)
        if extras and self.prog != "collsynth":
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return ns, extras


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser; ``command``'s own parser is filled in, the others are listed only."""
    parser = _Parser(prog="collsynth",
                     description="Synthesize, verify, simulate and compile straggler-aware collective schedules.",
                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"collsynth {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an internal error (also COLLSYNTH_DEBUG=1)")
    parser.add_argument("--max-file-size", metavar="SIZE", default=os.environ.get("COLLSYNTH_MAX_FILE_SIZE"),
                        help="largest input file read, e.g. 1GiB (default 256MiB; also COLLSYNTH_MAX_FILE_SIZE)")
    parser.add_argument("--max-memory", metavar="SIZE", default=os.environ.get("COLLSYNTH_MAX_MEMORY"),
                        help="memory budget: work estimated above it is refused with the largest size that fits "
                             "(default: half the available memory; also COLLSYNTH_MAX_MEMORY)")
    parser.add_argument("--max-time", metavar="TIME", default=os.environ.get("COLLSYNTH_MAX_TIME"),
                        help="time budget: work estimated to run longer is refused with the largest size that fits "
                             f"(default {budget.DEFAULT_MAX_SECONDS:g}s; also COLLSYNTH_MAX_TIME)")
    parser.add_argument("--jobs", "-j", metavar="N", default=os.environ.get(workers.ENV),
                        help="build the independent candidates of a search (clusterstraggler's forms with late "
                             "ranks on a cluster, reproduce cluster's rows) in N processes, 0 for one per CPU "
                             "core; the output is the same for every N (default 1; also COLLSYNTH_JOBS)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    add_commands_for(sub, command)
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


# top-level options that take a value (it is not the command)
_TOP_LEVEL_VALUES = ("--max-file-size", "--max-memory", "--max-time", "--jobs", "-j")


def _command_of(args_in: list[str]) -> str | None:
    """The command word: the first argument that is neither an option nor a top-level option's value."""
    skip = False
    for a in args_in:
        if skip:
            skip = False
        elif a in _TOP_LEVEL_VALUES:
            skip = True
        elif not a.startswith("-"):
            return a
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args_in = _join_negative_values([str(a) for a in (sys.argv[1:] if argv is None else argv)])
    command = _command_of(args_in)
    debug = "--debug" in args_in[: args_in.index(command)] if command else "--debug" in args_in
    debug = debug or os.environ.get("COLLSYNTH_DEBUG", "") not in ("", "0")
    try:
        parser = build_parser(command)
        args = parser.parse_args(args_in)
        if not getattr(args, "func", None):
            parser.print_help()
            sys.stdout.flush()
            sys.stderr.write("collsynth: error: give a COMMAND (listed above)\n")
            return 2
        if getattr(args, "max_file_size", None):
            fileio.set_max_read_bytes(parse_size(args.max_file_size, flag="--max-file-size"))
        if getattr(args, "max_memory", None):
            flag = _budget_source(args_in, "--max-memory", "COLLSYNTH_MAX_MEMORY")
            budget.set_max_memory(parse_size(args.max_memory, flag=flag), source=flag)
        if getattr(args, "max_time", None):
            flag = _budget_source(args_in, "--max-time", "COLLSYNTH_MAX_TIME")
            budget.set_max_seconds(parse_time(args.max_time, allow_zero=False, flag=flag), source=flag)
        if getattr(args, "jobs", None):
            workers.set_jobs(workers.parse_jobs(args.jobs))
        if progress.wanted():
            progress.enable()
        return int(args.func(args) or 0)
    except CollsynthError as e:
        sys.stderr.write(f"collsynth: error: {e}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("collsynth: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except MemoryError:  # an estimate missed: still the input's size, not a verdict and not a traceback
        sys.stderr.write("collsynth: error: out of memory: give a smaller size, or raise the budget with "
                         "`collsynth --max-memory SIZE ...` on a larger machine\n")
        return 2
    except Exception as e:  # a bug, never a verdict: exit 3, not 1
        if debug:
            traceback.print_exc()
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        again = f"collsynth --debug {command} ..." if command else "collsynth --debug ..."
        sys.stderr.write(f"collsynth: internal error: {type(e).__name__}{': ' + first if first else ''} "
                         f"(rerun as `{again}` or with COLLSYNTH_DEBUG=1 for the traceback, and report it)\n")
        return 3
    finally:
        progress.disable()
        budget.set_max_memory(None)
        budget.set_max_seconds(None)
        workers.set_jobs(None)
        fileio.set_max_read_bytes(fileio.DEFAULT_MAX_READ_BYTES)


def _budget_source(args_in: list[str], flag: str, env: str) -> str:
    """The flag when the command line gives it, else the environment variable its default came from."""
    return flag if any(a == flag or a.startswith(flag + "=") for a in args_in) else env


if __name__ == "__main__":
    sys.exit(main())
