"""Issue 15's bad input, as regressions: an arrival for a rank that does not exist, arrival times that are
not finite (nan, inf, 1e400) in --arrival / --delay, a topology without the nodes a cluster form needs:
one line on stderr, exit 2, for synth, compare, simulate, reproduce and bench; the library refuses the same
with CollsynthError."""

from __future__ import annotations

import pytest

from collsynth.cli import main as cli_main
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.stragglar.family import ClusterFamily
from collsynth.synth.registry import build_schedule
from collsynth.synth.topology import make_topology

NOT_FINITE = ("nan", "inf", "-inf", "NaN", "nanms", "infus", "1e400s", "1e999ms", "1e400")


@pytest.fixture(scope="module")
def ring16(tmp_path_factory):
    path = tmp_path_factory.mktemp("bad15") / "ring16.json"
    assert cli_main(["synth", "-a", "ring", "-n", "16", "-o", str(path)]) == 0
    return str(path)


def _argv(cmd, ring16, value):
    return {"synth": ["synth", "-a", "clusterstraggler", "-n", "16", "-t", "h100-cluster", "--arrival", value],
            "compare": ["compare", "--gpus", "16", "-t", "h100-cluster", "--size", "1MiB", "--arrival", value],
            "simulate": ["simulate", ring16, "-t", "h100-cluster", "--size", "1MiB", "--arrival", value]}[cmd]


def _one_line_exit_2(argv, capsys, *needles):
    assert cli_main(argv) == 2, argv
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(n in err for n in needles), (argv, err)


@pytest.mark.parametrize("cmd", ["synth", "compare", "simulate"])
@pytest.mark.parametrize("value", ["16=5ms", "99=1ms", "-1=5ms"])
def test_arrival_for_a_rank_that_does_not_exist(cmd, value, ring16, capsys):
    _one_line_exit_2(_argv(cmd, ring16, value), capsys, "--arrival", "does not exist", "0..15")


@pytest.mark.parametrize("cmd", ["synth", "compare", "simulate"])
@pytest.mark.parametrize("t", NOT_FINITE)
def test_arrival_that_is_not_finite(cmd, t, ring16, capsys):
    _one_line_exit_2(_argv(cmd, ring16, f"3={t}"), capsys, "--arrival")


@pytest.mark.parametrize("t", NOT_FINITE)
def test_delay_that_is_not_finite(t, capsys):
    _one_line_exit_2(["reproduce", "cluster", "--nodes", "2", f"--delay={t}"], capsys, "--delay")
    _one_line_exit_2(["bench", "--backend", "gloo", "--ranks", "2", "--size", "1KiB", "--delay", f"1={t}"], capsys,
                     "--delay")


def test_bench_delay_for_a_rank_that_does_not_exist(capsys):
    _one_line_exit_2(["bench", "--backend", "gloo", "--ranks", "2", "--size", "1KiB", "--delay", "2=1s"], capsys,
                     "--delay", "does not exist")


def test_cluster_study_on_a_topology_without_nodes(capsys):
    _one_line_exit_2(["reproduce", "cluster", "--nodes", "2", "-t", "nvswitch"], capsys, "node", "h100-cluster")


def test_library_refuses_the_same():
    topo = make_topology("h100-cluster", 16)
    for arrivals in ({16: 1.0}, {3: float("nan")}, {3: float("inf")}, {3: -1.0}, [0.0] * 15):
        with pytest.raises(CollsynthError):
            build_schedule("clusterstraggler", 16, topology=topo, arrivals=arrivals)
    for one in ("nvswitch", "dgx-h100"):  # one NVLink domain: each GPU alone, no late-node form
        fam_one = ClusterFamily(make_topology(one, 8))
        assert fam_one.one_domain and fam_one.nodes == () and fam_one.missing_counts() == {1}
        assert fam_one.get([0, 1]) is None and fam_one.get([8]) is None
    with pytest.raises(CollsynthError, match="not 'ports'"):
        ClusterFamily(make_topology("dgx-h100", 8), ports=2)
    fam = ClusterFamily(topo, pipeline=2)
    assert fam.get([16]) is None and fam.get([0, 1]) is None  # not one GPU, not one node: no member


@pytest.mark.parametrize("argv,needles", [
    (["-a", "clusterstraggler", "-n", "16"], ("give -t TOPOLOGY",)),
    (["-a", "clusterstraggler", "-n", "16", "-t", "h100-cluster", "--arrival", "3=1ms"], ("drop --arrival",)),
    (["-a", "ring", "-n", "16"], ("-a stragglar and -a clusterstraggler only",)),
    (["-a", "clusterstraggler", "-n", "1024", "-t", "h100-cluster"], ("family of 1152 schedules", "one at a time")),
])
def test_cluster_family_refusals_write_nothing(argv, needles, capsys, tmp_path):
    out = tmp_path / "fam"
    _one_line_exit_2(["synth", *argv, "--straggler", "all", "-o", str(out)], capsys, *needles)
    assert not out.exists()
