"""Worker processes for a search's candidates (collsynth.workers; `collsynth --jobs N`, COLLSYNTH_JOBS): the
same schedule, byte for byte, for every job count, built in worker processes when jobs are set; failures
raised as in a loop; bad job counts refused with one line and exit 2; the memory estimate counts one
candidate per process."""

from __future__ import annotations

import time

import pytest

import collsynth as cs
from collsynth import budget, workers
from collsynth.cli import main as cli_main
from collsynth.errors import CollsynthError
from collsynth.synth.ir import save_schedule


@pytest.fixture(autouse=True)
def _default_jobs(monkeypatch):
    monkeypatch.delenv(workers.ENV, raising=False)
    workers.set_jobs(None)
    yield
    workers.set_jobs(None)


# several late ranks (the waves search: cutoffs, funnel choices, the synchronous schedule) and one late GPU
# by a short delay (choose.py weighs the funnel choices)
CASES = {"several": {3: 1e-3, 12: 2.5e-3}, "one-gpu": {5: 1e-3}}


def _build_bytes(arrivals, tmp_path, name):
    topo = cs.make_topology("h100-cluster", 16)
    s = cs.build_schedule("clusterstraggler", 16, arrivals=arrivals, size=64 * 2**20, topology=topo)
    assert cs.verify(s).ok
    path = tmp_path / f"{name}.json"
    save_schedule(s, str(path))
    return path.read_bytes(), s.meta["form"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_jobs_give_the_same_schedule_byte_for_byte(case, tmp_path):
    serial, form = _build_bytes(CASES[case], tmp_path, "serial")
    assert workers.processes() == 0  # one job: nothing started
    cs.set_jobs(2)
    parallel, form2 = _build_bytes(CASES[case], tmp_path, "parallel")
    assert workers.processes() == 2  # the candidates did go to worker processes
    assert (form2, parallel) == (form, serial)


def _fail_on_two(x):
    if x == 2:
        raise CollsynthError("two")
    return x * x


@pytest.mark.parametrize("k", [1, 2])
def test_map_ordered_keeps_the_order_and_raises_the_first_failure(k):
    workers.set_jobs(k)
    assert workers.map_ordered(_fail_on_two, [3, 1, 0, 5]) == [9, 1, 0, 25]
    got = workers.imap_ordered(_fail_on_two, [1, 3, 2, 4])
    assert [next(got), next(got)] == [1, 9]
    with pytest.raises(CollsynthError, match="two"):
        next(got)


def test_set_jobs_refuses_what_is_not_a_count_and_zero_is_every_core():
    for bad in (-1, True, 1.5, "2", workers.MAX_JOBS + 1):
        with pytest.raises(CollsynthError, match="jobs must be an integer"):
            workers.set_jobs(bad)  # type: ignore[arg-type]
    workers.set_jobs(0)
    assert workers.jobs() == workers.cpu_count()
    workers.set_jobs(None)
    assert workers.jobs() == 1


def test_the_environment_sets_the_default(monkeypatch):
    monkeypatch.setenv(workers.ENV, "3")
    assert workers.jobs() == 3
    monkeypatch.setenv(workers.ENV, "x3")
    with pytest.raises(CollsynthError, match=workers.ENV):
        workers.jobs()


@pytest.mark.parametrize("value", ["-1", "x", "1.5", "2000", ""])
def test_cli_refuses_a_bad_job_count(value, capsys):
    argv = [f"--jobs={value}", "synth", "-a", "ring", "-n", "4"] if value else ["--jobs", "", "synth", "-a",
                                                                                "ring", "-n", "4"]
    code = cli_main(argv)
    err = capsys.readouterr().err.strip()
    if value == "":  # an empty value means the default, as an empty COLLSYNTH_JOBS
        assert code == 0
        return
    assert code == 2 and len(err.splitlines()) == 1 and "--jobs" in err, err


def test_cli_jobs_writes_the_same_file(tmp_path, capsys):
    out = {}
    for k in ("1", "2"):
        path = tmp_path / f"j{k}.json"
        argv = ["-j", k, "synth", "-a", "clusterstraggler", "-n", "16", "-t", "h100-cluster", "--size", "64MiB",
                "--arrival", "3=1ms", "--arrival", "12=2.5ms", "-o", str(path)]
        assert cli_main(argv) == 0, capsys.readouterr().err
        out[k] = path.read_bytes()
    assert out["1"] == out["2"]
    assert workers.processes() == 0  # the command shut its processes down


def test_the_memory_estimate_counts_one_candidate_per_process():
    w = budget.Work(64, 1024, 100, 10_000, 40_000, copies=10)
    one = w.nbytes()
    workers.set_jobs(4)
    assert w.nbytes() == 5 * one  # 4 built at once, and the schedules that come back
    workers.set_jobs(20)
    assert w.nbytes() == 11 * one  # no more at once than there are candidates
    assert budget.Work(64, 1024, 100, 10_000, 40_000).nbytes() == budget.Work(64, 1024, 100, 10_000, 40_000,
                                                                              copies=1).nbytes()


def _inner_jobs(_):
    return workers.jobs(), workers.processes(), workers.map_ordered(abs, [-1, -2])


def test_a_worker_runs_nested_calls_itself():
    workers.set_jobs(2)
    assert workers.map_ordered(_inner_jobs, [0, 1]) == [(1, 0, [1, 2])] * 2


def test_choose_hands_out_the_candidates_that_do_not_depend_on_the_late_form():
    """choose.build's calls (built while the late form is, folded after it): one late GPU the funnel choices
    then the synchronous schedule, a late node the synchronous one, several late ranks (up to the search's
    limit) the late-GPU form for the last and the late-node form; none with an explicit pipeline, no late
    rank, a bad rank (cluster.build says why) or nodes of one GPU."""
    from collsynth.synth.algorithms.stragglar import choose, waves

    topo = cs.make_topology("h100-cluster", 32)
    gpu = choose.one_late_calls(32, "allreduce", {5: 4e-3}, 2**30, topo, "auto")
    assert [k for k, _ in gpu] == ["funnel"] * len(waves.funnel_choices(32, 4)) + ["sync"]
    node = {r: 4e-3 for r in range(8, 16)}
    assert [k for k, _ in choose.one_late_calls(32, "allreduce", node, 2**30, topo, "auto")] == ["sync"]
    several = {5: 4e-3, 20: 6e-3}
    assert choose.one_late_calls(32, "allreduce", several, 2**30, topo, "auto") == []
    assert [k for k, _ in choose.several_late_calls(32, "allreduce", several, 2**30, topo, "auto")] == \
        ["alone", "node"]
    for args in ((32, "allreduce", {5: 4e-3}, 2**30, topo, 16), (32, "allreduce", {}, 2**30, topo, "auto"),
                 (32, "allreduce", {40: 1e-3}, 2**30, topo, "auto"),
                 (32, "allreduce", {5: 4e-3}, 2**30, cs.make_topology("nvswitch", 32), "auto")):
        assert choose.one_late_calls(*args) == [] and choose.several_late_calls(*args) == []
    assert choose.several_late_calls(*((32, "allreduce", several, 2**30, topo, 16))) == []
    big = cs.make_topology("h100-cluster", 8 * (waves.SEARCH_MAX_GPUS // 8 + 1))
    assert choose.several_late_calls(big.nranks, "allreduce", several, 2**30, big, "auto") == []


def _timed_nap(arg):
    """Sleep, and record (start, end) in the file named by ``arg`` (a worker's call, module level)."""
    path, i = arg
    start = time.monotonic()
    time.sleep(0.3)
    with open(f"{path}/{i}", "w") as f:
        f.write(f"{start} {time.monotonic()}")
    return i


def test_at_once_caps_the_running_calls_and_refills_without_waiting_for_the_caller(tmp_path):
    """reproduce cluster keeps the workers busy while it builds small node counts itself: the next call
    starts when one finishes, not when the caller takes a result, and never more than ``at_once`` run."""
    workers.set_jobs(3)
    items = [(str(tmp_path), i) for i in range(6)]
    got = workers.imap_ordered(_timed_nap, items, at_once=2)
    assert next(got) == 0
    deadline = time.monotonic() + 60  # the caller takes nothing more meanwhile: the other five still run
    while not all((tmp_path / str(i)).exists() for i in range(6)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all((tmp_path / str(i)).exists() for i in range(6))
    assert list(got) == [1, 2, 3, 4, 5]
    spans = [tuple(map(float, (tmp_path / str(i)).read_text().split())) for i in range(6)]
    for start, _ in spans:
        assert sum(1 for s, e in spans if s <= start < e) <= 2, spans


def test_at_once_keeps_the_order_and_the_cap():
    workers.set_jobs(2)
    for cap in (1, 2, 3, 10):
        assert list(workers.imap_ordered(abs, [-3, 1, -4, 1, -5], at_once=cap)) == [3, 1, 4, 1, 5]
    assert workers.processes() == 2  # cap 1 ran here, the others in the workers


def _marked_nap(arg):
    """Mark the start in the file named by ``arg``, then sleep a second (a worker's call, module level)."""
    path, i = arg
    with open(f"{path}/{i}", "w") as f:
        f.write("started")
    time.sleep(1.0)


def test_at_once_after_a_shutdown_fails_the_rest_instead_of_waiting(tmp_path):
    """A pool shut down while calls are pending (Ctrl-C): the items not yet started fail, none hangs."""
    workers.set_jobs(2)
    got = workers.imap_ordered(_marked_nap, [(str(tmp_path), i) for i in range(6)], at_once=2)  # two run, four wait
    deadline = time.monotonic() + 60  # a call submitted but not yet handed to a worker would be cancelled
    while not ((tmp_path / "0").exists() and (tmp_path / "1").exists()) and time.monotonic() < deadline:
        time.sleep(0.02)
    workers.shutdown()
    assert next(got) is None and next(got) is None  # the two running finish
    with pytest.raises(RuntimeError):
        next(got)
