"""multistraggler (issue 15, point 3): several late ranks with arbitrary arrival times."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.stragglar.multi import construct, pack, retime
from collsynth.synth.bounds import lower_bound
from collsynth.synth.compare import compare
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import verify

SIZE = 2**30
MODEL = {"alpha": 3e-6, "bandwidth": 450 * 2**30}


@st.composite
def arrivals(draw, nmax=20):
    n = draw(st.integers(2, nmax))
    late = draw(st.lists(st.integers(0, n - 1), unique=True, max_size=min(n, 6)))
    return n, {r: draw(st.floats(0, 1e-2)) for r in late}


@settings(max_examples=40, deadline=None)
@given(case=arrivals(), natural=st.booleans())
def test_verifies_and_respects_bounds(case, natural):
    n, arr = case
    topo = make_topology("nvswitch", n, **MODEL)
    s = construct(n, arrivals=arr, size=SIZE, topology=topo, retime=not natural)
    r = verify(s)
    assert r.ok, r.message
    times = [arr.get(i, 0.0) for i in range(n)]
    t = simulate(s, SIZE, topo, arr).completion_s
    assert t >= lower_bound(n, SIZE, topo, times) * (1 - 1e-9)


@settings(max_examples=15, deadline=None)
@given(case=arrivals(12))
def test_never_slower_than_stragglar(case):
    """Treating every early late rank as punctual is one of the forms tried, and it is StragglAR."""
    n, arr = case
    topo = make_topology("nvswitch", n, **MODEL)
    times = [arr.get(i, 0.0) for i in range(n)]
    last = max(range(n), key=lambda r: (times[r], r))
    ms = simulate(build_schedule("multistraggler", n, arrivals=arr, size=SIZE, topology=topo), SIZE, topo, arr)
    sg = simulate(build_schedule("stragglar", n, straggler=last, pipeline="auto", size=SIZE, **MODEL),
                  SIZE, topo, arr)
    assert ms.completion_s <= sg.completion_s * (1 + 1e-9)


def test_two_close_arrivals_beat_every_other_algorithm():
    """Ranks 1 and 5 late by 4.9 and 5 ms on 8 GPUs: rank 1 streams into the punctual state and takes no
    block of the completion phase; StragglAR must wait for both in its ReduceScatter."""
    rows = compare(8, SIZE, make_topology("nvswitch", 8, **MODEL), {1: 4.9e-3, 5: 5e-3})
    assert rows[0]["algorithm"] == "multistraggler"
    assert rows[0]["after_last_arrival_s"] < 0.95 * min(r["after_last_arrival_s"] for r in rows[1:])
    one = compare(8, SIZE, make_topology("nvswitch", 8, **MODEL), {5: 5e-3})
    assert "multistraggler" not in {r["algorithm"] for r in one}  # one late rank: that is stragglar


def test_one_late_rank_is_stragglar():
    a = build_schedule("multistraggler", 8, arrivals={3: 1e-3}, size=SIZE)
    b = build_schedule("stragglar", 8, straggler=3, pipeline="auto", size=SIZE)
    assert sorted(zip(a.step.tolist(), a.src.tolist(), a.dst.tolist())) == \
        sorted(zip(b.step.tolist(), b.src.tolist(), b.dst.tolist()))


def test_deterministic():
    arr = {2: 3e-3, 9: 1e-3, 11: 3.5e-3}
    assert (build_schedule("multistraggler", 12, arrivals=arr, size=SIZE).to_json()
            == build_schedule("multistraggler", 12, arrivals=arr, size=SIZE).to_json())


def test_pack_keeps_sequential_meaning():
    # a copy then a read of its destination must not share a step; a reduce may follow a read
    steps = pack([[(0, 1, 0, 1, False)], [(1, 2, 0, 1, False)], [(3, 0, 0, 1, True)]])
    assert steps.tolist() == [0, 1, 1]


def test_retime_of_a_verified_schedule_verifies():
    s = construct(10, arrivals={1: 2e-3, 4: 2.1e-3, 7: 2.2e-3}, size=SIZE, retime=False)
    res = simulate(s, SIZE, "nvswitch", {1: 2e-3, 4: 2.1e-3, 7: 2.2e-3})
    again = retime(s, res.start_s)
    assert verify(again).ok


@pytest.mark.parametrize("arr, match", [({9: 1e-3}, "ranks are 0..7"), ({1: math.inf}, "finite"),
                                        ({1: -1.0}, "finite")])
def test_bad_arrivals(arr, match):
    with pytest.raises(CollsynthError, match=match):
        build_schedule("multistraggler", 8, arrivals=arr)
