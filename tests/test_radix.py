"""radix: mixed-radix halving-doubling over n's prime factors (synth/algorithms/radix.py)."""

from __future__ import annotations

import pytest

from collsynth.errors import CollsynthError
from collsynth.synth.algorithms import radix
from collsynth.synth.compare import compare, default_algorithms
from collsynth.synth.composition import radix_applies, radix_factors
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import verify


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 8, 9, 10, 12, 15, 16, 18, 20, 24, 27, 30, 36, 72])
@pytest.mark.parametrize("collective", ["allreduce", "reducescatter", "allgather"])
def test_verifies_in_2_sum_f_minus_1_steps(n: int, collective: str) -> None:
    s = build_schedule("radix", n, collective)
    assert verify(s).ok
    steps = sum(f - 1 for f in radix_factors(n))
    assert s.nsteps == (2 * steps if collective == "allreduce" else steps)
    assert s.meta["factors"] == radix_factors(n)


@pytest.mark.parametrize("n", [6, 12, 30, 72])
def test_time_is_the_ring_bytes_in_fewer_steps(n: int) -> None:
    """On nvswitch: 2 sum(f - 1) alpha + 2 (n-1)/n s / B exactly (every step one message per rank)."""
    topo = make_topology("nvswitch", n, alpha=3e-6, bandwidth=450e9)
    size = 2**30
    got = simulate(radix.build(n), size, topo).completion_s
    want = 2 * sum(f - 1 for f in radix_factors(n)) * 3e-6 + 2 * (n - 1) / n * size / 450e9
    assert got == pytest.approx(want, rel=1e-12)
    ring = simulate(build_schedule("ring", n), size, topo).completion_s
    assert got < ring


@pytest.mark.parametrize("n,other", [(8, "rhd"), (16, "rhd"), (7, "ring"), (13, "ring")])
def test_is_rhd_on_powers_of_two_and_the_ring_on_primes(n: int, other: str) -> None:
    topo = make_topology("nvswitch", n)
    a = simulate(radix.build(n), 2**26, topo).completion_s
    b = simulate(build_schedule(other, n), 2**26, topo).completion_s
    assert a == pytest.approx(b, rel=1e-12)
    assert not radix_applies(n)


def test_compare_runs_it_where_it_differs() -> None:
    assert "radix" in default_algorithms(n=12) and "radix" in default_algorithms()
    assert "radix" not in default_algorithms(n=8) and "radix" not in default_algorithms(n=7)
    rows = {r["algorithm"]: r["after_last_arrival_s"] for r in compare(12, "64MiB", "nvswitch")}
    assert rows["radix"] < min(rows["ring"], rows["rhd"])  # (twoshot's 2 direct steps win on nvswitch)
    assert "radix" not in [r["algorithm"] for r in compare(8, "64MiB", "nvswitch")]


def test_nvl72_beats_ring_and_rhd() -> None:
    """gb200-nvl72 (72 GPUs, one NVLink domain): 14 steps instead of the ring's 142, the ring's bytes."""
    topo = make_topology("gb200-nvl72", 72)
    t = {a: simulate(build_schedule(a, 72), 2**30, topo).completion_s for a in ("radix", "ring", "rhd")}
    assert t["radix"] < t["ring"] < t["rhd"]


def test_other_collectives_are_refused() -> None:
    with pytest.raises(CollsynthError, match="radix builds"):
        radix.build(6, "broadcast")
