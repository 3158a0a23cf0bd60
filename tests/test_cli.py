"""The core CLI: spellings, output, exit codes and bad input (one line, exit 2, nothing written)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from collsynth.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_algorithms_and_topologies_list(capsys):
    code, out, _ = run(capsys, "algorithms")
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()]
    assert {"ring", "rhd", "direct", "twoshot"} <= set(names)
    code, out, _ = run(capsys, "topologies")
    assert code == 0
    assert {"nvswitch", "full-mesh", "ring", "dgx1", "torus2d"} <= {line.split()[0] for line in out.splitlines()}


def test_algorithms_and_topologies_list_as_json(capsys):
    from collsynth.synth.registry import algorithms
    from collsynth.synth.topology import make_topology, topology_presets

    code, out, _ = run(capsys, "algorithms", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["name"] for r in rows] == list(algorithms())
    by = {r["name"]: r for r in rows}
    assert by["clusterstraggler"]["collectives"] == ["allreduce"] and "--arrival" in by["clusterstraggler"]["options"]
    assert "--topology" in by["ring"]["options"] and "allgather" in by["ring"]["collectives"]
    for argv in (["topologies", "--json"], ["topology", "list", "--json"]):
        code, out, _ = run(capsys, *argv)
        rows = json.loads(out)
        assert code == 0 and [r["name"] for r in rows] == list(topology_presets())
        per = {r["name"]: r["gpus_per_node"] for r in rows}
        assert per["h100-cluster"] == 8 and per["gb200-nvl72"] == 72 and per["nvswitch"] is None
        assert make_topology("h100-cluster", 24).node_count == 3  # the GPU counts it takes: multiples of 8


def test_synth_verify_info_simulate_round(capsys, tmp_path):
    path = tmp_path / "ring8.json"
    code, _, err = run(capsys, "synth", "-a", "ring", "-n", "8", "-o", str(path))
    assert code == 0 and "verified" in err
    code, out, _ = run(capsys, "verify", str(path))
    assert code == 0 and out.startswith("OK allreduce on 8 ranks")
    code, out, _ = run(capsys, "info", str(path), "--json")
    info = json.loads(out)
    assert (info["ranks"], info["chunks"], info["steps"], info["transfers"]) == (8, 8, 14, 112)
    assert info["bytes_sent_per_buffer_byte"] == [1.75] * 8
    code, out, _ = run(capsys, "simulate", str(path), "--size", "1GiB", "--alpha", "3us",
                       "--bandwidth", "450GiB/s", "--json")
    res = json.loads(out)
    expect = 2 * 7 * (3e-6 + 2**30 / (8 * 450 * 2**30))
    assert res["completion_s"] == pytest.approx(expect, rel=1e-12)
    assert res["after_last_arrival_s"] == pytest.approx(expect, rel=1e-12)
    code, out, _ = run(capsys, "simulate", str(path), "--size", "1GiB", "--alpha", "3us",
                       "--bandwidth", "450GiB/s", "--arrival", "3=1ms", "--json")
    late = json.loads(out)
    assert late["completion_s"] == pytest.approx(expect + 1e-3, rel=1e-9)
    assert late["after_last_arrival_s"] == pytest.approx(expect, rel=1e-9)
    # the distance to compare's proven bound: the per-GPU bound 2 (n-1)/n s/B (+ the late rank's arrival)
    per_gpu = 2 * 7 / 8 * 2**30 / (450 * 2**30)
    assert res["kind"] == "per-gpu" and res["bound_s"] == pytest.approx(per_gpu + 3e-6, rel=0.01)
    assert res["x_bound"] == pytest.approx(res["after_last_arrival_s"] / res["bound_after_last_arrival_s"])
    assert 1 < res["x_bound"] < 1.02  # ring is bandwidth-optimal here (its 14 alphas against one)
    code, out, _ = run(capsys, "simulate", str(path), "--size", "1GiB", "--alpha", "3us",
                       "--bandwidth", "450GiB/s", "--arrival", "3=1ms")
    assert out.rstrip().endswith(f"after the last arrival (1.000 ms); {late['x_bound']:.3f}x the lower bound of "
                                 f"{late['bound_after_last_arrival_s'] * 1e3:.3f} ms after it ({late['kind']})")
    rs = tmp_path / "rs8.json"
    run(capsys, "synth", "-a", "ring", "-n", "8", "-c", "reducescatter", "-o", str(rs))
    code, out, _ = run(capsys, "simulate", str(rs), "--size", "1GiB", "--json")
    assert code == 0 and "x_bound" not in json.loads(out)  # no proven bound for it: none claimed


def test_simulate_defaults_to_the_topology_the_schedule_records(capsys, tmp_path):
    """`synth -t h100-cluster` records the topology; `simulate FILE` without -t runs on it (not nvswitch), with
    --alpha/--bandwidth overriding its values as they would with -t; a schedule without one gets nvswitch."""
    path = tmp_path / "h16.json"
    assert run(capsys, "synth", "-a", "hierarchical", "-n", "16", "-t", "h100-cluster", "-o", str(path))[0] == 0

    def sim(*extra):
        code, out, err = run(capsys, "simulate", str(path), "--size", "1GiB", "--arrival", "5=1ms", "--json", *extra)
        assert code == 0, err
        return json.loads(out)

    own, named, flat = sim(), sim("-t", "h100-cluster"), sim("-t", "nvswitch")
    assert own["topology"] == named["topology"] == "h100-cluster" and flat["topology"] == "nvswitch"
    assert own["completion_s"] == named["completion_s"] != flat["completion_s"]
    assert own["bound_s"] == named["bound_s"]
    for flag, value in (("--alpha", "net=20us"), ("--bandwidth", "net=100GB/s"), ("--alpha", "5us"),
                        ("--bandwidth", "nvlink=900GB/s,net=25GB/s")):
        over, named_over = sim(flag, value), sim(flag, value, "-t", "h100-cluster")
        assert over["completion_s"] == named_over["completion_s"] != own["completion_s"], (flag, value)
    ring = tmp_path / "ring8.json"
    run(capsys, "synth", "-a", "ring", "-n", "8", "-o", str(ring))
    code, out, _ = run(capsys, "simulate", str(ring), "--size", "1MiB", "--json")
    assert code == 0 and json.loads(out)["topology"] == "nvswitch"
    code, out, _ = run(capsys, "info", str(path))  # info names it; a schedule without one says nothing
    assert code == 0 and "  topology: h100-cluster, 2 nodes (recorded: verify enforces" in out
    assert "topology" not in run(capsys, "info", str(ring))[1]
    broken = tmp_path / "broken.json"
    d = json.loads(path.read_text())
    d["meta"]["topology"] = {"preset": "nope", "gpus": 16}
    broken.write_text(json.dumps(d))
    code, out, _ = run(capsys, "info", str(broken))
    assert code == 0 and "  topology: recorded, but " in out and "unknown topology 'nope'" in out
    code, _, err = run(capsys, "simulate", str(broken), "--size", "1GiB")
    assert code == 2 and "unknown topology 'nope'" in err and err.count("\n") == 1
    code, _, err = run(capsys, "simulate", str(path), "--size", "1GiB", "--alpha", "net=3")
    assert code == 2 and "--alpha" in err and err.count("\n") == 1


def test_synth_to_stdout_is_the_json(capsys):
    code, out, _ = run(capsys, "synth", "-a", "rhd", "-n", "4")
    assert code == 0 and json.loads(out)["nranks"] == 4


def test_verify_broken_file_exit_1(capsys, tmp_path):
    path = tmp_path / "s.json"
    run(capsys, "synth", "-a", "ring", "-n", "4", "-o", str(path))
    d = json.loads(path.read_text())
    d["transfers"]["reduce"][0] = 0  # first reduce becomes a copy: contributions lost
    path.write_text(json.dumps(d))
    code, out, _ = run(capsys, "verify", str(path))
    assert code == 1 and out.startswith("FAIL")


def test_compare_table_and_json(capsys):
    argv = ["compare", "--gpus", "8", "--size", "1GiB", "--alpha", "3us", "--bandwidth", "450GiB/s",
            "--arrival", "7=5ms"]
    code, out, _ = run(capsys, *argv, "--json")
    assert code == 0
    rows = json.loads(out)["rows"]
    assert {"ring", "rhd", "direct", "twoshot"} <= {r["algorithm"] for r in rows}
    times = [r["after_last_arrival_s"] for r in rows]
    assert times == sorted(times)
    ring = next(r for r in rows if r["algorithm"] == "ring")
    assert ring["speedup_vs_ring"] == 1.0
    for r in rows:
        assert {"algorithm", "completion_s", "after_last_arrival_s", "speedup_vs_ring"} <= set(r)
        assert r["completion_s"] == pytest.approx(r["after_last_arrival_s"] + 5e-3)
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "speedup vs ring" in out
    code, out, _ = run(capsys, *argv, "-a", "ring,stragglar", "--json")  # -a: as synth's
    assert code == 0 and [r["algorithm"] for r in json.loads(out)["rows"]] == ["stragglar", "ring"]


@pytest.mark.parametrize("argv,needle", [
    (["synth", "-a", "ring", "-n", "1"], ">= 2"),
    (["synth", "-a", "nosuch", "-n", "4"], "unknown algorithm"),
    (["synth", "-a", "ring", "-n", "4", "-t", "nosuch"], "unknown topology"),
    (["compare", "-n", "8", "--size", "1GiB", "--alpha", "3us", "--bandwidth", "450GiB/s", "--arrival", "9=5ms"],
     "does not exist"),
    (["compare", "-n", "8", "--size", "-1GiB", "--alpha", "3us", "--bandwidth", "450GiB/s"], "positive"),
    (["synth", "-a", "ring", "-n", "x"], "integer"),
])
def test_bad_input_one_line_exit_2(capsys, argv, needle, tmp_path):
    with pytest.raises(SystemExit) as e:
        code = main(argv)
        raise SystemExit(code)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert needle in err.lower() and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_malformed_json_exit_2_and_no_output_written(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for cmd in (["verify", str(bad)], ["info", str(bad)],
                ["simulate", str(bad), "--size", "1MiB", "--alpha", "1us", "--bandwidth", "1GB/s"]):
        code, _, err = run(capsys, *cmd)
        assert code == 2 and "not valid JSON" in err and len(err.strip().splitlines()) == 1
    out = tmp_path / "never.json"
    code, _, _ = run(capsys, "synth", "-a", "ring", "-n", "1", "-o", str(out))
    assert code == 2 and not out.exists()
    assert list(tmp_path.iterdir()) == [bad]


def test_console_script_runs():
    r = subprocess.run([sys.executable, "-m", "collsynth.cli", "synth", "-a", "ring", "-n", "1"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("collsynth: error:") and "Traceback" not in r.stderr


def test_every_command_help_has_an_example(capsys):
    from collsynth.commands.catalog import COMMANDS

    for c in COMMANDS:
        with pytest.raises(SystemExit) as e:
            main([c.name, "--help"])
        assert e.value.code == 0
        out = capsys.readouterr().out
        assert f"  collsynth {c.name}" in out, f"`collsynth {c.name} --help` shows no example"


def test_version_and_top_level_help_list_every_command(capsys):
    from collsynth import __version__
    from collsynth.commands.catalog import COMMANDS

    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"collsynth {__version__}"
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(c.name in out for c in COMMANDS) and "exit codes" in out


def test_progress_lines_go_to_stderr_when_asked(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COLLSYNTH_PROGRESS", "1")
    assert main(["compare", "--gpus", "4", "--size", "1MiB", "--json"]) == 0
    out, err = capsys.readouterr()
    rows = json.loads(out)  # stdout stays clean JSON
    assert f"compare [1/{len(rows['rows'])}] ring" in err
    monkeypatch.setenv("COLLSYNTH_PROGRESS", "0")
    assert main(["compare", "--gpus", "4", "--size", "1MiB", "--json"]) == 0
    assert capsys.readouterr().err == ""


def test_an_internal_error_exits_3_with_one_line(capsys, monkeypatch):
    from collsynth.commands import core

    def boom(args):
        raise RuntimeError("simulated bug\nsecond line")

    monkeypatch.setattr(core, "cmd_algorithms", boom)
    assert main(["algorithms"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("collsynth: internal error: RuntimeError: simulated bug")
    assert "rerun as `collsynth --debug algorithms ...`" in err  # where --debug goes: before the command
    assert main(["--debug", "algorithms"]) == 3
    assert "Traceback" in capsys.readouterr().err
