"""Training-step simulator (training/) and `collsynth train-sim`: models checked against
closed forms computed here from the schedule simulator, the fast path against the event simulator,
the compute model, bad input, output determinism and the plot."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from collsynth.cli import main
from collsynth.errors import CollsynthError
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology
from collsynth.training.comm import CollectiveModel
from collsynth.training.compute import ComputeModel, load_trace, parse_slow
from collsynth.training.model import TrainingSetup, simulate_training


def _setup(n=8, tau=0.1, grad=250e6, alpha=5e-6, bw=25e9, steps=40, **kw):
    cm = ComputeModel(n, tau, jitter=kw.pop("jitter", 0.0), slow=kw.pop("slow", None), seed=kw.pop("seed", 0))
    topo = make_topology(kw.pop("topology", "nvswitch"), n, alpha=alpha, bandwidth=bw)
    return TrainingSetup(cm, topo, grad, steps=steps, **kw)


def _by(results):
    return {(r.method, r.algorithm): r for r in results}


# ------------------------------------------------------------------------------------ collectives
@pytest.mark.parametrize("topology", ["nvswitch", "dgx1", "ring"])
@pytest.mark.parametrize("alg,coll", [("ring", "allreduce"), ("rhd", "allreduce"), ("stragglar", "allreduce"),
                                      ("ring", "reducescatter"), ("ring", "allgather"),
                                      ("stragglar", "reducescatter")])
def test_fast_path_equals_event_simulator(topology, alg, coll):
    topo = make_topology(topology, 8, alpha=2e-6, bandwidth=50e9)
    fast = CollectiveModel(topo)
    slow = CollectiveModel(topo, exact=True)
    rng = np.random.default_rng(1)
    for _ in range(12):
        arr = rng.random(8) * rng.choice([1e-5, 1e-3, 1e-1])
        a = fast.run(alg, coll, 64e6, arr)
        b = slow.run(alg, coll, 64e6, arr)
        assert a.label == b.label
        np.testing.assert_allclose(a.finish, b.finish, rtol=1e-12, atol=1e-15)


def test_stragglar_takes_the_last_arrival_and_falls_back_when_two_are_late():
    cm = CollectiveModel(make_topology("nvswitch", 8), window_s=0.05)
    arr = np.zeros(8)
    arr[3] = 0.01
    assert cm.run("stragglar", "allreduce", 1e6, arr).label == "stragglar@3"
    arr[5] = 0.2  # 3 is within the window of the punctual ranks: 5 is the one straggler
    assert cm.run("stragglar", "allreduce", 1e6, arr).label == "stragglar@5"
    arr[3] = 0.1  # 3 and 5 both later than the window: two late ranks, ring
    assert cm.run("stragglar", "allreduce", 1e6, arr).label == "ring (two late)"
    # run-time detection cost delays the straggler only
    cm2 = CollectiveModel(make_topology("nvswitch", 8), agree_s=0.001)
    arr = np.zeros(8)
    arr[6] = 0.01
    s = build_schedule("stragglar", 8, straggler=6)
    late = arr.copy()
    late[6] += 0.001
    ref = simulate(s, 1e6, make_topology("nvswitch", 8), late).rank_finish_s
    np.testing.assert_allclose(cm2.run("stragglar", "allreduce", 1e6, arr).finish, ref, rtol=1e-12)


def test_allreduce_only_algorithm_stands_in_for_reducescatter():
    cm = CollectiveModel(make_topology("nvswitch", 4))
    res = cm.run("rhd", "reducescatter", 1e6, np.zeros(4))
    assert res.label == "rhd-as-rs"
    assert cm.run("rhd", "allgather", 1e6, np.zeros(4)).label == "ring"
    with pytest.raises(CollsynthError, match="unknown algorithm"):
        CollectiveModel(make_topology("nvswitch", 4)).check_algorithm("nope")


# ------------------------------------------------------------------------------------ methods
def test_ddp_homogeneous_is_compute_plus_allreduce_plus_optimizer():
    st = _setup(optimizer_s=0.002, record=0)
    topo = st.topology
    t_ar = simulate(build_schedule("ring", 8), st.grad_bytes, topo).completion_s
    r = _by(simulate_training(st, ["ddp", "zero1"], ["ring"]))
    want = 8 / (0.1 + t_ar + 0.002)
    assert r["ddp", "ring"].throughput == pytest.approx(want, rel=1e-9)
    t_rs = simulate(build_schedule("ring", 8, "reducescatter"), st.grad_bytes, topo).completion_s
    t_ag = simulate(build_schedule("ring", 8, "allgather"), st.grad_bytes, topo).completion_s
    assert r["zero1", "ring"].throughput == pytest.approx(8 / (0.1 + t_rs + 0.002 / 8 + t_ag), rel=1e-9)
    assert r["ddp", "ring"].samples_per_step == 8
    idle = (t_ar + 0.0) / (0.1 + t_ar + 0.002)
    assert r["ddp", "ring"].idle_fraction[0] == pytest.approx(idle, rel=1e-6)


def test_acco_hides_communication_when_compute_bound():
    st = _setup(microbatches=2, batch=4, optimizer_s=0.002, record=0)
    r = _by(simulate_training(st, ["acco", "ddp"], ["ring"]))
    acco = r["acco", "ring"]
    # one group of 2 micro-batches per round is longer than the round's communication: never idle
    assert acco.throughput == pytest.approx(8 * 4 / 0.1, rel=1e-9)
    assert acco.samples_per_step == 2 * 8 * 2 * 4 and acco.batch_min == acco.batch_max
    assert max(acco.idle_fraction) < 1e-6
    assert acco.throughput > r["ddp", "ring"].throughput


def test_acco_accumulates_more_when_communication_bound():
    st = _setup(tau=0.01, grad=2.5e9, record=0)
    r = _by(simulate_training(st, ["acco"], ["ring"]))["acco", "ring"]
    assert r.samples_per_step > 2 * 8  # more than one micro-batch per round per rank
    assert r.throughput == pytest.approx(8 / 0.01, rel=0.02)  # still never idle


def test_acco_doc_table_is_reproduced():
    """docs/acco.md section 4: N=8, 250 MB of bf16 gradients, 25 GB/s, 5 us, tau = 0.1 s."""
    res = _by(simulate_training(_setup(record=0, optimizer_s=0.0015), ["ddp", "ddp-bucketed", "acco"], ["ring"]))
    assert res["ddp", "ring"].throughput == pytest.approx(67, abs=1.5)
    assert 74 < res["ddp-bucketed", "ring"].throughput <= 80
    assert res["acco", "ring"].throughput == pytest.approx(80, abs=0.5)
    res = _by(simulate_training(_setup(record=0, optimizer_s=0.0015, slow={7: 2.0}), ["ddp", "acco"], ["ring"]))
    assert res["ddp", "ring"].throughput == pytest.approx(36.5, abs=1.0)
    assert res["acco", "ring"].throughput == pytest.approx(75, abs=1.0)  # 7 fast ranks + one at half speed


def test_one_bucket_is_plain_ddp_and_more_buckets_overlap():
    base = dict(jitter=0.1, slow={2: 1.3}, record=0, grad=1e9)
    one = _by(simulate_training(_setup(buckets=1, **base), ["ddp", "ddp-bucketed"], ["ring", "stragglar"]))
    for a in ("ring", "stragglar"):
        assert one["ddp-bucketed", a].throughput == pytest.approx(one["ddp", a].throughput, rel=1e-12)
    many = _by(simulate_training(_setup(buckets=8, **base), ["ddp-bucketed"], ["ring"]))
    assert many["ddp-bucketed", "ring"].throughput > one["ddp", "ring"].throughput


def test_stragglar_helps_ddp_when_the_delay_covers_phase_one():
    # delay 50 ms per step; phase 1 (ReduceScatter of 1 GB among 7) about 34 ms at 25 GB/s
    st = _setup(grad=1e9, slow={7: 1.5}, record=0)
    r = _by(simulate_training(st, ["ddp"], ["ring", "stragglar"]))
    assert r["ddp", "stragglar"].collectives == {"allreduce:stragglar@7": st.steps}
    assert r["ddp", "stragglar"].throughput > 1.05 * r["ddp", "ring"].throughput
    # the slow rank computes all the time, the others wait for it
    idle = r["ddp", "ring"].idle_fraction
    assert idle[7] < min(idle[:7])


def test_jitter_moves_the_straggler():
    st = _setup(jitter=0.2, grad=1e8, record=0, steps=60)
    r = simulate_training(st, ["ddp"], ["stragglar"])[0]
    assert len(r.collectives) >= 4  # several different ranks were last


def test_timeline_covers_recorded_steps():
    st = _setup(slow={3: 1.2}, record=2, warmup=1, steps=6, swap_s=0.001)
    for r in simulate_training(st, ["ddp", "ddp-bucketed", "zero1", "acco"], ["stragglar"]):
        kinds = {e["kind"] for e in r.timeline}
        assert {"compute", "comm"} <= kinds, (r.method, kinds)
        assert {e["rank"] for e in r.timeline} == set(range(8))
        assert all(e["end_s"] > e["start_s"] for e in r.timeline)
    assert any(e["kind"] == "swap" for e in r.timeline)


def test_setup_checks():
    with pytest.raises(CollsynthError, match="--warmup"):
        _setup(steps=5, warmup=5).check()
    with pytest.raises(CollsynthError, match="--buckets"):
        _setup(buckets=0).check()
    with pytest.raises(CollsynthError, match="unknown method 'fsdp'"):
        simulate_training(_setup(), ["fsdp"])
    with pytest.raises(CollsynthError, match="same --gpus"):
        TrainingSetup(ComputeModel(4, 0.1), make_topology("nvswitch", 8), 1e6).check()


# ------------------------------------------------------------------------------------ compute model
def test_compute_model_streams_are_per_rank_and_seeded():
    a = ComputeModel(4, 0.1, jitter=0.3, slow={1: 2.0}, seed=5)
    b = ComputeModel(4, 0.1, jitter=0.3, slow={1: 2.0}, seed=5)
    a.times(0, 0, 10000)  # drawing far ahead on rank 0 does not change rank 1's values
    np.testing.assert_array_equal(a.times(1, 0, 50), b.times(1, 0, 50))
    x = ComputeModel(2, 0.1, jitter=0.2, seed=1).times(0, 0, 40000)
    assert x.mean() == pytest.approx(0.1, rel=0.01)
    assert np.std(np.log(x)) == pytest.approx(0.2, rel=0.03)
    assert not np.array_equal(ComputeModel(2, 0.1, jitter=0.2, seed=2).times(0, 0, 10), x[:10])
    np.testing.assert_allclose(a.mean_s(), [0.1, 0.2, 0.1, 0.1])


def test_trace_files(tmp_path):
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("r0,r1\n0.1,0.2\n100ms,0.3\n")
    tr = load_trace(str(csv_path), 2)
    np.testing.assert_allclose(tr, [[0.1, 0.2], [0.1, 0.3]])
    m = ComputeModel(2, trace=tr, slow={0: 2.0})
    np.testing.assert_allclose(m.times(0, 0, 3), [0.2, 0.2, 0.2])
    np.testing.assert_allclose(m.times(1, 0, 3), [0.2, 0.3, 0.2])  # cycled
    js = tmp_path / "t.json"
    js.write_text(json.dumps({"compute_s": [[0.1, 0.1, 0.1]]}))
    assert load_trace(str(js), 3).shape == (1, 3)
    with pytest.raises(CollsynthError, match="row 1 has 3 times but there are 2 ranks"):
        load_trace(str(js), 2)
    bad = tmp_path / "b.csv"
    bad.write_text("0.1,-1\n")
    with pytest.raises(CollsynthError, match="must be positive"):
        load_trace(str(bad), 2)


def test_parse_slow():
    assert parse_slow(["7=1.3", "1=2,2=1"], 8) == {7: 1.3, 1: 2.0, 2: 1.0}
    for item, needle in (("9=1.3", "rank 9 does not exist"), ("3=0.5", "below 1"), ("x", "RANK=FACTOR"),
                         ("a=2", "not an integer"), ("1=fast", "not a number")):
        with pytest.raises(CollsynthError, match=needle):
            parse_slow([item], 8)


# ------------------------------------------------------------------------------------ CLI
SIM = ["train-sim", "--gpus", "8", "--grad-bytes", "250MB", "--compute", "100ms", "--steps", "12"]


def _run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


BAD = [
    (SIM[:-4] + ["--compute", "-5ms"], "--compute: time '-5ms' must be positive"),
    (SIM[:-4] + ["--compute", "0s"], "--compute: time '0s' must be positive"),
    (SIM + ["--slow", "7=0.8"], "below 1"),
    (SIM + ["--slow", "8=1.3"], "rank 8 does not exist"),
    (SIM + ["--methods", "ddp,fsdp"], "unknown method 'fsdp'"),
    (SIM + ["--algorithms", "ring,nope"], "unknown algorithm 'nope'"),
    (SIM + ["--jitter", "-1"], "--jitter"),
    (SIM + ["--optimizer", "-1ms"], "--optimizer: time '-1ms' must be non-negative"),
    (SIM + ["--plot", "x.svg"], "PNG"),
    (SIM + ["--warmup", "12"], "--warmup"),
    (["train-sim", "--gpus", "1", "--grad-bytes", "1MB", "--compute", "1ms"], "--gpus"),
    (["train-sim", "--gpus", "8", "--grad-bytes", "0", "--compute", "1ms"], "positive"),
    (["train-sim", "--gpus", "8", "--grad-bytes", "1MB"], "--compute"),
]


@pytest.mark.parametrize("argv,needle", BAD)
def test_bad_input_exits_2_with_one_line(argv, needle, capsys):
    code, out, err = _run(argv, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("collsynth: error: ") and needle in err, err


def test_trace_with_wrong_rank_count_is_one_line(tmp_path, capsys):
    path = tmp_path / "trace.csv"
    path.write_text("0.1,0.1,0.1,0.1\n")
    code, out, err = _run(["train-sim", "--gpus", "8", "--grad-bytes", "1MB", "--trace", str(path)], capsys)
    assert code == 2 and "row 1 has 4 times but there are 8 ranks" in err and err.count("\n") == 1
    code, out, err = _run(["train-sim", "--gpus", "4", "--grad-bytes", "1MB", "--trace", str(path),
                           "--steps", "5", "--json"], capsys)
    assert code == 0 and json.loads(out)["setup"]["compute"].startswith("trace")


def test_json_is_deterministic_and_table_prints(capsys):
    argv = SIM + ["--jitter", "0.1", "--slow", "7=1.3", "--json"]
    code1, out1, _ = _run(argv, capsys)
    code2, out2, _ = _run(argv, capsys)
    assert code1 == code2 == 0 and out1 == out2
    d = json.loads(out1)
    assert [(r["method"], r["algorithm"]) for r in d["results"]] == [
        (m, a) for m in ("ddp", "ddp-bucketed", "zero1", "acco") for a in ("ring", "stragglar")]
    code, out, _ = _run(SIM, capsys)
    assert code == 0 and "samples/s" in out and "acco" in out


def test_plot_is_written(tmp_path, capsys):
    path = tmp_path / "t.png"
    code, out, err = _run(SIM + ["--slow", "3=1.3", "--methods", "ddp,acco", "--plot", str(path)], capsys)
    assert code == 0, err
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000
    assert [f for f in os.listdir(tmp_path) if f.startswith(".collsynth")] == []
