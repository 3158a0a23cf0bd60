"""Issue 15 point 3: `-a solver` with late ranks on a cluster improves its warm start by a large-neighbourhood
search (synth/solver/lns.py: windows of steps re-solved by a MILP), keeps only verified faster schedules,
and reports status, objective, improvement over the warm start and gap to the bound."""

from __future__ import annotations

import json

import numpy as np
import pytest

from collsynth.cli import main
from collsynth.synth.ir import Schedule
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.solver import lns
from collsynth.synth.solver.grid import normalize_arrivals
from collsynth.synth.solver.solve import fitting_options, greedy_seconds, solve, status_line
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import check, class_port_violation, verify

ARR = {5: 0.05}  # long enough that clusterstraggler is the late-GPU form, not the synchronous one


def _setup(alg: str, n: int = 16):
    topo = make_topology("h100-cluster", n)
    s = check(build_schedule(alg, n, "allreduce", **({"topology": topo} if alg == "hierarchical" else {})))
    return topo, s, (lambda x: float(simulate(x, 2**30, topo, ARR).completion_s))


def test_lns_improves_an_improvable_warm_start_and_the_result_verifies() -> None:
    """The double binary tree on 2 nodes of 8 H100s, rank 5 late: the third window from the end
    (steps 522..527) compacts into fewer steps and simulates faster."""
    topo, s, f = _setup("tree")
    assert lns.windows(s)[2] == (522, 528)
    res = lns.improve(s, f, topology=topo, time_limit=60, max_windows=3)
    assert res.improved >= 1 and res.steps_saved >= 1
    assert res.time_s < res.start_s == f(s)
    assert res.time_s == f(res.schedule)
    assert verify(res.schedule).ok and class_port_violation(res.schedule, topo) is None
    assert res.schedule.nsteps == s.nsteps - res.steps_saved and res.schedule.ntransfers == s.ntransfers


def test_lns_turns_a_serial_broadcast_into_a_tree() -> None:
    """Reduce along a chain to rank 0, then rank 0 copies the sum to 1, 2 and 3 one per step (ports 1):
    re-sourcing lets rank 1 forward to 3 while 0 sends to 2, one step fewer and faster."""
    s = check(Schedule.from_arrays("allreduce", 4, 1, step=[0, 1, 2, 3, 4, 5], src=[3, 2, 1, 0, 0, 0],
                                   dst=[2, 1, 0, 1, 2, 3], chunk=[0] * 6, reduce=[1, 1, 1, 0, 0, 0]))
    topo = make_topology("nvswitch", 4)
    f = (lambda x: float(simulate(x, 2**20, topo, {}).completion_s))
    res = lns.improve(s, f, topology=topo, time_limit=60)
    assert res.improved >= 1 and res.steps_saved == 1 and res.time_s < res.start_s
    out = res.schedule
    assert verify(out).ok and out.nsteps == 5
    (k0, a0, r), *last = sorted(zip(out.step[3:].tolist(), out.src[3:].tolist(), out.dst[3:].tolist()))
    assert (k0, a0) == (3, 0) and {k for k, _, _ in last} == {4}  # 0 -> r, then 0 and r send at once
    assert sorted(a for _, a, _ in last) == sorted([0, r]) and {d for _, _, d in last} == {1, 2, 3} - {r}


def test_lns_on_the_late_gpu_form_is_never_slower() -> None:
    """clusterstraggler on 2 x 8 H100s, rank 5 late (the solver's warm start there)."""
    topo = make_topology("h100-cluster", 16)
    s = check(build_schedule("clusterstraggler", 16, "allreduce", arrivals=ARR, size=2**30, topology=topo))
    f = (lambda x: float(simulate(x, 2**30, topo, ARR).completion_s))
    res = lns.improve(s, f, topology=topo, time_limit=60, max_windows=3)
    assert res.time_s <= res.start_s and res.time_s == f(res.schedule)
    assert verify(res.schedule).ok and class_port_violation(res.schedule, topo) is None


def test_sources_offer_only_receivers_of_the_same_final_value() -> None:
    topo = make_topology("h100-cluster", 16)
    s = check(build_schedule("clusterstraggler", 16, "allreduce", arrivals=ARR, size=2**30, topology=topo))
    ts = list(range(int(s.step_bounds[s.nsteps - 8]), s.ntransfers))
    src = lns.window_sources(s, ts, topo)
    assert src
    for t, opts in src.items():
        assert not s.reduce[t]
        for j, t2 in opts:
            assert not s.reduce[t2] and int(s.src[t2]) == int(s.src[t]) and int(s.dst[t2]) == j != int(s.dst[t])
            assert (int(s.chunk[t2]), int(s.count[t2])) == (int(s.chunk[t]), int(s.count[t]))


@pytest.mark.parametrize("alg", ["tree", "hierarchical", "ring"])
def test_lns_never_returns_a_slower_or_unverified_schedule(alg: str) -> None:
    topo, s, f = _setup(alg)
    res = lns.improve(s, f, topology=topo, time_limit=60, max_windows=4)
    assert res.time_s <= res.start_s
    assert verify(res.schedule).ok and class_port_violation(res.schedule, topo) is None
    if not res.improved:
        assert res.schedule is s


def test_lns_keeps_the_step_semantics_of_a_window() -> None:
    """window_order: a read in the same step as a write of its location stays at or before it; writes of one
    step to one location stay together; an earlier write stays strictly earlier."""
    s = build_schedule("stragglar", 8, "allreduce", straggler=7)
    ts = list(range(s.ntransfers))
    kinds = {k for _, _, k in lns.window_order(s, ts)}
    assert kinds <= {"<", "<=", "="} and "<" in kinds
    steps = s.step
    for t1, t2, k in lns.window_order(s, ts):
        if k == "<":
            assert steps[t1] < steps[t2]
        elif k == "<=":
            assert steps[t1] <= steps[t2]
        else:
            assert steps[t1] == steps[t2]


def test_solver_on_a_cluster_with_a_late_rank_reports_the_search(capsys, tmp_path) -> None:
    # 20 s: the warm start and the first windows must fit on a loaded 2-core machine (12 s left no window there)
    out = tmp_path / "s.json"
    code = main(["synth", "-a", "solver", "-n", "16", "-t", "h100-cluster", "--arrival", "5=50ms", "--size", "1GiB",
                 "--time-limit", "20s", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    info = json.loads(out.read_text())["meta"]["solver"]
    assert info["status"] in ("improved", "warm-start")
    assert info["warm_start_source"] == "clusterstraggler"
    assert info["objective_s"] <= info["warm_start_s"] and info["improvement"] >= 0
    assert (info["status"] == "improved") == (info["objective_s"] < info["warm_start_s"])
    assert info["lns"]["windows"] >= 1 and 0 <= info["gap"] < 1
    assert info["lns"]["moves"]["evaluated"] >= 1  # the simulator-guided moves ran before the windows
    assert "large-neighbourhood search" in info["note"]
    line = err.strip().splitlines()[-1]
    assert line == status_line(info)
    assert "gap" in line and "objective" in line
    if info["status"] == "improved":
        assert "better than the warm start (clusterstraggler" in line
    else:
        assert "the warm start (clusterstraggler" in line and "as is" in line and "0.00%" not in line


def test_solver_without_late_ranks_or_on_one_switch_does_not_search() -> None:
    s = solve(4, arrivals={3: 0.001}, time_limit=5)
    assert "lns" not in s.meta["solver"] and s.meta["solver"]["status"] != "improved"  # type: ignore[operator]


def test_status_line_of_an_improved_result() -> None:
    info = {"status": "improved", "note": "large-neighbourhood search improved the warm start (clusterstraggler) "
                                          "in 2 of 9 windows; the model is too large", "objective_s": 0.01,
            "gap": 0.1, "improvement": 0.02, "warm_start_s": 0.0102, "warm_start_source": "clusterstraggler"}
    assert status_line(info, short=True) == ("improved warm start (LNS, 2 of 9 windows), 2.00% over the warm start, "
                                             "gap 10.0% to the lower bound")
    assert "2.00% better than the warm start (clusterstraggler, 10.2 ms)" in status_line(info)
    assert np.isfinite(info["objective_s"])
    same = {**info, "status": "warm-start", "improvement": 0.0, "objective_s": 0.0102}
    assert "the warm start (clusterstraggler, 10.2 ms) as is" in status_line(same)
    assert "0.00%" not in status_line(same) and "warm start as is" in status_line(same, short=True)


def test_solver_at_32_gpus_with_a_short_limit_starts_from_the_cluster_construction() -> None:
    """4 x 8 H100s, rank 5 late, 5 s: the greedy placements and the MILP cannot pay off there (the model is
    far beyond the binary budget) and are skipped, so the answer comes from clusterstraggler and the search
    (before, the greedy warm starts alone ran past a minute)."""
    topo = make_topology("h100-cluster", 32)
    s = solve(32, topology=topo, arrivals={5: 0.01}, size=2**30, time_limit=5)
    info = s.meta["solver"]
    assert isinstance(info, dict)
    assert verify(s).ok and class_port_violation(s, topo) is None
    assert info["status"] in ("improved", "warm-start") and info["warm_start_source"] == "clusterstraggler"
    assert info["model_chunks"] is None and info["model_bound_s"] is None and "MILP did not run" in info["note"]
    assert info["objective_s"] <= info["warm_start_s"] and 0 <= info["gap"] < 1
    sim = simulate(s, 2**30, topo, {5: 0.01}).completion_s
    assert sim == pytest.approx(info["objective_s"], rel=1e-12)
    if info.get("lns") is not None:
        assert info["lns"]["stopped"] in ("time limit", "all windows")


def test_greedy_chunk_counts_follow_the_estimate_not_the_clock() -> None:
    """fitting_options: smallest first while the estimate fits; elsewhere than on a cluster with late ranks the
    smallest always runs (the MILP needs a start); on a cluster a count whose model exceeds the binary
    budget is skipped whatever the time."""
    sw = make_topology("nvswitch", 8)
    arr = normalize_arrivals({7: 0.001}, 8)
    assert greedy_seconds(8, 16) < greedy_seconds(8, 56) < greedy_seconds(16, 56)
    assert fitting_options(8, 2**30, sw, arr, [7, 8, 56], 1e9, 2e4, False) == ([7, 8, 56], [])
    assert fitting_options(8, 2**30, sw, arr, [7, 8, 56], 0.0, 2e4, False) == ([7], [8, 56])
    budget = greedy_seconds(8, 7) + greedy_seconds(8, 8)
    assert fitting_options(8, 2**30, sw, arr, [56, 8, 7], budget, 2e4, False) == ([7, 8], [56])
    cl = make_topology("h100-cluster", 32)
    arr32 = normalize_arrivals({5: 0.01}, 32)
    assert fitting_options(32, 2**30, cl, arr32, [31, 32, 192], 1e9, 2e4, True) == ([], [31, 32, 192])
    assert fitting_options(32, 2**30, cl, arr32, [31], 1e9, 1e12, True) == ([31], [])


def test_last_writes_is_the_last_step_writing_each_location() -> None:
    """lns.last_writes (one pass per incumbent) against a transfer-by-transfer scan, multi-chunk transfers too."""
    topo = make_topology("h100-cluster", 16)
    s = check(build_schedule("clusterstraggler", 16, "allreduce", arrivals=ARR, size=2**30, topology=topo))
    assert int(s.count.max()) > 1
    want: dict[tuple[int, int], int] = {}
    for t in range(s.ntransfers):
        for x in range(int(s.chunk[t]), int(s.chunk[t]) + int(s.count[t])):
            want[(int(s.dst[t]), x)] = max(want.get((int(s.dst[t]), x), -1), int(s.step[t]))
    assert lns.last_writes(s) == want
