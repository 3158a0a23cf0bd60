"""Arrival times: when each rank calls the collective, in seconds, and who is late.

``arrival_vector`` turns what users give ({rank: time} with missing ranks at 0, or one time per rank;
times as seconds or strings like "5ms") into one float per rank, refusing unknown ranks and times that
are not finite or negative. ``latest_rank`` is the one rule every straggler-aware stage uses to name
the straggler: the rank that arrives last, the highest rank among ties. ``sooner`` compares two completions
after the last arrival.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from collsynth.apitypes import Arrivals
from collsynth.errors import CollsynthError
from collsynth.units import parse_time


def arrival_vector(arrivals: Arrivals, nranks: int) -> np.ndarray:
    """Per-rank arrival times (seconds) from a {rank: time} dict (missing ranks 0) or a sequence."""
    out = np.zeros(nranks, np.float64)
    if arrivals is None:
        return out
    if isinstance(arrivals, Mapping):
        for k, v in arrivals.items():
            try:
                r = int(k)
                if isinstance(k, bool) or (not isinstance(k, (int, np.integer)) and str(r) != str(k).strip()):
                    raise ValueError
            except (TypeError, ValueError):
                raise CollsynthError(f"arrival rank {k!r} is not an integer rank") from None
            if not 0 <= r < nranks:
                raise CollsynthError(f"arrival for rank {r}: ranks are 0..{nranks - 1}")
            out[r] = _seconds(v, r)
        return out
    if isinstance(arrivals, (str, bytes)):
        raise CollsynthError("arrivals must be a {rank: time} mapping or one time per rank")
    vals = list(arrivals)
    if len(vals) != nranks:
        raise CollsynthError(f"arrivals list has {len(vals)} entries for {nranks} ranks: give one per rank")
    for r, v in enumerate(vals):
        out[r] = _seconds(v, r)
    return out


def _seconds(v: Any, rank: int) -> float:
    if isinstance(v, str):
        return parse_time(v)
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise CollsynthError(f"arrival of rank {rank} must be a time in seconds or like '5ms', not {v!r}")
    x = float(v)
    if not math.isfinite(x) or x < 0:
        raise CollsynthError(f"arrival of rank {rank} is {v!r}: use a finite time >= 0")
    return x


def sooner(t: float, best: float, since: float = 0.0, tie: float = 1e-12) -> bool:
    """Whether a completion at ``t`` beats one at ``best`` by more than the relative ``tie``, both counted from
    ``since`` (the last arrival): counted from time 0, completions of 1.7e9 s (timestamps) would tie within 1.7 ms
    at a tie of 1e-12, and a rank 1e9 s late made clusterstraggler keep a form 55% slower than the synchronous one."""
    return t - since < (best - since) * (1 - tie)


def latest_rank(arrivals: Arrivals, nranks: int) -> int:
    """The rank that arrives last (the highest rank among ties): StragglAR's straggler."""
    times = arrival_vector(arrivals, nranks)
    return max(range(nranks), key=lambda r: (float(times[r]), r))
