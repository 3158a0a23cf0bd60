"""Round-optimality of StragglAR's completion collective (synth/algorithms/stragglar/rounds.py) and `solve-rounds`."""

from __future__ import annotations

import json
import math

import pytest

from collsynth.cli import main
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.stragglar.rounds import round_lower_bound, rounds_row, rounds_schedule, solve_rounds
from collsynth.synth.ir import load_schedule
from collsynth.synth.verify import verify


def test_lower_bound_formula():
    assert [round_lower_bound(n) for n in (3, 4, 6, 8, 12, 16)] == [3, 4, 7, 9, 14, 18]
    assert all(round_lower_bound(n) == n - 2 + math.ceil(math.log2(n)) for n in range(3, 40))


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_bound_is_met_and_one_round_fewer_is_infeasible(n):
    lb = round_lower_bound(n)
    at = solve_rounds(n, lb, time_limit=30, staircase=False)
    assert at.status == "feasible"
    s = rounds_schedule(at)
    rep = verify(s)
    assert rep.ok, rep.message
    assert s.steps_per_phase()["completion"] == lb
    assert solve_rounds(n, lb - 1, time_limit=30).status == "infeasible"


def test_found_rounds_respect_one_port_and_the_straggler_sends_every_round():
    n = 6
    at = solve_rounds(n, round_lower_bound(n), time_limit=30, staircase=True)
    assert at.moves is not None
    for moves in at.moves:
        senders = [m[2] for m in moves]
        receivers = [m[3] for m in moves]
        assert len(set(senders)) == len(senders) and len(set(receivers)) == len(receivers)
    assert all(any(m[2] == n - 1 for m in moves) for moves in at.moves[: n - 1])


def test_rounds_row_reports_optimal():
    row, sched = rounds_row(5, time_limit=30)
    assert row["status"] == "optimal" and row["rounds"] == row["lower_bound"] == 6
    assert row["below_status"] == "infeasible" and sched is not None


def test_too_few_rounds_for_the_straggler_is_infeasible_without_solving():
    assert solve_rounds(8, 5).status == "infeasible"


@pytest.mark.parametrize("n", [2, 17, True])
def test_bad_n(n):
    with pytest.raises(CollsynthError):
        solve_rounds(n, 10)


def test_cli_solve_rounds(capsys, tmp_path):
    out_file = tmp_path / "r4.json"
    code = main(["solve-rounds", "--gpus", "4", "--json", "-o", str(out_file)])
    out, err = capsys.readouterr()
    assert code == 0
    rows = json.loads(out)["rows"]
    assert rows[0]["gpus"] == 4 and rows[0]["status"] == "optimal" and rows[0]["below_status"] == "infeasible"
    assert verify(load_schedule(str(out_file))).ok
    code = main(["solve-rounds", "--gpus", "3,4", "--no-below"])
    out, _ = capsys.readouterr()
    assert code == 0 and "optimal" in out and out.count("\n") == 4


@pytest.mark.parametrize("argv", [
    ["solve-rounds", "--gpus", "2"],
    ["solve-rounds", "--gpus", "x"],
    ["solve-rounds", "--gpus", "4,6", "-o", "out.json"],
    ["solve-rounds", "--gpus", "4", "--time-limit", "-3s"],
])
def test_cli_bad_input_exit_2(capsys, tmp_path, argv, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(argv)
    _, err = capsys.readouterr()
    assert code == 2 and err.startswith("collsynth: error:") and err.count("\n") == 1
    assert not (tmp_path / "out.json").exists()


def test_highs_rounds_when_installed(capfd):
    pytest.importorskip("highspy")
    code = main(["solve-rounds", "--gpus", "5", "--solver", "highs", "--json"])
    out, _ = capfd.readouterr()  # file-descriptor level: HiGHS's C++ banner would land here
    assert code == 0 and json.loads(out)["rows"][0]["status"] == "optimal"  # stdout is pure JSON


def test_cbc_killed_at_the_time_limit_is_unknown(monkeypatch):
    """solve-rounds runs CBC with the solver's hard deadline (its own limit was overshot: 27 s for --time-limit
    2s at 13 GPUs); a run killed there answers unknown, never infeasible."""
    from collsynth.synth.algorithms.stragglar import rounds

    calls = []

    def killed(prob, limit, *a, **k):
        calls.append(limit)
        return None, "killed at the time limit"

    monkeypatch.setattr(rounds, "run_cbc", killed)
    r = rounds.solve_rounds(6, 6 - 2 + 2, time_limit=3.0)
    assert r.status == "unknown" and calls == [3.0]
