"""Issue 13: every bad input gets a clean answer (one line, exit 2), nothing is overwritten, and a crash
never reads as a verdict. One regression test per class of the issue; the fuzz suite is test_fuzz_cli.py."""

from __future__ import annotations

import json
import os
import sys

import pytest

from collsynth.cli import main


def run(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:  # argparse's own errors (also one line, exit 2)
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line_exit_2(code, err, needle=""):
    assert code == 2, err
    assert err.startswith("collsynth: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert needle in err, err


@pytest.fixture
def ring4(tmp_path, capsys):
    path = tmp_path / "r4.json"
    assert run(capsys, "synth", "-a", "ring", "-n", "4", "-o", path)[0] == 0
    return path


# ------------------------------------------------------------------------------------------ output paths
def _bad_outputs(tmp_path, ring4):
    (tmp_path / "adir").mkdir()
    return {
        "an existing directory": str(tmp_path / "adir"),
        "below a regular file": str(ring4) + "/x.out",
        "empty": "",
        "300-character name": str(tmp_path / ("a" * 300)),
        "missing folder": str(tmp_path / "nope" / "x.out"),
        "under /proc": "/proc/collsynth-test.out",
    }


@pytest.mark.parametrize("case", ["an existing directory", "below a regular file", "empty", "300-character name",
                                  "missing folder", "under /proc"])
@pytest.mark.parametrize("command", ["synth", "simulate", "emit-xml", "emit-plan", "solve-rounds"])
def test_unwritable_outputs_are_one_line_exit_2(capsys, tmp_path, ring4, case, command):
    path = _bad_outputs(tmp_path, ring4)[case]
    argv = {
        "synth": ["synth", "-a", "ring", "-n", "4", "-o", path],
        "simulate": ["simulate", ring4, "--size", "1MiB", "--timeline", path],
        "emit-xml": ["emit", ring4, "--format", "msccl-xml", "-o", path],
        "emit-plan": ["emit", ring4, "--format", "mscclpp-plan", "-o", path],
        "solve-rounds": ["solve-rounds", "-n", "4", "--time-limit", "1s", "-o", path],
    }[command]
    before = sorted(os.listdir(tmp_path))
    code, _, err = run(capsys, *argv)
    one_line_exit_2(code, err)
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("case", ["below a regular file", "empty", "300-character name", "under /proc"])
@pytest.mark.parametrize("command", ["family", "nccl-cuda", "regenerate"])
def test_unwritable_output_folders_are_one_line_exit_2(capsys, tmp_path, ring4, case, command):
    path = _bad_outputs(tmp_path, ring4)[case]
    argv = {
        "family": ["synth", "-a", "stragglar", "-n", "4", "--straggler", "all", "-o", path],
        "nccl-cuda": ["emit", ring4, "--format", "nccl-cuda", "-o", path],
        "regenerate": ["schedules", "regenerate", "--out", path],
    }[command]
    code, _, err = run(capsys, *argv)
    one_line_exit_2(code, err)


@pytest.mark.parametrize("flag", ["--plot"])
@pytest.mark.parametrize("command", ["reproduce", "train-sim"])
def test_unwritable_plot_is_refused_before_the_work(capsys, tmp_path, ring4, flag, command):
    (tmp_path / "d.png").mkdir()
    for path in (str(tmp_path / "d.png"), "/proc/collsynth-test.png", str(ring4) + "/x.png"):
        argv = {"reproduce": ["reproduce", "stragglar", "-n", "4", flag, path],
                "train-sim": ["train-sim", "-n", "4", "--grad-bytes", "1MB", "--compute", "1ms", "--steps", "3",
                              flag, path]}[command]
        code, out, err = run(capsys, *argv)
        one_line_exit_2(code, err, flag)
        assert out == ""  # refused before the study ran


# ------------------------------------------------------------------------------------------ output == input
def test_output_equal_to_input_is_refused_and_the_input_kept(capsys, tmp_path, ring4):
    original = ring4.read_bytes()
    link = tmp_path / "link.json"
    link.symlink_to(ring4)
    hard = tmp_path / "hard.json"
    os.link(ring4, hard)
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps({"name": "t", "nranks": 4}))
    topo_before = topo.read_bytes()
    cases = [
        ["simulate", ring4, "--size", "1MiB", "--timeline", ring4],
        ["simulate", ring4, "--size", "1MiB", "--timeline", link],
        ["emit", ring4, "--format", "msccl-xml", "-o", ring4],
        ["emit", ring4, "--format", "msccl-xml", "-o", hard],
        ["emit", ring4, "--format", "mscclpp-plan", "-o", f"{tmp_path}/./r4.json"],
        ["emit", ring4, "--format", "nccl-cuda", "-o", tmp_path, "--force"],  # the folder holds the input
        ["synth", "-a", "ring", "-n", "4", "-t", topo, "-o", topo],
        ["reproduce", "stragglar", "-n", "4", "-t", topo, "--plot", topo.with_suffix(".png")],
        ["train-sim", "-n", "4", "--grad-bytes", "1MB", "--compute", "1ms", "--steps", "3", "-t", topo,
         "--plot", topo.with_suffix(".png")],
        ["topology", "show", topo, "--plot", topo.with_suffix(".png")],  # the link to the topology
    ]
    (tmp_path / "topo.png").symlink_to(topo)
    for argv in cases:
        code, _, err = run(capsys, *argv)
        one_line_exit_2(code, err, "input")
        assert ring4.read_bytes() == original and topo.read_bytes() == topo_before


def test_output_through_a_symlink_a_fifo_or_dev_null_keeps_what_the_path_is(capsys, tmp_path, ring4):
    """-o writes through a symlink (the link stays, the file it names is replaced), into a named pipe and into
    /dev/null; none of them is replaced by a regular file (they were, with exit 0)."""
    import stat
    import threading

    target = tmp_path / "target.json"
    target.write_text("old")
    link = tmp_path / "link.xml"
    link.symlink_to(target)
    fifo = tmp_path / "fifo.xml"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    for out in (link, fifo, os.devnull):
        code, _, err = run(capsys, "emit", ring4, "--format", "msccl-xml", "-o", out)
        assert code == 0, err
    reader.join(timeout=30)
    assert link.is_symlink() and "<algo name=" in target.read_text()
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and got and got[0] == target.read_bytes()
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_train_sim_trace_is_not_overwritten_by_plot(capsys, tmp_path):
    trace = tmp_path / "trace.png"  # a PNG name so only the input rule can refuse it
    trace.write_text("0.1,0.1,0.1,0.1\n")
    code, _, err = run(capsys, "train-sim", "-n", "4", "--grad-bytes", "1MB", "--trace", trace, "--steps", "3",
                       "--plot", trace)
    one_line_exit_2(code, err, "input")
    assert trace.read_text() == "0.1,0.1,0.1,0.1\n"


def test_force_into_a_nccl_cuda_folder_replaces_it(capsys, tmp_path, ring4):
    out = tmp_path / "cu"
    assert run(capsys, "emit", ring4, "--format", "nccl-cuda", "-o", out)[0] == 0
    (out / "stale_from_an_earlier_emission.cu").write_text("x")
    code, _, err = run(capsys, "emit", ring4, "--format", "nccl-cuda", "-o", out)
    one_line_exit_2(code, err, "--force")
    assert run(capsys, "emit", ring4, "--format", "nccl-cuda", "-o", out, "--force")[0] == 0
    assert not (out / "stale_from_an_earlier_emission.cu").exists()


# ------------------------------------------------------------------------------------------ optional deps
@pytest.mark.parametrize("argv,extra", [
    (["bench", "--ranks", "2", "--size", "1MiB"], "torch"),
    (["calibrate", "--ranks", "2"], "torch"),
    (["train-bench", "--ranks", "2"], "torch"),
    (["train-sim", "-n", "4", "--grad-bytes", "1MB", "--compute", "1ms", "--steps", "3", "--plot", "{tmp}/t.png"],
     "plot"),
    (["reproduce", "stragglar", "-n", "4", "--plot", "{tmp}/r.png"], "plot"),
])
def test_missing_optional_dependency_is_named_up_front(capsys, tmp_path, monkeypatch, argv, extra):
    module = {"torch": "torch", "plot": "matplotlib"}[extra]
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    code, out, err = run(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    one_line_exit_2(code, err, f"pip install 'collsynth[{extra}]'")
    assert out == "" and os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------------------ numbers and units
@pytest.mark.parametrize("argv,needle", [
    (["synth", "-a", "ring", "-n", "4", "--size", "1e400"], "--size"),
    (["compare", "-n", "4", "--size", "1e400"], "--size"),
    (["compare", "-n", "4", "--size", "1MiB", "--bandwidth", "1e400"], "--bandwidth"),
    (["compare", "-n", "4", "--size", "1MiB", "--bandwidth", "0"], "--bandwidth: bandwidth '0'"),
    (["train-sim", "-n", "4", "--grad-bytes", "1e400", "--compute", "1ms"], "--grad-bytes"),
    (["synth", "-a", "ring", "-n", "99999999999999999999999"], "--gpus"),
    (["compare", "-n", "99999999999999999999999", "--size", "1MiB"], "--gpus"),
    (["synth", "-a", "stragglar", "-n", "4", "--pipeline", "auto", "--alpha", "1e400s"], "--alpha"),
    (["compare", "-n", "4", "--size", "1MiB", "--alpha", "1e400s"], "--alpha"),
    (["compare", "-n", "4", "--size", "1MiB", "--alpha", "3"], "has no unit"),
    (["compare", "-n", "4", "--size", "1MiB", "--alpha", "-3"], "time '-3' must be non-negative"),  # not "no unit"
    (["solve-rounds", "-n", "5", "--time-limit", "-1"], "time '-1' must be positive"),
    (["train-sim", "-n", "4", "--grad-bytes", "1MB", "--compute", "100"], "--compute"),
    (["train-sim", "-n", "4", "--grad-bytes", "1MB", "--compute", "1ms", "--alpha", "3"], "--alpha"),
    (["compare", "-n", "4", "--size", "0.5"], "whole number of bytes"),
    (["simulate", "{ring4}", "--size", "1MiB", "--arrival", "3=soon"], "--arrival"),
    (["simulate", "{ring4}", "--size", "1MiB", "--arrival", "3=1e400s"], "--arrival"),
    (["bench", "--ranks", "2", "--size", "1MiB", "--delay", "1=soon"], "--delay"),
    (["verify", "{ring4}", "--ports", "0"], "--ports"),
    (["emit", "{ring4}", "--format", "msccl-xml", "--max-bytes", "0.5"], "--max-bytes"),
    (["emit", "{ring4}", "--format", "mscclpp-plan", "--max-bytes", "1e400"], "--max-bytes"),
    (["emit", "{ring4}", "--format", "msccl-xml", "--min-bytes", "99999999999999999999999999"], "--min-bytes"),
    (["train-sim", "-n", "4", "--grad-bytes", "1MB", "--compute", "1ms", "--seed", "-1"], "--seed"),
])
def test_numbers_are_checked_and_the_flag_named(capsys, ring4, argv, needle):
    code, out, err = run(capsys, *[a.replace("{ring4}", str(ring4)) for a in argv])
    one_line_exit_2(code, err, needle)
    assert out == ""


@pytest.mark.parametrize("text", ["1_000", "+4", " 4", "4 ", "\u0663", "\uff14", "4.0", "1e3", "0x10"])
@pytest.mark.parametrize("argv,needle", [
    (["synth", "-a", "ring", "-n", "{}"], "--gpus"),
    (["compare", "--gpus", "{}", "--size", "1MiB"], "--gpus"),
    (["synth", "-a", "stragglar", "-n", "5", "--straggler", "{}"], "--straggler"),
    (["synth", "-a", "stragglar", "-n", "5", "--pipeline", "{}"], "--pipeline"),
    (["reproduce", "stragglar", "-n", "{}"], "--gpus"),
    (["compare", "--gpus", "4", "--size", "1MiB", "--arrival", "{}=1ms"], "--arrival"),
    (["emit", "{ring4}", "--format", "msccl-xml", "--instances", "{}"], "--instances"),
    (["emit", "{ring4}", "--format", "mscclpp-plan", "--plan-chunks", "{}"], "--plan-chunks"),
    (["train-sim", "-n", "4", "--grad-bytes", "1MB", "--compute", "1ms", "--steps", "{}"], "--steps"),
])
def test_counts_are_plain_ascii_digits(capsys, ring4, text, argv, needle):
    """int() reads 1_000, +4, ' 4' and other scripts' digits: a count on the command line must not."""
    code, out, err = run(capsys, *[a.replace("{ring4}", str(ring4)).replace("{}", text) for a in argv])
    one_line_exit_2(code, err, needle)
    assert out == ""


@pytest.mark.parametrize("text", ["1_0", " 1", "nan", "inf", "\u0661", "0x1"])
def test_plain_numbers_are_plain_ascii(capsys, text):
    code, out, err = run(capsys, "train-sim", "-n", "4", "--grad-bytes", "1MB", "--compute", "1ms", "--jitter", text)
    one_line_exit_2(code, err, "--jitter")
    if text != " 1":  # a size may have spaces around it
        code, out, err = run(capsys, "compare", "-n", "4", "--size", text + "MiB")
        one_line_exit_2(code, err, "--size")


def test_fractional_bytes_are_refused_not_rounded():
    from collsynth.errors import CollsynthError
    from collsynth.units import parse_rate, parse_size, parse_time
    assert parse_size("1.5KiB") == 1536 and parse_size("1.1MB") == 1_100_000
    for bad in ("0.5", "1.5B", "1e-400", "0.3KB7"):
        with pytest.raises(CollsynthError):
            parse_size(bad)
    for bad in (float("inf"), float("nan")):
        with pytest.raises(CollsynthError):
            parse_size(bad)
        with pytest.raises(CollsynthError):
            parse_time(bad)
        with pytest.raises(CollsynthError):
            parse_rate(bad)
    assert parse_time("0") == 0.0 and parse_time(3) == 3.0  # a Python number is seconds; text needs a unit
    with pytest.raises(CollsynthError, match="no unit"):
        parse_time("3")


# ------------------------------------------------------------------------------------------ input files
def _mutated(ring4, tmp_path, name, change):
    d = json.loads(ring4.read_text())
    change(d)
    path = tmp_path / name
    path.write_text(json.dumps(d))
    return path


@pytest.mark.parametrize("command", ["info", "verify", "simulate", "emit"])
def test_special_and_oversized_input_files_are_refused(capsys, tmp_path, ring4, command):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    extra = {"simulate": ["--size", "1MiB"], "emit": ["--format", "msccl-xml"]}.get(command, [])
    for path, needle in ((fifo, "named pipe"), ("/dev/zero", "device"), (tmp_path, "directory"),
                         (deep, "nested too deeply")):
        code, _, err = run(capsys, command, path, *extra)
        one_line_exit_2(code, err, needle)
    code, _, err = run(capsys, "--max-file-size", "100", command, ring4, *extra)
    one_line_exit_2(code, err, "--max-file-size")
    assert run(capsys, "--max-file-size", "1MiB", "info", ring4)[0] == 0


def test_topology_and_trace_files_are_read_with_the_same_rules(capsys, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, _, err = run(capsys, "compare", "-n", "4", "--size", "1MiB", "-t", fifo)
    one_line_exit_2(code, err, "named pipe")
    code, _, err = run(capsys, "train-sim", "-n", "4", "--grad-bytes", "1MB", "--trace", "/dev/zero")
    one_line_exit_2(code, err)
    for path, needle in ((fifo, "named pipe"), (tmp_path, "directory")):  # topology show: a hang, an exit 3
        code, _, err = run(capsys, "topology", "show", path)
        one_line_exit_2(code, err, needle)
    code, out, err = run(capsys, "topology", "show", "h100-cluster:fabric=fat-tree", "--gpus", "16")
    assert code == 0 and "fat-tree fabric" in out, err


@pytest.mark.parametrize("field,change,needle", [
    ("chunk", lambda d: d["transfers"]["chunk"].__setitem__(0, 2**63 - 1), "'chunk'"),
    ("chunk", lambda d: d["transfers"]["chunk"].__setitem__(0, 2**64 + 1), "'chunk'"),
    ("count", lambda d: d["transfers"]["count"].__setitem__(0, -2**63), "'count'"),
    ("nranks", lambda d: d.__setitem__("nranks", 2**60), "'nranks'"),
    ("nranks", lambda d: d.__setitem__("nranks", 10**12), "memory"),  # in range, but too big to check
    ("nchunks", lambda d: d.__setitem__("nchunks", "4"), "'nchunks'"),
    ("nsteps", lambda d: d.__setitem__("nsteps", 10**12), "memory"),
    ("ports", lambda d: d.__setitem__("ports", 1.5), "'ports'"),
])
@pytest.mark.parametrize("command", ["info", "verify"])
def test_schedule_fields_are_range_checked_before_use(capsys, tmp_path, ring4, field, change, needle, command):
    path = _mutated(ring4, tmp_path, "bad.json", change)
    code, _, err = run(capsys, command, path)
    one_line_exit_2(code, err, needle)


def test_verify_estimates_its_memory_before_allocating(capsys, tmp_path, ring4):
    path = _mutated(ring4, tmp_path, "wide.json", lambda d: d.__setitem__("nchunks", 10**12))
    code, _, err = run(capsys, "verify", path)
    one_line_exit_2(code, err, "--max-memory")
    code, _, err = run(capsys, "--max-memory", "1KiB", "verify", ring4)
    one_line_exit_2(code, err, "--max-memory")


def test_info_on_an_out_of_range_rank_is_bad_input_and_verify_a_verdict(capsys, tmp_path, ring4):
    path = _mutated(ring4, tmp_path, "neg.json", lambda d: d["transfers"]["src"].__setitem__(0, -1))
    code, _, err = run(capsys, "info", path)
    one_line_exit_2(code, err, "src -1")
    code, out, _ = run(capsys, "verify", path)
    assert code == 1 and "rank out of range" in out


@pytest.mark.parametrize("manifest", ['{"entries": [{"x": 1}]}', "[1]", '{"entries": [{"straggler": null}]}',
                                      '{"entries": 3}', "{", '{"entries": [7]}'])
def test_malformed_library_manifest_is_one_line(capsys, tmp_path, manifest):
    (tmp_path / "MANIFEST.json").write_text(manifest)
    code, _, err = run(capsys, "schedules", "list", "--dir", tmp_path)
    one_line_exit_2(code, err, "MANIFEST.json")


# ------------------------------------------------------------------------------------------ scale
@pytest.mark.parametrize("argv,needle", [
    (["synth", "-a", "ring", "-n", "1000000"], "largest that fits is"),
    (["synth", "-a", "stragglar", "-n", "1000000000"], "largest that fits is"),
    (["compare", "--gpus", "100000", "--size", "1MiB"], "largest that fits is"),
    (["reproduce", "stragglar", "-n", "1000000000"], "largest that fits is"),
    (["train-sim", "--gpus", "1000000000", "--grad-bytes", "1MB", "--compute", "1ms"], "largest that fits is"),
    (["train-sim", "--gpus", "8", "--grad-bytes", "1MB", "--compute", "1ms", "--steps", "1000000000"], "--steps"),
    (["train-sim", "--gpus", "8", "--grad-bytes", "1MB", "--compute", "1ms", "--buckets", "1000000000"], "limit"),
    (["--max-memory", "1MiB", "synth", "-a", "ring", "-n", "64"], "--max-memory"),
    # fuzz run 6: ACCO computes micro-batches until its communication ends, so a tiny --compute never ends
    (["train-sim", "--gpus", "2", "--grad-bytes", "1MiB", "--compute", "1e-30s"], "raise --compute"),
    # without --jitter ACCO's waits are computed in closed form; with it every micro-batch is drawn
    (["--max-time", "3s", "train-sim", "--gpus", "2", "--grad-bytes", "1MiB", "--compute", "1e-11s",
      "--jitter", "0.1", "--methods", "acco"], "acco computes about"),
])
def test_work_is_estimated_before_allocating(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    one_line_exit_2(code, err, needle)


@pytest.mark.parametrize("argv", [
    # compare probed hierarchical at other counts with the 8,192-GPU topology: an internal error (ValueError)
    ["compare", "--gpus", "8192", "--topology", "h100-cluster", "--arrival", "5=10ms", "--size", "1GiB"],
    # the largest count named was 525 ranks, which h100-cluster (8 GPUs per node) refuses
    ["synth", "-a", "clusterstraggler", "--gpus", "8192", "--topology", "h100-cluster", "--arrival", "5=10ms",
     "--size", "1GiB"],
    ["synth", "-a", "hierarchical", "--gpus", "65536", "--topology", "h100-cluster", "--size", "1GiB"],
    ["synth", "-a", "ring", "--gpus", "100000", "--topology", "h100-cluster"],
])
def test_the_largest_gpu_count_named_on_a_cluster_is_one_it_takes(capsys, tmp_path, argv):
    code, _, err = run(capsys, "--max-memory", "4GiB", *argv, *(["-o", tmp_path / "x.json"] if argv[0] == "synth"
                                                              else []))
    one_line_exit_2(code, err, "the largest that fits is")
    fit = int(err.split("the largest that fits is ")[1].split(" ranks")[0])
    assert fit % 8 == 0 and 8 <= fit < int(argv[argv.index("--gpus") + 1]), err
    assert not list(tmp_path.iterdir())
    if argv[0] == "synth" and argv[2] != "ring":  # and it fits: the same command at that count passes the check
        from collsynth import budget
        from collsynth.synth.registry import check_work
        from collsynth.synth.topology import make_topology

        budget.set_max_memory(4 * 2**30)
        try:
            check_work(argv[2], fit, params={"topology": make_topology("h100-cluster", fit), "size": 2**30,
                                             **({"arrivals": {5: 0.01}} if "--arrival" in argv else {})})
        finally:
            budget.set_max_memory(None)


def test_a_topology_resized_is_the_same_machine():
    from collsynth.synth.topology import make_topology, preset_gpus_per_node, resized

    t = make_topology("h100-cluster:fabric=fat-tree", 16, alpha="nvlink=2us")
    r = resized(t, 24)
    assert r is not None and (r.nranks, r.node_count, r.name) == (24, 3, t.name)
    assert r.spec == {**t.spec, "gpus": 24}
    assert resized(t, 20) is None and resized(make_topology("dgx-h100", 8), 16) is None  # 8 per node; one node
    assert resized(make_topology("nvswitch", 8), 12).nranks == 12
    assert [preset_gpus_per_node(x) for x in ("h100-cluster", "h100-cluster:fabric=fat-tree", "gb200-nvl72",
                                              "nvswitch", "t.json")] == [8, 8, 72, 1, 1]


def test_check_work_names_a_multiple_of_its_step():
    from collsynth import budget
    from collsynth.errors import CollsynthError

    cost = budget.Work(2, 2, 2, 2, 2)  # the same Work for every count: the budget alone decides

    def work(x: int) -> budget.Work:
        return budget.Work(x, x, 2 * x, x * x, x * x)

    budget.set_max_memory(2**30)
    try:
        budget.check_work(lambda x: cost, 10**6, "small", step=8)  # fits: no search
        for step in (1, 8, 72):
            with pytest.raises(CollsynthError, match="the largest that fits is") as e:
                budget.check_work(work, 10**6, "x", step=step)
            fit = int(str(e.value).split("the largest that fits is ")[1].split(" ranks")[0])
            assert fit % step == 0 and work(fit).nbytes() <= 2**30 < work(fit + step).nbytes()
    finally:
        budget.set_max_memory(None)


def test_largest_fitting_size_is_within_the_budget():
    from collsynth import budget
    budget.set_max_memory(2**30)
    try:
        n = budget.largest_fitting(budget.schedule_bytes, 2, 10**6)
        assert budget.schedule_bytes(n) <= 2**30 < budget.schedule_bytes(n + 1)
    finally:
        budget.set_max_memory(None)


# ------------------------------------------------------------------------------------------ MSCCL XML setup limits
@pytest.mark.parametrize("change,code_expected,needle", [
    (('nchannels="1"', 'nchannels="33"'), 2, "MAXCHANNELS"),
    (('nchannels="1"', 'nchannels="1000000000000"'), 2, "MAXCHANNELS"),
    (('ngpus="4"', 'ngpus="1000000000"'), 2, "no <gpu> element"),
    (('nchunksperloop="4"', 'nchunksperloop="1000000000000"'), 2, "memory"),
    (('s_chunks="0"', 's_chunks="1000000000000"'), 2, "memory"),
])
def test_xml_setup_limits_and_sizes(capsys, tmp_path, change, code_expected, needle):
    xml = tmp_path / "r4.xml"
    assert run(capsys, "synth", "-a", "ring", "-n", "4", "--format", "msccl-xml", "-o", xml)[0] == 0
    bad = tmp_path / "bad.xml"
    bad.write_text(xml.read_text().replace(*change, 1))
    code, out, err = run(capsys, "verify", bad)
    if code_expected == 2:
        one_line_exit_2(code, err, needle)
    else:
        assert code == 1 and out.startswith("FAIL") and needle in out


# ------------------------------------------------------------------------------------------ honest solver status
def test_solver_status_on_the_terminal_and_in_compare(capsys, tmp_path):
    out = tmp_path / "s.json"
    code, _, err = run(capsys, "synth", "-a", "solver", "-n", "4", "--arrival", "3=1ms", "--time-limit", "1s",
                       "-o", out)
    assert code == 0
    meta = json.loads(out.read_text())["meta"]["solver"]
    line = err.strip().splitlines()[-1]
    assert line.startswith("solver: ") and meta["status"].replace("-", " ").split()[0] in line
    assert f"gap {meta['gap']:.1%} to the lower bound" in line
    code, out_text, _ = run(capsys, "compare", "-n", "4", "--size", "1MiB", "--arrival", "3=1ms",
                            "--algorithms", "ring", "--solver-time-limit", "1s", "--json")
    row = next(r for r in json.loads(out_text)["rows"] if r["algorithm"] == "solver") if code == 0 else None
    assert row is not None and "gap" in row["note"] and any(w in row["note"] for w in ("optimal", "time limit",
                                                                                        "warm start"))


def test_status_line_says_why_a_warm_start_was_returned():
    from collsynth.synth.solver.solve import status_line
    info = {"status": "warm-start", "note": "the model (267307 binaries) is too large for a 30 s time limit",
            "objective_s": 7.783e-3, "gap": 0.072}
    assert status_line(info) == ("solver: warm start (the model (267307 binaries) is too large for a 30 s time "
                                 "limit), objective 7.783 ms, gap 7.2% to the lower bound")
    assert status_line(info, short=True) == ("warm start (MILP too large for the time limit), gap 7.2% to the "
                                             "lower bound")
    assert status_line({"status": "optimal", "gap": 0.0}, short=True) == "optimal, gap 0.0% to the lower bound"


# ------------------------------------------------------------------------------------------ messages
def test_messages_name_the_field_or_flag(capsys, tmp_path, ring4):
    nokey = _mutated(ring4, tmp_path, "nokey.json", lambda d: d.pop("transfers"))
    code, _, err = run(capsys, "info", nokey)
    one_line_exit_2(code, err, "missing field 'transfers'")
    assert "KeyError" not in err
    phase = _mutated(ring4, tmp_path, "phase.json", lambda d: d.__setitem__(
        "phases", [{"name": "x", "start": "a", "stop": 1, "waits_for": [0]}]))
    code, _, err = run(capsys, "verify", phase)
    one_line_exit_2(code, err, "phases[0] field 'start' must be a step index")
    code, _, err = run(capsys, "train-sim", "-n", "4", "--grad-bytes", "1MB", "--compute", "1ms", "--slow", "3=x")
    one_line_exit_2(code, err, "--slow '3=x': factor")
    code, _, err = run(capsys, "compare", "-n", "4", "--size", "1MiB", "--bandwidth", "nvlink=0")
    one_line_exit_2(code, err, "--bandwidth")
    bad = _mutated(ring4, tmp_path, "count0.json", lambda d: d["transfers"]["count"].__setitem__(0, 0))
    code, _, err = run(capsys, "emit", bad, "--format", "msccl-xml")
    one_line_exit_2(code, err, "count0.json")


@pytest.mark.parametrize("change,needle", [
    ({"start": "0"}, "phases[0] field 'start' must be a step index"),
    ({"start": 1.5}, "phases[0] field 'start' must be a step index"),
    ({"stop": True}, "phases[0] field 'stop' must be a step index"),
    ({"stop": None}, "phases[0] field 'stop'"),
    ({"waits_for": "0,1"}, "phases[0] field 'waits_for' must be a list of rank numbers"),
    ({"waits_for": [0, "1"]}, "phases[0] field 'waits_for'"),
    ({"name": 3}, "phases[0] field 'name' must be a string"),
    ({"start": None, "drop": "start"}, "phases[0] has no field 'start'"),
])
@pytest.mark.parametrize("command", ["info", "verify", "simulate"])
def test_wrong_typed_phase_field_is_named(capsys, tmp_path, ring4, change, needle, command):
    """A phase field of the wrong type names the phase, the field and what it expects (issue 13, Messages)."""
    def edit(d):
        ph = {"name": "all", "start": 0, "stop": d["nsteps"], "waits_for": list(range(d["nranks"]))}
        ph.update({k: v for k, v in change.items() if k != "drop"})
        ph.pop(change.get("drop", ""), None)
        d["phases"] = [ph]
    path = _mutated(ring4, tmp_path, "phase.json", edit)
    code, _, err = run(capsys, command, path, *(["--size", "1MiB"] if command == "simulate" else []))
    one_line_exit_2(code, err, needle)


@pytest.mark.parametrize("field,value,needle", [("phases", {"a": 1}, "field 'phases' must be a list"),
                                                ("owner", [0, "1"], "field 'owner'"),
                                                ("meta", [1], "field 'meta' must be an object"),
                                                ("collective", 3, "field 'collective' must be a string")])
def test_wrong_typed_top_level_field_is_named(capsys, tmp_path, ring4, field, value, needle):
    path = _mutated(ring4, tmp_path, "top.json", lambda d: d.__setitem__(field, value))
    code, _, err = run(capsys, "verify", path)
    one_line_exit_2(code, err, needle)


# ------------------------------------------------------------------------------------------ found by the long fuzz run
def test_owner_out_of_range_is_bad_input(capsys, tmp_path):
    """A reducescatter schedule whose owner map names a rank that does not exist: an IndexError before."""
    path = tmp_path / "rs.json"
    assert run(capsys, "synth", "-a", "ring", "-n", "3", "--collective", "reducescatter", "-o", path)[0] == 0
    for bad in (3, 2**31):
        d = json.loads(path.read_text())
        d["owner"] = [0, 1, bad]
        (tmp_path / "bad.json").write_text(json.dumps(d))
        for command in ("verify", "info"):
            code, _, err = run(capsys, command, tmp_path / "bad.json")
            one_line_exit_2(code, err, f"owner map names rank {bad}")


@pytest.mark.parametrize("field,value,needle", [("alpha", 1e308, "too long"), ("alpha", -1.0, "non-negative"),
                                                ("bandwidth", 1e-300, "out of range"),
                                                ("bandwidth", 1e300, "out of range"),
                                                ("alpha", 10**400, "too long"),  # an int beyond a float:
                                                ("bandwidth", 10**400, "out of range")])  # OverflowError before
def test_topology_numbers_are_range_checked_like_text(capsys, tmp_path, field, value, needle):
    """A raw number for alpha or bandwidth in a topology file overflowed the model to inf (a numpy
    warning on stderr and 'time inf must be finite'); it is checked like "3us" is."""
    topo = {"gpus": 2, "switches": ["sw"], "links": [{"src": 0, "dst": "sw"}, {"src": 1, "dst": "sw"}], field: value}
    (tmp_path / "t.json").write_text(json.dumps(topo))
    code, _, err = run(capsys, "compare", "-n", "2", "--size", "1MiB", "-t", tmp_path / "t.json")
    one_line_exit_2(code, err, needle)
    assert field in err


@pytest.mark.parametrize("key,value,needle", [
    ("ports", 10**40, '"ports" must be an integer in 1..1024'),  # was exit 3: an int64 overflow in simulate
    ("ports", {"default": 10**40}, "\"ports\" of class 'default' must be an integer in 1..1024, got 10000"),
    ("ports", 1025, "got 1025"),
    ("gpus", 10**40, "but its 2 links reach at most 4 GPUs"),  # was killed: a graph of 10^40 nodes
    ("gpus", 5, '"gpus" is 5 but its 2 links reach at most 4 GPUs; every GPU needs a link')])
def test_topology_counts_beyond_the_machine_are_refused_before_anything_is_built(capsys, tmp_path, key, value,
                                                                                   needle):
    """Found by fuzzing with huge numbers: a topology file's "ports" above MAX_PORTS (1024 messages per GPU and
    class at once) and "gpus" above what its links can reach are one line, exit 2; a long number is cut."""
    topo = {"gpus": 2, "switches": ["sw"], "links": [{"src": 0, "dst": "sw"}, {"src": 1, "dst": "sw"}], key: value}
    (tmp_path / "t.json").write_text(json.dumps(topo))
    for argv in (("compare", "-n", "2", "--size", "1MiB", "-t", tmp_path / "t.json"),
                 ("topology", "show", tmp_path / "t.json")):
        code, _, err = run(capsys, *argv)
        one_line_exit_2(code, err, needle)
        assert len(err) < 300


@pytest.mark.parametrize("field", ["dst_buff", "src_buff", "channel_ids"])
@pytest.mark.parametrize("value", [0, -0.0, "", 0.5])
def test_plan_list_field_of_the_wrong_type_is_named(capsys, tmp_path, ring4, field, value):
    """A falsy non-list (0, -0.0, "") slipped past the plan reader's fast path: TypeError, exit 3."""
    plan = tmp_path / "plan.json"
    assert run(capsys, "emit", ring4, "--format", "mscclpp-plan", "-o", plan)[0] == 0
    d = json.loads(plan.read_text())
    op = next(o for g in d["gpus"] for t in g["threadblocks"] for o in t["ops"] if field in o)
    op[field] = value
    plan.write_text(json.dumps(d))
    code, _, err = run(capsys, "verify", plan)
    one_line_exit_2(code, err, f"'{field}': must be a list")


def test_mscclpp_plan_size_is_estimated_before_loading_and_running(capsys, tmp_path, ring4):
    """Issue 13 Scale: the plan reader checks the text's bytes before decoding, and thread blocks x ops x
    launches before the symbolic execution, against --max-memory and --max-time."""
    plan = tmp_path / "plan.json"
    assert run(capsys, "emit", ring4, "--format", "mscclpp-plan", "-o", plan)[0] == 0
    code, _, err = run(capsys, "--max-memory", "64KiB", "verify", plan)
    one_line_exit_2(code, err, "bytes of JSON) needs about")
    assert "--max-memory" in err
    code, _, err = run(capsys, "--max-time", "1us", "verify", plan)
    one_line_exit_2(code, err, "thread blocks")
    assert "ops" in err and "--max-time" in err
    assert run(capsys, "verify", plan)[0] == 0


def test_simulate_estimates_port_slots_before_allocating(capsys, tmp_path, ring4):
    """ports 2**53 (a schedule file or a plan) made the simulator allocate n x ports slots: ValueError."""
    path = _mutated(ring4, tmp_path, "ports.json", lambda d: d.__setitem__("ports", 2**53))
    code, _, err = run(capsys, "simulate", path, "--size", "1MiB")
    one_line_exit_2(code, err, "ports per rank")
    assert "--max-memory" in err


@pytest.mark.parametrize("nsteps", [2**64, 10**400, 100])
@pytest.mark.parametrize("command", ["info", "simulate"])
def test_plan_record_step_count_is_checked_against_its_operations(capsys, tmp_path, ring4, nsteps, command):
    """Fuzz run 11: a plan whose "collsynth" record said 2^64 steps made `simulate` allocate per-step arrays
    (ValueError) and `info`'s memory message overflow a float (OverflowError), both exit 3."""
    plan = tmp_path / "plan.json"
    assert run(capsys, "emit", ring4, "--format", "mscclpp-plan", "-o", plan)[0] == 0
    d = json.loads(plan.read_text())
    d["collsynth"]["nsteps"] = nsteps
    plan.write_text(json.dumps(d))
    code, _, err = run(capsys, command, plan, *(["--size", "1MiB"] if command == "simulate" else []))
    one_line_exit_2(code, err, "record says")
    assert ("about 2^" in err) == (nsteps > 2**53) and "moves: fix the record or delete it" in err


def test_memory_messages_survive_counts_beyond_a_float() -> None:
    from collsynth import budget
    from collsynth.errors import CollsynthError

    with pytest.raises(CollsynthError, match="more than 1e308 bytes"):
        budget.check(10**400, "a huge count")


def test_simulate_counts_the_steps_in_its_estimate(capsys, tmp_path, ring4):
    """nsteps 2**53 in a schedule file with no phases: refused by the estimate, not by numpy."""
    import dataclasses

    from collsynth.errors import CollsynthError
    from collsynth.synth.ir import load_schedule
    from collsynth.synth.simulate import simulate
    from collsynth.synth.topology import make_topology

    s = load_schedule(str(ring4))
    big = dataclasses.replace(s, nsteps=2**53, phases=())
    with pytest.raises(CollsynthError, match=r"9007199254740992 steps\)"):
        simulate(big, 2**20, make_topology("nvswitch", s.nranks))


@pytest.mark.parametrize("dialect,mode", [("executor", "--inplace"), ("executor", "--no-inplace"),
                                          ("legacy", "--inplace"), ("legacy", "--no-inplace")])
def test_msccl_xml_lowering_of_a_split_multi_chunk_transfer_emits_a_checked_file(capsys, tmp_path, dialect, mode):
    """A verified ring ReduceScatter whose last transfer moves two chunks (rank 2 sends chunk 0 from scratch
    and chunk 1 from its input: two pieces) was a cycle of the emitter's step model (an AssertionError,
    exit 3, then a refusal, exit 2): the two pieces are one Schedule transfer and share a step
    (backends/msccl/deps.py). It now emits, and the independent checker runs it: no deadlock, every
    contribution exactly once."""
    d = {"format": "collsynth-schedule", "version": 1, "name": "ring_reducescatter_n3", "collective": "reducescatter",
         "nranks": 3, "nchunks": 3, "nsteps": 2, "ports": 1, "owner": [0, 1, 2], "phases": [],
         "meta": {"algorithm": "ring"},
         "transfers": {"step": [0, 0, 0, 1, 1, 1], "src": [0, 1, 2, 0, 1, 2], "dst": [1, 2, 0, 1, 2, 0],
                       "chunk": [2, 0, 1, 1, 2, 0], "count": [1, 1, 1, 1, 1, 2], "reduce": [1, 1, 1, 1, 1, 1]}}
    path = tmp_path / "cyc.json"
    path.write_text(json.dumps(d))
    out = tmp_path / "out.xml"
    code, _, err = run(capsys, "emit", path, "--format", "msccl-xml", "--dialect", dialect, mode, "-o", out)
    assert code == 0, err
    code, out_text, err = run(capsys, "verify", out)
    assert code == 0 and out_text.startswith("OK reducescatter on 3 GPUs"), out_text + err
    assert "no deadlock" in out_text and "every contribution exactly once" in out_text


# ------------------------------------------------------------------------------------------ output flags
@pytest.mark.parametrize("argv, needle", [
    (["emit", "{s}", "-f", "msccl-xml", "--sms", "132"], "--sms applies to --format mscclpp-plan, not msccl-xml"),
    (["emit", "{s}", "-f", "msccl-xml", "--plan-chunks", "pow2"], "--plan-chunks applies to --format mscclpp-plan"),
    (["emit", "{s}", "-f", "mscclpp-plan", "--dialect", "legacy"], "--dialect applies to --format msccl-xml, not "),
    (["emit", "{s}", "-f", "mscclpp-plan", "--no-outofplace"], "--no-outofplace applies to --format msccl-xml"),
    (["emit", "{s}", "-f", "mscclpp-plan", "--instances", "2"], "--instances applies to --format msccl-xml"),
    (["emit", "{s}", "-f", "msccl-xml", "--dtypes", "float"], "--dtypes applies to --format nccl-cuda"),
    (["emit", "{s}", "-f", "nccl-cuda", "--proto", "LL"], "--proto applies to --format msccl-xml or mscclpp-plan"),
    (["synth", "-a", "ring", "-n", "4", "--proto", "LL"], "--proto applies to --format msccl-xml or mscclpp-plan, "
                                                          "not json"),
    (["synth", "-a", "ring", "-n", "4", "--no-inplace"], "--no-inplace applies to"),
    (["synth", "-a", "ring", "-n", "4", "-f", "msccl-xml", "--gpus-per-node", "2"], "--gpus-per-node applies to"),
])
def test_an_output_flag_the_format_does_not_take_is_refused_not_ignored(capsys, tmp_path, ring4, argv, needle):
    out = tmp_path / "out"
    code, _, err = run(capsys, *[str(ring4) if a == "{s}" else a for a in argv], "-o", out)
    one_line_exit_2(code, err, needle)
    assert not out.exists()


def test_output_flags_the_format_takes_are_accepted(capsys, tmp_path, ring4):
    for fmt, flags in (("msccl-xml", ["--proto", "LL", "--instances", "2", "--no-outofplace", "--name", "x"]),
                       ("mscclpp-plan", ["--proto", "LL", "--no-inplace", "--sms", "96", "--name", "x"])):
        code, _, err = run(capsys, "emit", ring4, "-f", fmt, *flags, "-o", tmp_path / f"{fmt}.out")
        assert code == 0, err
    code, _, err = run(capsys, "emit", ring4, "-f", "nccl-cuda", "--name", "x", "--dtypes", "float",
                       "-o", tmp_path / "cuda")
    assert code == 0, err


def test_cli_audit_of_session_45(capsys, tmp_path, monkeypatch, ring4):
    """Bad input that was an internal error (exit 3), an exit 1 or invalid JSON."""
    import pulp

    code, _, err = run(capsys, "reproduce", "cluster", "--nodes", "2", "--seed", "-1")  # numpy's ValueError
    one_line_exit_2(code, err, "--seed")
    monkeypatch.setattr(pulp.HiGHS, "available", lambda self: False)  # HiGHS missing: was PulpSolverError
    code, _, err = run(capsys, "solve-rounds", "--gpus", "4", "--solver", "highs", "--no-below")
    one_line_exit_2(code, err, "highspy")
    for out in (ring4, tmp_path / "nodir"):  # nothing to compare is bad input, not "out of date" (exit 1)
        code, _, err = run(capsys, "schedules", "regenerate", "--check", "--out", out)
        one_line_exit_2(code, err, "--out")
    # a rank so late that the others' time after it rounds to 0: the speedup is null, not Infinity
    code, out, err = run(capsys, "compare", "--gpus", "4", "--size", "1MiB", "--alpha", "0", "--arrival", "3=1e9s",
                         "--json")
    assert code == 0, err
    rows = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in --json output"))
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert None in [r["speedup_vs_ring"] for r in rows]


def test_a_topology_too_large_for_memory_is_refused_before_it_is_built(capsys):
    """`topology show nvswitch --gpus 100000000` was killed by the kernel after 47 s (24 GB)."""
    code, _, err = run(capsys, "topology", "show", "nvswitch", "--gpus", "100000000")
    one_line_exit_2(code, err, "give fewer GPUs")
    code, _, err = run(capsys, "--max-memory", "64MiB", "topology", "show", "nvswitch", "--gpus", "40000")
    one_line_exit_2(code, err, "bisection")  # built (8 MB), but its bisection would take about 120 MB


@pytest.mark.parametrize("argv", [
    ["bench", "--ranks", "2", "--size", "100GiB"],
    ["calibrate", "--ranks", "2", "--sizes", "1KiB,100GiB", "--iters", "1"],
    ["train-bench", "--grad-bytes", "100GiB", "--ranks", "2", "--steps", "3", "--warmup", "0", "--alpha", "3us",
     "--bandwidth", "1GB/s", "--runs", "ddp:torch"],
    ["train-bench", "--ranks", "100000", "--runs", "ddp:torch"],  # started spawning 100,000 processes
])
def test_real_runs_too_large_for_memory_are_refused_before_any_process_starts(capsys, argv):
    """Were exit 1 (torch's allocator, or a worker killed for memory, read as a failed run)."""
    pytest.importorskip("torch")
    code, _, err = run(capsys, *argv)
    one_line_exit_2(code, err, "memory")


def test_schedule_files_with_a_reduce_flag_of_2_or_an_owner_outside_the_ranks_are_malformed(capsys, tmp_path, ring4):
    """Both passed verify and emit (reduce 2 read as true; an AllReduce's owner map ignored)."""
    d = json.loads(ring4.read_text())
    bad_reduce = {**d, "transfers": {**d["transfers"], "reduce": [2] + d["transfers"]["reduce"][1:]}}
    bad_owner = {**d, "owner": [99] * d["nchunks"]}
    for name, doc, needle in (("r.json", bad_reduce, "'reduce'"), ("o.json", bad_owner, "rank 99")):
        path = tmp_path / name
        path.write_text(json.dumps(doc))
        for argv in (["verify", path], ["emit", path, "--format", "msccl-xml"]):
            code, _, err = run(capsys, *argv)
            one_line_exit_2(code, err, needle)


def test_straggler_all_refuses_a_format_it_would_ignore(capsys, tmp_path):
    """`synth --straggler all -f msccl-xml` wrote JSON schedules, exit 0."""
    out = tmp_path / "fam"
    code, _, err = run(capsys, "synth", "-a", "stragglar", "-n", "4", "--straggler", "all", "-f", "msccl-xml",
                       "-o", out)
    one_line_exit_2(code, err, "--straggler all")
    assert not out.exists()


def test_msccl_xml_with_a_size_window_the_runtime_never_selects_is_bad_input(capsys, tmp_path, ring4):
    """minBytes above maxBytes (with maxBytes not 0) or a negative bound verified OK."""
    xml = tmp_path / "r4.xml"
    assert run(capsys, "emit", ring4, "--format", "msccl-xml", "-o", xml)[0] == 0
    text = xml.read_text()
    assert 'minBytes="0" maxBytes="0"' in text
    for window, needle in (('minBytes="100" maxBytes="10"', "never selects"),
                           ('minBytes="-5" maxBytes="0"', "0 or more")):
        bad = tmp_path / "bad.xml"
        bad.write_text(text.replace('minBytes="0" maxBytes="0"', window))
        code, _, err = run(capsys, "verify", bad)
        one_line_exit_2(code, err, needle)


def test_transfers_of_the_wrong_shape_are_named_not_quoted_from_python(capsys, tmp_path, ring4):
    """`"transfers": []` said "list indices must be integers or slices, not str"."""
    for name, value, needle in (("l.json", [], "field 'transfers' must be an object of equal-length columns"),
                                ("d.json", {"step": []}, "lacks the column(s) src, dst, chunk, count, reduce")):
        path = _mutated(ring4, tmp_path, name, lambda d, v=value: d.__setitem__("transfers", v))
        code, _, err = run(capsys, "verify", path)
        one_line_exit_2(code, err, needle)
        assert "list indices" not in err and "KeyError" not in err


def test_a_bandwidth_without_a_unit_is_refused_and_large_units_are_read(capsys):
    """`--bandwidth 450` meant 450 B/s silently; `--size 1EiB` was "unknown unit" under a "4 EiB" limit."""
    code, _, err = run(capsys, "compare", "-n", "4", "--size", "1MiB", "--bandwidth", "450")
    one_line_exit_2(code, err, "bandwidth '450' has no unit: write 450GB/s, 450GiB/s or 450B/s")
    code, _, err = run(capsys, "compare", "-n", "4", "--size", "1MiB", "--bandwidth", "nvlink=450")
    one_line_exit_2(code, err, "no unit")
    from collsynth.units import parse_rate, parse_size
    assert parse_rate("450B/s") == 450.0 and parse_rate(450) == 450.0
    assert parse_size("1EiB") == 2**60 and parse_size("2PB") == 2 * 10**15 and parse_size("1PiB") == 2**50
    code, _, err = run(capsys, "compare", "-n", "4", "--size", "5EiB")
    one_line_exit_2(code, err, "too large")


def test_budget_errors_name_the_option_that_grew_the_work(capsys, tmp_path):
    """`--pipeline 1000000` and `--instances 100000` were told "the largest that fits is 7 ranks", as if the
    GPU count were the problem; `--sms 1` did not say which --sms would do."""
    out = tmp_path / "x.json"
    code, _, err = run(capsys, "--max-memory", "1GiB", "synth", "-a", "stragglar", "-n", "8", "--pipeline",
                       "1000000", "-o", out)
    one_line_exit_2(code, err, "at --pipeline 1000000: give a smaller --pipeline")
    code, _, err = run(capsys, "--max-memory", "1GiB", "synth", "-a", "stragglar", "-n", "8", "--instances",
                       "100000", "-f", "msccl-xml", "-o", out)
    one_line_exit_2(code, err, "give a smaller --instances")
    code, _, err = run(capsys, "synth", "-a", "ring", "-n", "8", "--sms", "1", "-f", "mscclpp-plan", "-o", out)
    one_line_exit_2(code, err, "--sms 2 or more would fit it")
    assert not out.exists()


def test_budget_errors_name_the_environment_variable_that_set_the_budget(capsys, monkeypatch):
    monkeypatch.setenv("COLLSYNTH_MAX_MEMORY", "1KB")
    code, _, err = run(capsys, "compare", "-n", "8", "--size", "1MiB")
    one_line_exit_2(code, err, "or COLLSYNTH_MAX_MEMORY, which set it")
    monkeypatch.setenv("COLLSYNTH_MAX_MEMORY", "abc")
    code, _, err = run(capsys, "compare", "-n", "8", "--size", "1MiB")
    one_line_exit_2(code, err, "COLLSYNTH_MAX_MEMORY: cannot read size 'abc'")
    code, _, err = run(capsys, "--max-memory", "abc", "compare", "-n", "8", "--size", "1MiB")
    one_line_exit_2(code, err, "--max-memory: cannot read size 'abc'")
    monkeypatch.delenv("COLLSYNTH_MAX_MEMORY")
    monkeypatch.setenv("COLLSYNTH_MAX_TIME", "1ms")
    code, _, err = run(capsys, "compare", "-n", "8", "--size", "1MiB")
    one_line_exit_2(code, err, "or COLLSYNTH_MAX_TIME, which set it")


def test_an_unknown_option_of_a_command_points_at_that_commands_help(capsys):
    code, _, err = run(capsys, "compare", "-n", "4", "--size", "1MiB", "--bogus")
    one_line_exit_2(code, err, "unrecognized arguments: --bogus (see `collsynth compare --help`)")
    code, _, err = run(capsys, "topology", "show", "nvswitch", "-n", "4", "--bogus")
    one_line_exit_2(code, err, "(see `collsynth topology show --help`)")


@pytest.mark.parametrize("change,needle", [
    (lambda t: t.__setitem__("alpha", "fast"), "its meta \"topology\" cannot be rebuilt (--alpha: alpha 'fast'"),
    (lambda t: t.__setitem__("preset", "nvswitch"), "its meta \"topology\" cannot be rebuilt (--alpha names link"),
    (lambda t: t.__setitem__("gpus", 32), "its meta \"topology\" has 32 GPUs but the schedule has 16 ranks"),
])
def test_a_recorded_topology_that_does_not_rebuild_says_it_came_from_the_file(capsys, tmp_path, change, needle):
    """A schedule's meta "topology" (the spec that makes `verify FILE` enforce its ports again) that does not
    rebuild was reported as if the user had passed --alpha, or as a topology/schedule mismatch without saying
    which topology: the message now names the schedule's meta "topology" and says to fix or delete it."""
    path = tmp_path / "c16.json"
    assert run(capsys, "synth", "-a", "clusterstraggler", "-n", "16", "-t", "h100-cluster", "--arrival", "3=1ms",
               "--size", "64MiB", "-o", path)[0] == 0
    d = json.loads(path.read_text())
    change(d["meta"]["topology"])
    path.write_text(json.dumps(d))
    for argv in (("verify", path), ("simulate", path, "--size", "1MiB"),
                 ("emit", path, "--format", "msccl-xml", "-o", tmp_path / "c16.xml")):
        code, _, err = run(capsys, *argv)
        one_line_exit_2(code, err, needle)
        assert "schedule clusterstraggler_gpu_n16_l3: " in err and err.rstrip().endswith("fix it or delete it")
    assert not (tmp_path / "c16.xml").exists()


@pytest.mark.parametrize("size, needle", [(1e40, "too large"), (10**400, "too large"), (-1, "positive, finite"),
                                          (float("nan"), "positive, finite"), (float("inf"), "positive, finite"),
                                          (0, "positive, finite"), (True, "number of bytes"), ("1XB", "unit")])
def test_the_api_takes_the_sizes_the_cli_takes(size, needle):
    """The CLI capped sizes at 4 EiB, but the Python API's simulate, build_schedule and compare took 1e40 and
    printed 40-digit times; now every entry refuses what the CLI refuses, with one short line."""
    import collsynth as cs
    s = cs.build_schedule("ring", 4)
    calls = (lambda: cs.simulate(s, size, "nvswitch"), lambda: cs.build_schedule("stragglar", 4, size=size),
             lambda: cs.compare(4, size, "nvswitch", {3: 1e-3}, algorithms=["ring"]))
    for call in calls:
        with pytest.raises(cs.CollsynthError) as exc:
            call()
        msg = str(exc.value)
        assert needle in msg and "\n" not in msg and len(msg) < 160, msg
    assert cs.simulate(s, 2**62, "nvswitch").size_bytes == 2.0**62  # the largest size still runs


@pytest.mark.parametrize("names", ["", ",", " , "])
def test_compare_with_no_algorithm_named_says_so(capsys, names):
    """`--algorithms ""` ran every default algorithm, as if the option were left out."""
    code, out, err = run(capsys, "compare", "--gpus", "8", "--size", "1MiB", "--algorithms", names)
    one_line_exit_2(code, err, "--algorithms names no algorithm")
    assert out == ""


def test_compare_api_with_an_empty_list_says_so():
    from collsynth.errors import CollsynthError
    from collsynth.synth.compare import compare

    with pytest.raises(CollsynthError, match="names no algorithm"):
        compare(8, 2**20, algorithms=[])
    assert [r["algorithm"] for r in compare(8, 2**20, algorithms=["ring"])] == ["ring"]


@pytest.mark.parametrize("topology,takes", [("h100-cluster", "a multiple of 8 GPUs"), ("dgx1", "8 GPUs"),
                                            ("tests/fixtures/topologies/dgx_h100_x4_rail.json", "32 GPUs")])
def test_a_topology_that_does_not_fit_the_schedule_names_the_schedule_not_gpus(capsys, ring4, topology, takes):
    """simulate takes its rank count from the schedule: the refusal says so (it has no --gpus to change)."""
    path = os.path.join(os.path.dirname(__file__), os.pardir, topology) if topology.endswith(".json") else topology
    code, _, err = run(capsys, "simulate", ring4, "--size", "1MiB", "-t", path)
    one_line_exit_2(code, err, "the schedule has 4 ranks, but topology")
    assert f"takes {takes}: give -t a topology of 4 GPUs" in err and "--gpus" not in err


def test_bench_ranks_that_do_not_fit_the_topology_name_ranks(capsys):
    pytest.importorskip("torch")
    code, _, err = run(capsys, "bench", "--ranks", "4", "--size", "1MiB", "-t", "h100-cluster")
    one_line_exit_2(code, err, "--ranks is 4, but topology h100-cluster takes a multiple of 8 GPUs: set --ranks")
