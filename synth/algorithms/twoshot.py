"""Two-shot AllReduce: direct ReduceScatter, then direct AllGather.

Two steps of n-1 messages of s/n bytes per rank: 2 alpha + 2(n-1)/n s beta on a non-blocking switch
(cost-models.md, "Two-shot AR"). Declares ports = n-1.
"""

from __future__ import annotations

from collsynth.synth.algorithms.patterns import add_direct_allgather, add_direct_reducescatter
from collsynth.synth.ir import Schedule, ScheduleBuilder


def build(n: int, collective: str = "allreduce") -> Schedule:
    ranks = list(range(n))
    b = ScheduleBuilder(collective, n, n, name=f"twoshot_allreduce_n{n}", ports=n - 1,
                        meta={"algorithm": "twoshot"})
    add_direct_reducescatter(b, ranks, ranks)
    add_direct_allgather(b, ranks, ranks)
    return b.build()
