"""Issue 15 point 3: the simulator-guided moves of the solver's large-neighbourhood search
(synth/solver/critical.py): the critical path follows the simulator's exact waits, moves keep the schedule
well formed, and a search with a move budget (not a clock) is deterministic, verified and never slower."""

from __future__ import annotations

import numpy as np
import pytest

from collsynth.synth.ir import Schedule
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.solver import critical, lns
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import check, class_port_violation, verify

SIZE = 16 * 2**20
ARR = {5: 0.001}


def _ring32():
    topo = make_topology("h100-cluster", 32)
    s = check(build_schedule("ring", 32, "allreduce", topology=topo))
    return topo, s, (lambda x: simulate(x, SIZE, topo, ARR))


def test_moves_improve_a_ring_at_32_gpus_deterministically() -> None:
    """Ring on 4 x 8 H100s, rank 5 1 ms late, 16 MiB: a budget of 60 candidates (no clock) keeps moves that
    make it faster; the result verifies with the per-class ports, simulates as reported, and two runs are
    identical."""
    topo, s, f = _ring32()
    runs = [lns.improve(s, f, topology=topo, size=SIZE, max_evals=60, max_windows=0, time_limit=600)
            for _ in range(2)]
    res = runs[0]
    assert res.moves >= 1 and res.stats["moves"]["stopped"] == "move budget"
    assert res.time_s < res.start_s == f(s).completion_s
    assert res.time_s == f(res.schedule).completion_s
    assert verify(res.schedule, topology=topo).ok and class_port_violation(res.schedule, topo) is None
    assert res.schedule.digest() == runs[1].schedule.digest() and res.time_s == runs[1].time_s
    assert sum(res.schedule.count) >= sum(s.count) and res.schedule.nchunks == s.nchunks


def test_the_critical_path_follows_the_simulators_waits() -> None:
    """Every edge of the path is exact: the transfer starts when the one it waited for ends, and that one is a
    data producer, a transfer on the same port or link, or an access of its destination."""
    topo, s, f = _ring32()
    r = f(s)
    start, end = np.asarray(r.start_s), np.asarray(r.end_s)
    path = critical.critical_path(s, start, end, topo)
    assert path[0][0] == int(np.argmax(end)) and path[-1][1] == "start" and len(path) > 3
    for t, why, u in path[:-1]:
        assert end[u] == start[t] and int(s.step[u]) <= int(s.step[t])
        if why == "raw":
            assert int(s.dst[u]) == int(s.src[t]) and int(s.step[u]) < int(s.step[t])
        elif why == "send-port":
            assert int(s.src[u]) == int(s.src[t])
        elif why == "recv-port":
            assert int(s.dst[u]) == int(s.dst[t])
    t, _, _ = path[-1]
    assert not s.phases and start[t] == max(ARR.values())  # without phases every step waits for the last arrival


def test_moves_keep_the_schedule_well_formed() -> None:
    """split, own step and merge: chunk moves are kept, steps renumbered densely, the phases keep their steps."""
    s = check(build_schedule("stragglar", 8, "allreduce", straggler=7))
    big = [t for t in range(s.ntransfers) if s.count[t] > 1] or [0]
    t = big[0]
    for mv in (critical.Move("split", t, (int(s.step[t]),)), critical.Move("own", t)):
        out = critical.apply_move(s, mv)
        if out is None:
            continue
        assert int(out.count.sum()) == int(s.count.sum())
        assert set(out.step.tolist()) == set(range(out.nsteps))
        assert [p.name for p in out.phases] == [p.name for p in s.phases]
    # merge two adjacent-chunk copies of one pair into one message
    two = check(Schedule.from_arrays("allreduce", 2, 2, step=[0, 1, 2, 3], src=[0, 0, 1, 1], dst=[1, 1, 0, 0],
                                     chunk=[0, 1, 0, 1], reduce=[1, 1, 0, 0]))
    merged = critical.apply_move(two, critical.Move("merge", 0, (1, 1)))
    assert merged is not None and merged.ntransfers == 3 and verify(merged).ok
    assert int(merged.count[0]) == 2 and int(merged.chunk[0]) == 0


@pytest.mark.parametrize("alg", ["hierarchical", "tree"])
def test_moves_never_return_a_slower_or_unverified_schedule(alg: str) -> None:
    topo = make_topology("h100-cluster", 16)
    s = check(build_schedule(alg, 16, "allreduce", topology=topo))
    f = (lambda x: simulate(x, SIZE, topo, ARR))
    res = critical.search(s, f, topology=topo, size=SIZE, max_evals=40, verify_topology=topo)
    assert res.time_s <= f(s).completion_s and res.time_s == f(res.schedule).completion_s
    assert verify(res.schedule, topology=topo).ok
    if not res.kept:
        assert res.schedule is s
