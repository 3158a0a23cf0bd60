"""backends/nccl/plan.py: the per-rank plan the generated CUDA code runs, checked with its numpy interpreter."""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "nccl_emu"))
import nccl_testlib as lib  # noqa: E402

from collsynth.backends.nccl import plan as P  # noqa: E402
from collsynth.errors import CollsynthError  # noqa: E402
from collsynth.synth.ir import ScheduleBuilder  # noqa: E402
from collsynth.synth.registry import algorithms, build_schedule  # noqa: E402
from collsynth.synth.verify import check  # noqa: E402


def _inputs(coll: str, n: int, count: int, dtype, rng) -> list[np.ndarray]:
    full = count * n if coll == "reducescatter" else count
    return [rng.integers(0, 8, full).astype(dtype) for _ in range(n)]


def _expected(coll: str, ins: list[np.ndarray], count: int) -> list[np.ndarray]:
    n = len(ins)
    tot = sum(x.astype(np.float64) for x in ins)
    if coll == "allreduce":
        return [tot] * n
    if coll == "reducescatter":
        return [tot[r * count:(r + 1) * count] for r in range(n)]
    return [np.concatenate(ins).astype(np.float64)] * n


def _assert_runs(schedule, count, dtype, inplace, rng) -> None:
    plan = P.build_plan(check(schedule))
    ins = _inputs(schedule.collective, schedule.nranks, count, dtype, rng)
    outs = P.run_plan(plan, ins, inplace=inplace)
    for r, (got, want) in enumerate(zip(outs, _expected(schedule.collective, ins, count))):
        assert np.array_equal(got.astype(np.float64), want), (schedule.name, count, inplace, r)


CONSTRUCTIVE = ("ring", "rhd", "direct", "twoshot", "stragglar")


def _cases():
    for name, info in algorithms().items():
        for coll in info.collectives:
            # the MILP solver is slow beyond a few ranks; the constructive ones are instant
            for n in ((2, 3, 4, 5, 8) if name in CONSTRUCTIVE else (3, 4)):
                yield name, coll, n


@pytest.mark.parametrize("name,coll,n", list(_cases()))
def test_every_algorithm_runs_through_the_plan(name, coll, n):
    try:
        s = build_schedule(name, n, coll)
    except CollsynthError as e:
        pytest.skip(f"{name} does not build for n={n}: {e}")
    rng = np.random.default_rng(n)
    for count in (1, 7, 300, 1031):
        for dtype in (np.float32, np.float16):
            for inplace in (False, True):
                _assert_runs(s, count, dtype, inplace, rng)


@pytest.mark.parametrize("straggler", [0, 3, 7])
def test_stragglar_every_late_rank(straggler):
    s = build_schedule("stragglar", 8, straggler=straggler)
    rng = np.random.default_rng(straggler)
    for count in (5, 777):
        for inplace in (False, True):
            _assert_runs(s, count, np.float32, inplace, rng)


@pytest.mark.parametrize("case", sorted(lib.CORNER_CASES))
def test_corner_cases(case):
    s = lib.CORNER_CASES[case]()
    rng = np.random.default_rng(1)
    for count in (1, 3, 64, 1000, 4097):
        for dtype in (np.float32, np.float16):
            for inplace in (False, True):
                _assert_runs(s, count, dtype, inplace, rng)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["ring", "rhd", "direct", "twoshot", "stragglar"]), n=st.integers(2, 9),
       count=st.integers(1, 5000), inplace=st.booleans())
def test_random_sizes(name, n, count, inplace):
    try:
        s = build_schedule(name, n)
    except CollsynthError:
        return
    _assert_runs(s, count, np.float32, inplace, np.random.default_rng(count))


# ---------------------------------------------------------------------------------------------- structure
def test_mixed_run_is_split_into_two_messages():
    plan = P.build_plan(lib.mixed_run_allreduce())
    step1 = [st for st in plan.steps[1] if st.step == 1][0]
    sends = [op for op in step1.p2p if op.send]
    assert [(op.chunk, op.nchunk, op.loc) for op in sends] == [(0, 1, P.OUT), (1, 1, P.IN)]
    recv = [st for st in plan.steps[2] if st.step == 1][0].p2p
    assert [(op.chunk, op.nchunk, op.loc) for op in recv] == [(0, 1, P.SCR), (1, 1, P.SCR)]


def test_reducescatter_partial_sums_use_the_work_area():
    plan = P.build_plan(lib.split_reducescatter())
    assert plan.uses_work
    adds = plan.steps[1][0].adds  # rank 1 reduces chunks 0 (not owned: WORK) and 1 (owned: OUT)
    assert [(a.chunk, a.dst_loc, a.a_loc) for a in adds] == [(0, P.WORK, P.IN), (1, P.OUT, P.IN)]
    assert P.build_plan(build_schedule("direct", 4, "reducescatter")).uses_work is False


def test_overlapping_reduces_go_to_separate_batches():
    plan = P.build_plan(lib.overlapping_reduces())
    adds = plan.steps[0][0].adds
    assert [(a.chunk, a.nchunk, a.new_batch) for a in adds] == [(0, 2, True), (1, 1, True)]
    assert adds[1].a_loc == P.OUT  # the second add reads the first one's result


def test_add_batches_hold_at_most_max_ops():
    adds = P.build_plan(lib.many_adds()).steps[1][0].adds
    assert len(adds) == 20
    starts = [i for i, a in enumerate(adds) if a.new_batch]
    assert starts == [0, 8, 16]


def test_one_shot_sums_in_rank_order():
    plan = P.build_plan(build_schedule("direct", 5))
    for r in range(5):
        (add,) = plan.steps[r][0].adds
        assert add.apos == r and len(add.srcs) == 4
    many = P.build_plan(build_schedule("direct", 40))
    parts = many.steps[39][0].adds
    assert len(parts) == 2 and parts[1].a_loc == P.OUT and parts[1].new_batch


def test_one_shot_results_are_bitwise_identical_on_every_rank():
    s = build_schedule("direct", 6)
    rng = np.random.default_rng(5)
    ins = [rng.standard_normal(999).astype(np.float32) for _ in range(6)]
    outs = P.run_plan(P.build_plan(s), ins)
    assert all(np.array_equal(o.view(np.uint32), outs[0].view(np.uint32)) for o in outs)


def test_chunk_layout():
    # float: 64-element alignment; count 1000 over 3 chunks -> 384, 384, 232
    S = P.chunk_elems(1000, 3, 4)
    assert S == 384
    assert [P.pos(c, 1000, 3, S) for c in range(4)] == [0, 384, 768, 1000]
    # blocks of a ReduceScatter: 2 chunks per block of 10 elements (half: 128-element alignment)
    S = P.chunk_elems(10, 2, 2)
    assert [P.pos(c, 10, 2, S) for c in range(5)] == [0, 10, 10, 20, 20]


# ---------------------------------------------------------------------------------------------- refusals
def test_reducescatter_owner_not_in_rank_order_is_refused():
    b = ScheduleBuilder("reducescatter", 2, 2, owner=[1, 0])
    b.new_step(); b.add(0, 1, 0, 1, True); b.add(1, 0, 1, 1, True)
    with pytest.raises(CollsynthError, match="rank order"):
        P.build_plan(check(b.build()))


def test_reducescatter_chunks_not_multiple_of_ranks_is_refused():
    b = ScheduleBuilder("reducescatter", 2, 3, owner=[0, 0, 1])
    b.new_step(); b.add(1, 0, 0, 2, True); b.add(0, 1, 2, 1, True)
    with pytest.raises(CollsynthError, match="multiple of its rank count"):
        P.build_plan(check(b.build()))


# ---------------------------------------------------------------------------------------------- the oracle can fail
def test_interpreter_catches_a_wrong_location():
    s = build_schedule("ring", 4)
    plan = P.build_plan(s)
    rank0 = list(plan.steps[0])
    st1 = rank0[1]
    bad = tuple(dataclasses.replace(op, loc=P.IN) if op.send else op for op in st1.p2p)
    rank0[1] = dataclasses.replace(st1, p2p=bad)
    broken = dataclasses.replace(plan, steps=(tuple(rank0),) + plan.steps[1:])
    ins = _inputs("allreduce", 4, 1000, np.float32, np.random.default_rng(0))
    outs = P.run_plan(broken, ins)
    assert not all(np.array_equal(o.astype(np.float64), e) for o, e in zip(outs, _expected("allreduce", ins, 1000)))


def test_interpreter_catches_a_missing_add():
    plan = P.build_plan(build_schedule("ring", 3))
    r1 = list(plan.steps[1])
    r1[0] = dataclasses.replace(r1[0], adds=())
    broken = dataclasses.replace(plan, steps=(plan.steps[0], tuple(r1), plan.steps[2]))
    ins = _inputs("allreduce", 3, 300, np.float32, np.random.default_rng(0))
    outs = P.run_plan(broken, ins)
    assert not all(np.array_equal(o.astype(np.float64), e) for o, e in zip(outs, _expected("allreduce", ins, 300)))
