"""One late GPU in nodes of many GPUs (G not a power of two): Bruck's AllGather (synth/algorithms/stragglar/
bruck.py) and the wide form of clusterstraggler (cluster.ClusterPlan._wide_row; docs/stragglar.md section 9,
"Large NVLink domains as nodes"). Every schedule is verified; times are model results."""

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
from collsynth.synth.bruck import bruck_reduce_steps, bruck_steps, cyclic_runs
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.verify import verify

GiB = 2**30


@pytest.mark.parametrize("mirrored", [False, True])
def test_bruck_gathers_every_block_in_log_steps(mirrored):
    for R in range(2, 80):
        held = [{i} for i in range(R)]
        sent = [0] * R
        steps = bruck_steps(R, mirrored)
        assert len(steps) == math.ceil(math.log2(R))
        for step in steps:
            assert sorted(src for src, *_ in step) == list(range(R))  # one message per rank and step
            assert sorted(dst for _, dst, *_ in step) == list(range(R))
            new = [set(h) for h in held]
            for src, dst, first, count in step:
                blocks = {(first + k) % R for k in range(count)}
                assert len(blocks) == count and blocks <= held[src] and not blocks & held[dst]
                new[dst] |= blocks
                sent[src] += count
            held = new
        assert all(h == set(range(R)) for h in held) and sent == [R - 1] * R, R


@pytest.mark.parametrize("mirrored", [False, True])
def test_bruck_transposed_reduces_every_block_once(mirrored):
    """bruck_reduce_steps: rank i ends with every rank's contribution to block i exactly once, and no rank
    sends a partial sum twice or gets one after sending it."""
    for R in range(2, 80):
        part = [[{r: 1} for _ in range(R)] for r in range(R)]
        sent = [[False] * R for _ in range(R)]
        for step in bruck_reduce_steps(R, mirrored):
            landed = []
            for src, dst, first, count in step:
                for k in range(count):
                    b = (first + k) % R
                    assert not sent[src][b]
                    sent[src][b] = True
                    landed.append((dst, b, part[src][b]))
            for dst, b, got in landed:
                assert not sent[dst][b]
                part[dst][b] = {x: part[dst][b].get(x, 0) + got.get(x, 0) for x in set(part[dst][b]) | set(got)}
        assert all(part[r][r] == {x: 1 for x in range(R)} for r in range(R)), R


def test_cyclic_runs():
    assert cyclic_runs(3, 4, 8) == [(3, 4)]
    assert cyclic_runs(6, 4, 8) == [(6, 2), (0, 2)]
    assert cyclic_runs(9, 2, 8) == [(1, 2)]
    assert cyclic_runs(0, 8, 8) == [(0, 8)]


def nvlink_sends(plan: cs.ClusterPlan, rank: int, after: float) -> int:
    """NVLink messages ``rank`` sends after ``after`` in the plan's list-scheduling model."""
    return sum(1 for i, atom in enumerate(plan.atoms) for src, dst, *_ in atom
               if src == rank and plan.est[i] >= after and plan.node[src] == plan.node[dst])


@pytest.mark.parametrize("N,G,L", [(2, 6, 0), (2, 6, 3), (2, 6, 5), (3, 6, 8), (2, 12, 11), (3, 5, 7)])
def test_wide_form_verifies_for_any_late_index(N, G, L):
    """The late GPU's local index decides where the peers' runs of parts pass part G - 1 (two messages)."""
    n, M = N * G, 3
    t = cluster(N, G)
    times = np.zeros(n)
    times[L] = 0.05
    runs = cost.make_runs(M, 1, M)
    plan = cs.merged_plan(t, n, times, GiB, M, runs, runs, [L], wide=True)
    assert plan.wide
    s = plan.to_schedule("wide", {})
    r = verify(s)
    assert r.ok, r.message
    R = G - 1
    groups = -(-R // cost.wide_group(R))
    assert nvlink_sends(plan, L, 0.05) <= M * (groups + 1)  # one reduction per group (a wrapped group: two)
    star = cs.merged_plan(t, n, times, GiB, M, runs, runs, [L])
    assert not star.wide and nvlink_sends(star, L, 0.05) >= M * (G - 1)  # one per root and block


def test_powers_of_two_keep_the_star_form():
    t, n = cluster(2, 8), 16
    times = np.zeros(n)
    times[5] = 0.05
    runs = cost.make_runs(4, 1, 4)
    wide = cs.merged_plan(t, n, times, GiB, 4, runs, runs, [5], wide=True)
    star = cs.merged_plan(t, n, times, GiB, 4, runs, runs, [5])
    assert not wide.wide and wide.to_schedule("x", {}).to_json() == star.to_schedule("x", {}).to_json()
    assert not cost.wide_applies(8) and not cost.wide_applies(2) and cost.wide_applies(6) and cost.wide_applies(72)
    assert [cost.wide_group(R) for R in (2, 5, 9, 10, 71)] == [2, 3, 3, 4, 9]  # ceil(sqrt(R)): 8 groups of 71 peers


@pytest.mark.parametrize("N,G", [(2, 24), (4, 24), (2, 40)])
def test_build_keeps_the_faster_form_and_the_estimate_holds(N, G):
    """Up to 256 GPUs the star, wide and node-broadcast forms are built with their own block counts (best_pipeline,
    best_bcast) and the fastest kept: at 900 GB/s and 1 GiB the node-broadcast form on all three (the star form on 2 x
    24 and the wide one on 4 x 24 and 2 x 40 before it); the wide and node-broadcast estimates within 10% of the
    simulator."""
    t = cluster(N, G, bw_nv=900e9, a_nv=3.4e-6, a_net=14e-6)
    n = N * G
    times = np.zeros(n)
    times[5] = 0.05
    s = build_schedule("clusterstraggler", n, arrivals={5: 0.05}, size=GiB, topology=t)
    assert verify(s).ok
    got = simulate(s, GiB, t, times).after_last_arrival_s
    model = cost.link_model(t, node_grid(t, n))
    after = {}
    for form in ("gpu", "wide", "bcast"):
        if form == "bcast":
            M, k = cost.best_bcast(N, G, GiB, model)
            runs = rows = cost.make_runs(M, 1, M)
            est = cost.bcast_estimate(N, G, [GiB / M] * M, k, model)
        else:
            M, runs, rows = cost.best_pipeline(form, N, G, GiB, model)
            est = cost.after_arrival_estimate(form, N, G, M, runs, GiB, model, rows)
        plan = cs.merged_plan(t, n, times, GiB, M, runs, rows, [5], wide=form == "wide",
                              bcast=k if form == "bcast" else 0)
        after[form] = simulate(plan.to_schedule("x", {}), GiB, t, times).after_last_arrival_s
        if form != "gpu":
            assert after[form] == pytest.approx(est, rel=0.1), form
    # (fit_delay may then build fewer blocks where the simulator ends more than 2% over the estimate)
    assert got <= min(after.values()) * (1 + 1e-9)
    assert min(after, key=after.__getitem__) == "bcast" and s.meta["node_bcast"] > 0 and not s.meta["wide"]


def test_the_wide_form_lowers_to_a_plan_and_xml_that_check(tmp_path):
    """The wide form's schedule (2 x 6, rank 3 late) as an MSCCL++ plan that round-trips and passes the plan
    checker, and as MSCCL XML that reads back to a schedule that verifies."""
    t, n = cluster(2, 6), 12
    times = np.zeros(n)
    times[3] = 0.05
    runs = cost.make_runs(2, 1, 2)
    plan = cs.merged_plan(t, n, times, 2**20, 2, runs, runs, [3], wide=True)
    s = cs.plan_schedule(plan, "gpu", [3], t, 2**20)
    assert s.meta["wide"] and verify(s).ok
    text = emit(s, "mscclpp-plan")
    back = plan_text_to_schedule(text, "plan.json")
    assert verify(back).ok and len(back.src) == len(s.src)
    assert check_plan_text(text).ok
    path = tmp_path / "wide.xml"
    path.write_text(emit(s, "msccl-xml"))
    assert verify(xml_to_schedule(str(path))).ok


@pytest.mark.parametrize("N,G", [(2, 6), (3, 5), (2, 24)])
def test_a_late_node_of_any_size_reduces_and_gathers_by_bruck(N, G):
    """A whole late node whose G is not a power of two reduces each row by Bruck's AllGather transposed and
    gathers it by Bruck's, or by the mixed-radix steps where G's factors give no more steps (``radix_node``: 6
    and 24, not the prime 5): log2 G NVLink messages per GPU and row, not G - 1 star reductions and spreads;
    verified; at 2 x 24 and 900 GB/s it beats the synchronous schedule (2.35 ms against hierarchical's 2.47
    with radix steps in the node, 2.87 with the ring; before, hierarchical was returned)."""
    assert cost.radix_node(G) == (G in (6, 24)) and cost.radix_node(72) and not cost.radix_node(40)
    n, M = N * G, 2
    t = cluster(N, G, bw_nv=900e9, a_nv=3.4e-6, a_net=14e-6)
    times = np.zeros(n)
    times[G:2 * G] = 0.05
    runs = cost.make_runs(M, 1, M)
    plan = cs.merged_plan(t, n, times, GiB, M, runs, runs, list(range(G, 2 * G)))
    assert verify(plan.to_schedule("node", {})).ok
    steps = math.ceil(math.log2(G))
    for r in range(G, 2 * G):  # per row a ReduceScatter and an AllGather, at most two messages per step each
        assert nvlink_sends(plan, r, 0.05) <= M * 2 * 2 * steps
    if G == 24:
        s = build_schedule("clusterstraggler", n, arrivals={r: 0.05 for r in range(G, 2 * G)}, size=GiB, topology=t)
        hier = build_schedule("hierarchical", n, size=GiB, topology=t)
        assert s.meta["form"] == "node" and verify(s).ok
        ours = simulate(s, GiB, t, times).after_last_arrival_s
        assert ours < simulate(hier, GiB, t, times).after_last_arrival_s and hier.meta["intra"] == "radix"
