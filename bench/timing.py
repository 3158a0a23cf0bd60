"""Shared timing helper for the bench/ scripts (run as `python bench/NAME.py`, so this folder is on sys.path)."""

from __future__ import annotations

import time
from collections.abc import Callable


def best(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    """(the fastest of ``repeat`` runs of ``fn`` in seconds, rounded to 0.1 ms, and the last run's result)."""
    out, times = None, []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return round(min(times), 4), out
