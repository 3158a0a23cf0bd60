"""Arrival times far from 0 (timestamps, or a rank hours late): only their differences shape a schedule and its
time after the last arrival. Float64 leaves a microsecond no digits at 1.7e9 s, so the simulator counts from the
first arrival, build_schedule builds from it, and the straggler forms' choices compare completions after the last
arrival (arrivals.sooner)."""

from __future__ import annotations

import pytest

from collsynth.synth.arrivals import sooner
from collsynth.synth.compare import compare
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology

MiB = 2**20
STAMP = 1.7e9  # seconds since 1970, about 2023


def test_sooner_counts_from_the_last_arrival():
    assert sooner(STAMP + 30e-6, STAMP + 50e-6, STAMP)
    assert not (STAMP + 30e-6 < (STAMP + 50e-6) * (1 - 1e-12))  # what the choices compared before: a tie
    assert not sooner(STAMP + 50e-6, STAMP + 30e-6, STAMP) and not sooner(1.0, 1.0)
    assert sooner(1.0, 2.0) and not sooner(2.0 - 1e-13, 2.0)  # from 0 by default; within the tie is not sooner
    assert sooner(0.5, 0.6, 0.0, tie=0.1) and not sooner(0.55, 0.6, 0.0, tie=0.1)


# offsets of whole 2^-10 s, so that STAMP + offset - STAMP is the offset exactly (a float64 of 1.7e9 s has steps of
# 2^-22 s: 0.002 s would land 1e-7 s off, and the schedules rightly differ by that much)
@pytest.mark.parametrize("algorithm,late", [("clusterstraggler", {5: 10 / 1024}),
                                            ("clusterstraggler", {5: 2 / 1024, 9: 4 / 1024}),
                                            ("multistraggler", {3: 1 / 1024})])
def test_timestamps_give_the_schedule_and_times_of_their_differences(algorithm, late):
    n, t = 16, make_topology("h100-cluster", 16)
    rel = [late.get(r, 0.0) for r in range(n)]
    stamps = [STAMP + x for x in rel]
    a = build_schedule(algorithm, n, arrivals=rel, size=64 * MiB, topology=t)
    b = build_schedule(algorithm, n, arrivals=stamps, size=64 * MiB, topology=t)
    assert a.to_json() == b.to_json()
    ra, rb = simulate(a, 64 * MiB, t, rel), simulate(a, 64 * MiB, t, stamps)
    assert ra.after_last_arrival_s > 0
    assert rb.after_last_arrival_s == pytest.approx(ra.after_last_arrival_s, rel=1e-9)
    assert rb.last_arrival_s == STAMP + max(rel)
    assert rb.completion_s == pytest.approx(STAMP + ra.completion_s, abs=1e-6)
    assert rb.rank_finish_s == pytest.approx([STAMP + x for x in ra.rank_finish_s], abs=1e-6)


def test_a_rank_a_billion_seconds_late_gets_no_slower_form_than_waiting():
    """Before, clusterstraggler kept its late-GPU form (85.0 us after the arrival) against hierarchical's 54.8:
    completions of 1e9 s compared within a relative 1e-12 were a tie, and ties keep the first candidate."""
    rows = {r["algorithm"]: r for r in compare(16, size=MiB, topology=make_topology("h100-cluster", 16),
                                            arrivals={5: 1e9}, algorithms=["clusterstraggler", "hierarchical"])}
    ours, sync = rows["clusterstraggler"], rows["hierarchical"]
    assert ours["after_last_arrival_s"] <= sync["after_last_arrival_s"] * (1 + 1e-6)


def test_the_bound_after_the_last_arrival_is_that_of_the_differences():
    from collsynth.synth.bounds import allreduce_bound

    t = make_topology("h100-cluster", 16)
    rel = [0.0] * 16
    rel[5] = 10 / 1024
    a = allreduce_bound(t, MiB, rel)
    b = allreduce_bound(t, MiB, [STAMP + x for x in rel])  # was 12.398 us after the last arrival, not 12.297
    assert b.after_last_arrival_s == a.after_last_arrival_s and b.kind == a.kind
    assert b.value_s == STAMP + a.value_s and b.terms == {k: v + STAMP for k, v in a.terms.items()}
    assert b.numbers.startswith(a.numbers) and "from the first arrival" in b.numbers
