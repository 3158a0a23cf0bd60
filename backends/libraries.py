"""Every shipped library under ``schedules/``, rebuilt by one command (``collsynth schedules regenerate``).

- the MSCCL XML library (backends/msccl/library.py): ``MANIFEST.json``, ``json/``, ``msccl/``;
- the MSCCL++ plan library (backends/mscclpp/library.py): ``mscclpp/`` with its own manifest, selectors and
  GPU script.

``build_files`` gives both; ``compare_folder`` and ``write`` cover the folders both own, so a stale or
stray file in either is found, and a rewrite replaces them all at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import Any

from collsynth.backends.msccl import library as msccl_library
from collsynth.backends.mscclpp import library as mscclpp_library
from collsynth.errors import CollsynthError

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
    """Write both libraries into ``out`` (their folders replaced all at once; other files kept). If the write
    fails, a folder ``out`` that this call created is removed again, so nothing half-written is left."""
    created = not os.path.lexists(out)
    try:
        return msccl_library.write(out, files, MANAGED)
    except BaseException as e:
        if created:
            _remove_created(out)
        if isinstance(e, CollsynthError):
            gone = f" ({out}, created by this run, was removed)" if created and not os.path.lexists(out) else ""
            raise CollsynthError(f"{e}; nothing was written{gone}: fix that and run again, or give another "
                                 f"--out") from None
        raise


def _remove_created(out: str) -> None:
    """Remove what ``write`` put into the folder ``out`` it created, then the folder if it is empty (a file
    someone else put there meanwhile is kept)."""
    for top in MANAGED:
        path = os.path.join(out, top)
        with contextlib.suppress(OSError):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            elif os.path.lexists(path):
                os.unlink(path)
    with contextlib.suppress(OSError):
        os.rmdir(out)
