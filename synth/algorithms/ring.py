"""Ring AllReduce, ReduceScatter and AllGather, along the topology's best ring.

Source: Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations",
JPDC 2009. n chunks; ReduceScatter then AllGather around the ring. Cost (one port, alpha-beta):
2(n-1) alpha + 2(n-1)/n s beta for AllReduce; half of it for RS or AG, with beta the slowest hop.
The ring is 0 -> 1 -> ... -> n-1 -> 0 unless a topology is given: then ``layout.ring_order`` (the
Hamiltonian cycle of the fastest links, as NCCL builds its rings; docs/cluster-algorithms.md), which
keeps rank order on ``nvswitch`` and ``full-mesh``. Rank r always owns chunk r after the ReduceScatter.
"""

from __future__ import annotations

from typing import Any

from collsynth.synth.algorithms.layout import check_topology, ring_order
from collsynth.synth.algorithms.patterns import add_ring_allgather, add_ring_reducescatter
from collsynth.synth.ir import Schedule, ScheduleBuilder


def build(n: int, collective: str = "allreduce", topology: Any = None) -> Schedule:
    check_topology(topology, n, "ring")
    order = ring_order(topology, n)
    meta: dict[str, object] = {"algorithm": "ring"}
    if order != list(range(n)):
        meta["order"] = order
    b = ScheduleBuilder(collective, n, n, name=f"ring_{collective}_n{n}", owner=list(range(n)), meta=meta)
    if collective in ("allreduce", "reducescatter"):
        add_ring_reducescatter(b, order, order)
    if collective in ("allreduce", "allgather"):
        add_ring_allgather(b, order, order)
    return b.build()
