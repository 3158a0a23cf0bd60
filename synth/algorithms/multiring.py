"""Multi-ring AllReduce: C rings run at once, each carrying its share of the buffer (NCCL's channels).

Source: NCCL builds several rings ("channels") over disjoint NVLinks inside a box and one ring per NIC
across nodes; each runs the ring AllReduce of Patarasuk & Yuan (JPDC 2009) on its part of the buffer.
See docs/cluster-algorithms.md.

- Several nodes (a rail-optimized cluster of N nodes x G GPUs): C = G rings, one per rail. Ring c
  enters node a at local position (c + a) mod G of the node's ring, walks the node backwards and leaves
  from position (c + a + 1) mod G to the GPU on the same rail of node a+1, so the N node crossings of the
  G rings use every NIC once. Ring c carries s/G; its steps are emitted one ring after another, every
  step with one message per GPU, and the schedule declares ports 2 (one NVLink and one NIC message at
  a time). Cost about 2(n-1) (alpha_net + s/(G n B_net)) when the NIC is the bottleneck.
- One node: Hamiltonian cycles packed into the link capacities (``layout.disjoint_cycles``, up to 8;
  every ring with spare capacity adds bandwidth, so the model takes all it finds); ring c gets a share
  proportional to its bandwidth (integer chunk weights). All rings advance in the same step, so the
  schedule declares ports C. On ``dgx1``: the doubled-NVLink cycle both ways (50 GB/s each) and the
  single-NVLink cycle 0-2-1-5-6-4-7-3 both ways (25 GB/s), i.e. all six NVLinks of every GPU:
  2(n-1) alpha + 2(n-1)/n s / 150 GB/s. On ``nvswitch`` one ring (the plain ring).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.layout import check_topology, cluster_meta, disjoint_cycles, intra_order, node_grid
from collsynth.synth.ir import Schedule, ScheduleBuilder
from collsynth.synth.verify import ports_travel

MAX_RINGS = 8


def _rail_rings(grid: np.ndarray, local: list[int]) -> list[list[int]]:
    """The G rings of a cluster, each through every GPU (node by node)."""
    N, G = grid.shape
    rings = []
    for c in range(G):
        seq: list[int] = []
        for a in range(N):
            e = (c + a) % G
            seq += [int(grid[a, local[(e - j) % G]]) for j in range(G)]
        rings.append(seq)
    return rings


def rings(n: int, topology: Any = None) -> tuple[list[list[int]], list[int], bool]:
    """(rings, chunk weights, together) of the multi-ring AllReduce on ``topology`` (module docstring):
    each ring a rank sequence through all n ranks carrying weight / sum(weights) of the buffer; together:
    all rings advance in the same step (ports C), else one ring after another (ports 2)."""
    grid = node_grid(topology, n)
    N, G = grid.shape
    if N > 1 and G > 1:
        out = _rail_rings(grid, intra_order(topology, grid))
        weights = [1] * len(out)
        together = False
    elif topology is not None:
        found = disjoint_cycles(topology, np.arange(n, dtype=np.int64), MAX_RINGS)
        out = [list(o) for o, _ in found] or [list(range(n))]
        low = min((bw for _, bw in found), default=1.0)
        weights = [max(1, min(8, round(bw / low))) for _, bw in found] or [1]
        together = not ports_travel(topology) or within_class_ports(topology, out)
    else:
        out, weights, together = [list(range(n))], [1], True
    return out, weights, together


def within_class_ports(topology: Any, ring_list: list[list[int]]) -> bool:
    """Whether the rings can all advance in the same step without a GPU sending or receiving more messages
    through a link class's port than the topology allows (``class_ports``, enforced where the schedule records
    its topology: verify.ports_travel; a message takes the class of its first hop to send and of its last hop
    to receive): where GPUs relay other GPUs' traffic over their own links (a topology file whose GPU 2 carries
    0 <-> 1), two rings may both need one port; they then run one after another."""
    used: dict[tuple[int, str, int], int] = {}
    for ring in ring_list:
        for a, b in zip(ring, ring[1:] + ring[:1]):
            send, recv = topology.transfer_class(a, b)
            for key in ((a, send, 0), (b, recv, 1)):
                used[key] = used.get(key, 0) + 1
                if used[key] > topology.class_ports[key[1]]:
                    return False
    return True


_SHAPES: weakref.WeakKeyDictionary[Any, dict[int, tuple[int, int, bool]]] = weakref.WeakKeyDictionary()


def ring_shape(n: int, topology: Any = None, find: bool = True) -> tuple[int, int, bool] | None:
    """(ring count, sum of the chunk weights, together) of ``rings(n, topology)``: G rings of weight 1 on a
    topology with nodes of G GPUs (one after another), else from ``rings`` itself, remembered per topology
    object for the budget estimate (which is asked again for each size its search for the largest that fits
    tries; finding the rings of 8,192 GPUs on a switch takes seconds). ``find=False``: None where that
    search has not run yet."""
    if topology is None:
        return 1, 1, True
    nodes = int(getattr(topology, "node_count", 1) or 1)
    per = int(topology.nranks) // nodes
    if nodes > 1 and per > 1:
        return per, per, False
    known = _SHAPES.setdefault(topology, {})
    if n not in known:
        if not find:
            return None
        found, weights, together = rings(n, topology)
        known[n] = (len(found), sum(weights), together)
    return known[n]


def build(n: int, collective: str = "allreduce", topology: Any = None) -> Schedule:
    """Multi-ring AllReduce on ``topology`` (one rank-order ring without a topology)."""
    check_topology(topology, n, "multiring")
    if collective != "allreduce":
        raise CollsynthError(f"multiring builds allreduce, not {collective!r}")
    grid = node_grid(topology, n)
    ring_list, weights, together = rings(n, topology)
    C = len(ring_list)
    offs = np.concatenate([[0], np.cumsum(weights)]) * n
    meta: dict[str, object] = {"algorithm": "multiring", "rings": C, "weights": weights}
    meta.update(cluster_meta(topology, grid))
    b = ScheduleBuilder("allreduce", n, int(offs[-1]), name=f"multiring_allreduce_n{n}",
                        ports=C if together else 2, meta=meta)
    i = np.arange(n)
    for t in range(2 * (n - 1)):
        reduce = t < n - 1
        shift = t + 1 if reduce else t - (n - 1)
        if together:
            b.new_step()
        for c, ring in enumerate(ring_list):
            r = np.asarray(ring, np.int64)
            if not together:
                b.new_step()
            # member i sends block i-shift of ring c (block j = chunks offs[c] + j*w .. + w)
            b.add_many(r, np.roll(r, -1), offs[c] + ((i - shift) % n) * weights[c], weights[c], reduce)
    return b.build()
