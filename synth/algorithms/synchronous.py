"""The fastest synchronous AllReduce on a topology: the schedules that wait for every rank (ring, multiring,
hierarchical, tree, rhd, radix, direct, twoshot), each built and simulated, ring, multiring, direct and
twoshot only where a proven lower bound of theirs (``port_bound``) is below the best of the others.

clusterstraggler (choose.py, waves.py) returns it as its form "synchronous" when waiting for the late ranks
finishes first; `collsynth reproduce cluster` reports it as the best synchronous schedule
(synth/algorithms/stragglar/cluster_study.py). On the h100-cluster preset that is always ``hierarchical``;
on an imported machine with PCIe GPUs sharing a NIC it can be ``multiring`` (docs/stragglar.md section 9);
in one NVLink domain it is ``radix`` (gb200-nvl72, 64 MiB: radix 0.195 ms, tree 0.544 ms; dgx-h100: radix,
which is rhd there, 0.281 ms, hierarchical 0.309 ms), and on the abstract nvswitch preset from 12 to 48
GPUs twoshot (docs/results.md, radix). rhd, radix, direct and twoshot take no topology (rank order).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collsynth.synth.algorithms import direct, hierarchical, multiring, radix, rhd, ring, tree, twoshot
from collsynth.synth.algorithms.layout import ring_order, route_stats
from collsynth.synth.ir import Schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import Topology

SYNC = ("ring", "multiring", "hierarchical", "tree", "rhd", "radix", "direct", "twoshot")
BOUNDED = ("ring", "multiring", "direct", "twoshot")  # built only when their lower bound is below the others' best
PAIR_SENDERS = 128  # port_bound of direct and twoshot counts these ranks' sends (n - 1 each), not n (n - 1)


def port_bound(name: str, n: int, topo: Topology, size: float) -> float:
    """A proven lower bound of the simulated time of ``name`` (one of BOUNDED) on ``topo`` (s bytes per
    rank), from its construction without building it (ring, multiring: 2 n (n-1) and more transfers;
    direct, twoshot: n (n-1) and 2 n (n-1)). The messages each rank sends: in every ring
    (``layout.ring_order``; ``multiring.rings``, ring c carrying w_c / sum(w) of the buffer in n blocks)
    each member sends 2(n-1) messages of its ring's block to its successor; in direct every rank sends its
    whole buffer to each other rank, in twoshot two messages of s/n to each. On synth/simulate.py's model
    such a message lasts at least alpha + bytes / bandwidth of its route (the sum of the route's link
    alphas; bandwidth: its slowest link, shared only ever lower; a queued message waits besides) and holds
    one of the sender's send slots of the class of the route's first hop until it ends
    (topology.class_ports of that class; without link classes the schedule's ports: 1 for ring, the ring
    count or 2 for multiring, n - 1 for direct and twoshot), so the slowest (rank, class) needs at least
    the sum of its messages' durations divided by its slots."""
    if name in ("direct", "twoshot"):  # the sends of the first PAIR_SENDERS ranks: a max over fewer is a bound too
        k = min(n, PAIR_SENDERS)
        src = np.repeat(np.arange(k, dtype=np.int64), n - 1)
        dst = (src + np.tile(np.arange(1, n, dtype=np.int64), k)) % n
        whole = name == "direct"  # the whole buffer once to each peer, else two messages of s/n
        block, count, ports = np.full(len(src), size if whole else size / n), (1 if whole else 2), n - 1
    elif name in ("ring", "multiring"):
        if name == "ring":
            ring_list, weights, ports = [ring_order(topo, n)], [1], 1
        else:
            ring_list, weights, together = multiring.rings(n, topo)
            ports = len(ring_list) if together else 2
        src = np.concatenate([np.asarray(r, np.int64) for r in ring_list])
        dst = np.concatenate([np.roll(np.asarray(r, np.int64), -1) for r in ring_list])
        block = np.concatenate([np.full(len(r), size * w / (sum(weights) * n)) for r, w in zip(ring_list, weights)])
        count = 2 * (n - 1)
    else:
        raise ValueError(f"port_bound: {name!r} is not one of {BOUNDED}")
    alpha, bw, _ = route_stats(topo, np.stack([src, dst], 1))
    dur = count * (alpha + block / bw)
    K = len(topo.classes)
    if K > 1:
        first, _ = topo.route_classes(src, dst)
        slots = np.array([topo.class_ports[c] for c in topo.classes], np.float64)[first]
        key = src * K + first
    else:
        slots = np.full(len(src), float(ports))
        key = src
    load = np.zeros(int(key.max()) + 1)
    np.add.at(load, key, dur / slots)
    return float(load.max())


def build_sync(name: str, n: int, topo: Topology, size: float) -> Schedule:
    """Synchronous AllReduce ``name`` of SYNC on ``topo`` (not yet verified); the sized ones for ``size``."""
    if name == "hierarchical":
        return hierarchical.build(n, topology=topo, size=size)
    if name == "tree":
        return tree.build(n, topology=topo, size=size)
    if name == "multiring":
        return multiring.build(n, topology=topo)
    if name == "ring":
        return ring.build(n, topology=topo)
    if name == "rhd":
        return rhd.build(n)
    if name == "radix":
        return radix.build(n)
    if name == "direct":
        return direct.build(n)
    if name == "twoshot":
        return twoshot.build(n)
    raise ValueError(f"build_sync: {name!r} is not one of {SYNC}")


@dataclass
class Fastest:
    """``fastest``'s answer: the winner's name, its schedule (None unless kept), its completion with the
    arrivals given, and {one of BOUNDED: its lower bound} for those not built (the bound exceeds the
    best completion of the others)."""

    name: str
    schedule: Schedule | None
    completion_s: float
    pruned: dict[str, float] = field(default_factory=dict)

    def as_form(self, algorithm: str, times: Any) -> Schedule:
        """The kept schedule as ``algorithm``'s form "synchronous" (clusterstraggler's, when waiting for the
        late ranks is faster): its meta names the synchronous algorithm and the late ranks with their
        arrival times."""
        if self.schedule is None:
            raise ValueError("as_form: the schedule was not kept (fastest(..., keep=False))")
        t = np.asarray(times, np.float64)
        late = [[int(r), float(t[r])] for r in np.flatnonzero(t > t.min())]
        return self.schedule.replace(meta={**self.schedule.meta, "algorithm": algorithm, "form": "synchronous",
                                           "synchronous": self.name, "late": late})


def fastest(n: int, topo: Topology, size: float, times: Any = None,
            build: Callable[[str], Schedule] | None = None, keep: bool = True) -> Fastest:
    """The synchronous AllReduce of SYNC that completes first on ``topo`` with arrival ``times`` (None: all
    at 0; ties to the name first in alphabetical order), hierarchical, tree, rhd and radix first, then those
    of BOUNDED where ``port_bound`` (after the last arrival) is below the best so far.
    ``build(name)`` makes a candidate (default ``build_sync``; the study verifies each); ``keep=False``
    drops every schedule once simulated (``schedule`` is then None), so at most one is in memory at a time."""
    make = build if build is not None else (lambda a: build_sync(a, n, topo, size))
    t_last = 0.0 if times is None else float(np.max(times))
    done: dict[str, float] = {}
    pruned: dict[str, float] = {}
    best: Schedule | None = None
    for a in [x for x in SYNC if x not in BOUNDED] + [x for x in SYNC if x in BOUNDED]:
        if a in BOUNDED and done:
            lb = port_bound(a, n, topo, size)
            if t_last + lb > min(done.values()):
                pruned[a] = lb
                continue
        sched = make(a)
        if sched.phases:
            raise AssertionError(f"synchronous {a} has phases; it must wait for every rank")
        done[a] = simulate(sched, size, topo, times).completion_s
        if keep and min(done, key=lambda x: (done[x], x)) == a:
            best = sched
        del sched
    a = min(done, key=lambda x: (done[x], x))
    return Fastest(a, best if keep else None, done[a], pruned)
