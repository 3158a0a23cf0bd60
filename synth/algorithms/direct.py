"""Direct (one-shot) AllReduce, and direct ReduceScatter / AllGather.

One-shot AllReduce: every rank sends its whole buffer to every other rank in one step and reduces
what it receives (cost-models.md: alpha + (n-1) s beta behind one switch port, alpha + s beta on a
full mesh). The schedule declares ports = n-1 messages per rank per step.
"""

from __future__ import annotations

from collsynth.synth.algorithms.patterns import add_direct_allgather, add_direct_reducescatter, shifted_pairs
from collsynth.synth.ir import Schedule, ScheduleBuilder


def build(n: int, collective: str = "allreduce") -> Schedule:
    ranks = list(range(n))
    meta = {"algorithm": "direct"}
    if collective == "allreduce":
        b = ScheduleBuilder(collective, n, 1, name=f"direct_allreduce_n{n}", ports=n - 1, meta=meta)
        src, dst = shifted_pairs(n)
        b.new_step()
        b.add_many(src, dst, 0, 1, True)
        return b.build()
    b = ScheduleBuilder(collective, n, n, name=f"direct_{collective}_n{n}", ports=n - 1, owner=ranks, meta=meta)
    (add_direct_reducescatter if collective == "reducescatter" else add_direct_allgather)(b, ranks, ranks)
    return b.build()
