"""Checks and parsers shared by the topology builders: link parameters, times and rates given as
numbers or unit strings, per-class values, and an empty networkx graph."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from collsynth.errors import CollsynthError
from collsynth.units import parse_class_values, parse_rate, parse_time

if TYPE_CHECKING:
    import networkx as nx

# ---------------------------------------------------------------------- construction helpers
def check_link_params(alpha: float, bandwidth: float, what: str) -> None:
    if not (isinstance(alpha, float) and math.isfinite(alpha) and alpha >= 0):
        raise CollsynthError(f"{what}: alpha {alpha!r} must be a finite time >= 0, e.g. 3us")
    if not (isinstance(bandwidth, float) and math.isfinite(bandwidth) and bandwidth > 0):
        raise CollsynthError(f"{what}: bandwidth {bandwidth!r} must be a positive rate, e.g. 450GiB/s")


def new_graph(n: int, switches: Sequence[str] = ()) -> nx.DiGraph:
    import networkx as nx
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_nodes_from(switches)
    return g


def as_time(x: Any, what: str) -> float:
    if isinstance(x, bool):
        raise CollsynthError(f"{what}: alpha must be a time such as \"3us\" or seconds, not {x!r}")
    if isinstance(x, (int, float, str)):  # a number is seconds, range-checked like text (finite, <= 1e9 s)
        try:
            return parse_time(x)
        except CollsynthError as e:
            raise CollsynthError(f"{what}: alpha {x!r}: {e}") from None
    raise CollsynthError(f"{what}: alpha must be a time such as \"3us\" or seconds, not {x!r}")


def as_rate(x: Any, what: str) -> float:
    if isinstance(x, bool):
        raise CollsynthError(f"{what}: bandwidth must be a rate such as \"450GiB/s\" or bytes/s, not {x!r}")
    if isinstance(x, (int, float)):  # bytes/s, range-checked like text
        try:
            return parse_rate(x)
        except CollsynthError as e:
            raise CollsynthError(f"{what}: bandwidth {x!r}: {e}") from None
    if isinstance(x, str):
        try:
            v = parse_rate(x)
        except CollsynthError:
            raise CollsynthError(f"{what}: bandwidth {x!r} is not a positive rate: write e.g. 450GiB/s "
                                 f"or 25GB/s") from None
        if v <= 0:
            raise CollsynthError(f"{what}: bandwidth {x!r} must be a positive rate, e.g. 450GiB/s")
        return v
    raise CollsynthError(f"{what}: bandwidth must be a rate such as \"450GiB/s\" or bytes/s, not {x!r}")


def class_values(x: Any, what: str) -> float | dict[str, float] | None:
    """A single alpha/bandwidth (every class) or a per-class mapping / "cls=value,..." string."""
    parse = (lambda v: as_time(v, f"--{what}")) if what == "alpha" else (lambda v: as_rate(v, f"--{what}"))
    if isinstance(x, Mapping):
        x = dict(x)
    return parse_class_values(x, parse, flag=f"--{what}",
                              example="nvlink=1us,net=3us" if what == "alpha" else "nvlink=450GB/s,net=50GB/s")

