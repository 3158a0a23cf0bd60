"""Where the shared test vectors live: ../shared/vectors beside the checkout (or $COLLSYNTH_SHARED)."""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("COLLSYNTH_SHARED") or os.path.join(os.path.dirname(ROOT), "shared")


def vectors(*parts: str) -> str:
    """A path under the shared vectors folder, e.g. vectors("msccl")."""
    return os.path.join(SHARED, "vectors", *parts)
