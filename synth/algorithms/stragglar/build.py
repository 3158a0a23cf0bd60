"""StragglAR: AllReduce when one known rank (the straggler) arrives late.

Source: Devraj, Ding, Vijaya Kumar, Kleinberg, Singh, "Efficient AllReduce with Stragglers",
arXiv 2505.23523 (2025); restated in docs/stragglar.md. Two phases over n-1 chunks:

1. ``reducescatter`` (waits for the n-1 punctual ranks only): a ReduceScatter among them (ring,
   direct or rhd; see phase1.py), so punctual rank c ends holding chunk c summed over them.
2. ``completion`` (waits for everyone): in round c the straggler S and the owner of chunk c swap
   chunk c and both add (the exchange X(c, c): two reduce transfers in one step); reduced chunks
   spread by copies (design.py, phase2.py). n - 2 + log2 n rounds for powers of two (the lower bound
   n - 2 + ceil(log2 n) holds for every n), found by search for other n, odd n included.

Cost after the straggler arrives, phase 1 hidden: (n-2+log2 n)(alpha + s/(n-1) beta).
Any straggler rank: the schedule is built for straggler n-1 and relabelled.

Pipelining (``pipeline=K``, issue 9): the buffer is cut into K(n-1) chunks; S reduces them one per
round, meeting punctual GPU 0, 1, ..., n-2, 0, 1, ... in turn, so phase 2 takes K(n-1) - 1 +
ceil(log2 n) rounds of s/(K(n-1)) (the lower bound; n = 3 takes one more), i.e. about
(1 + (ceil(log2 n) - 1)/(K(n-1))) s beta instead of (1 + (ceil(log2 n) - 1)/(n-1)) s beta. The
cyclic design carries over unchanged (its port conditions are residues mod n-1); see design.py. Buffer layout: the
j-th chunk S reduces (logical chunk j, owned by GPU j mod (n-1)) is stored at physical chunk
(j mod (n-1)) K + j div (n-1), so each punctual GPU owns one contiguous block of K chunks and
phase 1 is the unpipelined ReduceScatter with every transfer K chunks long: same steps, same bytes,
one message per rank per step (round-robin physical ownership would need K messages per step or K
times the steps). ``pipeline="auto"`` picks K from the alpha-beta model (pipeline.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.stragglar.design import lower_bound
from collsynth.synth.algorithms.stragglar.phase1 import PHASE1, reducescatter_steps
from collsynth.synth.algorithms.stragglar.phase2 import phase2_plan
from collsynth.synth.algorithms.stragglar.pipeline import resolve_pipeline
from collsynth.synth.ir import Schedule, ScheduleBuilder


def _straggler(n: int, straggler: Any) -> int:
    if straggler is None:
        return n - 1
    if isinstance(straggler, bool) or not isinstance(straggler, (int, np.integer)):
        raise CollsynthError(f"--straggler must be an integer rank in 0..{n - 1}, got {straggler!r}")
    if not 0 <= int(straggler) < n:
        raise CollsynthError(f"--straggler {straggler} is out of range: use a rank in 0..{n - 1}")
    return int(straggler)


def build(n: int, collective: str = "allreduce", straggler: int | None = None, phase1: str = "ring",
          pipeline: int | str = 1, size: int | float | str | None = None, alpha: float | str | None = None,
          bandwidth: float | str | None = None) -> Schedule:
    """StragglAR AllReduce for n ranks, ``straggler`` late (default n-1), K(n-1) chunks for
    ``pipeline=K`` (or "auto": K from the alpha-beta model for ``size`` bytes per rank, ``alpha``
    seconds per message and ``bandwidth`` bytes/s per port; see pipeline.py). A given ``size``
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
