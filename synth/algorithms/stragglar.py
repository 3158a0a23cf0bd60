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

Pipelining (``pipeline=K``, issue 9): the buffer is cut into K(n-1) chunks; S reduces them one per
round, meeting punctual GPU 0, 1, ..., n-2, 0, 1, ... in turn, so phase 2 takes K(n-1) - 1 +
ceil(log2 n) rounds of s/(K(n-1)) (the lower bound; n = 3 takes one more), i.e. about
(1 + log2(n)/(K(n-1))) s beta instead of (1 + log2(n)/(n-1)) s beta. The cyclic design carries
over unchanged (its port conditions are residues mod n-1); see stragglar_design. Buffer layout: the
j-th chunk S reduces (logical chunk j, owned by GPU j mod (n-1)) is stored at physical chunk
(j mod (n-1)) K + j div (n-1), so each punctual GPU owns one contiguous block of K chunks and
phase 1 is the unpipelined ReduceScatter with every transfer K chunks long: same steps, same bytes,
one message per rank per step (round-robin physical ownership would need K messages per step or K
times the steps). ``pipeline="auto"`` picks K from the alpha-beta model (stragglar_pipeline).
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
from .stragglar_pipeline import resolve_pipeline


def _straggler(n: int, straggler: Any) -> int:
    if straggler is None:
        return n - 1
    if isinstance(straggler, bool) or not isinstance(straggler, (int, np.integer)):
        raise CollsynthError(f"--straggler must be an integer rank in 0..{n - 1}, got {straggler!r}")
    if not 0 <= int(straggler) < n:
        raise CollsynthError(f"--straggler {straggler} is out of range: use a rank in 0..{n - 1}")
    return int(straggler)


@register("stragglar", "straggler-aware two-phase AllReduce: ReduceScatter among punctual ranks, "
          "then n-2+log2 n completion rounds once the straggler arrives (K(n-1)-1+log2 n rounds of "
          "smaller chunks with --pipeline K)", collectives=("allreduce",))
def build(n: int, collective: str = "allreduce", straggler: int | None = None, phase1: str = "ring",
          pipeline: int | str = 1, size: int | float | str | None = None, alpha: float | str | None = None,
          bandwidth: float | str | None = None) -> Schedule:
    """StragglAR AllReduce for n ranks, ``straggler`` late (default n-1), K(n-1) chunks for
    ``pipeline=K`` (or "auto": K from the alpha-beta model for ``size`` bytes per rank, ``alpha``
    seconds per message and ``bandwidth`` bytes/s per port; see stragglar_pipeline). A given ``size``
    also bounds K: a chunk must hold at least one 4-byte element."""
    if collective != "allreduce":
        raise CollsynthError(f"stragglar builds allreduce only, not {collective!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise CollsynthError(f"--gpus must be an integer >= 2, got {n!r}")
    n = int(n)
    late = _straggler(n, straggler)
    if phase1 not in PHASE1:
        raise CollsynthError(f"unknown --phase1 {phase1!r}: use one of {', '.join(PHASE1)}")
    choice = resolve_pipeline(n, pipeline, size=size, alpha=alpha, bandwidth=bandwidth)
    k = choice.k
    p = n - 1
    plan = phase2_plan(n, k=k)
    # Logical chunk j (the one S reduces in round j) belongs to punctual local rank j mod p and is
    # stored at physical chunk (j mod p) k + j div p: local rank g owns the block [g k, g k + k).
    # Phase 1 runs in member labels over p blocks; member owner[c] sits at local rank c.
    steps, owner = reducescatter_steps(phase1, p)
    local = np.empty(p, np.int64)
    local[np.asarray(owner, np.int64)] = np.arange(p)
    meta = {"algorithm": "stragglar", "straggler": late, "phase1": phase1, "phase2_rounds": plan.rounds,
            "pipeline": k, "lower_bound": lower_bound(n, k), "phase2_method": plan.method}
    if choice.model is not None:
        meta["pipeline_model"] = choice.model
    name = f"stragglar_n{n}_s{late}" if k == 1 else f"stragglar_n{n}_k{k}_s{late}"
    b = ScheduleBuilder("allreduce", n, k * p, name=name, meta=meta)
    b.begin_phase("reducescatter", range(p))
    for step in steps:
        b.new_step()
        a = np.array(step, np.int64).reshape(-1, 5)
        b.add_many(local[a[:, 0]], local[a[:, 1]], a[:, 2] * k, a[:, 3] * k, a[:, 4].astype(bool))
    b.begin_phase("completion", range(n))
    phys = plan.chunk % p * k + plan.chunk // p
    bounds = np.searchsorted(plan.round, np.arange(plan.rounds + 1))
    for r in range(plan.rounds):
        lo, hi = bounds[r], bounds[r + 1]
        b.new_step()
        b.add_many(plan.src[lo:hi], plan.dst[lo:hi], phys[lo:hi], 1, plan.reduce[lo:hi])
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
