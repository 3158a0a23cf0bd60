"""Registry entry for the straggler-aware MILP solver (the work is in synth/solver.py)."""

from __future__ import annotations

from typing import Any

from ...errors import CollsynthError
from ..ir import Schedule
from . import register


@register("solver", "MILP (pulp: CBC or HiGHS) for any arrival times and topology, warm-started from the "
                    "constructive algorithms, with a lower-bound certificate; small n", collectives=("allreduce",))
def build(n: int, collective: str = "allreduce", *, topology: Any = None, arrivals: Any = None,
          chunks: Any = None, size: Any = None, time_limit: Any = None, solver: str = "cbc") -> Schedule:
    """See synth.solver.solve: ``topology`` is a preset name, a JSON path or a Topology; ``arrivals`` a
    {rank: seconds} dict or a list; ``size`` bytes (or "1GiB"); ``time_limit`` seconds (or "30s")."""
    if collective != "allreduce":
        raise CollsynthError(f"the solver builds allreduce only, not {collective!r}")
    from ..solver import solve

    return solve(n, topology=topology, arrivals=arrivals, chunks=chunks, size=size, time_limit=time_limit,
                 solver=solver)
