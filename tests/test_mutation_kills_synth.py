"""Tests for behaviour of synth/ that mutants of the sampled mutation run (docs/mutation.md) changed
with every other test still passing: exact boundaries, the first offending item a message names, the
ranges messages quote, read-only results and per-class ports."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from collsynth import budget, progress
from collsynth.errors import CollsynthError
from collsynth.synth import verify as verify_module
from collsynth.synth.algorithms import hierarchical, tree
from collsynth.synth.algorithms.layout import cycle_in
from collsynth.synth.algorithms.stragglar import cluster as clusterstraggler
from collsynth.synth.algorithms.stragglar import cluster_cost as cost
from collsynth.synth.algorithms.stragglar.phase2 import phase2_plan
from collsynth.synth.arrivals import arrival_vector
from collsynth.synth.bounds import allreduce_bound, min_route_alpha
from collsynth.synth.compare import compare
from collsynth.synth.ir import Schedule
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.solver.grid import make_grid, normalize_arrivals, to_schedule
from collsynth.synth.solver.model import build_model, slot_lower_bound, solve_model
from collsynth.synth.topology import Topology, cluster_topology, make_topology, topology_from_dict
from collsynth.synth.topology_import import read_node
from collsynth.synth.trees import trees
from collsynth.synth.verify import verify

GiB = 2**30


# ---------------------------------------------------------------------- verify
def test_auto_verifies_flat_up_to_exactly_flat_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    s = hierarchical.build(24, topology=cluster_topology(3, 8), size=GiB, pipeline=2)
    monkeypatch.setattr(verify_module, "flat_bytes", lambda _s: 256 * 2**20)  # exactly the threshold: flat
    assert verify(s).stats.get("method") is None
    monkeypatch.setattr(verify_module, "flat_bytes", lambda _s: 256 * 2**20 + 1)  # above it: composed
    assert verify(s).stats.get("method") == "composed"


class _Stop(Exception):
    pass


@pytest.mark.parametrize("transfers,shown", [(499_999, False), (500_000, True)])
def test_progress_line_from_half_a_million_transfers(monkeypatch: pytest.MonkeyPatch, transfers: int,
                                                     shown: bool) -> None:
    notes: list[str] = []
    monkeypatch.setattr(progress, "note", notes.append)

    def stop(*_a: object) -> None:  # the memory check follows the progress line: stop there
        raise _Stop

    monkeypatch.setattr(budget, "check", stop)
    z = np.zeros(transfers, np.int64)
    s = Schedule.from_arrays("allgather", 2, 1, step=z, src=z, dst=z + 1, chunk=z)
    with pytest.raises(_Stop):
        verify(s, method="flat")
    assert bool(notes) == shown


# ---------------------------------------------------------------------- ir, simulate: ranks out of range
def _bad_ranks() -> Schedule:
    return Schedule.from_arrays("allgather", 4, 4, step=[0, 0, 0, 1], src=[0, 9, 1, 7], dst=[1, 0, 2, 3],
                                chunk=[0, 0, 0, 0])


def test_bytes_sent_names_the_first_bad_transfer_and_the_rank_range() -> None:
    with pytest.raises(CollsynthError, match=r"^transfer #1 has src 9, not a rank \(0\.\.3\)"):
        _bad_ranks().bytes_sent_per_rank()


def test_simulate_names_the_rank_range() -> None:
    with pytest.raises(CollsynthError, match=r"names a rank outside 0\.\.3$"):
        simulate(_bad_ranks(), 2**20, "nvswitch")


# ---------------------------------------------------------------------- simulate
def _two_class_box(net_ports: int) -> Topology:
    return topology_from_dict({
        "gpus": 3, "switches": ["sw"], "ports": {"nvlink": 2, "net": net_ports},
        "links": [*({"src": g, "dst": "sw", "class": "nvlink"} for g in range(3)),
                  {"src": 0, "dst": 1, "class": "net"}, {"src": 0, "dst": 2, "class": "net"}]})


def test_a_class_with_fewer_ports_serializes_its_messages() -> None:
    s = Schedule.from_arrays("allgather", 3, 3, step=[0, 0], src=[0, 0], dst=[1, 2], chunk=[0, 0])
    one = simulate(s, 3 * 2**20, _two_class_box(1))  # rank 0's two net sends share its one net port
    assert one.start_s[0] == 0 and one.start_s[1] == pytest.approx(one.end_s[0])
    assert np.isfinite(one.completion_s)
    two = simulate(s, 3 * 2**20, _two_class_box(2))
    assert list(two.start_s) == [0, 0] and two.completion_s == pytest.approx(one.end_s[0])


def test_simulated_times_are_read_only() -> None:
    s = Schedule.from_arrays("allgather", 2, 2, step=[0, 0], src=[0, 1], dst=[1, 0], chunk=[0, 1])
    r = simulate(s, 2**20, "nvswitch")
    for a in (r.start_s, r.end_s):
        with pytest.raises(ValueError):
            a[0] = 1.0


# ---------------------------------------------------------------------- arrivals, compare, bounds
@pytest.mark.parametrize("bad", [None, [1], {}])
def test_an_arrival_that_is_not_a_time_is_bad_input(bad: object) -> None:
    with pytest.raises(CollsynthError, match="arrival of rank 1 must be a time"):
        arrival_vector({1: bad}, 4)  # type: ignore[dict-item]


def test_compare_clusterstraggler_on_one_node_has_no_cluster_note() -> None:
    rows = compare(4, "1MiB", "nvswitch", arrivals={3: 1e-3}, algorithms=["ring", "clusterstraggler"])
    row = next(r for r in rows if r["algorithm"] == "clusterstraggler")
    assert "late" not in row["note"]  # the one-node fallback (multistraggler) has no cluster form


def test_min_route_alpha_without_routes_is_zero() -> None:
    assert min_route_alpha(Topology("none", 2, [], [], [], [])) == 0.0


def test_bound_numbers_print_microseconds() -> None:
    b = allreduce_bound(make_topology("nvswitch", 4, alpha=3e-6), 2**20)
    assert " + 3 us + " in b.numbers



def test_bound_of_gpus_behind_two_switches_in_series() -> None:
    """Switch-to-switch links (the first switch is vertex n) are not GPU-switch links: the bound's
    switch-to-node map reads only the GPU neighbours of each switch."""
    t = topology_from_dict({"gpus": 2, "switches": ["a", "b"],
                            "links": [{"src": 0, "dst": "a"}, {"src": "a", "dst": "b"}, {"src": "b", "dst": 1}]})
    b = allreduce_bound(t, float(GiB), np.zeros(2))
    assert 0 < b.value_s < float("inf") and b.terms


def test_compare_runs_stragglar_with_the_auto_pipeline() -> None:
    """compare gives algorithms with a pipeline parameter pipeline="auto" for the size: at 1 GiB on 8
    GPUs StragglAR pipelines (the row says K=...), at 1 MiB it does not."""
    big = compare(8, "1GiB", "nvswitch", arrivals={3: 1e-3}, algorithms=["ring", "stragglar"])
    row = next(r for r in big if r["algorithm"] == "stragglar")
    auto = build_schedule("stragglar", 8, "allreduce", straggler=3, pipeline="auto", size=GiB)
    assert auto.meta["pipeline"] > 1 and row["note"] == f"straggler=3 K={auto.meta['pipeline']}"


# ---------------------------------------------------------------------- topology files and presets
def _file(**extra: object) -> dict[str, object]:
    return {"gpus": 4, "links": [{"src": g, "dst": (g + 1) % 4, "class": "nvlink" if g % 2 else "net"}
                                 for g in range(4)], **extra}


def test_topology_file_nodes_message_quotes_the_gpu_range() -> None:
    with pytest.raises(CollsynthError, match=r"\"nodes\"\[1\] names 7; use GPUs 0\.\.3$"):
        topology_from_dict(_file(ports={"nvlink": 1, "net": 1}, nodes=[[0, 1], [2, 7]]))


def test_topology_file_ports_of_one_per_class_are_accepted() -> None:
    t = topology_from_dict(_file(ports={"nvlink": 1, "net": 1}))
    assert t.class_ports == {"nvlink": 1, "net": 1}
    with pytest.raises(CollsynthError, match=r"must be an integer in 1\.\.1024, got 0"):
        topology_from_dict(_file(ports={"nvlink": 0, "net": 1}))


def test_topology_file_link_to_an_unlisted_switch_is_refused() -> None:
    d = {"gpus": 2, "switches": ["sw"], "links": [{"src": 0, "dst": "sw"}, {"src": 1, "dst": "nosuch"}]}
    with pytest.raises(CollsynthError, match="link 1 names node 'nosuch'"):
        topology_from_dict(d)


def test_cluster_preset_options() -> None:
    t = make_topology("h100-cluster:fabric=fat-tree", 16)
    assert t.fabric == "fat-tree" and t.name == "h100-cluster-fat-tree"
    for bad in ("h100-cluster:=fat-tree", "h100-cluster:fabric=", "h100-cluster:fabric"):
        with pytest.raises(CollsynthError, match="write options as NAME:key=value"):
            make_topology(bad, 16)



@pytest.mark.parametrize("fabric", ["fat-tree", "rail"])
def test_spine_of_a_route_is_source_local_index_plus_destination_node(fabric: str) -> None:
    """docs/topologies.md: leaf -> spine ((source local index + destination node) mod G) -> leaf."""
    G = 4
    t = cluster_topology(3, G, fabric=fabric, routing="spine")
    for src in range(3 * G):
        for dst in range(3 * G):
            if src // G == dst // G or (fabric == "rail" and src % G == dst % G):
                continue  # no spine: the same node, or the same rail
            spines = [t.nodes[int(t.link_dst[lk])] for lk in t.path_links(src, dst)
                      if str(t.nodes[int(t.link_dst[lk])]).startswith("spine")]
            assert spines == [f"spine{(src % G + dst // G) % G}"], (src, dst)

def test_node_zero_and_empty_routes() -> None:
    t = cluster_topology(2, 4)
    assert t.node_gpus(0) == (0, 1, 2, 3)
    first, last = t.route_classes([], [])
    assert first.shape == (0,) and last.shape == (0,)


# ---------------------------------------------------------------------- algorithms: layout, hierarchical, tree
def _graph(n: int, edges: list[tuple[int, int]]) -> Topology:
    return topology_from_dict({"gpus": n, "links": [{"src": a, "dst": b} for a, b in edges]})


def test_cycle_in_on_a_switch_keeps_the_identity_ring() -> None:
    ring, bw = cycle_in(make_topology("nvswitch", 4), np.arange(4))
    assert ring == [0, 1, 2, 3] and bw > 0  # every pair has the one (best) bandwidth: the first level fits


@pytest.mark.parametrize("n,edges", [
    (4, [(0, 2), (2, 1), (1, 3), (3, 0)]),  # the ring 0 2 1 3
    (5, [(0, 2), (2, 4), (4, 1), (1, 3), (3, 0)]),
    # a search that first finds the Hamiltonian path 0 4 1 2 3, which does not close (3 is not next to 0)
    (5, [(0, 1), (0, 4), (1, 2), (1, 3), (1, 4), (2, 3), (2, 4)]),
])
def test_cycle_in_finds_a_ring_of_direct_links(n: int, edges: list[tuple[int, int]]) -> None:
    ring, bw = cycle_in(_graph(n, edges), np.arange(n))
    adjacent = {frozenset(e) for e in edges}
    assert sorted(ring) == list(range(n)) and bw > 0
    assert all(frozenset((ring[i], ring[(i + 1) % n])) in adjacent for i in range(n)), ring


def test_hierarchical_defaults_are_the_nvswitch_preset_and_one_gib() -> None:
    model = hierarchical.build(8).meta["model_s"]
    assert model == pytest.approx(hierarchical.build(8, topology=make_topology("nvswitch", 8)).meta["model_s"])
    assert model == pytest.approx(hierarchical.build(8, size=GiB).meta["model_s"])


@pytest.mark.parametrize("N,G", [(2, 8), (3, 4)])
def test_hierarchical_budget_estimate_counts_the_schedule(monkeypatch: pytest.MonkeyPatch, N: int, G: int) -> None:
    seen: list[str] = []
    monkeypatch.setattr(budget, "check", lambda _b, what, hint="": seen.append(what))
    s = hierarchical.build(N * G, topology=cluster_topology(N, G), size=GiB)
    assert seen == [f"hierarchical on {N * G} ranks ({s.ntransfers} transfers, {s.nchunks} chunks)"]
    assert s.meta["gpus_per_node"] == G



def test_hierarchical_pipeline_never_cuts_chunks_below_one_element() -> None:
    """With --pipeline 3, 96 bytes on 2 nodes of 4: the profile with 32 chunks would make 3-byte chunks
    (below a 4-byte element), so the 24-chunk one is used."""
    s = hierarchical.build(8, topology=cluster_topology(2, 4), size=96, pipeline=3)
    assert s.nchunks == 24 and 96 / s.nchunks >= 4


def test_tree_declares_two_ports_only_on_several_nodes() -> None:
    """docs: one port on one node (NVLink), two on a multi-node topology (NVLink and the NIC)."""
    assert build_schedule("tree", 8, "allreduce").ports == 1
    assert build_schedule("tree", 8, "allreduce", topology=cluster_topology(1, 8)).ports == 1
    assert build_schedule("tree", 16, "allreduce", topology=cluster_topology(2, 8)).ports == 2


def test_clusterstraggler_estimate_bounds_a_pipelined_late_gpu() -> None:
    """The work estimate is an upper bound on what is built (here the steps: 109 of at most 4c + 4N = 136)."""
    from collsynth.synth.algorithms.estimate import work

    p = {"topology": cluster_topology(2, 8), "arrivals": {15: 0.05}, "size": GiB, "pipeline": 4}
    s = build_schedule("clusterstraggler", 16, "allreduce", **p)
    w = work("clusterstraggler", 16, "allreduce", p)
    got = (s.ntransfers, int(s.count.sum()), s.nsteps, s.nchunks)
    assert all(g <= e for g, e in zip(got, (w.transfers, w.moves, w.nsteps, w.nchunks))), (got, w)

@pytest.mark.parametrize("bad", [0, -1, "x", 1.5, True])
def test_tree_pipeline_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(CollsynthError, match="--pipeline must be a positive integer or auto"):
        tree.build(4, pipeline=bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- stragglar: phase 2, clusterstraggler
@pytest.mark.parametrize("n,k", [(4, 1), (8, 2), (4, 3)])
def test_phase2_plan_chunk_count_is_the_chunks_it_moves(n: int, k: int) -> None:
    plan = phase2_plan(n, k=k)
    assert plan.nchunks == k * (n - 1) == len({mv[3] for mv in plan.moves()})



@pytest.mark.parametrize("n,k", [(3, 2), (4, 1), (5, 1), (6, 2), (8, 2), (12, 1)])
def test_phase2_plan_moves_are_sorted_by_round_source_destination(n: int, k: int) -> None:
    plan = phase2_plan(n, k=k)
    keys = list(zip(plan.round.tolist(), plan.src.tolist(), plan.dst.tolist()))
    assert keys == sorted(keys)


def test_round_model_takes_up_to_16_gpus() -> None:
    from collsynth.synth.algorithms.stragglar.rounds import solve_rounds

    assert solve_rounds(16, 14).status == "infeasible"  # fewer rounds than S's n - 1 sends: no solver run
    with pytest.raises(CollsynthError, match="--gpus 17: the round model is exact only for small n"):
        solve_rounds(17, 30)

@pytest.mark.parametrize("N,G,late", [(2, 4, {3: 1e-3}), (3, 2, {0: 1e-3, 1: 1e-3})])
def test_clusterstraggler_before_the_arrival_verifies(N: int, G: int, late: dict[int, float]) -> None:
    s = clusterstraggler.build(N * G, arrivals=late, topology=cluster_topology(N, G), size=2**20)
    assert verify(s).ok  # the present ranks' ring AllReduce along the rails, then the late part


@pytest.mark.parametrize("form", ["gpu", "node"])
def test_clusterstraggler_estimate_is_of_the_per_block_size(form: str) -> None:
    size, nic = float(GiB), 50e9
    est = cost.after_arrival_estimate(form, 2, 8, 8, [(f, 1) for f in range(8)], size,
                                                  (3e-6, 450e9, 14e-6, nic))
    assert size / (8 * nic) <= est <= size / nic  # at least one GPU's part through a NIC, at most the buffer


# ---------------------------------------------------------------------- double binary trees, topology import
@pytest.mark.parametrize("m", [3, 5, 7, 9])
def test_second_tree_of_an_odd_count_is_the_first_shifted_by_one(m: int) -> None:
    t1, t2 = trees(m)
    for q in range(m):
        assert t2[(q + 1) % m] == (-1 if t1[q] < 0 else (t1[q] + 1) % m)


@pytest.mark.parametrize("m", [2, 4, 6])
def test_second_tree_of_an_even_count_is_the_first_mirrored(m: int) -> None:
    t1, t2 = trees(m)
    for q in range(m):
        assert t2[m - 1 - q] == (-1 if t1[q] < 0 else m - 1 - t1[q])


def test_imported_node_is_named_after_the_file(tmp_path: Path) -> None:
    src = os.path.join(os.path.dirname(__file__), "fixtures", "topologies", "dgx_h100_8nic.xml")
    path = tmp_path / "my.box.xml"
    shutil.copy(src, path)
    assert read_node(str(path)).name == "my.box"


# ---------------------------------------------------------------------- solver
@pytest.mark.parametrize("C", [1, 2])
def test_milp_two_ranks_exchange_from_the_first_slot(C: int) -> None:
    """Two ranks finish each chunk with one exchange, which needs no earlier reduction (n - 2 = 0 of
    them): the optimum meets the slot lower bound's lb - 1 like larger n do."""
    t = make_topology("nvswitch", 2)
    a = normalize_arrivals({}, 2)
    lb = slot_lower_bound(make_grid(2, C, GiB, t, a, final_slots=2 * C + 10))
    g = make_grid(2, C, GiB, t, a, final_slots=lb + 2)
    res = solve_model(build_model(g), "cbc", 20, warm=False)
    assert res.status == "optimal" and res.objective == pytest.approx(lb - 1)
    assert verify(to_schedule(g, res.placed, {})).ok


class _Info:
    def __init__(self, primal: int, obj: float, dual: float) -> None:
        self.primal_solution_status, self.objective_function_value, self.mip_dual_bound = primal, obj, dual


@pytest.mark.parametrize("hstatus,primal,dual,want", [
    ("kOptimal", 2, 7.0, ("optimal", 7.0, 7.0)),
    ("kTimeLimit", 2, 6.5, ("feasible", 7.0, 6.5)),
    ("kTimeLimit", 1, 6.5, ("none", None, 6.5)),  # 1: an infeasible point, not a solution
    ("kTimeLimit", 0, 1e31, ("none", None, None)),  # no dual bound either
    ("kInfeasible", 0, 1e31, ("infeasible", None, None)),
])
def test_highs_status_maps_to_the_result(monkeypatch: pytest.MonkeyPatch, hstatus: str, primal: int, dual: float,
                                         want: tuple[str, float | None, float | None]) -> None:
    """The HiGHS branch of solve_model (highspy is optional: a stand-in reports the statuses HiGHS does)."""
    import sys
    import types

    import pulp

    codes = types.SimpleNamespace(kOptimal=7, kInfeasible=8, kTimeLimit=13)
    monkeypatch.setitem(sys.modules, "highspy", types.SimpleNamespace(HighsModelStatus=codes))
    made: list[dict[str, object]] = []

    class FakeHighs:
        def __init__(self, **kw: object) -> None:
            made.append(kw)

    monkeypatch.setattr(pulp, "HiGHS", FakeHighs)
    t = make_topology("nvswitch", 2)
    g = make_grid(2, 1, GiB, t, normalize_arrivals({}, 2), final_slots=4)
    model = build_model(g)
    solver_model = types.SimpleNamespace(getInfo=lambda: _Info(primal, 7.0, dual),
                                         getModelStatus=lambda: getattr(codes, hstatus))

    def solve(solver: object) -> None:
        assert isinstance(solver, FakeHighs)
        model.prob.solverModel = solver_model

    monkeypatch.setattr(model.prob, "solve", solve)
    res = solve_model(model, "highs", 0.25, warm=False, threads=3)
    assert (res.status, res.objective, res.bound) == want
    assert (res.placed is not None) == (want[1] is not None)
    assert made == [{"msg": False, "timeLimit": 1.0, "threads": 3}]  # at least one second



@pytest.mark.parametrize("u,v,why", [(-1, 0, "out of range"), (0, 2, "out of range"), (1, 1, "out of range"),
                                     (0, -1, "out of range")])
def test_solver_model_refuses_a_move_with_a_rank_out_of_range(u: int, v: int, why: str) -> None:
    from collsynth.synth.solver.grid import COPY, ModelState

    g = make_grid(2, 1, GiB, make_topology("nvswitch", 2), normalize_arrivals({}, 2), final_slots=4)
    assert ModelState(g).check(0, [(COPY, 0, u, v)]) == f"transfer {COPY} c0 {u}->{v} {why}"

# ---------------------------------------------------------------------- stragglar: design search, tables
@pytest.mark.parametrize("n", [5, 6, 7, 9, 10, 12])
def test_design_search_finds_a_valid_design_at_depth_log2_plus_one(n: int) -> None:
    from collsynth.synth.algorithms.stragglar.design import ceil_log2, design_from_ages, search_design

    d = search_design(n - 1, ceil_log2(n) + 1, time_limit=30)
    assert d is not None and (d.p, d.K) == (n - 1, ceil_log2(n) + 1) and not d.problems()
    assert design_from_ages(n - 1, d.K, d.age) is not None


def test_design_search_runs_seeded_attempts_then_one_under_the_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    import pulp

    from collsynth.synth.algorithms.stragglar.design import search_design

    runs: list[tuple[object, object]] = []

    class NoSolution:
        def __init__(self, **kw: object) -> None:
            runs.append((kw["timeLimit"], kw["maxNodes"]))

        def actualSolve(self, prob: object) -> int:  # noqa: N802 (pulp's name)
            return 0  # "Not Solved"

    monkeypatch.setattr(pulp, "PULP_CBC_CMD", NoSolution)
    assert search_design(4, 4, time_limit=9.0, attempts=3, max_nodes=77) is None
    assert runs == [(None, 77)] * 3 + [(9.0, None)]


def test_tables_generate_stores_found_designs_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import io
    import json

    from collsynth.synth.algorithms.stragglar import tables

    real = tables.search_design
    monkeypatch.setattr(tables, "search_design", lambda p, K, t: None if p == 6 else real(p, K, t))
    out, log = tmp_path / "designs.json", io.StringIO()
    tables.generate([4, 5, 6, 7, 8], 30.0, str(out), log)  # 4 and 8: powers of two, never searched
    data = json.loads(out.read_text())
    assert data["format"] == tables.FORMAT and sorted(data["designs"], key=int) == ["5", "6"]
    assert "n=7: NOT FOUND" in log.getvalue() and "n=5: found" in log.getvalue()
    for n in (5, 6):
        assert data["designs"][str(n)] == tables.encode(real(n - 1, tables.ceil_log2(n) + 1, 30.0))


# ---------------------------------------------------------------------- topology view
@pytest.mark.parametrize("preset,n", [("nvswitch", 8), ("h100-cluster", 16)])
def test_topology_plot_frames_every_node_with_one_unit_of_margin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                 preset: str, n: int) -> None:
    pytest.importorskip("matplotlib")
    from collsynth.synth import topology_view

    saved = []
    monkeypatch.setattr(topology_view, "save_figure", lambda fig, path: saved.append(fig))
    topology_view.plot_topology(make_topology(preset, n), str(tmp_path / "t.png"))
    ax = saved[0].axes[0]
    xy = np.concatenate([c.get_offsets() for c in ax.collections if len(c.get_offsets())])  # the node markers
    assert ax.get_xlim() == pytest.approx((xy[:, 0].min() - 1, xy[:, 0].max() + 1))
    assert ax.get_ylim() == pytest.approx((xy[:, 1].min() - 1, xy[:, 1].max() + 1))


@pytest.mark.parametrize("arch,vendor,family,model,gbps", [
    ("ppc64", None, None, None, 32.0), ("aarch64", None, None, None, 6.0),
    ("x86_64", "GenuineIntel", 6, 0x4F, 6.0), ("x86_64", "GenuineIntel", 6, 0x54, 6.0),
    ("x86_64", "GenuineIntel", 6, 0x55, 10.0), ("x86_64", "GenuineIntel", 6, 0x8E, 10.0),
    ("x86_64", "GenuineIntel", 6, 0x8F, 22.0), ("x86_64", "GenuineIntel", 6, 0xCE, 22.0),
    ("x86_64", "GenuineIntel", 6, 0xCF, 40.0), ("x86_64", "AuthenticAMD", 25, 1, 16.0),
    ("x86_64", None, None, None, 6.0)])
def test_cpu_to_cpu_bandwidth_is_the_documented_nccl_table(arch: str, vendor: str | None, family: int | None,
                                                         model: int | None, gbps: float) -> None:
    """docs/topology-import.md: Broadwell 6, Skylake+ 10, Sapphire Rapids 22, Emerald Rapids 40, AMD 16,
    ARM 6, POWER 32 GB/s (NCCL topo.h; Intel by family 6 model >= 0x55, 0x8F, 0xCF)."""
    from collsynth.synth.topology_import.constants import cpu_link_gbps

    assert cpu_link_gbps(arch, vendor, family, model) == gbps


def test_solver_greedy_grid_has_room_for_every_owner_policy() -> None:
    """The greedy warm starts run on a grid of 3n + 2C + 4 slots after the last arrival. With arrivals
    5 us apart on 5 GPUs and 10 chunks, the "first" owner policy (rank 0, the only one on time, owns
    every chunk) finishes in exactly that many slots: every policy's placements are warm starts, and each
    verifies (kills `+ 4` -> `+ 3` in synth/solver/solve.py, which drops the three "first" ones)."""
    from collsynth.synth.solver.grid import last_slot
    from collsynth.synth.solver.solve import model_candidates

    n, C, size = 5, 10, float(1 << 20)
    topo, arr = make_topology("nvswitch", n), tuple(i * 5e-6 for i in range(n))
    cands = model_candidates(n, size, topo, arr, [C], [])
    names = {f"greedy-{r}{p}" for r in ("oldest", "rarest", "neediest") for p in ("", "-first", "-early")}
    assert {c.source for c in cands} == names
    for c in cands:
        assert verify(c.schedule).ok and c.grid is not None and c.placed is not None
        if c.source.endswith("-first"):
            assert last_slot(c.placed) - c.grid.first_final + 1 == 3 * n + 2 * C + 4


def test_multistraggler_tries_the_last_late_rank_trailing() -> None:
    """4 GPUs, rank 1 late by 2 us, rank 2 by 5 us, rank 3 (S) by 10 us, 1 MiB: the fastest form has the
    last late rank before S (rank 2) trailing (no block in phase 2), which neither the plain form nor
    the model's trailing set gives; the result is faster than every one of those (kills the trail tuple
    (0, 1, "model") -> (0, 0, "model") in synth/algorithms/stragglar/multi.py)."""
    from collsynth.synth.algorithms.stragglar import multi

    n, size, arr = 4, 1 << 20, {1: 2e-6, 2: 5e-6, 3: 10e-6}
    topo = make_topology("nvswitch", n)
    times = arrival_vector(arr, n)
    best = multi.construct(n, "allreduce", arr, size=size, topology=topo)
    assert verify(best).ok and best.meta["trailing"] == [2]
    t = simulate(best, size, topo, times.tolist()).completion_s
    for absorb in (0, 1, 2):
        for trail in (0, "model"):
            s = multi._construct(n, "allreduce", arr, "auto", size, None, None, topo, trail, absorb)
            assert s.meta["trailing"] != [2]
            for form in multi._orders(s, float(size), topo, times):
                assert t < simulate(form, size, topo, times.tolist()).completion_s, (absorb, trail)


@pytest.mark.parametrize("n,arr,C", [(4, {3: 5e-3}, 3), (5, {3: 1e-5, 4: 2e-5}, 4), (8, {7: 5e-3}, 7)])
def test_solver_warm_start_meets_the_rank_symmetry_order(n: int, arr: dict, C: int) -> None:
    """The model orders interchangeable ranks (same arrival, uniform complete pair graph) by the full sums
    they hold over the final slots (F is defined from the last arrival on); the relabelled warm start
    satisfies that order, or the MIP start is infeasible (kills `t >= grid.first_final` -> `not` in
    synth/solver/model.rank_order, which scores the slots before the last arrival)."""
    from collsynth.synth.solver.greedy import greedy_schedules
    from collsynth.synth.solver.grid import ModelState
    from collsynth.synth.solver.model import interchangeable_ranks, symmetric_start

    g = make_grid(n, C, 1 << 30, make_topology("nvswitch", n), normalize_arrivals(arr, n),
                  final_slots=3 * n + 2 * C + 4)
    groups = interchangeable_ranks(g)
    assert groups
    for rule, placed in greedy_schedules(g).items():
        start = symmetric_start(g, placed)
        state, by_slot, held = ModelState(g), dict(start), [0] * n
        for t in range(g.nslots):
            if t in by_slot:
                state.apply(t, by_slot[t])
            if t >= g.first_final:
                for v in range(n):
                    held[v] += int(state.full[:, v].sum())
        for group in groups:
            assert all(held[a] >= held[b] for a, b in zip(group, group[1:])), (rule, group, held)
