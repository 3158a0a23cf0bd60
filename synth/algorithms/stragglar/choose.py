"""clusterstraggler's entry point (issue 15): the fastest of its forms for the given arrivals.

cluster.py builds the late-GPU or the late-node form (waves.py several late ranks, with its own choices up
to waves.SEARCH_MAX_GPUS GPUs, one construction above). Their AllReduce before the arrival (prephase.py) is
hidden only behind a delay long enough; for a shorter one, or close arrivals of several ranks, waiting for
everybody and running the synchronous ``hierarchical`` schedule can finish first. So with a late rank and
``pipeline="auto"`` both are simulated (synth/simulate.py, the arrivals given) and the faster is returned;
the synchronous one as form "synchronous" (as waves.py does), its meta naming the late ranks. Without a
late rank, or with an explicit ``pipeline``, the constructed form is returned as is (the run-time families,
synth/algorithms/stragglar/family.py, need the late forms themselves).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collsynth.apitypes import Arrivals
from collsynth.synth.algorithms import hierarchical
from collsynth.synth.algorithms.stragglar import cluster, waves
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
    sync = hierarchical.build(n, topology=topology, size=s_bytes)
    ours = simulate(s, s_bytes, topology, times).completion_s
    if simulate(sync, s_bytes, topology, times).completion_s >= ours * (1 - 1e-12):
        return s
    return sync.replace(meta={**sync.meta, "algorithm": "clusterstraggler", "form": "synchronous",
                              "synchronous": "hierarchical", "late": [[int(r), float(times[r])] for r in late]})
