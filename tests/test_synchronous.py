"""synth/algorithms/synchronous.py: the fastest synchronous AllReduce, and clusterstraggler falling back to it
(not only to hierarchical) when waiting for the late ranks finishes first."""

from __future__ import annotations

import numpy as np
import pytest
from shared_paths import vectors

from collsynth.synth.algorithms import synchronous
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology, topology_from_dict
from collsynth.synth.topology_import import import_topology
from collsynth.synth.verify import verify

MiB = 2**20
PCIE_XML = vectors("topologies", "nccl-xml", "nccl-issue2397-2xa100-pcie-roce-gin-attrs.xml")


def pcie_cluster():
    """4 copies of a 2 x A100 PCIe box with one RoCE NIC per GPU on a rail fabric (8 GPUs): a machine on which
    multiring, not hierarchical, is the fastest synchronous AllReduce."""
    return topology_from_dict(import_topology(PCIE_XML, nodes=4, fabric="rail").topology)


def every_sync(n, topo, size, times):
    """{name: completion} of every synchronous algorithm, built through the registry (not build_sync),
    verified and simulated."""
    out = {}
    for a in synchronous.SYNC:
        s = build_schedule(a, n, topology=topo, **({"size": size} if a in ("hierarchical", "tree") else {}))
        assert verify(s).ok, a
        out[a] = simulate(s, size, topo, times).completion_s
    return out


@pytest.mark.parametrize("spec", ["h100-cluster", "pcie"])
def test_fastest_is_the_least_of_every_synchronous_schedule(spec):
    topo = pcie_cluster() if spec == "pcie" else make_topology("h100-cluster", 16)
    n, size = topo.nranks, 256 * MiB
    times = np.zeros(n)
    times[1] = 10e-3
    got = synchronous.fastest(n, topo, size, times)
    every = every_sync(n, topo, size, times)
    assert got.name == min(every, key=lambda a: (every[a], a))
    assert got.completion_s == pytest.approx(every[got.name], rel=1e-12)
    assert got.schedule is not None and simulate(got.schedule, size, topo, times).completion_s == got.completion_s
    for a, lb in got.pruned.items():  # skipped only where its bound already loses
        assert a in synchronous.RING_FAMILY and times.max() + lb > got.completion_s and every[a] > got.completion_s
    assert got.name == ("multiring" if spec == "pcie" else "hierarchical")
    dropped = synchronous.fastest(n, topo, size, times, keep=False)
    assert (dropped.name, dropped.completion_s, dropped.schedule) == (got.name, got.completion_s, None)
    with pytest.raises(ValueError, match="not kept"):
        dropped.as_form("clusterstraggler", times)


def test_clusterstraggler_waits_with_the_fastest_synchronous_schedule():
    """On the PCIe machine the late-GPU and funnel forms lose to waiting, and waiting is fastest with
    multiring (hierarchical, the only fallback before, is 14% slower there): clusterstraggler returns it,
    verified, named in its meta and in compare's note."""
    topo = pcie_cluster()
    n, size = topo.nranks, 256 * MiB
    arr = {1: 10e-3}
    s = build_schedule("clusterstraggler", n, arrivals=arr, size=size, topology=topo)
    assert verify(s).ok
    assert s.meta["form"] == "synchronous" and s.meta["synchronous"] == "multiring"
    assert s.meta["late"] == [[1, 10e-3]]
    times = np.zeros(n)
    times[1] = 10e-3
    every = every_sync(n, topo, size, times)
    ours = simulate(s, size, topo, arr).completion_s
    assert ours == pytest.approx(min(every.values()), rel=1e-12) and ours < every["hierarchical"] * 0.95
