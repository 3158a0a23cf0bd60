"""One late GPU in nodes whose NICs together outrun its NVLink port: the node-broadcast form of clusterstraggler
(cluster.ClusterPlan._bcast_node; docs/stragglar.md section 9, "The node-broadcast form"). Every schedule is verified;
times are model results."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_cluster_algorithms import cluster

from collsynth.backends import emit
from collsynth.backends.msccl.schedule import xml_to_schedule
from collsynth.backends.mscclpp import check_plan_text, plan_text_to_schedule
from collsynth.synth.algorithms.layout import node_grid
from collsynth.synth.algorithms.stragglar import cluster as cs
from collsynth.synth.algorithms.stragglar import cluster_cost as cost
from collsynth.synth.algorithms.stragglar.bcast import broadcast_rounds
from collsynth.synth.compare import compare
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import verify

GiB = 2**30


def nvlink_moves(plan: cs.ClusterPlan, after: float) -> list[tuple[int, int, int, int, bool]]:
    """The NVLink moves of the plan listed at or after ``after`` in its list-scheduling model."""
    return [mv for i, atom in enumerate(plan.atoms) for mv in atom
            if plan.est[i] >= after and plan.node[mv[0]] == plan.node[mv[1]]]


def test_bcast_applies_where_the_nics_outrun_an_nvlink_port():
    fast = cost.link_model(cluster(2, 24, bw_nv=900e9), node_grid(cluster(2, 24, bw_nv=900e9), 48))
    assert cost.bcast_applies(24, fast) and cost.bcast_applies(72, fast) and not cost.bcast_applies(12, fast)
    h100 = make_topology("h100-cluster", 16)  # 8 x 400 Gb/s against 450 GB/s: the NICs set the pace
    assert not cost.bcast_applies(8, cost.link_model(h100, node_grid(h100, 16)))
    assert not cost.bcast_applies(2, (1e-6, 1e9, 1e-6, 1e12))


@pytest.mark.parametrize("N,G,L,M,k", [(2, 4, 0, 2, 2), (2, 4, 3, 3, 2), (3, 6, 8, 2, 3), (2, 6, 5, 3, 4),
                                       (4, 4, 6, 2, 3), (2, 8, 3, 2, 8)])
def test_the_node_broadcast_form_verifies_and_l_sends_each_block_once(N, G, L, M, k):
    """L's node broadcasts the final rows from L: every node peer gets every block of every row once, from L as a
    reduction into its S' or from a peer as a copy of the final block; L's sends are all reductions (the
    hypercube's root sends the last block to each of its partners that lack it, so at most q - 1 more than the
    blocks), and L gets every block back once, as a copy; verified for any late index and node count."""
    n = N * G
    t = cluster(N, G, bw_nv=100e9)  # G B_net >= B_nv from G = 2
    times = np.zeros(n)
    times[L] = 0.05
    runs = cost.make_runs(M, 1, M)
    plan = cs.merged_plan(t, n, times, GiB, M, runs, runs, [L], bcast=k)
    assert plan.bcast and not plan.wide
    s = plan.to_schedule("bcast", {})
    res = verify(s)
    assert res.ok, res.message
    a = int(plan.node[L])
    nv = [mv for mv in nvlink_moves(plan, 0.05) if plan.node[mv[0]] == a]
    blocks = M * min(k, G)
    q = math.ceil(math.log2(G))
    sent = [mv for mv in nv if mv[0] == L]
    assert blocks <= len(sent) <= blocks + q - 1 and all(red for *_, red in sent)
    got: dict[int, list[tuple[int, int]]] = {}
    for src, dst, c, w, red in nv:
        assert red == (src == L)
        got.setdefault(dst, []).append((c, w))
    every = sorted(set(got[L]))
    assert len(every) == blocks == len(got[L]) and sum(w for _, w in every) == plan.C
    assert sorted(got) == sorted(int(x) for x in plan.grid[a])
    assert all(sorted(got[p]) == every for p in got)
    assert len(broadcast_rounds(G, blocks)) == blocks + q - 1  # the one-port optimum


def test_node_broadcast_needs_one_late_gpu_in_a_whole_node():
    """Two late GPUs, or a whole late node, take the other forms even when asked for the node broadcast."""
    t, n, M = cluster(2, 4, bw_nv=100e9), 8, 2
    runs = cost.make_runs(M, 1, M)
    times = np.zeros(n)
    times[4:] = 0.05
    node = cs.merged_plan(t, n, times, GiB, M, runs, runs, [4, 5, 6, 7], bcast=2)
    assert not node.bcast and verify(node.to_schedule("x", {})).ok


@pytest.mark.parametrize("N,G", [(2, 72), (4, 24)])
def test_node_broadcast_beats_the_star_and_wide_forms_on_large_nodes(N, G):
    """Two GB200 NVL72 racks as nodes (900 GB/s NVLink, 50 GB/s NICs), and 4 nodes of 24: one GPU 50 ms late,
    1 GiB: the node-broadcast form is built and is at least 10% faster after the arrival than the faster of the star
    and the wide forms (2.114 ms -> 1.81 at 2 x 72; 2.18 -> 1.85 at 4 x 24), its estimate within 10%."""
    t = cluster(N, G, bw_nv=900e9, a_nv=3.4e-6, a_net=14e-6)
    n = N * G
    times = np.zeros(n)
    times[5] = 0.05
    s = build_schedule("clusterstraggler", n, arrivals={5: 0.05}, size=GiB, topology=t)
    assert s.meta["form"] == "gpu" and s.meta["node_bcast"] > 0 and verify(s).ok
    ours = simulate(s, GiB, t, times).after_last_arrival_s
    model = cost.link_model(t, node_grid(t, n))
    others = []
    for form in ("gpu", "wide"):
        M, runs, rows = cost.best_pipeline(form, N, G, GiB, model)
        plan = cs.merged_plan(t, n, times, GiB, M, runs, rows, [5], wide=form == "wide")
        others.append(simulate(plan.to_schedule("x", {}), GiB, t, times).after_last_arrival_s)
    assert ours * 1.1 < min(others)
    assert ours == pytest.approx(s.meta["after_arrival_estimate_s"], rel=0.1)


def test_node_broadcast_is_deterministic_and_lowers_to_a_plan_and_xml_that_check(tmp_path):
    """Built twice, byte-identical; as an MSCCL++ plan that passes the plan checker and reads back to a
    schedule that verifies, and as MSCCL XML that does too; compare names the form."""
    t, n = cluster(2, 6, bw_nv=200e9), 12
    arr = {3: 0.05}
    s = build_schedule("clusterstraggler", n, arrivals=arr, size=2**26, topology=t)
    assert s.meta["node_bcast"] > 0 and verify(s).ok
    again = build_schedule("clusterstraggler", n, arrivals=arr, size=2**26, topology=t)
    assert s.to_json() == again.to_json()
    text = emit(s, "mscclpp-plan")
    assert check_plan_text(text).ok and verify(plan_text_to_schedule(text, "plan.json")).ok
    path = tmp_path / "bcast.xml"
    path.write_text(emit(s, "msccl-xml"))
    assert verify(xml_to_schedule(str(path))).ok
    row = next(r for r in compare(n, 2**26, t, arr, algorithms=["clusterstraggler", "ring"])
               if r["algorithm"] == "clusterstraggler")
    assert row["note"].startswith("node-broadcast gpu form, late 3 (50.000 ms)"), row["note"]


def test_bcast_estimate_tracks_its_parts():
    """More blocks per row shorten the first row's wait and lengthen L's node's alpha terms; the estimate is
    never below L's own port (the row bytes over B_nv) and grows with the rows' alpha terms."""
    model = (3.4e-6, 900e9, 14e-6, 50e9)
    rows = [GiB / 10] * 10
    port = GiB / model[1]
    for k in cost.BCAST_SPLITS:
        assert cost.bcast_estimate(2, 72, rows, k, model) > port
    assert cost.bcast_estimate(2, 72, [GiB / 64] * 64, 16, model) > cost.bcast_estimate(2, 72, rows, 8, model)
    assert cost.best_bcast(2, 72, GiB, model) == (12, 8)
    assert cost.bcast_estimate(2, 72, [], 4, model) == 0.0


def test_the_absent_gpus_part_spreads_over_its_node_and_large_nodes_take_one_round(monkeypatch):
    """The AllReduce before the arrival (prephase.py) on 2 nodes of many GPUs, one GPU absent: its part's one
    ring piece in its node is cut over about m / P of the punctual GPUs (``holders``), not held by one, and
    where NVLink sets the pace the in-node stages may take one round (``local_spans``): at 2 x 72, 900 GB/s,
    1 GiB the list-scheduling model's AllReduce takes 3.70 ms (5.86 before both), so a GPU 5 ms late no longer
    spills into the time after its arrival; on h100-cluster neither applies to 16 nodes (nothing changes)."""
    from collsynth.synth.algorithms.stragglar.prephase import local_spans, present_allreduce, ring_shape

    G, n, L = 72, 144, 5
    t = cluster(2, G, bw_nv=900e9, a_nv=3.4e-6, a_net=14e-6)
    grid = node_grid(t, n)
    hold = set(range(n)) - {L}
    assert ring_shape(grid, hold) == (2, 72)
    model = cost.link_model(t, grid)
    M = 12
    assert local_spans(2, 72, GiB, G, model) == [1, 2] and local_spans(2, 72, GiB, G, None) == [1]
    moves: list[tuple[int, int, int, int, bool]] = []
    present_allreduce(grid, hold, M, lambda *mv: moves.append(mv))
    part = range(L * M, (L + 1) * M)  # the absent GPU's part (part-major: units [g M, (g + 1) M))
    holders = {d for s_, d, c, w, red in moves if red and s_ < G and d < G and c in part}
    assert len(holders) == M  # one per chunk of the one piece (at most m / P = 71); one holder before
    times = np.zeros(n)
    times[L] = 1.0
    plan = cs.new_plan(t, n, times, GiB, M)
    plan.pre({L})
    pre = plan.busy_end()
    two = cs.new_plan(t, n, times, GiB, M)
    present_allreduce(grid, hold, M, two.add, 1)
    default = two.busy_end()
    assert pre == plan.pre_end < 0.85 * default and pre < 4e-3  # 3.70 and 4.61 ms
    monkeypatch.setattr(cs, "BALANCED_MAX_GPUS", 100)  # above it no trial: the default rounds (build time)
    big = cs.new_plan(t, n, times, GiB, M)
    big.pre({L})
    assert big.pre_end == pytest.approx(default, rel=1e-12)
    monkeypatch.undo()
    times[L] = 0.005
    s = build_schedule("clusterstraggler", n, arrivals={L: 0.005}, size=GiB, topology=t)
    assert s.meta["node_bcast"] > 0 and verify(s).ok and s.meta["pre_end_s"] < 0.005
    after = simulate(s, GiB, t, times).after_last_arrival_s
    assert not cs.spilled(after, s.meta["after_arrival_estimate_s"])
    h100 = make_topology("h100-cluster", 128)
    g16 = node_grid(h100, 128)
    assert local_spans(*ring_shape(g16, set(range(128)) - {5}), GiB, 8, cost.link_model(h100, g16)) == [1]
