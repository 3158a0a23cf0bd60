"""Every shipped library under ``schedules/``, rebuilt by one command (``collsynth schedules regenerate``).

- the MSCCL XML library (backends/msccl/library.py): ``MANIFEST.json``, ``json/``, ``msccl/``;
- the MSCCL++ plan library (backends/mscclpp/library.py): ``mscclpp/`` with its own manifest, selectors and
  GPU script.

``build_files`` gives both; ``compare_folder`` and ``write`` cover the folders both own, so a stale or
stray file in either is found, and a rewrite replaces them all at once.
"""

from __future__ import annotations

from typing import Any

from collsynth.backends.msccl import library as msccl_library
from collsynth.backends.mscclpp import library as mscclpp_library

MANAGED = msccl_library.MANAGED + mscclpp_library.MANAGED


def build_files() -> tuple[dict[str, bytes], dict[str, Any]]:
    """Every library file (relative path -> bytes) and the two manifests ({"msccl": ..., "mscclpp": ...})."""
    files, manifest = msccl_library.build_files()
    plans, plan_manifest = mscclpp_library.build_files()
    return {**files, **plans}, {"msccl": manifest, "mscclpp": plan_manifest}


def compare_folder(out: str, files: dict[str, bytes]) -> list[str]:
    """Paths that differ between ``files`` and the folder ``out`` (missing, changed or extra)."""
    return msccl_library.compare_folder(out, files, MANAGED)


def write(out: str, files: dict[str, bytes]) -> dict[str, int]:
    """Write both libraries into ``out`` (their folders replaced all at once; other files kept)."""
    return msccl_library.write(out, files, MANAGED)
