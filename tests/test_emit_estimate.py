"""Issue 13 Scale, emit: every format's memory and time are estimated (backends/cost.py) before any
lowering, in both `emit` and `synth --format`, and a job beyond the budget is refused in one line naming
the largest size that fits (exit 2); MSCCL XML's per-rank limits are checked before lowering."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from collsynth import budget
from collsynth.backends import cost, emit
from collsynth.backends.msccl import emit as msccl_emit
from collsynth.backends.mscclpp import emit as mscclpp_emit
from collsynth.cli import main
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.estimate import work
from collsynth.synth.ir import Schedule
from collsynth.synth.registry import build_schedule


def run(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line_exit_2(code, err, needle=""):
    assert code == 2, err
    assert err.startswith("collsynth: error: ") and err.count("\n") == 1, err
    assert needle in err, err


@pytest.fixture
def no_lowering(monkeypatch):
    """Any lowering (MSCCL or MSCCL++) fails the test: the refusal must come before it."""
    def boom(*a, **k):
        raise AssertionError("lowered before the estimate refused")

    monkeypatch.setattr(msccl_emit, "lower", boom)
    monkeypatch.setattr(mscclpp_emit, "_build", boom)


@pytest.mark.parametrize("fmt", ["msccl-xml", "mscclpp-plan", "nccl-cuda"])
def test_emit_beyond_the_memory_budget_is_refused_before_lowering(capsys, tmp_path, no_lowering, fmt):
    src = tmp_path / "r64.json"
    assert run(capsys, "synth", "-a", "ring", "-n", "64", "-o", src)[0] == 0
    out = tmp_path / "out"  # 8 MiB: enough to load and verify it (about 3.3 MiB), not to emit it
    code, _, err = run(capsys, "--max-memory", "8MiB", "emit", src, "--format", fmt, "-o", out)
    one_line_exit_2(code, err, f"emitting ring_allreduce_n64 as {fmt} (64 ranks, 8064 transfers) needs about")
    assert "the largest that fits is about" in err and "transfers on 64 ranks" in err and "--max-memory" in err
    assert not out.exists()


@pytest.mark.parametrize("fmt", ["msccl-xml", "mscclpp-plan"])
def test_synth_format_beyond_the_time_budget_names_the_largest_n(capsys, tmp_path, no_lowering, fmt):
    out = tmp_path / "out"
    code, _, err = run(capsys, "--max-time", "20ms", "synth", "-a", "ring", "-n", "64", "--format", fmt, "-o", out)
    one_line_exit_2(code, err, f"synth -a ring -n 64 --format {fmt} would run for about")
    assert "--max-time" in err and not out.exists()
    fit = int(err.split("the largest that fits is ")[1].split(" ranks")[0])
    assert 2 <= fit < 64
    # the size it names does fit (and one more does not)
    budget.set_max_seconds(0.02)
    try:
        cost.check_synth_emit(fmt, "ring", fit)
        with pytest.raises(CollsynthError):
            cost.check_synth_emit(fmt, "ring", fit + 1)
    finally:
        budget.set_max_seconds(None)


def test_emit_largest_transfers_fits_and_one_more_does_not() -> None:
    s = build_schedule("direct", 12, "allreduce")
    shape = cost.shape_of(s)
    limit = 3 * 2**20
    budget.set_max_memory(limit)
    try:
        t = cost.largest_transfers("mscclpp-plan", shape)
        assert 0 < t < shape.transfers
        assert cost.cost("mscclpp-plan", cost._scaled(shape, t))[0] <= limit
        assert cost.cost("mscclpp-plan", cost._scaled(shape, t + 1))[0] > limit
        with pytest.raises(CollsynthError, match=f"largest that fits is about {t} transfers on 12 ranks"):
            emit(s, "mscclpp-plan")
    finally:
        budget.set_max_memory(None)


@pytest.mark.parametrize("alg,n", [("ring", 16), ("direct", 12), ("rhd", 16), ("rhd", 12), ("stragglar", 9),
                                   ("tree", 16), ("multiring", 12), ("twoshot", 8)])
@pytest.mark.parametrize("fmt", ["msccl-xml", "mscclpp-plan", "nccl-cuda"])
def test_synth_estimate_is_not_below_the_built_schedules(alg: str, n: int, fmt: str) -> None:
    """synth checks before building (from synth.algorithms.estimate's Work); it must not promise less than
    the estimate of the schedule actually built."""
    s = build_schedule(alg, n, "allreduce")
    before = cost.cost(fmt, cost.shape_of_work(work(alg, n), cost.peers_of(alg, n)))
    after = cost.cost(fmt, cost.shape_of(s))
    assert before[0] >= after[0] and before[1] >= after[1], (before, after)


def test_msccl_peer_limits_refuse_before_lowering(capsys, tmp_path, no_lowering) -> None:
    """direct on 66 ranks: every rank has 65 send peers, one thread block each, more than MSCCL's 64
    (it took 7 s and 1.1 GB at n = 300 to find out after lowering)."""
    src = tmp_path / "d66.json"
    assert run(capsys, "synth", "-a", "direct", "-n", "66", "-o", src)[0] == 0
    code, _, err = run(capsys, "emit", src, "--format", "msccl-xml", "-o", tmp_path / "x.xml")
    one_line_exit_2(code, err, "rank 0 exchanges with 65 peers in one direction")
    assert "at most 64 per GPU (checked before lowering)" in err and "at most 65 for an all-to-all" in err
    with pytest.raises(CollsynthError, match="peer and instance and allows at most 64 per GPU"):
        emit(build_schedule("direct", 23, "allreduce"), "msccl-xml", instances=3)
    msccl_emit.check_peer_limits(build_schedule("direct", 23, "allreduce"), instances=2)  # 44 fit


def test_msccl_step_limit_refuses_before_lowering(no_lowering) -> None:
    """A rank that sends more transfers than MSCCL's per-rank steps hold (64 thread blocks of 64 steps,
    4096 XML elements): a ring AllGather repeated 2100 times (2 x 2100 sends per rank)."""
    s = build_schedule("ring", 4, "allgather")
    k = 2100
    big = Schedule.from_arrays("allgather", 4, s.nchunks, step=(np.tile(s.step, k) +
                                                               np.repeat(np.arange(k), s.ntransfers) * s.nsteps),
                               src=np.tile(s.src, k), dst=np.tile(s.dst, k), chunk=np.tile(s.chunk, k),
                               count=np.tile(s.count, k), reduce=np.tile(s.reduce, k))
    with pytest.raises(CollsynthError, match=r"^rank 0 runs at least 6300 steps .*at most 4091 per GPU .*checked "
                                             r"before lowering"):
        msccl_emit.check_peer_limits(big)
    msccl_emit.check_peer_limits(s)


def test_plan_check_estimate_counts_the_vector_clocks() -> None:
    """The symbolic execution of a plan keeps clocks over every actor (thread blocks, proxies, callers),
    about as many as actors: its memory grows with the actors squared and the thread blocks, not with ops
    alone."""
    from collsynth.backends.mscclpp.check import OP_BYTES, check_plan_work, plan_size, read_plan_text

    plan = read_plan_text(emit(build_schedule("direct", 24, "allreduce"), "mscclpp-plan"), "d24.json")
    ntbs, nops = plan_size(plan)
    ops_only = 2 * OP_BYTES * nops
    budget.set_max_memory(int(ops_only * 1.05))
    try:
        with pytest.raises(CollsynthError, match=r"checking the MSCCL\+\+ plan d24.json \(24 GPUs, .* needs about"):
            check_plan_work(plan, 2)
    finally:
        budget.set_max_memory(None)
    check_plan_work(plan, 2)


def test_plan_check_estimate_counts_the_clock_entries_not_the_light_proxies(monkeypatch) -> None:
    """Proxies without a clock entry (exec_proxies.py) widen no clock: on a plan over two nodes the estimate
    is the one with their entries only where they need one."""
    from collsynth.backends.mscclpp import check

    plan = check.read_plan_text(emit(build_schedule("ring", 16, "allreduce"), "mscclpp-plan", gpus_per_node=8),
                                "r16.json")
    assert sum(len(g.peers["port"]) for g in plan.gpus) > 0

    seen: list[float] = []
    monkeypatch.setattr(check.budget, "check", lambda nbytes, what: seen.append(nbytes))
    check.check_plan_work(plan, 2)
    monkeypatch.setattr(check, "proxies_with_entries", lambda plan, *a: sum(len(g.peers["port"]) for g in plan.gpus))
    check.check_plan_work(plan, 2)
    assert len(seen) == 4 and seen[0] == seen[2] < seen[1] < seen[3]
    # before emitting, the estimate assumes the emitter's plans: Simple proxies need no entry, LL ones do
    shape = cost.shape_of(build_schedule("ring", 16, "allreduce"))
    several = dataclasses.replace(shape, nodes=2)
    assert cost.cost("mscclpp-plan", several, {"proto": "LL"})[0] > cost.cost("mscclpp-plan", several)[0]
    assert cost.cost("mscclpp-plan", shape, {"proto": "LL"}) == cost.cost("mscclpp-plan", shape)  # no port channel


def test_synth_on_several_nodes_estimates_the_emit_on_the_schedule_built(capsys, tmp_path, no_lowering) -> None:
    """On several nodes the build's estimate does not know the plan's shape (blocks per part, rings per rail):
    for clusterstraggler at 16 x 8 it said 2.6 times the transfers and 10 times the peers of the schedule
    built, and refused a plan that needs 2 GB. synth estimates the emit on the schedule built instead, still
    before any lowering."""
    params = {"topology": "h100-cluster", "arrivals": {5: 0.01}, "size": float(2**30)}
    s = build_schedule("clusterstraggler", 32, "allreduce", **params)
    shape = cost.shape_of(s)
    assert shape.nodes == 4
    real = cost.cost("mscclpp-plan", shape)[0]
    mib = int(real * 0.8) // 2**20
    budget.set_max_memory(mib * 2**20)
    try:
        cost.check_synth_emit("mscclpp-plan", "clusterstraggler", 32, "allreduce", params, nodes=4)  # the build only
        with pytest.raises(CollsynthError):
            cost.check_synth_emit("mscclpp-plan", "clusterstraggler", 32, "allreduce", params)
    finally:
        budget.set_max_memory(None)
    out = tmp_path / "p.json"
    code, _, err = run(capsys, "--max-memory", f"{mib}MiB", "synth", "-a", "clusterstraggler", "--topology",
                       "h100-cluster", "-n", "32", "--arrival", "5=10ms", "--size", "1GiB", "-f", "mscclpp-plan",
                       "-o", out)
    one_line_exit_2(code, err, f"emitting {s.name} as mscclpp-plan (32 ranks, {s.ntransfers} transfers) needs about")
    assert not out.exists()


def test_shape_of_a_schedule_recording_a_node_size_that_does_not_fit() -> None:
    """Only the MSCCL++ emitter reads gpus_per_node: the estimate of another format must not refuse it."""
    s = build_schedule("ring", 8, "allreduce")
    s.meta["gpus_per_node"] = 3
    assert cost.shape_of(s).nodes == 1
    assert emit(s, "nccl-cuda")
    with pytest.raises(CollsynthError, match=r"^schedule ring_allreduce_n8: its meta \"gpus_per_node\" 3 does not "
                                             r"divide the schedule's 8 ranks \(fix it, or give --gpus-per-node\)$"):
        emit(s, "mscclpp-plan")  # the value came from the file, not from an option the user gave


def test_a_plan_too_large_to_check_is_refused_before_it_is_parsed(tmp_path, monkeypatch, capsys) -> None:
    """`verify` of a plan whose check needs more memory than the budget even at its least (no proxy with a
    clock entry) is refused once the JSON is decoded, without parsing it; the bound never exceeds the full
    estimate, so a plan the budget holds is parsed and checked."""
    from collsynth.backends.mscclpp import check
    from collsynth.cli import main

    text = emit(build_schedule("ring", 16, "allreduce"), "mscclpp-plan", gpus_per_node=8)
    path = tmp_path / "r16.json"
    path.write_text(text)
    plan = check.read_plan_text(text, "r16.json")
    ntbs, nops = check.plan_size(plan)
    ports = sum(len(g.peers["port"]) for g in plan.gpus)
    assert ports > 0  # every port channel is an actor, with no clock entry of its own at the least
    least = (nops * 2 * check.OP_BYTES + ntbs * check.TB_BYTES
             + check.CLOCK_BYTES * (ntbs + 16 + ports) * (ntbs + 16))
    parsed: list[str] = []
    real = check.parse_plan

    def recording(obj, source):
        parsed.append(source)
        return real(obj, source)

    monkeypatch.setattr(check, "parse_plan", recording)
    budget.set_max_memory(least - 1)
    try:
        assert main(["verify", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert f"(16 GPUs, {ntbs} thread blocks, {nops} ops, before its proxies are counted)" in err, err
        assert parsed == []  # refused before the parser built the plan
        budget.set_max_memory(least - 1)  # main() sets the budget of its own command line
        with pytest.raises(CollsynthError, match="before its proxies are counted"):
            check.check_plan_text(text, "r16.json")
        assert check.read_plan_text(text, "r16.json") and parsed == ["r16.json"]  # reading alone needs no clocks
    finally:
        budget.set_max_memory(None)
    budget.set_max_memory(least * 2)  # above the least: the proxies and the real estimate decide
    try:
        assert check.check_plan_text(text, "r16.json").ok
    finally:
        budget.set_max_memory(None)
