"""A StragglAR family: one verified schedule per possible straggler rank, and its manifest on disk,
so that a runtime can pick a schedule once it knows who is late."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from collsynth.errors import CollsynthError
from collsynth.fileio import check_outdir, write_tree
from collsynth.synth.algorithms.stragglar.build import build
from collsynth.synth.ir import Schedule
from collsynth.synth.verify import check


def build_family(n: int, **params: Any) -> dict[int, Schedule]:
    """One verified schedule per possible straggler rank (a runtime picks one once it knows)."""
    if "straggler" in params:
        raise CollsynthError("build_family builds every straggler: do not pass straggler")
    return {r: check(build(n, straggler=r, **params)) for r in range(n)}


def write_family(n: int, outdir: str, force: bool = False, **params: Any) -> dict[str, Any]:
    """Write stragglar_n{N}_s{R}.json for every rank R plus manifest.json into ``outdir``, all or
    nothing (fileio.write_tree): everything is built and verified first. A non-empty existing
    ``outdir`` is refused unless ``force``, which replaces it. Returns the manifest."""
    check_outdir(outdir, force)
    family = build_family(n, **params)
    entries = []
    texts: dict[str, str | bytes] = {}
    for r, s in family.items():
        name = f"stragglar_n{n}_s{r}.json"
        text = s.to_json()
        texts[name] = text
        rounds = s.meta["phase2_rounds"]
        assert isinstance(rounds, int)  # build() records the completion collective's round count
        entries.append({"straggler": r, "file": name, "sha256": hashlib.sha256(text.encode()).hexdigest(),
                        "rounds": rounds, "steps": s.nsteps})
    first = family[0].meta
    manifest = {"algorithm": "stragglar", "n": n, "phase1": first["phase1"], "pipeline": first["pipeline"],
                "phase2_rounds": first["phase2_rounds"], "schedules": entries}
    texts["manifest.json"] = json.dumps(manifest, indent=1) + "\n"
    write_tree(outdir, texts, force=force)
    return manifest
