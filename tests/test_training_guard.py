"""train-sim sizes its work before starting it (training/work.py, budget.py): a run beyond the time or memory
budget, or one whose ACCO micro-batch count the clock cannot resolve, is refused with one line naming the
flag to change and the largest value that fits (exit 2); ACCO's wait for a very slow rank is computed in
closed form (ComputeStream.run_until) instead of one group at a time; recorded timelines stay small.

The CLI cases run in a subprocess with a timeout, so that a run that would take minutes (the behaviour before
the guard) fails the test quickly instead of hanging it; no test asserts how long anything takes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from collsynth.synth.topology import make_topology
from collsynth.training.compute import SKIP_GROUPS, ComputeModel
from collsynth.training.model import TrainingSetup, simulate_training
from collsynth.training.work import RECORD_BUCKETS, RECORD_MICROBATCHES

REFUSE_TIMEOUT_S = 60  # a refusal comes before any simulation; the old behaviour ran for minutes or hours
RUN_TIMEOUT_S = 180
BASE = ["--grad-bytes", "1GB", "--compute", "100ms"]


def _cli(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLLSYNTH_MAX_TIME", "COLLSYNTH_MAX_MEMORY")}
    return subprocess.run([sys.executable, "-m", "collsynth.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env)


REFUSED = [
    # ACCO with jitter draws every micro-batch the fast ranks compute while they wait for a 1e6 times slower one
    pytest.param(["--max-time", "10s", "train-sim", "--gpus", "8", *BASE, "--slow", "3=1e6", "--jitter", "0.1"],
                 [r"fits is .*--slow 3=\d", "--jitter"], id="slow-with-jitter"),
    # without jitter it is closed form, but 1e300 slow makes more micro-batches than the clock resolves
    pytest.param(["train-sim", "--gpus", "8", *BASE, "--slow", "3=1e300"], [r"--slow 3=\d", "2\\^40"],
                 id="slow-beyond-the-clock"),
    # a closed-form collective per bucket and step
    pytest.param(["train-sim", "--gpus", "8", *BASE, "--buckets", "1000000", "--methods", "ddp-bucketed", "-a",
                  "ring"], [r"fits is .*--buckets \d+"], id="buckets"),
    pytest.param(["--max-time", "10s", "train-sim", "--gpus", "8", *BASE, "--buckets", "100000", "--methods",
                  "ddp-bucketed", "-a", "ring"], [r"fits is .*--buckets \d+"], id="buckets-10s"),
    # n + 1 event simulations per schedule, one schedule per late rank for StragglAR
    pytest.param(["train-sim", "--gpus", "512", *BASE], [r"fits is .*--gpus \d+"], id="gpus"),
    pytest.param(["--max-time", "10s", "train-sim", "--gpus", "64", *BASE, "--jitter", "0.1"],
                 [r"fits is .*--gpus \d+"], id="gpus-jitter-10s"),
    # n x A compute times per step
    pytest.param(["train-sim", "--gpus", "8", *BASE, "--microbatches", "1000000000"],
                 [r"fits is .*--microbatches \d+"], id="microbatches"),
    # 10,000 groups a round for each fast rank, 200,000 rounds
    pytest.param(["train-sim", "--gpus", "8", *BASE, "--steps", "100000", "--slow", "3=1e4", "--methods", "acco",
                  "-a", "ring"], [r"fits is .*--steps \d+"], id="steps-acco"),
]


@pytest.mark.parametrize("argv,needles", REFUSED)
def test_too_much_work_is_refused_in_one_line_naming_the_flag(argv, needles):
    r = _cli(argv, REFUSE_TIMEOUT_S)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stdout == ""
    assert r.stderr.startswith("collsynth: error: ") and r.stderr.count("\n") == 1, r.stderr
    for needle in needles:
        assert re.search(needle, r.stderr), (needle, r.stderr)


def test_largest_value_named_is_accepted():
    """The --buckets value a refusal names fits the same budget (the refusal's own estimate)."""
    argv = ["--max-time", "2s", "train-sim", "--gpus", "8", *BASE, "--buckets", "100000", "--methods",
            "ddp-bucketed", "-a", "ring", "--steps", "20"]
    r = _cli(argv, REFUSE_TIMEOUT_S)
    fit = re.search(r"fits is --buckets (\d+)", r.stderr)
    assert r.returncode == 2 and fit, r.stderr
    r = _cli(argv[:argv.index("100000")] + [fit.group(1)] + argv[argv.index("100000") + 1:], RUN_TIMEOUT_S)
    assert r.returncode == 0, r.stderr


def test_normal_run_still_works():
    r = _cli(["train-sim", "--gpus", "8", "--grad-bytes", "250MB", "--compute", "100ms", "--steps", "12"],
             RUN_TIMEOUT_S)
    assert r.returncode == 0, r.stderr
    assert "samples/s" in r.stdout and "acco" in r.stdout and r.stderr == ""


def test_acco_with_a_very_slow_rank_runs_in_closed_form():
    """Rank 3 is 1e6 times slower: the other 7 compute about a million micro-batches each per ACCO round (the
    loop did them one group at a time: hours); throughput is theirs, 7 x 10 samples/s."""
    r = _cli(["train-sim", "--gpus", "8", *BASE, "--slow", "3=1e6", "--methods", "acco,ddp", "-a", "ring",
              "--steps", "20", "--json"], RUN_TIMEOUT_S)
    assert r.returncode == 0, r.stderr
    res = {x["method"]: x for x in json.loads(r.stdout)["results"]}
    assert res["acco"]["throughput_samples_s"] == pytest.approx(70.0, rel=1e-3)
    assert res["acco"]["samples_per_step"] > 1e6
    assert res["ddp"]["throughput_samples_s"] == pytest.approx(8 / 1e5, rel=1e-3)


# ------------------------------------------------------------------------------------ library
def _loop(model: ComputeModel, rank: int, group: int, t: float, until: float) -> tuple[int, float]:
    """ACCO's compute phase as it was: one group at a time."""
    stream, groups = model.stream(), 0
    while True:
        t += float(stream.take(rank, group).sum())
        groups += 1
        if t >= until:
            return groups, t


@pytest.mark.parametrize("model", [
    ComputeModel(2, 0.1, slow={1: 3.0}),
    ComputeModel(2, trace=np.random.default_rng(4).uniform(0.05, 0.15, (7, 2))),
], ids=["constant", "trace"])
def test_run_until_skips_periods_and_agrees_with_the_loop(model):
    group = 3
    per = float(model.times(1, 0, 21 * group).sum()) / 21  # a group's mean time
    until = 3.0 + per * (4 * SKIP_GROUPS + 0.37)  # far enough that whole periods are skipped
    g, t = model.stream().run_until(1, group, 3.0, until)
    g0, t0 = _loop(model, 1, group, 3.0, until)
    assert abs(g - g0) <= 1 and t == pytest.approx(t0, rel=1e-9)  # the loop's 65,000 additions round too
    # a few groups: exactly the loop's sums
    assert model.stream().run_until(1, group, 3.0, 3.0 + 5.5 * per) == _loop(model, 1, group, 3.0, 3.0 + 5.5 * per)


def test_run_until_with_jitter_is_the_loop_exactly():
    model = ComputeModel(3, 0.01, jitter=0.3, seed=7)
    for until in (0.0, 0.05, 3.0, 40.0):
        assert model.stream().run_until(2, 4, 1.0, 1.0 + until) == _loop(model, 2, 4, 1.0, 1.0 + until)


def _setup(**kw) -> TrainingSetup:
    n = kw.pop("n", 4)
    return TrainingSetup(ComputeModel(n, 0.01, jitter=kw.pop("jitter", 0.0), slow=kw.pop("slow", None)),
                         make_topology("nvswitch", n), 1e7, **kw)


def test_recorded_timelines_stay_small():
    st = _setup(microbatches=1000, buckets=500, steps=4, warmup=1, record=2, slow={1: 50.0})
    for r in simulate_training(st, ["ddp", "ddp-bucketed", "acco"], ["ring"]):
        for rank in range(4):
            ev = [e for e in r.timeline if e["rank"] == rank]
            compute = sum(e["kind"] == "compute" for e in ev)
            comm = sum(e["kind"] == "comm" for e in ev)
            per_step = 2 * (RECORD_MICROBATCHES + 2) if r.method == "acco" else RECORD_MICROBATCHES + 1
            assert 0 < compute <= 2 * per_step, (r.method, rank, compute)
            assert comm <= 2 * (RECORD_BUCKETS + 1) if r.method == "ddp-bucketed" else comm <= 2 * 6
            assert all(e["end_s"] > e["start_s"] for e in ev)
