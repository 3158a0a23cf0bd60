"""synth/algorithms/synchronous.py: the fastest synchronous AllReduce, and clusterstraggler falling back to it
(not only to hierarchical) when waiting for the late ranks finishes first."""

from __future__ import annotations

import numpy as np
import pytest
from shared_paths import vectors

from collsynth.synth.algorithms import synchronous
from collsynth.synth.algorithms.stragglar import domain
from collsynth.synth.compare import compare
from collsynth.synth.registry import algorithm_params, build_schedule
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
        params = {k: v for k, v in (("topology", topo), ("size", size)) if k in algorithm_params(a)}
        s = build_schedule(a, n, **params)
        assert verify(s).ok, a
        out[a] = simulate(s, size, topo, times).completion_s
    return out


@pytest.mark.parametrize("spec", ["h100-cluster", "pcie", "gb200-nvl72", "dgx-h100", "nvswitch"])
def test_fastest_is_the_least_of_every_synchronous_schedule(spec):
    gpus = {"gb200-nvl72": 72, "dgx-h100": 8, "nvswitch": 12}.get(spec, 16)
    topo = pcie_cluster() if spec == "pcie" else make_topology(spec, gpus)
    n, size = topo.nranks, (64 if spec in ("gb200-nvl72", "nvswitch") else 256) * MiB
    times = np.zeros(n)
    times[1] = 10e-3
    got = synchronous.fastest(n, topo, size, times)
    every = every_sync(n, topo, size, times)
    assert got.name == min(every, key=lambda a: (every[a], a))
    assert got.completion_s == pytest.approx(every[got.name], rel=1e-12)
    assert got.schedule is not None and simulate(got.schedule, size, topo, times).completion_s == got.completion_s
    for a, lb in got.pruned.items():  # skipped only where its bound already loses
        assert a in synchronous.BOUNDED and times.max() + lb > got.completion_s and every[a] > got.completion_s
    # one NVLink domain: the topology-free halving-doubling schedules beat every topology-aware one
    # (and on the abstract nvswitch preset, whose one port per rank takes n - 1 messages at once, twoshot)
    want = {"pcie": "multiring", "gb200-nvl72": "radix", "dgx-h100": "radix", "nvswitch": "twoshot"}
    assert got.name == want.get(spec, "hierarchical")
    if spec in ("h100-cluster", "gb200-nvl72"):  # their sends queue on one port per class: never built
        assert {"direct", "twoshot"} <= set(got.pruned)
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


@pytest.mark.parametrize("preset,n,size,delay,want", [("gb200-nvl72", 72, 64 * MiB, 5e-3, "domain"),
                                                      ("gb200-nvl72", 72, 256 * MiB, 5e-3, "domain"),
                                                      ("gb200-nvl72", 72, 64 * MiB, 2e-4, "radix"),
                                                      ("nvswitch", 5, 1024 * MiB, 5e-3, "flat")])
def test_clusterstraggler_in_one_nvlink_domain_weighs_the_synchronous_schedules(preset, n, size, delay, want):
    """One NVLink domain (no nodes): clusterstraggler's flat form is multistraggler, which is alpha-bound on
    many GPUs (n - 2 + log2 n rounds after the arrival); with one late GPU the broadcast form of domain.py
    (about M + log2 n rounds) is weighed too, and so is the fastest synchronous schedule. gb200-nvl72, 5 ms
    late: the broadcast form, 0.173 ms after the arrival at 64 MiB (radix 0.195, multistraggler 0.343) and
    0.491 at 256 MiB (multistraggler 0.585); 0.2 ms late its AllReduce before the arrival does not fit and radix
    is returned as form "synchronous"; on 5 GPUs multistraggler stays. Here (no ties within domain.TIE)
    clusterstraggler completes no later than any of them, and compare's note names it."""
    topo = make_topology(preset, n)
    late = n // 2
    arr = {late: delay}
    times = np.zeros(n)
    times[late] = delay
    s = build_schedule("clusterstraggler", n, arrivals=arr, size=size, topology=topo)
    assert verify(s).ok and verify(s, topology=topo).ok
    flat = build_schedule("multistraggler", n, arrivals=arr, size=size, topology=topo)
    t_flat = simulate(flat, size, topo, arr).completion_s
    bcast = domain.build(n, times, float(size), topo)
    assert bcast is not None and verify(bcast, topology=topo).ok and bcast.ports == 1
    t_bcast = simulate(bcast, size, topo, arr).completion_s
    every = every_sync(n, topo, size, times)
    ours = simulate(s, size, topo, arr).completion_s
    assert ours == pytest.approx(min(t_flat, t_bcast, *every.values()), rel=1e-12)
    note = compare(n, size, topo, arr, algorithms=["clusterstraggler"])[0]["note"]
    if want == "flat":
        assert "synchronous" not in s.meta and ours == t_flat < min(t_bcast, *every.values())
        assert note == f"flat form (multistraggler), straggler={late} K={s.meta['pipeline']}"
    elif want == "domain":
        assert s.meta["form"] == "domain" and s.meta["late"] == [late] and "gpus_per_node" not in s.meta
        assert ours == t_bcast < min(t_flat, *every.values())
        assert note == f"domain form, late {late} ({delay * 1e3:.3f} ms) K={s.meta['pipeline']}"
    else:
        assert s.meta["form"] == "synchronous" and s.meta["synchronous"] == want and s.meta["late"] == [[late, delay]]
        assert ours - delay < 0.6 * (t_flat - delay)  # after the arrival: 0.195 ms against 0.343
        assert note == f"synchronous ({want}: waiting is faster)"
