"""The MSCCL++ plan library (``schedules/mscclpp/``): verified plans, a manifest, selectors, a GPU script.

Contents, per GPU count (4 and 8), in place and out of place:

- ``direct`` (LL) for messages up to 64 KiB, ``rhd`` (LL) up to 1 MiB, ``ring`` (Simple) above: the
  plans for punctual ranks, one per size range;
- ``stragglar`` for every late rank, LL up to 1 MiB and Simple above.

Files: ``plans/<name>.json`` (power-of-two chunk grids, so power-of-two messages are eligible),
``MANIFEST.json`` (one entry per plan: collective, world size, ranks per node, size range, buffer mode,
late rank, file, sha256), ``selector.py`` and ``collsynth_mscclpp_selector.{h,cc}`` (generated from the
manifest by selector.py in this package), and ``run_plans.py`` (runs every plan through MSCCL++'s
executor against NCCL on GPUs; not run by the tests). Regenerating gives byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from collsynth import progress
from collsynth.backends.mscclpp.emit import emit_plan
from collsynth.backends.mscclpp.selector import render_selector_files
from collsynth.synth.registry import build_schedule
from collsynth.synth.verify import check

LIBRARY_FORMAT = "collsynth-mscclpp-plan-library"
LIBRARY_VERSION = 1
TOP = "mscclpp"
MANAGED = (TOP,)  # the folder of the schedules library this library owns
GPU_COUNTS = (4, 8)
KIB, MIB = 1 << 10, 1 << 20
MAX_ANY = (1 << 64) - 1
# (algorithm, protocol, smallest message, largest message) of the plans for punctual ranks
GENERAL = (("direct", "LL", 0, 64 * KIB), ("rhd", "LL", 64 * KIB + 1, MIB), ("ring", "Simple", MIB + 1, 0))
STRAGGLAR = (("LL", 0, MIB), ("Simple", MIB + 1, 0))


@dataclass(frozen=True)
class Entry:
    algorithm: str
    n: int
    straggler: int | None
    proto: str
    min_bytes: int
    max_bytes: int  # 0: the largest that fits
    inplace: bool

    @property
    def name(self) -> str:
        late = f"_s{self.straggler}" if self.straggler is not None else ""
        return f"{self.algorithm}_n{self.n}{late}_{self.proto}_{'inplace' if self.inplace else 'outofplace'}"


def entries() -> Iterator[Entry]:
    for n in GPU_COUNTS:
        for inplace in (True, False):
            for alg, proto, lo, hi in GENERAL:
                yield Entry(alg, n, None, proto, lo, hi, inplace)
            for r in range(n):
                for proto, lo, hi in STRAGGLAR:
                    yield Entry("stragglar", n, r, proto, lo, hi, inplace)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_files() -> tuple[dict[str, bytes], dict[str, Any]]:
    """Every library file (path relative to the schedules folder -> bytes) and the manifest."""
    files: dict[str, bytes] = {}
    items: list[dict[str, Any]] = []
    todo = list(entries())
    built: dict[tuple[str, int, int | None], Any] = {}
    for i, e in enumerate(todo):
        progress.note(f"mscclpp plans [{i + 1}/{len(todo)}] {e.name}")
        key = (e.algorithm, e.n, e.straggler)
        if key not in built:
            params = {"straggler": e.straggler} if e.straggler is not None else {}
            built[key] = check(build_schedule(e.algorithm, e.n, "allreduce", **params))
        s = built[key]
        text = emit_plan(s, proto=e.proto, inplace=e.inplace, min_bytes=e.min_bytes, max_bytes=e.max_bytes,
                         name=e.name, chunks="pow2")
        plan = json.loads(text)
        data = text.encode()
        path = f"plans/{e.name}.json"
        files[f"{TOP}/{path}"] = data
        g0 = plan["gpus"][0]
        items.append({"name": e.name, "file": path, "sha256": _sha(data), "algorithm": e.algorithm,
                      "collective": plan["collective"], "world_size": e.n,
                      "ranks_per_node": plan["collsynth"]["gpus_per_node"], "protocol": e.proto,
                      "inplace": e.inplace, "min_bytes": plan["min_message_size"],
                      "max_bytes": plan["max_message_size"], "straggler": e.straggler,
                      "granularity": 16 * (g0["output_chunks"] if plan["collective"] == "allgather"
                                           else g0["input_chunks"]),
                      "thread_blocks": max(len(g["threadblocks"]) for g in plan["gpus"]), "steps": s.nsteps,
                      "transfers": s.ntransfers})
    manifest = {"format": LIBRARY_FORMAT, "version": LIBRARY_VERSION, "mscclpp_version": "0.9.0",
                "generator": "collsynth schedules regenerate",
                "usage": "pick a plan with selector.py (Python) or collsynth_mscclpp_selector.cc (C++); a plan "
                         "serves messages of min_bytes..max_bytes bytes that are a multiple of granularity",
                "entries": items}
    files[f"{TOP}/MANIFEST.json"] = (json.dumps(manifest, indent=1) + "\n").encode()
    for rel, content in render_selector_files(manifest).items():
        files[f"{TOP}/{rel}"] = content.encode()
    return files, manifest
