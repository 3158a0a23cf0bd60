"""The largest size that fits when a schedule needs more thread blocks than can be resident at once.

A plan's thread blocks wait on each other (each rank's segments are chained, and every block waits on
its peers), so all of them must be resident: one 1024-thread block per SM. When a schedule needs more,
``emit_plan`` (the emitter the format registry uses) turns that failure into one line naming the limit
and the largest size of the same family that fits: the largest ``--pipeline`` for a pipelined StragglAR
schedule, fewer blocks per part for clusterstraggler (its shape follows its arrivals and topology), else the
largest GPU count for the schedule's algorithm. Found by a proportional guess and bisection (the
thread-block count grows with both); the block count of clusterstraggler by interpolating the counts
(``largest_within``: each probe lowers the schedule, 30 s at 512 GPUs). How many can be resident: emit.resident_limit.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from collsynth import progress
from collsynth.backends.mscclpp.emit import TooManyThreadBlocks, fits, resident_limit, thread_blocks, too_many_blocks
from collsynth.backends.mscclpp.emit import emit_plan as emit_plan_unfitted
from collsynth.budget import largest_true
from collsynth.errors import CollsynthError
from collsynth.synth.ir import Schedule
from collsynth.synth.registry import algorithms, build_schedule


def _ok(alg: str, n: int, params: dict[str, Any], **opts: Any) -> bool:
    try:
        s = build_schedule(alg, n, "allreduce", **params)
    except CollsynthError:
        return False
    return fits(s, **opts)[0]


def largest_passing(lo: int, hi: int, ok: Any, guess: int | None = None) -> int:
    """The largest x in [lo, hi] with ok(x), assuming ok is monotone; lo - 1 when none. ``guess`` (a
    proportional estimate) is probed first and steps of guess / 8 from it bracket the answer before the
    bisection (budget.largest_true); every size is probed at most once, none at or above one that failed."""
    if guess is None or not lo < guess < hi:
        return largest_true(ok, lo, hi)
    step = max(1, guess // 8)
    if ok(guess):
        a = guess
        while a + step <= hi and ok(a + step):
            a += step
        return largest_true(lambda x: x == a or ok(x), a, min(hi, a + step - 1))  # ok(a) is known
    b = guess - 1
    while b - step >= lo and not ok(b - step + 1):
        b -= step
    a = b - step + 1  # passed, unless the steps ran past lo
    return largest_true(ok, lo, b) if a <= lo else largest_true(lambda x: x == a or ok(x), a, b)


def largest_within(lo: int, hi: int, count: Any, limit: int, above: tuple[int, int]) -> int:
    """The largest x in [lo, hi] whose ``count(x)`` (a thread-block count growing with x, or None where x is
    unusable) is at most ``limit``; lo - 1 when none. ``above`` is a known (x > hi, count > limit), used as the
    upper end when it is hi + 1 (else the search stops at hi, the count above it unknown). Each probe
    interpolates linearly between the nearest counts known on either side (from 0 at x = 0 while none is
    below: the first probe is the proportional guess), and bisects after two probes on the same side, so a
    count that grows about linearly is found in two or three lowerings instead of a bisection's log2(hi)."""
    a, na = lo - 1, 0 if lo == 1 else None
    b, nb = above if above[0] <= hi + 1 else (hi + 1, None)
    sides: list[bool] = []
    while b - a > 1:
        if na is not None and nb is not None and nb > na and sides[-2:] not in ([True, True], [False, False]):
            x = a + (limit - na) * (b - a) // (nb - na)
        else:
            x = (a + b) // 2
        x = min(max(x, a + 1), b - 1)
        n = count(x)
        ok = n is not None and n <= limit
        if ok:
            a, na = x, n
        else:
            b, nb = x, n
        sides.append(ok)
    return a


def fit_hint(schedule: Any, need: int = 0, limit: int = 0, **opts: Any) -> str:
    """'the largest ... that fits is X' for the schedule's family (or why none does); ``need`` thread
    blocks were needed where ``limit`` fit (for a first proportional guess)."""
    meta = schedule.meta
    alg = meta.get("algorithm")
    n = schedule.nranks
    if alg == "stragglar" and int(meta.get("pipeline", 1)) > 1:
        k = int(meta["pipeline"])
        params = {"straggler": meta.get("straggler"), "phase1": meta.get("phase1", "ring")}
        guess = k * limit // need if need else None
        best = largest_passing(1, k - 1, lambda x: _ok("stragglar", n, {**params, "pipeline": x}, **opts), guess)
        return f"the largest --pipeline that fits is {best}" if best >= 1 else "no --pipeline fits on this many GPUs"
    if alg == "clusterstraggler":  # its shape follows the arrivals and the topology, not only the GPU count
        m = meta.get("pipeline")
        fewer = f" with fewer blocks per part (--pipeline below {m})" if isinstance(m, int) and m > 1 else ""
        return f"build it{fewer}, or emit msccl-xml or nccl-cuda"
    if isinstance(alg, str) and alg in algorithms() and schedule.collective == "allreduce":
        params = {"straggler": None} if alg == "stragglar" else {}
        best = largest_passing(2, n - 1, lambda x: _ok(alg, x, params, **opts))
        return f"the largest GPU count that fits for {alg} is {best}" if best >= 2 else f"{alg} does not fit"
    return "use an algorithm with fewer steps per rank"


def fit_cluster_pipeline(schedule: Schedule, params: Mapping[str, Any], **options: Any) -> tuple[Schedule, str]:
    """For an MSCCL++ plan of a clusterstraggler late-GPU or late-node form built with ``params`` (the build's
    keywords): ``schedule`` as it is when its plan fits the thread blocks that can be resident; else, when its
    block count was chosen automatically (no ``pipeline`` or "auto"), the same build with the most blocks per part
    whose plan fits and a line saying so, and when it was given, CollsynthError naming the most that fit. Other
    schedules are returned as they are ("" for the line): emit_plan names the limit and what fits."""
    meta = schedule.meta
    M = meta.get("pipeline")
    if meta.get("algorithm") != "clusterstraggler" or meta.get("form") not in ("gpu", "node") \
            or not isinstance(M, int) or M < 2:
        return schedule, ""
    opts = {k: options[k] for k in ("proto", "pipeline", "gpus_per_node", "chunks") if k in options}
    limits = resident_limit(schedule, options.get("sms"))
    limit = limits[0]
    try:
        worst, need = thread_blocks(schedule, **opts)
    except CollsynthError:
        return schedule, ""  # emit_plan names what cannot be lowered
    if need <= limit:
        return schedule, ""
    built: dict[int, Schedule] = {}

    def rebuild(x: int) -> Schedule:
        if x not in built:
            s = build_schedule("clusterstraggler", schedule.nranks, schedule.collective, **{**params, "pipeline": x})
            if "topology" in meta:
                s.meta["topology"] = meta["topology"]
            built[x] = s
        return built[x]

    def count(x: int) -> int | None:
        progress.note(f"mscclpp-plan: {need} thread blocks per rank at {M} blocks per part, at most {limit} "
                      f"resident: trying {x}")
        s = rebuild(x)
        if s.meta.get("form") != meta["form"]:
            return None
        try:
            return thread_blocks(s, **opts)[1]
        except CollsynthError:
            return None

    best = largest_within(1, M - 1, count, limit, (M, need))
    if params.get("pipeline", "auto") != "auto":
        most = f"the largest --pipeline that fits is {best}" if best >= 1 else "no --pipeline fits"
        raise CollsynthError(f"{too_many_blocks(worst, need, limits)}: {most}, or emit msccl-xml or nccl-cuda")
    if best < 1:
        return schedule, ""
    s = rebuild(best)
    before, after = meta.get("after_arrival_estimate_s"), s.meta.get("after_arrival_estimate_s")
    cost = (f" (after the arrival, estimated {before * 1e3:.3f} -> {after * 1e3:.3f} ms)"
            if isinstance(before, float) and isinstance(after, float) else "")
    return s, (f"--pipeline auto: {M} blocks per part need {need} thread blocks per rank, more than the {limit} "
               f"that can be resident; built with {best}, the most whose plan fits{cost}")


@functools.wraps(emit_plan_unfitted, assigned=())  # same keyword options (inspect.signature sees them)
def emit_plan(schedule: Any, **options: Any) -> str:
    """``emit.emit_plan``, except that a schedule needing too many thread blocks fails with one line naming
    the limit and the largest size that fits."""
    try:
        return emit_plan_unfitted(schedule, **options)
    except TooManyThreadBlocks as e:
        opts: dict[str, Any] = {k: options[k] for k in ("proto", "pipeline", "gpus_per_node", "chunks") if k in options}
        limit = opts["sms"] = resident_limit(schedule, options.get("sms"))[0]  # the rebuilt ones record no topology
        raise CollsynthError(f"{e}: {fit_hint(schedule, e.need, limit, **opts)}") from None
