"""`collsynth bench` and `collsynth calibrate`: bad input (no processes), the summary maths, and one
small real run of each (3 and 2 gloo ranks on loopback)."""

from __future__ import annotations

import json
import re

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

from collsynth.backends.torch.bench import (  # noqa: E402
    BenchSpec,
    fit_alpha_beta,
    format_alpha,
    format_rate,
    parse_delays,
    prepare_bench,
    summarize,
)
from collsynth.cli import main  # noqa: E402
from collsynth.errors import CollsynthError  # noqa: E402
from collsynth.synth.ir import save_schedule  # noqa: E402
from collsynth.synth.registry import build_schedule  # noqa: E402
from collsynth.units import parse_rate, parse_time  # noqa: E402


def _run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def ring4_file(tmp_path):
    path = tmp_path / "ring4.json"
    save_schedule(build_schedule("ring", 4), str(path))
    return str(path)


BAD = [
    (["bench", "--backend", "mpi", "--ranks", "2", "--size", "1MiB"], "unknown backend 'mpi'"),
    (["bench", "--ranks", "4", "--size", "1MiB", "--delay", "4=1s"], "rank 4 does not exist"),
    (["bench", "--ranks", "4", "--size", "1MiB", "--delay", "x"], "RANK=TIME"),
    (["bench", "--ranks", "4", "--size", "1MiB", "--algorithms", "ring,nope"], "unknown algorithm 'nope'"),
    (["bench", "--ranks", "1", "--size", "1MiB"], "--ranks must be an integer >= 2"),
    (["bench", "--ranks", "2", "--size", "-3MiB"], "must be positive"),
    (["bench", "--ranks", "2", "--size", "1MiB", "--dtype", "int8"], "unknown --dtype"),
    (["bench", "--ranks", "2", "--size", "1MiB", "--iters", "0"], "--iters must be >= 1"),
    (["calibrate", "--backend", "mpi", "--ranks", "2"], "unknown backend 'mpi'"),
    (["calibrate", "--ranks", "2", "--pattern", "star"], "unknown --pattern"),
    (["calibrate", "--ranks", "2", "--sizes", "4KiB"], "at least two different sizes"),
]


@pytest.mark.parametrize("argv,needle", BAD)
def test_bad_input_exits_2_with_one_line(argv, needle, capsys):
    code, out, err = _run(argv, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("collsynth: error: ") and needle in err, err


def test_schedule_for_another_rank_count(ring4_file, capsys):
    code, out, err = _run(["bench", "--ranks", "2", "--size", "1MiB", "--schedule", ring4_file,
                           "--algorithms", "torch"], capsys)
    assert code == 2 and out == ""
    assert "is for 4 ranks, not --ranks 2" in err and err.count("\n") == 1


def test_nccl_without_gpus_is_a_clear_error(capsys):
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:  # pragma: no cover
        pytest.skip("GPUs present")
    code, _, err = _run(["bench", "--backend", "nccl", "--ranks", "2", "--size", "1MiB"], capsys)
    assert code == 2 and "nccl" in err and err.count("\n") == 1


def test_api_raises_valueerror_with_the_cli_message(capsys):
    with pytest.raises(ValueError) as api:
        prepare_bench("gloo", 4, 1 << 20, parse_delays(["1=1s"], 4), ["ring", "nope"])
    assert isinstance(api.value, CollsynthError)
    _, _, err = _run(["bench", "--ranks", "4", "--size", "1MiB", "--delay", "1=1s", "--algorithms", "ring,nope"],
                     capsys)
    assert err.strip() == f"collsynth: error: {api.value}"
    with pytest.raises(CollsynthError, match="rank 9 does not exist"):
        parse_delays(["9=1s"], 4)


def test_algorithms_that_take_arrivals_are_built_for_the_delays():
    """multistraggler and clusterstraggler get the --delay values and --size (8 ranks on one machine: one
    NVLink domain, where clusterstraggler's broadcast form is the fastest at 64 MiB); stragglar the latest rank."""
    spec = prepare_bench("gloo", 8, 64 << 20, {3: 0.002, 6: 0.005},
                         ["clusterstraggler", "multistraggler", "stragglar"])
    built = dict(spec.entries)
    assert built["clusterstraggler"].name == "clusterstraggler_domain_n8_l6"
    assert built["clusterstraggler"].meta["late"] == [6]
    assert built["multistraggler"].meta["late"] == [[3, 0.002], [6, 0.005]]
    assert built["stragglar"].meta["straggler"] == 6


def test_fit_recovers_a_known_model():
    sizes = [4096 * 4**i for i in range(6)]
    alpha, bw = 50e-6, 2e9
    times = [alpha + s / bw for s in sizes]
    a, b = fit_alpha_beta(sizes, times)
    assert a == pytest.approx(alpha, rel=1e-6) and b == pytest.approx(bw, rel=1e-6)
    assert parse_time(format_alpha(a)) == pytest.approx(a, rel=1e-3)
    assert parse_rate(format_rate(b)) == pytest.approx(b, rel=1e-3)


def test_summary_medians_and_speedup():
    spec = BenchSpec("gloo", 2, 64, "float32", {1: 1.0}, 3, 0, 60.0,
                     entries=[("ring", build_schedule("ring", 2)), ("torch", "torch")])
    recs = {0: {"records": []}, 1: {"records": []}}
    for it in range(3):
        for k, cost in ((0, 0.1 * (it + 1)), (1, 0.4)):
            base = 10.0 * it + k
            # rank 0 punctual at base, rank 1 arrives 1 s later; both finish `cost` after rank 1
            recs[0]["records"].append({"alg": k, "it": it, "arrive": base, "done": base + 1 + cost, "err": 0.0,
                                       "ok": True, "sum": (1, 2)})
            recs[1]["records"].append({"alg": k, "it": it, "arrive": base + 1, "done": base + 1 + cost / 2,
                                       "err": 0.0, "ok": True, "sum": (1, 2 if k else it)})
    res = summarize(spec, recs)
    ring, tor = res["results"]
    assert ring["after_last_arrival_s"]["median"] == pytest.approx(0.2)
    assert ring["from_punctual_arrival_s"]["median"] == pytest.approx(1.2)
    assert ring["speedup_vs_torch"] == pytest.approx(2.0)
    assert tor["speedup_vs_torch"] == pytest.approx(1.0)
    assert ring["identical_across_ranks"] is False and tor["identical_across_ranks"] is True


def test_bench_runs_and_checks_against_torch(capfd):
    # capfd: the worker processes write the progress bar straight to file descriptor 2
    code, out, err = _run(["bench", "--ranks", "3", "--size", "48KiB", "--delay", "2=50ms",
                           "--algorithms", "ring,stragglar,torch,auto", "--iters", "2", "--json"], capfd)
    assert code == 0, err
    res = json.loads(out)  # stdout holds the JSON alone
    assert "bench [" in err  # the progress bar is on stderr
    assert res["ranks"] == 3 and res["straggler"] == 2
    algs = [r["algorithm"] for r in res["results"]]
    assert algs == ["ring", "stragglar", "torch", "auto"]
    for r in res["results"]:
        assert r["correct"] and r["identical_across_ranks"], r
        assert r["after_last_arrival_s"]["median"] > 0 and "speedup_vs_torch" in r
        assert r["from_punctual_arrival_s"]["median"] >= r["after_last_arrival_s"]["median"]
    auto = res["results"][3]
    assert auto["chosen"] == ["stragglar_n3_s2"] and auto["agreement_last_rank_s"]["median"] > 0


def test_bench_on_a_topology_builds_for_it_and_auto_runs_its_cluster_family(capfd):
    """-t: clusterstraggler is built for the topology (recorded in the schedule) and the delays, and auto runs
    StragglerAwareAllReduce(topology=...) at --size; one NVLink domain here, so the late GPU's member."""
    spec = prepare_bench("gloo", 8, 64 << 20, {6: 0.005}, ["clusterstraggler", "hierarchical", "auto"],
                         topology="dgx-h100")
    built = dict(spec.entries)
    assert built["clusterstraggler"].name == "clusterstraggler_domain_n8_l6"
    assert built["hierarchical"].meta["topology"]["preset"] == "dgx-h100" and built["auto"] == "auto"
    for bad, msg in (("nope", "unknown topology"),
                     ("gb200-nvl72", "--ranks is 8, but topology gb200-nvl72 takes 72 GPUs")):
        with pytest.raises(CollsynthError, match=msg):
            prepare_bench("gloo", 8, 1 << 20, {}, ["ring"], topology=bad)
    code, out, err = _run(["bench", "--ranks", "3", "--size", "48KiB", "--delay", "2=50ms", "-t", "nvswitch",
                           "--algorithms", "clusterstraggler,auto", "--iters", "1", "--warmup", "0", "--json"], capfd)
    assert code == 0, err
    res = json.loads(out)
    assert res["topology"] == "nvswitch" and [r["algorithm"] for r in res["results"]] == ["clusterstraggler", "auto"]
    assert all(r["correct"] and r["identical_across_ranks"] for r in res["results"]), res["results"]
    assert len(res["results"][1]["chosen"]) == 1


def test_calibrate_prints_figures_compare_reads(capsys):
    # sizes large enough that the bandwidth term dominates timing noise on a busy machine
    code, out, err = _run(["calibrate", "--ranks", "2", "--sizes", "16KiB,4MiB,16MiB", "--iters", "3"], capsys)
    assert code == 0, err
    m = re.search(r"alpha (\S+), bandwidth (\S+)", out)
    assert m, out
    assert parse_time(m.group(1)) >= 0 and parse_rate(m.group(2)) > 0
    assert f"--alpha {m.group(1)} --bandwidth {m.group(2)}" in out
