"""clusterstraggler's entry point (issue 15): the fastest of its forms for the given arrivals.

cluster.py builds the late-GPU or the late-node form (waves.py several late ranks, with its own choices up
to waves.SEARCH_MAX_GPUS GPUs, one construction above). Their AllReduce before the arrival (prephase.py) is
hidden only behind a delay long enough; for a shorter one, or close arrivals of several ranks, waiting for
everybody and running the synchronous ``hierarchical`` schedule can finish first. So with a late rank and
``pipeline="auto"`` both are simulated (synth/simulate.py, the arrivals given) and the faster is returned;
the synchronous one as form "synchronous" (as waves.py does), its meta naming the late ranks. One late GPU
(up to waves.SEARCH_MAX_GPUS GPUs) also weighs the funnel form (``reduce_only``: before the arrival only a
reduction toward its node, which a medium delay hides where the others' AllReduce does not). Without a
late rank, or with an explicit ``pipeline``, the constructed form is returned as is (the run-time families,
synth/algorithms/stragglar/family.py, need the late forms themselves).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collsynth.apitypes import Arrivals
from collsynth.synth.algorithms import hierarchical
from collsynth.synth.algorithms.stragglar import cluster, funnel, waves
from collsynth.synth.arrivals import arrival_vector
from collsynth.synth.ir import Schedule
from collsynth.synth.simulate import simulate
from collsynth.units import parse_size


def build(n: int, collective: str = "allreduce", arrivals: Arrivals = None, size: int | float | str | None = None,
          topology: Any = None, pipeline: int | str = "auto") -> Schedule:
    """The late-GPU / late-node form of cluster.build, or the synchronous hierarchical schedule when that
    completes first for these arrivals (module docstring)."""
    s = cluster.build(n, collective, arrivals, size, topology, pipeline)
    if pipeline != "auto" or s.meta.get("form") in (None, "synchronous"):  # one node (multistraggler), or chosen
        return s
    if s.meta.get("form") not in ("gpu", "node") and n <= waves.SEARCH_MAX_GPUS:
        return s  # waves.build's own search already weighed the synchronous schedule

    times = arrival_vector(arrivals, n)
    late = np.flatnonzero(times > times.min())
    if not late.size:
        return s
    s_bytes = cluster.DEFAULT_SIZE if size is None else float(parse_size(size) if isinstance(size, str) else size)
    ours = simulate(s, s_bytes, topology, times).completion_s
    if s.meta.get("form") == "gpu" and n <= waves.SEARCH_MAX_GPUS:
        s, ours = reduce_only(s, ours, n, arrivals, s_bytes, topology, times)
    sync = hierarchical.build(n, topology=topology, size=s_bytes)
    if simulate(sync, s_bytes, topology, times).completion_s >= ours * (1 - 1e-12):
        return s
    return sync.replace(meta={**sync.meta, "algorithm": "clusterstraggler", "form": "synchronous",
                              "synchronous": "hierarchical", "late": [[int(r), float(times[r])] for r in late]})


def reduce_only(s: Schedule, ours: float, n: int, arrivals: Arrivals, size: float, topology: Any,
                times: np.ndarray) -> tuple[Schedule, float]:
    """One late GPU: its form (``s``, completing at ``ours``) or, where that wins in total, the funnel form
    (funnel.py: before the arrival only a reduction toward the late GPU's node instead of an AllReduce of
    the others, issue 15 point 1's "only a ReduceScatter"), each of waves.FUNNEL_CHOICES simulated; the
    fastest and its completion (ties keep ``s``). h100-cluster 8 x 8, 1 GiB, one GPU 4 ms late: the
    synchronous schedule 5.548 ms after the arrival, the funnel 3.556 ms; 10 ms late: the late-GPU form
    stays (3.479 against 3.554)."""
    T = funnel.rail_time(topology, n, size)
    for choice in waves.FUNNEL_CHOICES:
        f = waves.funnel_candidate(n, arrivals, size, topology, choice, T)
        t = simulate(f, size, topology, times).completion_s
        if t < ours * (1 - 1e-12):
            s, ours = f, t
    return s, ours
