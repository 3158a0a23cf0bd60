"""Precomputed StragglAR phase-2 plans (none yet)."""

from __future__ import annotations

from typing import Any


def cached_plan(n: int) -> Any:
    return None
