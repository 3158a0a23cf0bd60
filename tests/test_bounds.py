"""Proven lower bounds (synth/bounds.py): hand derivations (the brief's clusters.md section 4) and a
brute-force check that no schedule the library builds beats them in the simulator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from collsynth.synth.bounds import allreduce_bound, cut_bandwidths, lower_bound, min_route_alpha
from collsynth.synth.registry import algorithms, build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import cluster_topology, make_topology

GiB = 2**30


def test_node_cut_16x8_h100():
    t = make_topology("h100-cluster", 128)
    b = allreduce_bound(t, GiB)
    assert b.kind == "node-cut"
    assert b.value_s == pytest.approx(2 * 15 / 16 * GiB / (8 * 50e9))
    assert round(b.value_s * 1e3, 2) == 5.03  # clusters.md section 4
    assert b.terms["per-gpu"] == pytest.approx(2 * 127 / 128 * GiB / 500e9)
    assert b.after_last_arrival_s == b.value_s


def test_cut_bandwidths_of_a_rail_cluster():
    t = make_topology("h100-cluster", 24)
    gout, gin, nout, nin = cut_bandwidths(t)
    assert np.allclose(gout, 500e9) and np.allclose(gin, 500e9)
    assert np.allclose(nout, 400e9) and np.allclose(nin, 400e9)  # 8 NICs; the NVSwitch is inside the node
    f = cluster_topology(3, 4, fabric="fat-tree", routing="spine", oversubscription=2.0, net_bandwidth=10e9)
    _, _, nout, nin = cut_bandwidths(f)
    assert np.allclose(nout, 4 * 10e9 / 2) and np.allclose(nin, 4 * 10e9 / 2)  # the leaf is the node's: uplinks


def test_per_gpu_bound_dgx1():
    b = allreduce_bound(make_topology("dgx1", 8), GiB)
    assert b.kind == "per-gpu" and b.value_s == pytest.approx(2 * 7 / 8 * GiB / (6 * 25e9))


def test_late_gpu_on_a_cluster():
    t = make_topology("h100-cluster", 128)
    a = np.zeros(128)
    a[5] = 10e-3
    b = allreduce_bound(t, GiB, a)
    amin = min_route_alpha(t)
    assert amin == pytest.approx(3.4e-6)
    # every other node must receive s bytes about rank 5's data through its 8 NICs: s / (G B_net)
    assert b.kind in ("late-in", "late-out") and b.value_s == pytest.approx(10e-3 + amin + GiB / 400e9)
    assert round((b.value_s - 10e-3) * 1e3, 2) == 2.69  # clusters.md: 2.68 ms plus latency
    assert b.after_last_arrival_s == pytest.approx(amin + GiB / 400e9)


def test_late_node_and_most_of_a_node_on_a_cluster():
    """The late-set bound (one-way gossip of the late GPUs with the rest): a whole late node of 8 H100s
    needs 2 s / (B_nv + 2 B_net) after it arrives; 7 of its 8 GPUs late, with the NVSwitch inside the cut,
    2 * 7 s / (7 * 500 GB/s + 450 GB/s + 7 * 50 GB/s)."""
    t = make_topology("h100-cluster", 128)
    amin = min_route_alpha(t)
    a = np.zeros(128)
    a[8:16] = 10e-3
    b = allreduce_bound(t, GiB, a)
    assert b.kind == "late-set" and b.after_last_arrival_s == pytest.approx(amin + 2 * GiB / 550e9)
    assert b.terms["late-out"] == pytest.approx(10e-3 + amin + GiB / 400e9)  # the node's 8 NICs
    a[8] = 0.0
    b = allreduce_bound(t, GiB, a)
    assert b.kind == "late-set" and b.after_last_arrival_s == pytest.approx(amin + 14 * GiB / 4300e9)
    a[8:16] = 0.0
    a[8], a[16] = 10e-3, 10e-3  # two late GPUs in two nodes: no more than the late GPU bound
    assert allreduce_bound(t, GiB, a).kind in ("late-out", "late-in")


def test_straggler_on_nvswitch_is_stragglar_bound():
    t = make_topology("nvswitch", 8)
    a = [0.0] * 7 + [5e-3]
    assert lower_bound(8, GiB, t, a) == pytest.approx(5e-3 + 3e-6 + GiB / (450 * 2**30))


def test_latency_bound_on_clusters():
    t = make_topology("h100-cluster", 128)
    b = allreduce_bound(t, 1)
    assert b.kind == "latency" and b.value_s == pytest.approx(math.ceil(math.log(128, 3)) * 3.4e-6)


def test_latency_bound_adds_the_late_ranks_bytes():
    """One late GPU in an NVLink domain with a NIC per GPU (P = 2 send ports): its bytes leave over both
    links, then the last of them needs ceil(log_3 72) - 1 more message times to reach all 72 ranks."""
    t = make_topology("gb200-nvl72", 72)
    a = np.zeros(72)
    a[5] = 5e-3
    size = 64 << 20
    b = allreduce_bound(t, size, a)
    assert t.ports == 2 and b.kind == "latency" and "r = 5" in b.formula
    assert b.after_last_arrival_s == pytest.approx(size / 950e9 + 4 * 3.4e-6)
    assert b.terms["late-out"] == pytest.approx(5e-3 + 3.4e-6 + size / 950e9)  # what it tightens


def _all_schedules(n, t, size, arrivals):
    regs = algorithms()
    late = int(np.argmax(arrivals))
    for name, info in regs.items():
        if name == "solver" or "allreduce" not in info.collectives:
            continue
        params = {}
        acc = info.params()
        if "straggler" in acc:
            params["straggler"] = late
        if "topology" in acc:
            params["topology"] = t
        if "size" in acc:
            params["size"] = size
        if "arrivals" in acc:
            params["arrivals"] = {r: float(x) for r, x in enumerate(arrivals) if x}
        yield name, build_schedule(name, n, **params)


@pytest.mark.parametrize("topo,n", [("h100-cluster", 16), ("h100-cluster", 24), ("dgx1", 8), ("ring", 6),
                                    ("torus2d", 8), ("fat", 8), ("domain", 12)])
@pytest.mark.parametrize("size", [1 << 10, 64 << 20])
@pytest.mark.parametrize("late", [None, 3, "node", "node-but-one", "spread"])
def test_no_schedule_beats_the_bound(topo, n, size, late):
    """Brute force: every algorithm of the table (built for this topology where it takes one) simulates
    to no less than the bound; late: one rank, the last node (the upper half of a single node), all
    of it but one GPU, or one GPU of every node (ranks 1, 3 and 5 where there is one node or one GPU per
    node: the late-gossip bound's case)."""
    t = (cluster_topology(2, 4, fabric="fat-tree", routing="spine", oversubscription=2.0) if topo == "fat"
         else cluster_topology(1, n) if topo == "domain"  # one NVLink domain and a NIC per GPU, as gb200-nvl72
         else make_topology(topo, n))
    a = np.zeros(n)
    if isinstance(late, int):
        a[late] = 2e-3
    elif late == "spread":
        firsts = np.unique(t.node_of, return_index=True)[1]
        a[firsts + 1 if 1 < len(firsts) < n else [1, 3, 5]] = 2e-3
    elif late is not None:
        last = np.flatnonzero(t.node_of == t.node_count - 1) if t.node_count > 1 else np.arange(n // 2, n)
        a[last[1:] if late == "node-but-one" else last] = 2e-3
    b = allreduce_bound(t, size, a)
    for name, s in _all_schedules(n, t, size, a):
        sim = simulate(s, size, t, {r: float(x) for r, x in enumerate(a) if x})
        assert sim.completion_s >= b.value_s * (1 - 1e-9), (name, sim.completion_s, b)


def test_compare_carries_the_bound(capsys):
    import json

    from collsynth.cli import main
    from collsynth.synth.compare import compare, compare_bound
    rows = compare(8, GiB, "dgx1", algorithms=["ring", "twoshot"])
    b = compare_bound(8, GiB, "dgx1")
    for r in rows:
        assert r["bound_s"] == b.value_s and r["x_bound"] == pytest.approx(r["after_last_arrival_s"] / b.value_s)
        assert r["x_bound"] >= 1
    assert main(["compare", "--gpus", "8", "--size", "1GiB", "-t", "dgx1", "--algorithms", "ring", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bound_s"] == pytest.approx(2 * 7 / 8 * GiB / 150e9)
    assert out["bound_after_last_arrival_s"] == out["bound_s"] and out["bound"]["kind"] == "per-gpu"
    assert all("x_bound" in r for r in out["rows"])
    assert main(["compare", "--gpus", "8", "--size", "1GiB", "-t", "dgx1", "--algorithms", "ring",
                 "--arrival", "3=1ms"]) == 0
    text = capsys.readouterr().out
    assert "bound: " in text and "x bound" in text


def test_late_gossip_bound_for_late_gpus_in_several_nodes():
    """Three GPUs of three nodes late together at 8 x 8: 8 + 3 - 2 = 9 messages per element cross the
    nodes' NICs (64 of 50 GB/s), 9/8 of the single late GPU's 2.68 ms; two late nodes give no more than
    late-out."""
    t = make_topology("h100-cluster", 64)
    size = 2**30
    a = np.zeros(64)
    a[[5, 13, 21]] = 1e-2
    b = allreduce_bound(t, size, a)
    assert b.kind == "late-gossip" and "k = 3" in b.formula and "Q = 8 nodes" in b.formula
    assert b.after_last_arrival_s == pytest.approx(min_route_alpha(t) + 9 * size / (64 * 50e9))
    a[21] = 0.0
    assert allreduce_bound(t, size, a).kind == "late-out"
