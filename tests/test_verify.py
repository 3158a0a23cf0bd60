"""The verifier: unit cases and a mutation test against the numeric oracle (tests/oracle.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from oracle import reference_ok

from collsynth.synth.ir import Schedule, ScheduleBuilder
from collsynth.synth.registry import build_schedule
from collsynth.synth.verify import VerificationError, check, verify


def _sched(collective, n, C, steps, ports=1, owner=None):
    b = ScheduleBuilder(collective, n, C, ports=ports, owner=owner)
    for step in steps:
        b.new_step()
        for t in step:
            b.add(*t)
    return b.build()


def test_two_rank_swap_ok():
    s = _sched("allreduce", 2, 1, [[(0, 1, 0, 1, True), (1, 0, 0, 1, True)]])
    assert verify(s).ok


def test_missing_contribution_reported():
    s = _sched("allreduce", 2, 1, [[(0, 1, 0, 1, True)]])
    r = verify(s)
    assert not r.ok and r.violation.kind == "missing" and "rank 0 chunk 0" in r.message


def test_double_count_reported_with_step():
    # 0 -> 1 reduce twice: rank 1 holds rank 0's contribution twice
    s = _sched("allreduce", 2, 1, [[(0, 1, 0, 1, True)], [(0, 1, 0, 1, True)], [(1, 0, 0, 1, False)]])
    r = verify(s)
    assert not r.ok and r.violation.kind == "double-count" and r.violation.step == 1


def test_double_count_overwritten_later_is_harmless():
    s = _sched("allreduce", 2, 1, [[(0, 1, 0, 1, True)], [(0, 1, 0, 1, True)],
                                   [(1, 0, 0, 1, True)], [(0, 1, 0, 1, False)]])
    # step 1 double counts at rank 1, but step 3 overwrites rank 1 with rank 0's correct sum? no:
    # rank 0 got rank 1's tainted value at step 2, so the final value is wrong: must fail.
    assert not verify(s).ok


def test_ports_violation():
    s = _sched("allreduce", 3, 1, [[(0, 1, 0, 1, True), (0, 2, 0, 1, True)]])
    r = verify(s)
    assert not r.ok and r.violation.kind == "ports"
    assert verify(s, ports=2).violation.kind != "ports"


def test_range_violation():
    s = _sched("allreduce", 2, 1, [[(0, 5, 0, 1, True)]])
    r = verify(s)
    assert r.violation.kind == "range" and "out of range" in r.message
    s = _sched("allreduce", 2, 2, [[(0, 1, 1, 2, True)]])
    assert verify(s).violation.kind == "range"


def test_copy_hazard_in_one_step():
    # rank 0 copies chunk 0 to rank 1 while rank 1 sends its chunk 0: read/write race on (1, 0)
    s = _sched("allreduce", 2, 1, [[(0, 1, 0, 1, False), (1, 0, 0, 1, False)]])
    r = verify(s)
    assert r.violation.kind == "hazard"


def test_exchange_reduce_is_legal():
    s = _sched("allreduce", 2, 2, [[(0, 1, 0, 1, True), (1, 0, 0, 1, True)], [(0, 1, 1, 1, True), (1, 0, 1, 1, True)]])
    assert verify(s).ok


def test_allgather_undefined_data():
    s = _sched("allgather", 2, 2, [[(0, 1, 1, 1, False)]], owner=(0, 1))  # rank 0 does not own chunk 1
    r = verify(s)
    assert not r.ok


def test_check_raises():
    s = _sched("allreduce", 2, 1, [[(0, 1, 0, 1, True)]])
    with pytest.raises(VerificationError):
        check(s)


@pytest.mark.parametrize("alg,coll", [("ring", "allreduce"), ("rhd", "allreduce"), ("direct", "allreduce"),
                                      ("twoshot", "allreduce"), ("ring", "reducescatter"), ("ring", "allgather"),
                                      ("direct", "reducescatter"), ("direct", "allgather")])
def test_verifier_agrees_with_numeric_oracle_on_mutants(alg, coll):
    rng = random.Random(f"{alg}-{coll}")
    broken = 0
    for n in [2, 3, 4, 5, 6, 7, 8, 11]:
        base = build_schedule(alg, n, coll)
        assert verify(base).ok and reference_ok(base)
        for _ in range(25):
            mutant = _mutate(base, rng)
            got, want = verify(mutant).ok, reference_ok(mutant)
            assert got == want, (alg, coll, n, verify(mutant).message, mutant.to_json())
            broken += not want
    assert broken > 50  # the mutations really do break schedules


def _mutate(s: Schedule, rng: random.Random) -> Schedule:
    cols = {k: getattr(s, k).copy() for k in ("step", "src", "dst", "chunk", "count", "reduce")}
    m = len(cols["step"])
    i = rng.randrange(m)
    kind = rng.choice(["drop", "duplicate", "retarget", "rechunk", "flip"])
    if kind == "drop":
        cols = {k: np.delete(v, i) for k, v in cols.items()}
    elif kind == "duplicate":
        cols = {k: np.append(v, v[i]) for k, v in cols.items()}
        cols["step"][-1] = rng.randrange(s.nsteps)
    elif kind == "retarget":
        key = rng.choice(["src", "dst"])
        cols[key][i] = rng.randrange(-1, s.nranks + 1) if rng.random() < 0.1 else rng.randrange(s.nranks)
    elif kind == "rechunk":
        cols["chunk"][i] = rng.randrange(s.nchunks)
        if rng.random() < 0.3:
            cols["count"][i] = rng.randrange(1, s.nchunks + 1)
    else:
        cols["reduce"][i] = not cols["reduce"][i]
    return Schedule.from_arrays(s.collective, s.nranks, s.nchunks, nsteps=s.nsteps, ports=s.ports,
                                owner=s.owner, phases=s.phases, **cols)


# ------------------------------------------------------------------ cases mutation testing found untested
def _allreduce3_then(extra_step, ports=2):
    """3-rank allreduce that is correct after two steps (reduce into rank 0, copy out), then ``extra_step``."""
    return _sched("allreduce", 3, 1, [[(1, 0, 0, 1, True), (2, 0, 0, 1, True)],
                                      [(0, 1, 0, 1, False), (0, 2, 0, 1, False)], extra_step], ports=ports)


def test_count_zero_is_a_range_violation():
    # the 2-rank swap is correct; a transfer of count 0 moves nothing and must still be refused
    s = _sched("allreduce", 2, 1, [[(0, 1, 0, 1, True), (1, 0, 0, 1, True)], [(0, 1, 0, 0, False)]])
    r = verify(s)
    assert not r.ok and r.violation.kind == "range" and "count 0" in r.message
    assert r.violation.index == 2 and r.violation.step == 1


def test_two_copies_into_one_location_in_one_step_are_a_race():
    # both copies deliver the full sum, so the final values are right: only the race check can object
    assert verify(_allreduce3_then([(1, 0, 0, 1, False)])).ok
    s = _allreduce3_then([(1, 0, 0, 1, False), (2, 0, 0, 1, False)])
    r = verify(s)
    assert not r.ok and r.violation.kind == "hazard", r.message
    assert r.violation.step == 2 and r.violation.index in (4, 5)
    assert "rank 0 chunk 0" in r.message


def test_race_on_a_location_read_in_the_same_step_taints_what_the_reader_delivers():
    # step 2: 1 -> 0 copy while rank 0 sends its chunk to rank 2; rank 2's copy is garbage
    s = _allreduce3_then([(1, 0, 0, 1, False), (0, 2, 0, 1, False)])
    r = verify(s)
    assert not r.ok and r.violation.kind == "hazard" and r.violation.index == 4, r.message


def test_port_overflow_blames_the_first_message_past_the_limit():
    # step 0 is fine; in step 1 rank 2 receives three messages (from 0, 1, 3): with p=1 the second one
    # (transfer #3) is the first over the limit, with p=2 the third (#4)
    steps = [[(0, 1, 0, 1, True), (2, 3, 0, 1, True)],
             [(0, 2, 0, 1, True), (1, 2, 0, 1, True), (3, 2, 0, 1, True)]]
    s = _sched("allreduce", 4, 1, steps)
    r = verify(s)
    assert r.violation.kind == "ports" and r.violation.step == 1 and r.violation.index == 3, r.message
    assert "rank 2 receives 3 messages" in r.message
    r = verify(s, ports=2)
    assert r.violation.kind == "ports" and r.violation.index == 4, r.message
    # the sending side: rank 0 sends twice in step 1
    s = _sched("allreduce", 4, 1, [[(1, 2, 0, 1, True)], [(0, 1, 0, 1, True), (0, 3, 0, 1, True)]])
    r = verify(s)
    assert r.violation.kind == "ports" and r.violation.index == 2 and "rank 0 sends 2 messages" in r.message


# exact reports: the message is the product's interface (mutation testing showed message, boundary and
# many-rank code paths that no test read)
def _msg(steps, n=2, C=1, collective="allreduce", ports=1, owner=None):
    return verify(_sched(collective, n, C, steps, ports=ports, owner=owner)).message


@pytest.mark.parametrize("t, what", [
    ((0, 2, 0, 1, True), "(0->2 chunk 0 reduce): rank out of range (ranks are 0..1)"),
    ((2, 0, 0, 1, False), "(2->0 chunk 0 copy): rank out of range (ranks are 0..1)"),
    ((-1, 0, 0, 1, True), "(-1->0 chunk 0 reduce): rank out of range (ranks are 0..1)"),
    ((0, -1, 0, 1, True), "(0->-1 chunk 0 reduce): rank out of range (ranks are 0..1)"),
    ((1, 1, 0, 1, True), "(1->1 chunk 0 reduce): a rank sends to itself"),
    ((0, 1, 2, 1, True), "(0->1 chunk 2 reduce): chunk run 2..2 outside 0..1"),
    ((0, 1, -1, 1, True), "(0->1 chunk -1 reduce): chunk run -1..-1 outside 0..1"),
    ((0, 1, 1, 2, True), "(0->1 chunks 1..2 reduce): chunk run 1..2 outside 0..1"),
    ((0, 1, 0, 0, True), "(0->1 chunks 0..-1 reduce): count 0 (must be >= 1)"),
])
def test_range_messages_are_exact(t, what):
    assert _msg([[t]], C=2) == f"FAIL step 0, transfer #0 {what}"


def test_phase_waiting_for_a_rank_outside_is_refused():
    def phased(waits):
        b = ScheduleBuilder("allreduce", 2, 1)
        b.begin_phase("p", waits)
        b.new_step()
        b.add(0, 1, 0, 1, True)
        b.add(1, 0, 0, 1, True)
        b.end_phase()
        return b.build()

    assert verify(phased([0, 1])).ok and verify(phased([0])).ok and verify(phased([1])).ok
    for bad in ([2], [-1], [0, 2]):
        r = verify(phased(bad))
        assert not r.ok and r.violation.kind == "phase"
        assert r.message == "FAIL phase 'p' waits for a rank outside 0..1"


def test_postcondition_messages_name_rank_and_chunk():
    # 3 ranks, 2 chunks: chunk 1 is never reduced anywhere
    steps = [[(1, 0, 0, 1, True)], [(2, 0, 0, 1, True)], [(0, 1, 0, 1, False)], [(0, 2, 0, 1, False)]]
    assert _msg(steps, n=3, C=2, ports=1) == "FAIL rank 0 chunk 1: missing contributions of ranks 1, 2 at the end"
    # rank 2 chunk 0 misses only rank 0 once rank 0's copy to it is dropped
    assert _msg(steps[:3], n=3, C=1) == "FAIL rank 2 chunk 0: missing contributions of ranks 0, 1 at the end"
    # allgather: a location nobody writes holds undefined data
    assert _msg([[(0, 1, 0, 1, False)]], n=2, C=2, collective="allgather", owner=(0, 1)) == \
        "FAIL rank 0 chunk 1: holds undefined data (never written)"


@pytest.mark.parametrize("n, shown", [(9, "1, 2, 3, 4, 5, 6, 7, 8"), (10, "1, 2, 3, 4, 5, 6, 7, 8, ... (9 in all)")])
def test_long_rank_lists_are_shortened(n, shown):
    s = Schedule.from_arrays("allreduce", n, 1, step=[0], src=[0], dst=[1], chunk=[0], reduce=[True])
    assert verify(s).message == f"FAIL rank 0 chunk 0: missing contributions of ranks {shown} at the end"


@pytest.mark.parametrize("n", [63, 64, 65, 70, 129])
def test_more_ranks_than_one_bit_word(n):
    """Contribution sets span several 64-bit words past 64 ranks."""
    s = build_schedule("ring", n)
    assert verify(s).ok
    # drop the last transfer: exactly one location misses exactly one contribution
    cols = {k: getattr(s, k)[:-1] for k in ("step", "src", "dst", "chunk", "count", "reduce")}
    bad = Schedule.from_arrays("allreduce", n, s.nchunks, nsteps=s.nsteps, **cols)
    r = verify(bad)
    assert not r.ok and r.violation.kind == "missing"
    t = s.ntransfers - 1
    assert r.message.startswith(f"FAIL rank {int(s.dst[t])} chunk {int(s.chunk[t])}: missing contributions of ranks ")
    # a double count by a rank above 64 is found and blamed on its transfer
    dup = Schedule.from_arrays("allreduce", n, s.nchunks, nsteps=s.nsteps + 1,
                               **{k: np.append(getattr(s, k), getattr(s, k)[0]) for k in cols})
    dup = dup.replace(step=np.append(s.step, s.nsteps))
    assert not verify(dup).ok


def test_two_reduces_into_one_location_in_a_later_step_are_both_added():
    # step 1 (not 0) has two reduces into rank 0 chunk 0: both contributions must be accumulated
    steps = [[(1, 0, 1, 1, True), (2, 0, 1, 1, True)], [(1, 0, 0, 1, True), (2, 0, 0, 1, True)],
             [(0, 1, 0, 2, False), (0, 2, 0, 2, False)]]
    s = _sched("allreduce", 3, 2, steps, ports=2)
    assert verify(s).ok, verify(s).message


def test_race_with_the_last_read_of_the_step():
    # the copy 0->1 writes rank 1 chunk 0, which the copy 1->2 reads in the same step (the largest read)
    r = verify(_allreduce3_then([(0, 1, 0, 1, False), (1, 2, 0, 1, False)]))
    assert not r.ok and r.violation.kind == "hazard" and r.violation.index == 4, r.message


def test_garbage_from_a_race_spreads_to_later_copies():
    # step 2 races on rank 0 chunk 0; step 3 copies that garbage to rank 1; step 4 repairs rank 0 only
    s = _sched("allreduce", 3, 1, [[(1, 0, 0, 1, True), (2, 0, 0, 1, True)],
                                   [(0, 1, 0, 1, False), (0, 2, 0, 1, False)],
                                   [(1, 0, 0, 1, False), (2, 0, 0, 1, False)],
                                   [(0, 1, 0, 1, False)], [(2, 0, 0, 1, False)]], ports=2)
    r = verify(s)
    assert not r.ok and r.violation.kind == "hazard" and r.violation.step == 2, r.message
    assert "reaches rank 1 chunk 0" in r.message


def test_empty_steps_in_the_middle_are_skipped_not_the_end():
    s = Schedule.from_arrays("allreduce", 2, 1, step=[0, 2, 3], src=[0, 1, 0], dst=[1, 0, 1], chunk=[0, 0, 0],
                             reduce=[True, False, False], nsteps=4)
    assert verify(s).ok
    s = Schedule.from_arrays("allreduce", 2, 1, step=[0, 2], src=[0, 1], dst=[1, 0], chunk=[0, 0],
                             reduce=[True, False], nsteps=3)
    assert verify(s).ok


def test_reports_are_frozen_and_check_names_the_source():
    import dataclasses

    s = _sched("allreduce", 2, 1, [[(0, 1, 0, 1, True)]])
    r = verify(s)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.ok = True
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.violation.step = 3
    with pytest.raises(VerificationError) as e:
        check(s, source="x.json")
    assert str(e.value) == f"x.json does not verify ({r.message}); fix the schedule first"
    with pytest.raises(VerificationError) as e:
        check(s)
    assert str(e.value) == r.message and e.value.report == r


def test_no_progress_line_for_a_small_schedule(capsys):
    from collsynth import progress

    progress.enable()
    try:
        assert verify(build_schedule("ring", 4)).ok
    finally:
        progress.disable()
    assert capsys.readouterr().err == ""


def test_flat_bytes_is_the_bit_set_memory():
    from collsynth.synth.verify import flat_bytes

    for n, C in ((2, 1), (64, 3), (65, 3), (129, 2)):
        s = Schedule.from_arrays("allreduce", n, C, step=[0], src=[0], dst=[1], chunk=[0])
        assert flat_bytes(s) == n * C * ((n + 63) // 64) * 8


def test_range_message_when_the_destination_is_rank_0():
    assert _msg([[(1, 0, 2, 1, True)]], C=2) == \
        "FAIL step 0, transfer #0 (1->0 chunk 2 reduce): chunk run 2..2 outside 0..1"
