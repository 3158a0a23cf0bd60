"""The straggler-aware solver: grid, model-class rules, greedy warm start, MILP, bounds, registry, bad input."""

from __future__ import annotations

import pytest

from collsynth.errors import CollsynthError
from collsynth.synth.bounds import lower_bound
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.solver.greedy import greedy_schedules
from collsynth.synth.solver.grid import (
    COPY,
    EXCHANGE,
    REDUCE,
    ModelState,
    last_slot,
    make_grid,
    normalize_arrivals,
    place,
    schedule_moves,
    to_schedule,
)
from collsynth.synth.solver.model import build_model, set_start, slot_lower_bound, solve_model, symmetric_start
from collsynth.synth.solver.solve import solve
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import check, verify

GiB = 1 << 30
MS = 1e-3


def grid_for(n, arrivals, C, final=None, topo="nvswitch", size=GiB):
    t = make_topology(topo, n)
    a = normalize_arrivals(arrivals, n)
    return t, a, make_grid(n, C, size, t, a, final_slots=final if final is not None else 3 * n + 2 * C + 4)


# ------------------------------------------------------------------ grid
def test_grid_slots_follow_arrivals():
    topo, arr, g = grid_for(4, {3: 5 * MS}, 3, final=4)
    assert g.tau == pytest.approx(3e-6 + GiB / 3 / (450 * 2**30))
    assert g.first_final == 4  # capped at C+1 slots while rank 3 is late
    assert g.nslots == 8
    assert g.present(0) == (0, 1, 2) and g.present(g.first_final) == (0, 1, 2, 3)
    assert g.slot_start[g.first_final] == pytest.approx(5 * MS)
    assert len(g.pairs) == 12 and g.shared_links == ()


def test_grid_on_ring_topology_keeps_neighbours_only():
    _, _, g = grid_for(6, {}, 6, topo="ring")
    assert sorted(g.pairs) == sorted([(i, (i + 1) % 6) for i in range(6)] + [((i + 1) % 6, i) for i in range(6)])


def test_normalize_arrivals_rejects_unknown_ranks_and_bad_times():
    assert normalize_arrivals({2: 0.5}, 3) == (0.0, 0.0, 0.5)
    assert normalize_arrivals([1.0, 2.0], 2) == (1.0, 2.0)
    for bad in ({3: 1.0}, {-1: 1.0}, {0: -1.0}, {0: float("nan")}, [0.0]):
        with pytest.raises(CollsynthError):
            normalize_arrivals(bad, 3)


# ------------------------------------------------------------------ model-class rules
def test_model_state_rejects_what_breaks_the_rules():
    _, _, g = grid_for(4, {}, 1)
    st = ModelState(g)
    assert st.check(0, [(COPY, 0, 0, 1)]) is not None  # nobody holds the full sum yet
    assert st.check(0, [(EXCHANGE, 0, 0, 1)]) is not None  # 0 and 1 are not the last two live ranks
    assert st.check(0, [(REDUCE, 0, 0, 1), (REDUCE, 0, 2, 1)]) is not None  # location written twice
    assert st.check(0, [(REDUCE, 0, 0, 1), (REDUCE, 0, 1, 2)]) is not None  # 1 receives and forwards
    assert st.check(0, [(REDUCE, 0, 0, 1), (REDUCE, 0, 0, 2)]) is not None  # two sends, one port
    st.apply(0, [(REDUCE, 0, 0, 1)])
    assert st.check(1, [(REDUCE, 0, 2, 0)]) is not None  # 0 forwarded already: no more reductions
    st.apply(1, [(REDUCE, 0, 2, 3)])
    assert st.check(2, [(EXCHANGE, 0, 1, 3)]) is None
    st.apply(2, [(EXCHANGE, 0, 1, 3)])
    assert st.full[0].tolist() == [False, True, False, True]


def test_schedule_moves_reads_constructive_schedules():
    steps = schedule_moves(build_schedule("stragglar", 8, straggler=7))
    assert any(m[0] == EXCHANGE for step in steps for m in step)
    _, _, g = grid_for(8, {7: 5 * MS}, 7)
    placed = place(g, steps)
    assert placed is not None and last_slot(placed) - g.first_final + 1 == 9
    # direct: every rank sends its partial to every peer, outside the model class
    _, _, g1 = grid_for(4, {}, 1)
    assert place(g1, schedule_moves(build_schedule("direct", 4))) is None


@pytest.mark.parametrize("n,arrivals,C,topo", [
    (3, {}, 3, "nvswitch"), (4, {3: 5 * MS}, 3, "nvswitch"), (5, {1: 2 * MS, 4: 3 * MS}, 4, "nvswitch"),
    (6, {5: 5 * MS}, 5, "full-mesh"), (6, {}, 6, "ring"), (8, {6: 4.5 * MS, 7: 5 * MS}, 6, "nvswitch"),
    (8, {0: 1 * MS}, 8, "dgx1"), (6, {2: 1 * MS}, 6, "torus2d"),
])
def test_greedy_schedules_verify_and_grid_time_bounds_simulation(n, arrivals, C, topo):
    t, a, g = grid_for(n, arrivals, C, topo=topo)
    res = greedy_schedules(g)
    assert res
    for placed in res.values():
        s = check(to_schedule(g, placed, {}))
        sim = simulate(s, GiB, t, arrivals)
        grid_time = g.completion(last_slot(placed))
        assert sim.completion_s <= grid_time * (1 + 1e-9)
        if topo in ("nvswitch", "full-mesh", "ring"):  # uniform links: the grid is exact
            assert sim.completion_s == pytest.approx(grid_time, rel=1e-9)
        assert sim.completion_s >= lower_bound(n, GiB, t, a) * (1 - 1e-9)


def test_slot_lower_bound():
    assert slot_lower_bound(grid_for(8, {7: 5 * MS}, 7)[2]) == 9  # n - 2 + log2 n, as StragglAR
    assert slot_lower_bound(grid_for(6, {5: 5 * MS}, 5)[2]) == 7
    assert slot_lower_bound(grid_for(4, {}, 4)[2]) == 6  # 2(n-1)/n * C transfers per rank


# ------------------------------------------------------------------ MILP
def _milp(n, arrivals, C, final, warm=None):
    t, a, g = grid_for(n, arrivals, C, final=final)
    m = build_model(g)
    if warm is not None:
        set_start(m, symmetric_start(g, warm))
    return t, g, m, solve_model(m, "cbc", 20, warm=warm is not None)


def test_milp_finds_the_optimum_from_scratch_and_it_verifies():
    n, arrivals = 3, {2: 5 * MS}
    lb = slot_lower_bound(grid_for(n, arrivals, 2)[2])
    t, g, m, res = _milp(n, arrivals, 2, final=lb + 2)
    assert res.status == "optimal" and res.objective == pytest.approx(lb - 1)
    s = check(to_schedule(g, res.placed, {}))
    assert simulate(s, GiB, t, arrivals).after_last_arrival_s == pytest.approx(lb * g.tau)


def test_milp_proves_a_too_short_horizon_infeasible():
    n, arrivals = 4, {3: 5 * MS}
    lb = slot_lower_bound(grid_for(n, arrivals, 3)[2])
    g = grid_for(n, arrivals, 3, final=lb - 1)[2]
    m = build_model(g, slot_bound=False)  # without the cut: the constraints alone must rule it out
    res = solve_model(m, "cbc", 20, warm=False)
    assert res.status == "infeasible" and res.placed is None


def test_milp_warm_start_is_accepted():
    n, arrivals = 4, {3: 5 * MS}
    _, _, g = grid_for(n, arrivals, 3)
    placed = greedy_schedules(g)["oldest"]
    final = last_slot(placed) - g.first_final + 1
    _, g2, m, res = _milp(n, arrivals, 3, final=final, warm=place(grid_for(n, arrivals, 3, final=final)[2],
                                                                   [ms for _, ms in placed]))
    assert res.status == "optimal" and res.objective <= final - 1
    check(to_schedule(g2, res.placed, {}))


# ------------------------------------------------------------------ solve (the registered algorithm)
def test_solve_one_straggler_is_optimal_and_certified():
    arrivals = {3: 5 * MS}
    s = build_schedule("solver", 4, arrivals=arrivals, time_limit=10)
    info = s.meta["solver"]
    assert verify(s).ok
    topo = make_topology("nvswitch", 4)
    sim = simulate(s, GiB, topo, arrivals)
    assert info["status"] == "optimal" and info["model_gap"] == 0.0
    assert info["objective_s"] == pytest.approx(sim.completion_s)
    assert info["lower_bound_s"] <= info["objective_s"]
    assert info["gap"] == pytest.approx((info["objective_s"] - info["lower_bound_s"]) / info["objective_s"])
    for alg in ("ring", "rhd", "twoshot", "stragglar"):
        params = {"straggler": 3} if alg == "stragglar" else {}
        other = simulate(build_schedule(alg, 4, **params), GiB, topo, arrivals).completion_s
        assert sim.completion_s <= other * (1 + 1e-12)


def test_solve_two_late_ranks_runs_the_milp_and_beats_ring():
    arrivals = {4: 4.5 * MS, 5: 5 * MS}
    topo = make_topology("nvswitch", 6)
    s = solve(6, arrivals=arrivals, size="1GiB", time_limit=4, topology=topo)
    info = s.meta["solver"]
    assert info["status"] in ("optimal", "time-limit", "warm-start")
    assert info["model_bound_s"] is not None and info["model_bound_s"] <= info["objective_s"] * (1 + 1e-12)
    ring = simulate(build_schedule("ring", 6), GiB, topo, arrivals).after_last_arrival_s
    assert simulate(s, GiB, topo, arrivals).after_last_arrival_s < ring


def test_solve_accepts_topology_specs_and_objects_and_chunks():
    a = solve(4, topology="full-mesh", chunks=4, time_limit=5)
    b = solve(4, topology=make_topology("full-mesh", 4), chunks=4, time_limit=5)
    assert a.meta["solver"]["model_chunks"] == b.meta["solver"]["model_chunks"] == 4
    assert a.digest() == b.digest()


def test_solve_on_a_ring_topology_verifies():
    s = solve(5, topology="ring", arrivals={2: 1 * MS}, time_limit=5)
    assert verify(s).ok and s.meta["solver"]["objective_s"] >= s.meta["solver"]["lower_bound_s"]


def test_highs_when_installed():
    pytest.importorskip("highspy")
    s = solve(3, arrivals={2: 5 * MS}, chunks=2, time_limit=5, solver="highs")
    assert verify(s).ok and s.meta["solver"]["solver"] == "highs"


@pytest.mark.parametrize("kwargs,match", [
    ({"arrivals": {9: 1e-3}}, "rank 9"),
    ({"arrivals": {1: -1.0}}, ">= 0"),
    ({"chunks": 0}, "--chunks"),
    ({"chunks": "many"}, "--chunks"),
    ({"solver": "gurobi"}, "--solver"),
    ({"size": -5}, "--size"),
    ({"time_limit": 0}, "--time-limit"),
    ({"topology": "moebius"}, "unknown topology"),
])
def test_bad_input_is_one_line_collsynth_error(kwargs, match):
    with pytest.raises(CollsynthError, match=match) as e:
        solve(4, **kwargs)
    assert "\n" not in str(e.value)


def test_objective_is_the_simulated_completion_even_when_everyone_is_late():
    arrivals = {r: 1 * MS for r in range(4)} | {3: 3 * MS}
    s = solve(4, arrivals=arrivals, time_limit=5)
    sim = simulate(s, GiB, make_topology("nvswitch", 4), arrivals)
    assert s.meta["solver"]["objective_s"] == pytest.approx(sim.completion_s)
    assert s.meta["solver"]["lower_bound_s"] <= sim.completion_s


def test_topology_for_another_n_is_rejected():
    with pytest.raises(CollsynthError, match="has 6 GPUs but 4 are needed"):
        solve(4, topology=make_topology("nvswitch", 6))


def test_too_large_n_names_the_limit():
    with pytest.raises(CollsynthError, match=r"handles up to about \d+ ranks.*constructive") as e:
        solve(40, time_limit=1)
    assert "\n" not in str(e.value)


def test_registry_rejects_other_collectives():
    with pytest.raises(CollsynthError):
        build_schedule("solver", 4, "reducescatter")


# ------------------------------------------------------------------ lower bound
@pytest.mark.parametrize("topo", ["nvswitch", "ring", "full-mesh", "torus2d"])
@pytest.mark.parametrize("arrivals", [{}, {5: 5 * MS}, {1: 0.2 * MS, 4: 3 * MS}])
def test_lower_bound_holds_for_every_constructive_algorithm(topo, arrivals):
    n = 6
    t = make_topology(topo, n)
    a = normalize_arrivals(arrivals, n)
    lb = lower_bound(n, 64 << 20, t, a)
    assert lb >= max(a)
    for alg, params in (("ring", {}), ("rhd", {}), ("direct", {}), ("twoshot", {}), ("stragglar", {"straggler": 5})):
        sim = simulate(build_schedule(alg, n, **params), 64 << 20, t, arrivals)
        assert sim.completion_s >= lb * (1 - 1e-12), alg


def test_lower_bound_straggler_formula():
    n = 8
    t = make_topology("nvswitch", n)
    a = normalize_arrivals({7: 5 * MS}, n)
    alpha, bw = 3e-6, 450 * 2**30
    assert lower_bound(n, GiB, t, a) == pytest.approx(5 * MS + alpha + GiB / bw)
    assert lower_bound(n, GiB, t, (0.0,) * n) == pytest.approx(2 * (n - 1) / n * GiB / bw)


def test_runs_of_chunks_are_split_into_sub_steps():
    s = build_schedule("stragglar", 4, straggler=3, pipeline=2)
    assert int(s.count.max()) > 1
    steps = schedule_moves(s)
    assert sum(2 if m[0] == EXCHANGE else 1 for step in steps for m in step) == int(s.count.sum())
    _, _, g = grid_for(4, {3: 5 * MS}, s.nchunks)
    placed = place(g, steps)
    assert placed is not None
    assert last_slot(placed) - g.first_final + 1 == slot_lower_bound(g)  # pipelined StragglAR meets the bound
    check(to_schedule(g, placed, {}))
