"""Where the shared test vectors live: $COLLSYNTH_SHARED, else ../shared beside the checkout, else
/work/shared (where this project's machines and CI keep them)."""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CANDIDATES = [os.environ.get("COLLSYNTH_SHARED", ""), os.path.join(os.path.dirname(ROOT), "shared"), "/work/shared"]
SHARED = next((c for c in _CANDIDATES if c and os.path.isdir(os.path.join(c, "vectors"))), _CANDIDATES[1])


def vectors(*parts: str) -> str:
    """A path under the shared vectors folder, e.g. vectors("msccl")."""
    return os.path.join(SHARED, "vectors", *parts)
