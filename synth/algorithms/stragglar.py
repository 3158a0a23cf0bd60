"""StragglAR: AllReduce when one known rank (the straggler) arrives late.

Source: Devraj, Ding, Vijaya Kumar, Kleinberg, Singh, "Efficient AllReduce with Stragglers",
arXiv 2505.23523 (2025); restated in docs/stragglar.md. Two phases over n-1 chunks:

1. ``reducescatter`` (waits for the n-1 punctual ranks only): a ReduceScatter among them (ring,
   direct or rhd; see stragglar_phase1), so punctual rank c ends holding chunk c summed over them.
2. ``completion`` (waits for everyone): in round c the straggler S and the owner of chunk c swap
   chunk c and both add (the exchange X(c, c): two reduce transfers in one step); reduced chunks
   spread by copies (stragglar_design). n - 2 + log2 n rounds for powers of two (the lower bound
   n - 2 + ceil(log2 n) holds for every n), found by search for other n, odd n included.

Cost after the straggler arrives, phase 1 hidden: (n-2+log2 n)(alpha + s/(n-1) beta).
Any straggler rank: the schedule is built for straggler n-1 and relabelled.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import Any

import numpy as np

from ...errors import CollsynthError
from ..ir import Schedule, ScheduleBuilder
from . import register
from .stragglar_design import lower_bound, phase2_plan
from .stragglar_phase1 import PHASE1, reducescatter_steps


def _straggler(n: int, straggler: Any) -> int:
    if straggler is None:
        return n - 1
    if isinstance(straggler, bool) or not isinstance(straggler, (int, np.integer)):
        raise CollsynthError(f"--straggler must be an integer rank in 0..{n - 1}, got {straggler!r}")
    if not 0 <= int(straggler) < n:
        raise CollsynthError(f"--straggler {straggler} is out of range: use a rank in 0..{n - 1}")
    return int(straggler)


def _pipeline(pipeline: Any) -> int:
    if pipeline == "auto":
        return 1  # the only depth implemented so far
    if isinstance(pipeline, bool) or not isinstance(pipeline, (int, np.integer)) or pipeline < 1:
        raise CollsynthError(f"--pipeline must be a positive integer, got {pipeline!r}")
    if pipeline != 1:
        raise CollsynthError(f"--pipeline {pipeline} is not implemented yet for stragglar: use --pipeline 1")
    return 1


@register("stragglar", "straggler-aware two-phase AllReduce: ReduceScatter among punctual ranks, "
          "then n-2+log2 n completion rounds once the straggler arrives", collectives=("allreduce",))
def build(n: int, collective: str = "allreduce", straggler: int | None = None, phase1: str = "ring",
          pipeline: int = 1) -> Schedule:
    """StragglAR AllReduce for n ranks, ``straggler`` late (default n-1)."""
    if collective != "allreduce":
        raise CollsynthError(f"stragglar builds allreduce only, not {collective!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise CollsynthError(f"--gpus must be an integer >= 2, got {n!r}")
    n = int(n)
    late = _straggler(n, straggler)
    if phase1 not in PHASE1:
        raise CollsynthError(f"unknown --phase1 {phase1!r}: use one of {', '.join(PHASE1)}")
    k = _pipeline(pipeline)
    p = n - 1
    plan = phase2_plan(n)
    # Chunk c (of k*p; k = 1 for now) is owned by punctual local rank c mod p, the rank S meets in
    # round c of phase 2. Phase 1 runs in member labels; member owner[c] sits at local rank c.
    steps, owner = reducescatter_steps(phase1, p)
    local = np.empty(p, np.int64)
    local[np.asarray(owner, np.int64)] = np.arange(p)
    b = ScheduleBuilder("allreduce", n, k * p, name=f"stragglar_n{n}_s{late}",
                        meta={"algorithm": "stragglar", "straggler": late, "phase1": phase1,
                              "phase2_rounds": plan.rounds, "pipeline": k, "lower_bound": lower_bound(n),
                              "phase2_method": plan.method})
    b.begin_phase("reducescatter", range(p))
    for step in steps:
        b.new_step()
        a = np.array(step, np.int64).reshape(-1, 5)
        b.add_many(local[a[:, 0]], local[a[:, 1]], a[:, 2], a[:, 3], a[:, 4].astype(bool))
    b.begin_phase("completion", range(n))
    bounds = np.searchsorted(plan.round, np.arange(plan.rounds + 1))
    for r in range(plan.rounds):
        lo, hi = bounds[r], bounds[r + 1]
        b.new_step()
        b.add_many(plan.src[lo:hi], plan.dst[lo:hi], plan.chunk[lo:hi], 1, plan.reduce[lo:hi])
    b.end_phase()
    s = b.build()
    if late != p:
        perm = [r for r in range(n) if r != late] + [late]
        s = s.relabel(perm)
    return s


def build_family(n: int, **params: Any) -> dict[int, Schedule]:
    """One verified schedule per possible straggler rank (a runtime picks one once it knows)."""
    from ..verify import check

    if "straggler" in params:
        raise CollsynthError("build_family builds every straggler: do not pass straggler")
    return {r: check(build(n, straggler=r, **params)) for r in range(n)}


def write_family(n: int, outdir: str, force: bool = False, **params: Any) -> dict[str, Any]:
    """Write stragglar_n{N}_s{R}.json for every rank R plus manifest.json into ``outdir``, atomically:
    everything is built and verified first, written into a temporary directory beside ``outdir`` and
    moved into place. A non-empty existing ``outdir`` is refused unless ``force``. Returns the manifest."""
    outdir = os.path.abspath(outdir)
    if os.path.exists(outdir) and not os.path.isdir(outdir):
        raise CollsynthError(f"{outdir} exists and is not a directory: choose another -o")
    if os.path.isdir(outdir) and os.listdir(outdir) and not force:
        raise CollsynthError(f"{outdir} is not empty: choose an empty directory or pass --force")
    parent = os.path.dirname(outdir)
    if not os.path.isdir(parent):
        raise CollsynthError(f"cannot write {outdir}: directory {parent} does not exist")
    family = build_family(n, **params)
    entries = []
    texts: dict[str, str] = {}
    for r, s in family.items():
        name = f"stragglar_n{n}_s{r}.json"
        texts[name] = s.to_json()
        entries.append({"straggler": r, "file": name, "sha256": hashlib.sha256(texts[name].encode()).hexdigest(),
                        "rounds": int(s.meta["phase2_rounds"]), "steps": s.nsteps})
    first = family[0].meta
    manifest = {"algorithm": "stragglar", "n": n, "phase1": first["phase1"], "pipeline": first["pipeline"],
                "phase2_rounds": first["phase2_rounds"], "schedules": entries}
    texts["manifest.json"] = json.dumps(manifest, indent=1) + "\n"
    tmp = tempfile.mkdtemp(dir=parent, prefix=".collsynth-family-")
    try:
        for name, text in texts.items():
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                f.write(text)
        if os.path.isdir(outdir):
            old = tempfile.mkdtemp(dir=parent, prefix=".collsynth-old-")
            os.rmdir(old)
            os.replace(outdir, old)
            try:
                os.replace(tmp, outdir)
            except BaseException:
                os.replace(old, outdir)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, outdir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest
