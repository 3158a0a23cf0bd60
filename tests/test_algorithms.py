"""Every algorithm verifies for every n (property tests) and has the documented shape."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.errors import CollsynthError
from collsynth.synth.registry import algorithms, build_schedule
from collsynth.synth.verify import verify

BASELINES = ["ring", "rhd", "direct", "twoshot"]


@settings(max_examples=60, deadline=None)
@given(alg=st.sampled_from(BASELINES), n=st.integers(2, 40))
def test_allreduce_verifies(alg, n):
    s = build_schedule(alg, n)
    r = verify(s)
    assert r.ok, r.message


@settings(max_examples=40, deadline=None)
@given(alg=st.sampled_from(["ring", "direct"]), coll=st.sampled_from(["reducescatter", "allgather"]),
       n=st.integers(2, 40))
def test_rs_ag_verify(alg, coll, n):
    assert verify(build_schedule(alg, n, coll)).ok


@pytest.mark.parametrize("n", range(2, 41))
def test_every_registered_allreduce_verifies_for_every_n(n):
    for name, info in algorithms().items():
        if "allreduce" in info.collectives and name != "solver":
            r = verify(build_schedule(name, n))
            assert r.ok, (name, n, r.message)


def test_step_counts():
    assert build_schedule("ring", 8).nsteps == 14
    assert build_schedule("rhd", 8).nsteps == 6
    assert build_schedule("rhd", 6).nsteps == 6  # 2 fold steps + 2*2
    assert build_schedule("direct", 8).nsteps == 1
    assert build_schedule("twoshot", 8).nsteps == 2


def test_bad_requests():
    with pytest.raises(CollsynthError, match="unknown algorithm"):
        build_schedule("nope", 4)
    with pytest.raises(CollsynthError, match=">= 2"):
        build_schedule("ring", 1)
    with pytest.raises(CollsynthError, match="takes no --straggler"):
        build_schedule("ring", 4, straggler=1)
    with pytest.raises(CollsynthError, match="not 'reducescatter'"):
        build_schedule("rhd", 4, "reducescatter")


def test_deterministic():
    assert build_schedule("rhd", 13).to_json() == build_schedule("rhd", 13).to_json()


@settings(max_examples=60, deadline=None)
@given(alg=st.sampled_from(BASELINES), n=st.integers(2, 40), size=st.integers(1, 2**34),
       alpha=st.floats(0, 1e-4), bw=st.floats(1e8, 1e12))
def test_simulated_time_respects_lower_bounds(alg, n, size, alpha, bw):
    """With everyone on time: at least the bandwidth bound 2(n-1)/n s/B and, with one port, the
    latency bound ceil(log2 n) alpha (cost-models.md); ring meets its closed form for any size."""
    from collsynth.synth.simulate import simulate
    from collsynth.synth.topology import make_topology

    s = build_schedule(alg, n)
    t = simulate(s, size, make_topology("nvswitch", n, alpha=alpha, bandwidth=bw)).after_last_arrival_s
    latency = (n - 1).bit_length() * alpha if s.ports == 1 else alpha  # doubling needs one port
    bound = max(2 * (n - 1) / n * size / bw, latency)
    assert t >= bound * (1 - 1e-9)
    if alg == "ring":
        assert t == pytest.approx(2 * (n - 1) * (alpha + size / (n * bw)), rel=1e-9)
