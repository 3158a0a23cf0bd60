"""Ring AllReduce, ReduceScatter and AllGather.

Source: Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations",
JPDC 2009. n chunks; ReduceScatter then AllGather around the ring 0 -> 1 -> ... -> n-1 -> 0.
Cost (one port, alpha-beta): 2(n-1) alpha + 2(n-1)/n s beta for AllReduce; half of it for RS or AG.
After the ReduceScatter rank r holds chunk r.
"""

from __future__ import annotations

from collsynth.synth.algorithms.patterns import add_ring_allgather, add_ring_reducescatter
from collsynth.synth.ir import Schedule, ScheduleBuilder


def build(n: int, collective: str = "allreduce") -> Schedule:
    ranks = list(range(n))
    b = ScheduleBuilder(collective, n, n, name=f"ring_{collective}_n{n}", owner=ranks,
                        meta={"algorithm": "ring"})
    if collective in ("allreduce", "reducescatter"):
        add_ring_reducescatter(b, ranks, ranks)
    if collective in ("allreduce", "allgather"):
        add_ring_allgather(b, ranks, ranks)
    return b.build()
