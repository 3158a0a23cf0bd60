"""MSCCL XML for pipelined StragglAR schedules: the largest pipeline depth K that fits the runtime.

A pipelined StragglAR schedule (synth/algorithms/stragglar/build.py, ``pipeline=K``) has K(n-1) chunks, a
phase 1 whose transfers move K chunks at a time (each punctual rank owns a block of K chunks) and
K(n-1) - 1 + ceil(log2 n) completion steps. The MSCCL emitter (emit.py) spreads long programs
over channels so that no thread block exceeds the runtime's 64 steps; what stops a large K is one of
the runtime's other limits: ``cnt`` < 72 chunks per step (phase 1 moves K chunks per step), 64
thread blocks per GPU, 32 channels, 4096 XML elements per rank. ``emit_stragglar_xml`` turns such a
failure into one error that names the limit and the largest K that fits.

The limits are not monotone in K everywhere (more channels can mean fewer steps per thread block),
so "the largest K that fits" is found by bisection: K fits and K+1 does not.
"""

from __future__ import annotations

import functools
from typing import Any

from collsynth.backends.msccl.emit import emit_xml
from collsynth.backends.msccl.model import MAX_COUNT
from collsynth.errors import CollsynthError
from collsynth.synth.registry import build_schedule


def _fits(n: int, k: int, straggler: int | None, phase1: str, xml_options: dict[str, Any]) -> bool:
    try:
        s = build_schedule("stragglar", n, "allreduce", straggler=straggler, phase1=phase1, pipeline=k)
        emit_xml(s, **xml_options, check=False)
    except CollsynthError:
        return False
    return True


def xml_max_pipeline(n: int, *, straggler: int | None = None, phase1: str = "ring", upto: int | None = None,
                     **xml_options: Any) -> int:
    """The largest K <= ``upto`` (bisection: K fits and K+1 does not) for which the pipelined
    StragglAR schedule emits as MSCCL XML with ``xml_options``; 0 when not even K = 1 fits."""

    base = build_schedule("stragglar", n, "allreduce", straggler=straggler, phase1=phase1)
    cmax = int(base.count.max()) if base.ntransfers else 1
    hi = (MAX_COUNT - 1) // cmax  # phase 1 moves cmax*K chunks in one step
    if upto is not None:
        hi = min(hi, upto)
    if hi < 1 or not _fits(n, 1, straggler, phase1, xml_options):
        return 0
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fits(n, mid, straggler, phase1, xml_options):
            lo = mid
        else:
            hi = mid - 1
    return lo


@functools.wraps(emit_xml, assigned=())  # same keyword options as emit_xml (inspect.signature sees them)
def emit_stragglar_xml(schedule: Any, **xml_options: Any) -> str:
    """``emit.emit_xml``, except that a pipelined StragglAR schedule that does not fit fails with
    one line naming the limit and the largest ``--pipeline`` that fits."""

    try:
        return emit_xml(schedule, **xml_options)
    except CollsynthError as e:
        meta = schedule.meta
        k = int(meta.get("pipeline", 1)) if meta.get("algorithm") == "stragglar" else 1
        if k <= 1:
            raise
        opts = {key: v for key, v in xml_options.items() if key != "check"}
        best = xml_max_pipeline(schedule.nranks, straggler=meta.get("straggler"), phase1=meta.get("phase1", "ring"),
                                upto=k - 1, **opts)
        hint = (f"the largest --pipeline that fits is {best}" if best else
                "no --pipeline fits with these options")
        raise CollsynthError(f"--pipeline {k} does not fit MSCCL XML: {str(e).rstrip('.')}; {hint}") from None
