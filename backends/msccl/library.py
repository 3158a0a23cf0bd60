"""The schedule library: ready-to-load, verified schedules for the common cases, rebuilt from code.

Layout (under ``schedules/`` in the package, or any folder given to ``collsynth schedules regenerate``):

- ``MANIFEST.json``: one entry per file (algorithm, n, straggler, protocol, dialect, paths, sha256);
- ``json/<name>.json``: the collsynth Schedules;
- ``msccl/<choice>/<name>.xml``: MSCCL XML (executor/RCCL dialect, in place and out of place, all sizes;
  ``nchunksperloop`` a power of two, so power-of-two buffers are eligible), one folder per choice a user makes
  (algorithm, straggler rank, protocol), holding XML files only, one per GPU count. The executor parses
  every regular file in ``MSCCL_ALGO_DIR`` and takes the first algorithm that matches a call, so point
  ``MSCCL_ALGO_DIR`` at exactly one choice folder.

Everything is deterministic: regenerating gives byte-identical files (a test compares them).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from collsynth import progress
from collsynth.backends.msccl.emit import emit_xml
from collsynth.fileio import PACKAGE_DIR, replace_subtrees
from collsynth.synth.registry import build_schedule
from collsynth.synth.verify import check

LIBRARY_FORMAT = "collsynth-schedule-library"
LIBRARY_VERSION = 1
GPU_COUNTS = (4, 8, 16)
PROTOCOLS = ("Simple", "LL128")
BASELINES = ("ring", "rhd", "direct")
MANAGED = ("MANIFEST.json", "json", "msccl")


@dataclass(frozen=True)
class Entry:
    algorithm: str
    n: int
    straggler: int | None

    @property
    def stem(self) -> str:
        tail = f"_straggler{self.straggler}" if self.straggler is not None else ""
        return f"{self.algorithm}_n{self.n}{tail}"

    def choice(self, proto: str) -> str:
        mid = f"-straggler{self.straggler}" if self.straggler is not None else ""
        return f"{self.algorithm}{mid}-{proto}"


def entries() -> Iterator[Entry]:
    """The library's contents: baselines at every GPU count, StragglAR for every straggler rank."""
    for alg in BASELINES:
        for n in GPU_COUNTS:
            yield Entry(alg, n, None)
    for n in GPU_COUNTS:
        for r in range(n):
            yield Entry("stragglar", n, r)


def default_dir() -> str:
    """The package's own ``schedules/`` folder."""
    return os.path.join(PACKAGE_DIR, "schedules")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _with_proto(text: str, proto: str) -> str:
    """The same algorithm for another protocol (only the <algo> attribute differs)."""
    i = text.index("<algo ")
    j = text.index("\n", i)
    head = text[i:j]
    old = ' proto="Simple"'
    if old not in head:  # pragma: no cover - emit_xml always writes Simple first
        raise AssertionError("unexpected <algo> header")
    return text[:i] + head.replace(old, f' proto="{proto}"', 1) + text[j:]


def build_files() -> tuple[dict[str, bytes], dict[str, Any]]:
    """Every library file (relative path -> bytes) and the manifest (also among the files)."""

    files: dict[str, bytes] = {}
    items: list[dict[str, Any]] = []
    todo = list(entries())
    for i, e in enumerate(todo):
        progress.note(f"schedules [{i + 1}/{len(todo)}] {e.stem}")
        params = {"straggler": e.straggler} if e.straggler is not None else {}
        s = check(build_schedule(e.algorithm, e.n, "allreduce", **params))
        js = s.to_json().encode()
        jpath = f"json/{e.stem}.json"
        files[jpath] = js
        base = emit_xml(s, proto="Simple", name=e.stem, nchunksperloop="pow2")
        loop = int(base.split(' nchunksperloop="', 1)[1].split('"', 1)[0])
        for proto in PROTOCOLS:
            xml = (base if proto == "Simple" else _with_proto(base, proto)).encode()
            xpath = f"msccl/{e.choice(proto)}/{e.stem}_{proto}.xml"
            files[xpath] = xml
            items.append({"algorithm": e.algorithm, "collective": s.collective, "n": e.n, "straggler": e.straggler,
                          "protocol": proto, "dialect": "executor", "choice": f"msccl/{e.choice(proto)}",
                          "xml": xpath, "xml_sha256": _sha(xml), "json": jpath, "json_sha256": _sha(js),
                          "nchunksperloop": loop, "schedule_chunks": s.nchunks, "steps": s.nsteps,
                          "transfers": s.ntransfers})
    manifest = {"format": LIBRARY_FORMAT, "version": LIBRARY_VERSION,
                "generator": "collsynth schedules regenerate",
                "usage": "export MSCCL_ALGO_DIR=<library>/<choice> (one choice folder: XML files only); "
                         "calls need count*sizeMultiplier divisible by nchunksperloop",
                "entries": items}
    files["MANIFEST.json"] = (json.dumps(manifest, indent=1) + "\n").encode()
    return files, manifest


def compare_folder(out: str, files: dict[str, bytes], managed: tuple[str, ...] = MANAGED) -> list[str]:
    """Paths that differ between ``files`` and the folder ``out`` (missing, changed or extra files in the
    ``managed`` entries)."""
    diffs = []
    for rel, data in files.items():
        p = os.path.join(out, rel)
        try:
            with open(p, "rb") as f:
                if f.read() != data:
                    diffs.append(f"changed {rel}")
        except OSError:
            diffs.append(f"missing {rel}")
    for rel in _existing(out, managed):
        if rel not in files:
            diffs.append(f"extra {rel}")
    return sorted(diffs)


def _existing(out: str, managed: tuple[str, ...]) -> list[str]:
    found = []
    for top in managed[1:]:
        root = os.path.join(out, top)
        for d, _, names in os.walk(root):
            for nm in names:
                found.append(os.path.relpath(os.path.join(d, nm), out).replace(os.sep, "/"))
    return found


def write(out: str, files: dict[str, bytes], managed: tuple[str, ...] = MANAGED) -> dict[str, int]:
    """Write the library into ``out``: the ``managed`` entries (MANIFEST.json, json/, msccl/) are replaced
    all at once (fileio.replace_subtrees); other files in ``out`` are kept."""
    replace_subtrees(out, files, managed)
    return {"files": len(files), "bytes": sum(len(v) for v in files.values())}
