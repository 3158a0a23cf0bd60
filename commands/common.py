"""Helpers shared by CLI commands: output, tables, model arguments."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

from collsynth.errors import CollsynthError
from collsynth.synth.topology import DEFAULT_TOPOLOGY
from collsynth.units import INT_MAX, parse_count, parse_number


def print_json(obj: Any) -> None:
    """Deterministic JSON on stdout; an infinite or NaN number (a speedup over a time of 0) is null, which JSON
    has, not Infinity, which it has not."""
    sys.stdout.write(json.dumps(_finite(obj), indent=2, sort_keys=False, allow_nan=False) + "\n")


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], headers: Sequence[str] | None = None) -> None:
    """Plain aligned text table."""
    headers = list(headers or columns)
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(h), *(len(row[i]) for row in cells)) if cells else len(h) for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    sys.stdout.write("\n".join(out) + "\n")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return "" if v is None else str(v)


def int_arg(flag: str, *, lo: int | None = None, hi: int = INT_MAX) -> Callable[[str], int]:
    """argparse type: an integer in [lo, hi] written in ASCII digits (units.parse_count), with a message
    that names the flag (a huge number is refused here, before anything is sized by it)."""
    def conv(text: str) -> int:
        try:
            return parse_count(text, flag=flag, lo=lo, hi=hi)
        except CollsynthError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return conv


def number_arg(flag: str) -> Callable[[str], float]:
    """argparse type: a finite plain number (units.parse_number), with a message that names the flag."""
    def conv(text: str) -> float:
        try:
            return parse_number(text, flag=flag)
        except CollsynthError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return conv


def add_model_args(p: argparse.ArgumentParser, *, required: bool = True, recorded: bool = False) -> None:
    """--size, --alpha, --bandwidth, --topology, --arrival: the alpha-beta model's inputs. ``recorded``: the
    command reads a schedule, whose recorded topology is the default (--topology then defaults to None)."""
    p.add_argument("--size", required=required, help="buffer bytes per rank, e.g. 1GiB, 32MB")
    p.add_argument("--alpha", default=None,
                   help="per-message latency, e.g. 3us, or per link class nvlink=1us,net=3us "
                        "(default: the topology's own, 3us for nvswitch)")
    p.add_argument("--bandwidth", default=None,
                   help="per-port bandwidth, e.g. 450GiB/s, or per link class nvlink=450GB/s,net=50GB/s "
                        "(default: the topology's own, 450GiB/s for nvswitch)")
    p.add_argument("--topology", "-t", default=None if recorded else DEFAULT_TOPOLOGY,
                   help=("topology preset or JSON file (default: the one the schedule records, as `synth -t` "
                         "does for topologies with NVLink and NIC classes, else nvswitch; see `collsynth "
                         "topologies`)" if recorded else
                         "topology preset or JSON file (default nvswitch; see `collsynth topologies`)"))
    p.add_argument("--arrival", action="append", metavar="RANK=TIME", default=[],
                   help="when RANK arrives (default 0 for every rank); repeat per rank, e.g. --arrival 7=5ms")
