"""Pipelined StragglAR (issue 9): K(n-1) chunks, round counts against k(n-1) - 1 + ceil(log2 n), the
block layout of phase 1, the alpha-beta choice of K, its limits, and every backend (torch executor,
NCCL plan interpreter and code generator, MSCCL XML emitter and checker)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from collsynth.cli import main as cli_main
from collsynth.errors import CollsynthError
from collsynth.synth.registry import algorithms, build_schedule

algorithms()
from collsynth.synth.algorithms.stragglar.build import build  # noqa: E402
from collsynth.synth.algorithms.stragglar.design import ceil_log2, lower_bound
from collsynth.synth.algorithms.stragglar.phase2 import phase2_plan  # noqa: E402
from collsynth.synth.algorithms.stragglar.pipeline import (  # noqa: E402
    AUTO_MAX,
    best_pipeline,
    max_pipeline_for_build,
    phase2_time,
    resolve_pipeline,
)
from collsynth.synth.simulate import simulate  # noqa: E402
from collsynth.synth.topology import make_topology  # noqa: E402
from collsynth.synth.verify import verify  # noqa: E402

PAPER = dict(size=2**30, alpha=3e-6, bandwidth=450 * 2**30)


def _ok(s):
    rep = verify(s)
    assert rep.ok, rep.message
    return s


def _phase(s, name):
    return {p.name: p for p in s.phases}[name]


# ------------------------------------------------------------------------------------ round counts
@pytest.mark.parametrize("n", range(2, 65))
def test_every_n_to_64_meets_the_pipelined_lower_bound(n):
    """K = 2 and 3 for every n; the bound k(n-1) - 1 + ceil(log2 n) is met except n = 3 (one above)."""
    for k in (2, 3):
        s = _ok(build(n, pipeline=k))
        comp = _phase(s, "completion")
        assert comp.stop - comp.start == s.meta["phase2_rounds"]
        assert s.meta["lower_bound"] == lower_bound(n, k) == k * (n - 1) - 1 + ceil_log2(n)
        assert s.meta["phase2_rounds"] == lower_bound(n, k) + (1 if n == 3 else 0)
        assert s.nchunks == k * (n - 1) and s.meta["pipeline"] == k


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 11, 16, 24, 33, 48, 63, 64])
def test_depths_to_8(n):
    for k in range(4, 9):
        s = _ok(build(n, pipeline=k))
        assert s.meta["phase2_rounds"] - lower_bound(n, k) == (1 if n == 3 else 0)


def test_k1_is_unchanged():
    for n in (4, 6, 8, 13):
        a, b = build(n), build(n, pipeline=1)
        assert a.to_json() == b.to_json() and a.name == f"stragglar_n{n}_s{n - 1}"
        assert a.meta["lower_bound"] == n - 2 + ceil_log2(n)


def test_n3_rotation_beats_exchanges_by_k_minus_2():
    plan = phase2_plan(3, k=5)
    assert plan.method == "n3-rotation" and plan.rounds == 2 * 5 + 2 and plan.gap == 1


# ------------------------------------------------------------------------------------ structure
@pytest.mark.parametrize("n,k", [(5, 3), (8, 4), (12, 2)])
def test_straggler_meets_ranks_round_robin_in_a_block_layout(n, k):
    """Round j of phase 2: S exchanges (both reduce) with punctual GPU j mod (n-1) the chunk stored at
    (j mod (n-1)) k + j div (n-1); that GPU owns the block [g k, g k + k) after phase 1."""
    s = _ok(build(n, pipeline=k))
    p, S = n - 1, n - 1
    comp = _phase(s, "completion")
    for j in range(k * p):
        step = comp.start + j
        xs = [t for t in s.transfers(step) if S in (t.src, t.dst) and t.reduce]
        g = j % p
        assert sorted((t.src, t.dst) for t in xs) == sorted([(g, S), (S, g)])
        assert {t.chunk for t in xs} == {g * k + j // p}
    rs = _phase(s, "reducescatter")
    for step in range(rs.start, rs.stop):  # phase 1: one message per rank, whole blocks of k chunks
        ts = list(s.transfers(step))
        assert all(t.count % k == 0 and t.chunk % k == 0 for t in ts)
        assert len({t.src for t in ts}) == len(ts) == len({t.dst for t in ts})
    base = build(n)
    assert rs.stop - rs.start == _phase(base, "reducescatter").stop
    # phase 1 moves exactly the unpipelined bytes
    sent = lambda sch, ph: sum(t.count for t in sch.transfers() if ph.start <= t.step < ph.stop) / sch.nchunks
    assert sent(s, rs) == pytest.approx(sent(base, _phase(base, "reducescatter")))


@pytest.mark.parametrize("phase1", ["ring", "direct", "rhd"])
def test_phase1_kinds_and_every_straggler(phase1):
    for n in (4, 7):
        for r in range(n):
            s = _ok(build(n, straggler=r, phase1=phase1, pipeline=3))
            assert s.name == f"stragglar_n{n}_k3_s{r}"
            assert _phase(s, "reducescatter").waits_for == tuple(x for x in range(n) if x != r)


def test_deterministic():
    assert build(12, pipeline=4).to_json() == build(12, pipeline=4).to_json()
    assert build(10, pipeline="auto", size="64MiB").digest() == build(10, pipeline="auto", size="64MiB").digest()


def test_simulated_time_is_the_round_formula():
    """Phase 1 hidden, power of two: exactly R(K)(alpha + s/(K(n-1)B)) after the straggler arrives."""
    for n, k in ((8, 4), (16, 3)):
        topo = make_topology("nvswitch", n, alpha=PAPER["alpha"], bandwidth=PAPER["bandwidth"])
        s = _ok(build(n, pipeline=k))
        t = simulate(s, PAPER["size"], topo, {n - 1: 0.05}).after_last_arrival_s
        assert t == pytest.approx(phase2_time(n, k, **PAPER), rel=1e-9)


def test_model_speedup_n8_paper_parameters():
    """Issue 9: pipelined >= 1.55x ring after the straggler arrives (unpipelined: 1.36x)."""
    n = 8
    topo = make_topology("nvswitch", n, alpha=PAPER["alpha"], bandwidth=PAPER["bandwidth"])
    arr = {n - 1: 0.05}
    ring = simulate(_ok(build_schedule("ring", n)), PAPER["size"], topo, arr).after_last_arrival_s
    one = simulate(_ok(build(n)), PAPER["size"], topo, arr).after_last_arrival_s
    s = _ok(build(n, pipeline="auto", **PAPER))
    piped = simulate(s, PAPER["size"], topo, arr).after_last_arrival_s
    assert 1.35 < ring / one < 1.37
    assert ring / piped >= 1.55 and s.meta["pipeline"] > 1
    assert piped < 1.14 * (PAPER["size"] / PAPER["bandwidth"] + PAPER["alpha"])


# ------------------------------------------------------------------------------------ auto and limits
def test_auto_picks_the_model_minimum():
    for n in (4, 8, 16, 24):
        k = best_pipeline(n, **PAPER)
        times = [phase2_time(n, j, **PAPER) for j in range(1, AUTO_MAX + 1)]
        assert phase2_time(n, k, **PAPER) == min(times)
        assert all(t > min(times) for t in times[:k - 1])
        # near the continuous optimum sqrt((ceil(log2 n) - 1) s / (alpha B)) / (n - 1)
        star = math.sqrt((ceil_log2(n) - 1) * PAPER["size"] / (PAPER["alpha"] * PAPER["bandwidth"])) / (n - 1)
        assert abs(k - star) <= 1.5
    s = build(8, pipeline="auto", **PAPER)
    assert s.meta["pipeline"] == best_pipeline(8, **PAPER)
    assert s.meta["pipeline_model"]["size"] == 2**30 and s.meta["pipeline_model"]["alpha"] == 3e-6


def test_auto_follows_size_and_alpha():
    small = build(8, pipeline="auto", size="64KiB", alpha="3us", bandwidth="450GiB/s")
    assert small.meta["pipeline"] == 1  # latency-bound: fewer, larger messages
    big = build(8, pipeline="auto", size="1TiB", alpha="3us", bandwidth="450GiB/s")
    assert big.meta["pipeline"] == AUTO_MAX
    assert build(8, pipeline="auto", size=2**30, alpha=0.0).meta["pipeline"] == AUTO_MAX
    # bounded by one 4-byte element per chunk
    assert build(8, pipeline="auto", size=7 * 4 * 3, alpha=0.0).meta["pipeline"] == 3
    # no model given: the paper's
    assert build(8, pipeline="auto").meta["pipeline"] == best_pipeline(8, **PAPER)


@pytest.mark.parametrize("kw,match", [
    (dict(pipeline=0), "positive integer"),
    (dict(pipeline=-2), "positive integer"),
    (dict(pipeline=2.0), "positive integer"),
    (dict(pipeline="4"), "positive integer"),
    (dict(pipeline=True), "positive integer"),
    (dict(pipeline=5, size=7 * 4 * 4), r"one 4-byte element; the largest K that fits is 4"),
    (dict(pipeline=2, size=3), r"the largest K that fits is 1"),
    (dict(pipeline=10**6), r"at most \d+ transfers .*the largest K that fits is \d+"),
    (dict(pipeline="auto", size="lots"), "size"),
    (dict(pipeline="auto", bandwidth=0), "bandwidth"),
])
def test_bad_pipeline(kw, match):
    with pytest.raises(CollsynthError, match=match):
        build(8, **kw)


def test_limits_are_exact():
    assert _ok(build(8, pipeline=4, size=7 * 4 * 4)).meta["pipeline"] == 4
    kmax = max_pipeline_for_build(8)
    assert resolve_pipeline(8, kmax).k == kmax
    with pytest.raises(CollsynthError, match=f"largest K that fits is {kmax}"):
        resolve_pipeline(8, kmax + 1)


@pytest.mark.parametrize("argv", [["--pipeline", "0"], ["--pipeline", "x"], ["--pipeline", "-1"]])
def test_cli_bad_pipeline_exit_2(argv, capsys):
    assert cli_main(["synth", "-a", "stragglar", "-n", "8", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("collsynth: error:") and "--pipeline" in err[0]


def test_cli_synth_pipeline(tmp_path, capsys):
    f = tmp_path / "s.json"
    assert cli_main(["synth", "-a", "stragglar", "-n", "8", "--pipeline", "4", "-o", str(f)]) == 0
    d = json.loads(f.read_text())
    assert d["meta"]["pipeline"] == 4 and d["nchunks"] == 28
    assert cli_main(["synth", "-a", "stragglar", "-n", "8", "--pipeline", "auto"]) == 0
    assert json.loads(capsys.readouterr().out)["meta"]["pipeline"] == best_pipeline(8, **PAPER)


def test_reproduce_pipeline_columns(capsys):
    assert cli_main(["reproduce", "stragglar", "-n", "4,8", "--pipeline", "auto", "--json"]) == 0
    rows = {r["n"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    for n, r in rows.items():
        assert r["pipelined_k"] == best_pipeline(n, **PAPER)
        assert r["pipelined_rounds"] == r["pipelined_lower_bound"] == lower_bound(n, r["pipelined_k"])
        assert r["speedup_pipelined_ideal"] > r["speedup_ideal"] > 1
        assert r["pipelined_over_floor"] >= 1
        assert 0 <= r["pipelined_critical_delay_s"] <= r["critical_delay_s"]
    assert rows[8]["speedup_pipelined_ideal"] >= 1.55
    assert cli_main(["reproduce", "stragglar", "-n", "8", "--pipeline", "3"]) == 0
    out = capsys.readouterr().out
    assert "speedup(K)" in out and "23/23" in out
    assert cli_main(["reproduce", "stragglar", "-n", "8", "--pipeline", "0"]) == 2


# ------------------------------------------------------------------------------------ backends
def test_nccl_plan_runs_pipelined_schedules():
    plan_mod = pytest.importorskip("collsynth.backends.nccl.plan")
    rng = np.random.default_rng(9)
    for n, k, straggler in ((3, 2, 0), (4, 3, 1), (8, 4, 7), (6, 5, 2)):
        s = _ok(build(n, pipeline=k, straggler=straggler))
        plan = plan_mod.build_plan(s)
        for count in (k * (n - 1) * 3 + 1, 5, 1000):
            ins = [rng.integers(0, 8, count).astype(np.float32) for _ in range(n)]
            want = sum(x.astype(np.float64) for x in ins)
            for inplace in (False, True):
                outs = plan_mod.run_plan(plan, ins, inplace=inplace)
                for got in outs:
                    assert np.array_equal(got.astype(np.float64), want), (n, k, count, inplace)


def test_nccl_codegen_renders_pipelined_schedule():
    codegen = pytest.importorskip("collsynth.backends.nccl.codegen")
    s = _ok(build(8, pipeline=4))
    files = codegen.render_nccl_cuda(s)
    assert any(name.endswith(".cu") for name in files)
    assert all(text for text in files.values())


def test_msccl_xml_emits_and_checks_pipelined_schedules():
    mx = pytest.importorskip("collsynth.backends.msccl")
    for n, k in ((4, 3), (8, 8), (6, 2)):
        s = _ok(build(n, pipeline=k))
        text = mx.emit_xml(s)
        rep = mx.check_xml_text(text, "pipelined.xml")
        assert rep.ok, rep.message
        back = mx.xml_text_to_schedule(text)
        assert back.nchunks == s.nchunks and verify(back).ok
        # no barrier: punctual ranks never wait for the straggler before it takes part
        assert mx.straggler_independence(text, n - 1, text=True)["early"] == []


def test_msccl_xml_pipeline_limit_is_one_line_with_the_largest_k():
    pytest.importorskip("collsynth.backends.msccl")
    from collsynth.backends.msccl.fit import emit_stragglar_xml, xml_max_pipeline

    s = build(4, pipeline=80)
    with pytest.raises(CollsynthError) as e:
        emit_stragglar_xml(s)
    msg = str(e.value)
    assert "\n" not in msg and "cnt limit" in msg and "the largest --pipeline that fits is 71" in msg
    assert xml_max_pipeline(4, upto=100) == 71
    assert emit_stragglar_xml(build(4, pipeline=71))  # and it really fits
    with pytest.raises(CollsynthError, match="cnt limit"):  # unpipelined schedules: the emitter's own error
        emit_stragglar_xml(build(4), nchunksperloop=10**6)


def _torch_world(rank: int, n: int) -> dict:
    import torch

    import collsynth.backends.torch as te

    out = {}
    for k, straggler in ((3, 1), (2, 3)):
        s = build(n, pipeline=k, straggler=straggler)
        for length in (1, 7, 1001):
            g = torch.Generator().manual_seed(rank * 31 + length)
            x = torch.randint(0, 8, (length,), generator=g).float()
            ref = x.clone()
            torch.distributed.all_reduce(ref)
            te.allreduce(x, s)
            out[(k, straggler, length)] = bool(torch.equal(x, ref))
    return out


def test_torch_executor_runs_pipelined_schedules():
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
        pytest.skip("needs torch.distributed with gloo")
    del torch
    from collsynth.backends.torch.launch import launch

    results = launch(_torch_world, 4, timeout=180)
    assert len(results) == 4
    for r, res in results.items():
        assert res and all(res.values()), (r, res)


def test_compare_call_for_the_lead():
    """The call compare_rows makes for stragglar: pipeline auto with the topology's alpha and bandwidth."""
    from collsynth.synth.algorithms.stragglar.pipeline import topology_model
    from collsynth.synth.registry import algorithm_params

    assert {"pipeline", "size", "alpha", "bandwidth"} <= set(algorithm_params("stragglar"))
    topo = make_topology("nvswitch", 8, alpha=3e-6, bandwidth=450 * 2**30)
    al, bw = topology_model(topo, 7)
    assert (al, bw) == pytest.approx((3e-6, 450 * 2**30))
    s = build_schedule("stragglar", 8, "allreduce", straggler=7, pipeline="auto", size=2**30, alpha=al, bandwidth=bw)
    assert s.meta["pipeline"] == best_pipeline(8, **PAPER) > 1
    ring = make_topology("ring", 8, alpha=3e-6, bandwidth=450 * 2**30)
    assert topology_model(ring, 0)[0] == pytest.approx(4 * 3e-6)  # the farthest rank is 4 hops away


def test_family_with_pipeline(tmp_path):
    from collsynth.synth.algorithms.stragglar.family import write_family

    manifest = write_family(5, str(tmp_path / "fam"), pipeline=3)
    assert manifest["pipeline"] == 3 and manifest["phase2_rounds"] == lower_bound(5, 3)
    assert [e["file"] for e in manifest["schedules"]] == [f"stragglar_n5_s{r}.json" for r in range(5)]
    d = json.loads((tmp_path / "fam" / "stragglar_n5_s2.json").read_text())
    assert d["meta"]["pipeline"] == 3 and d["name"] == "stragglar_n5_k3_s2"


def test_n3_model_cost_matches_what_is_built():
    """n = 3 builds one round more than the bound for K >= 2 (not for K = 1): the cost --pipeline auto
    minimises must be the simulated time of the schedule it builds, at every K."""
    topo = make_topology("nvswitch", 3, alpha=PAPER["alpha"], bandwidth=PAPER["bandwidth"])
    for k in range(1, 7):
        s = _ok(build(3, pipeline=k))
        t = simulate(s, PAPER["size"], topo, {2: 0.05}).after_last_arrival_s
        assert t == pytest.approx(phase2_time(3, k, **PAPER), rel=1e-9), k
    for size in ("64KiB", "1MiB", "1GiB"):
        s = _ok(build(3, pipeline="auto", size=size, alpha="3us", bandwidth="450GiB/s"))
        model = s.meta["pipeline_model"]
        t = simulate(s, model["size"], topo, {2: 0.05}).after_last_arrival_s
        assert t == pytest.approx(model["phase2_s"], rel=1e-9)
        one = simulate(_ok(build(3, pipeline=1)), model["size"], topo, {2: 0.05}).after_last_arrival_s
        assert one == pytest.approx(model["phase2_s_unpipelined"], rel=1e-9)
        assert model["phase2_s"] <= one * (1 + 1e-9)
