"""Direct (one-shot) AllReduce, and direct ReduceScatter / AllGather.

One-shot AllReduce: every rank sends its whole buffer to every other rank in one step and reduces
what it receives (cost-models.md: alpha + (n-1) s beta behind one switch port, alpha + s beta on a
full mesh). The schedule declares ports = n-1 messages per rank per step.
"""

from __future__ import annotations

import numpy as np

from collsynth.synth.algorithms.patterns import add_direct_allgather, add_direct_reducescatter
from collsynth.synth.ir import Schedule, ScheduleBuilder


def build(n: int, collective: str = "allreduce") -> Schedule:
    ranks = list(range(n))
    meta = {"algorithm": "direct"}
    if collective == "allreduce":
        b = ScheduleBuilder(collective, n, 1, name=f"direct_allreduce_n{n}", ports=n - 1, meta=meta)
        src = np.repeat(np.arange(n), n - 1)
        dst = np.array([j for i in range(n) for j in range(n) if j != i], np.int64)
        b.new_step()
        b.add_many(src, dst, 0, 1, True)
        return b.build()
    b = ScheduleBuilder(collective, n, n, name=f"direct_{collective}_n{n}", ports=n - 1, owner=ranks, meta=meta)
    (add_direct_reducescatter if collective == "reducescatter" else add_direct_allgather)(b, ranks, ranks)
    return b.build()
