"""StragglAR (synth/algorithms/stragglar*.py): round counts against the lower bound, every straggler,
every phase 1, the paper's golden schedules, the family writer and bad input."""

from __future__ import annotations

import hashlib
import json
import os
import re

import numpy as np
import pytest

from collsynth.cli import main as cli_main
from collsynth.errors import CollsynthError
from collsynth.synth.registry import algorithms, build_schedule

algorithms()  # fill the whole registry before importing one algorithm module directly
from collsynth.synth.algorithms.stragglar.build import build  # noqa: E402
from collsynth.synth.algorithms.stragglar.design import ceil_log2, design_from_ages, is_pow2, lower_bound, pow2_design
from collsynth.synth.algorithms.stragglar.family import build_family, write_family  # noqa: E402
from collsynth.synth.algorithms.stragglar.phase1 import reducescatter_steps
from collsynth.synth.algorithms.stragglar.phase2 import phase2_plan
from collsynth.synth.algorithms.stragglar.tables import cached_design, stored_sizes
from collsynth.synth.ir import ScheduleBuilder
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import verify

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def _ok(s):
    rep = verify(s)
    assert rep.ok, rep.message
    return s


def _completion(s):
    """The completion phase's transfers as (round, src, dst, chunk, reduce) tuples."""
    ph = {p.name: p for p in s.phases}["completion"]
    return [(t.step - ph.start, t.src, t.dst, t.chunk, t.reduce) for t in s.transfers()
            if ph.start <= t.step < ph.stop]


# ------------------------------------------------------------------------------------ round counts
@pytest.mark.parametrize("n", range(2, 65))
def test_every_n_to_64_verifies_and_meets_the_lower_bound(n):
    s = _ok(build(n))
    ph = {p.name: p for p in s.phases}
    assert [p.name for p in s.phases] == ["reducescatter", "completion"]
    assert ph["reducescatter"].waits_for == tuple(range(n - 1))
    assert ph["completion"].waits_for == tuple(range(n))
    rounds = ph["completion"].stop - ph["completion"].start
    assert rounds == s.meta["phase2_rounds"] == lower_bound(n) == n - 2 + ceil_log2(n)
    assert s.meta["algorithm"] == "stragglar" and s.meta["straggler"] == n - 1


@pytest.mark.parametrize("k", range(1, 10))
def test_powers_of_two_to_512_take_exactly_n_minus_2_plus_log2_n(k):
    n = 1 << k
    s = _ok(build(n))
    assert s.meta["phase2_rounds"] == n - 2 + k


def test_power_of_two_1024():
    s = _ok(build(1024))
    assert s.meta["phase2_rounds"] == 1024 - 2 + 10


def test_stored_non_power_of_two_sizes_meet_the_lower_bound():
    """Every stored design completes, and a sample of the larger ones give verified optimal schedules."""
    sizes = stored_sizes()
    assert sizes, "designs.json is missing"
    for n in sizes:
        d = cached_design(n)
        assert d is not None and not d.problems(), n
        assert ceil_log2(n) + 1 == d.K
    for n in [m for m in (66, 96, 100, 127) if m in sizes]:
        assert _ok(build(n)).meta["phase2_rounds"] == lower_bound(n)


@pytest.mark.parametrize("K", range(2, 11))
def test_pow2_design_is_a_valid_cyclic_design(K):
    d = pow2_design(K)
    assert d.problems() == []
    assert max(d.age) == K


def test_design_checker_catches_a_broken_design():
    d = pow2_design(3)
    age = list(d.age)
    age[1], age[2] = age[2], age[1] + 0
    bad = type(d)(d.p, d.K, tuple(age), d.sender)
    if age == list(d.age):  # the swap was a no-op: break it another way
        bad = type(d)(d.p, d.K, d.age, (d.sender[0],) + (0,) * (d.p - 1))
    assert bad.problems()
    assert design_from_ages(d.p, d.K, [0] + [1] * (d.p - 1)) is None


def test_plan_structure_exchange_in_round_c():
    for n in (5, 8, 12):
        plan = phase2_plan(n)
        p = n - 1
        moves = plan.moves()
        for c in range(p):
            assert (c, c, p, c, True) in moves and (c, p, c, c, True) in moves
        assert all(not r for (t, s, d, c, r) in moves if s != p and d != p)


# ------------------------------------------------------------------------------------ stragglers
@pytest.mark.parametrize("n", [3, 5, 8, 10])
def test_every_straggler_is_a_relabelling(n):
    base = build(n)
    for r in range(n):
        s = _ok(build(n, straggler=r))
        assert s.meta["straggler"] == r
        ph = {p.name: p for p in s.phases}
        assert ph["reducescatter"].waits_for == tuple(x for x in range(n) if x != r)
        # the straggler sends exactly what rank n-1 sends in the base schedule
        assert np.sum(s.src == r) == np.sum(base.src == n - 1)
        assert s.nsteps == base.nsteps and s.ntransfers == base.ntransfers
        # round c of the completion: the straggler exchanges with some punctual rank, both reduce
        comp = _completion(s)
        for c in range(n - 1):
            xs = [m for m in comp if m[0] == c and r in (m[1], m[2])]
            assert len(xs) == 2 and all(m[4] and m[3] == c for m in xs)


@pytest.mark.parametrize("phase1", ["ring", "direct", "rhd"])
@pytest.mark.parametrize("n", [2, 3, 4, 6, 7, 9, 12, 17])
def test_phase1_kinds(phase1, n):
    s = _ok(build(n, phase1=phase1, straggler=n // 2))
    assert s.meta["phase1"] == phase1
    rs = {p.name: p for p in s.phases}["reducescatter"]
    m = n - 1
    expect = {"ring": m - 1, "direct": m - 1}.get(phase1)
    if expect is None:
        mp = 1 << (m.bit_length() - 1)
        expect = (mp.bit_length() - 1) + (2 if m != mp else 0)
    assert rs.stop - rs.start == expect


@pytest.mark.parametrize("kind", ["ring", "direct", "rhd"])
def test_phase1_owner_is_a_permutation(kind):
    for m in range(1, 20):
        steps, owner = reducescatter_steps(kind, m)
        assert sorted(owner) == list(range(m))
        for step in steps:  # one port: each member sends and receives at most once per step
            assert len({t[0] for t in step}) == len(step) and len({t[1] for t in step}) == len(step)


def test_deterministic():
    assert build(12, straggler=3).digest() == build(12, straggler=3).digest()
    assert build(16).to_json() == build(16).to_json()


def test_registry_and_compare_hook():
    s = build_schedule("stragglar", 8, "allreduce", straggler=2)
    assert s.meta["straggler"] == 2
    from collsynth.synth.compare import compare as compare_rows

    topo = make_topology("nvswitch", 8, alpha=3e-6, bandwidth=450 * 2**30)
    rows = compare_rows(8, 2**30, topo, {7: 5e-3}, ["ring", "stragglar"], None)
    row = next(r for r in rows if r["algorithm"] == "stragglar")
    assert row["note"].startswith("straggler=7")
    # compare may pick a pipeline depth (note "K=..."); the ideal-case closed form of stragglar.md, n = 8,
    # with R(K) = 7K - 1 + 3 rounds of s/(7K)
    m = re.search(r"K=(\d+)", row["note"])
    K = int(m.group(1)) if m else 1
    a, sb = 3e-6, 2**30 / (450 * 2**30)
    assert row["speedup_vs_ring"] == pytest.approx(2 * 7 * (a + sb / 8) / ((7 * K + 2) * (a + sb / (7 * K))),
                                                   rel=5e-3)


# ------------------------------------------------------------------------------------ golden
_X = re.compile(r"X\((\d+),(\d+)(?:,c(\d+))?\)")
_COPY = re.compile(r"(\d+)->(\d+) c(\d+)")


def load_fixture(n):
    """Parse tests/fixtures/stragglar_n{n}.txt into rounds of (src, dst, chunk, reduce)."""
    rounds = []
    with open(os.path.join(FIXTURES, f"stragglar_n{n}.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            head, _, body = line.partition(" ")
            assert head == f"r{len(rounds)}", line
            moves = []
            for g, s, c in _X.findall(body):
                c = int(c) if c else int(g)
                moves += [(int(g), int(s), c, True), (int(s), int(g), c, True)]
            body = _X.sub("", body)
            moves += [(int(a), int(b), int(c), False) for a, b, c in _COPY.findall(body)]
            assert _COPY.sub("", body).replace(";", "").replace(",", "").strip() == "", line
            rounds.append(moves)
    return rounds


def fixture_schedule(n):
    """Phase 1 from the same builder as the generator (ring), phase 2 from the fixture."""
    p = n - 1
    steps, owner = reducescatter_steps("ring", p)
    assert owner == list(range(p))
    b = ScheduleBuilder("allreduce", n, p, name=f"golden_n{n}")
    b.begin_phase("reducescatter", range(p))
    for step in steps:
        b.new_step()
        for src, dst, c, cnt, red in step:
            b.add(src, dst, c, cnt, red)
    b.begin_phase("completion", range(n))
    for moves in load_fixture(n):
        b.new_step()
        for src, dst, c, red in moves:
            b.add(src, dst, c, 1, red)
    return b.build()


@pytest.mark.parametrize("n,rounds", [(4, 4), (6, 7), (8, 9)])
def test_golden_schedules(n, rounds):
    golden = _ok(fixture_schedule(n))
    ours = build(n)
    assert len(load_fixture(n)) == rounds == ours.meta["phase2_rounds"]
    topo = make_topology("nvswitch", n, alpha=3e-6, bandwidth=450 * 2**30)
    for arrivals in (None, {n - 1: 1e-3}):
        a = simulate(golden, 2**30, topo, arrivals)
        b = simulate(ours, 2**30, topo, arrivals)
        assert a.completion_s == pytest.approx(b.completion_s, rel=1e-12)


def test_golden_fixture_loader_rejects_garbage(tmp_path, monkeypatch):
    bad = tmp_path / "stragglar_n4.txt"
    bad.write_text("r0 X(0,3,c0); 0=>2 c0\n")
    monkeypatch.setattr(__import__(__name__), "FIXTURES", str(tmp_path))
    with pytest.raises(AssertionError):
        load_fixture(4)


# ------------------------------------------------------------------------------------ family
def test_family(tmp_path):
    out = tmp_path / "fam"
    manifest = write_family(5, str(out))
    files = sorted(os.listdir(out))
    assert files == ["manifest.json"] + [f"stragglar_n5_s{r}.json" for r in range(5)]
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk == manifest and on_disk["n"] == 5 and on_disk["algorithm"] == "stragglar"
    for e in on_disk["schedules"]:
        text = (out / e["file"]).read_text()
        assert hashlib.sha256(text.encode()).hexdigest() == e["sha256"]
        assert e["rounds"] == lower_bound(5)
        assert json.loads(text)["meta"]["straggler"] == e["straggler"]
    with pytest.raises(CollsynthError, match="not empty"):
        write_family(5, str(out))
    write_family(4, str(out), force=True)
    assert sorted(os.listdir(out)) == ["manifest.json"] + [f"stragglar_n4_s{r}.json" for r in range(4)]


def test_family_writes_nothing_on_error(tmp_path):
    out = tmp_path / "fam"
    with pytest.raises(CollsynthError):
        write_family(5, str(out), phase1="bogus")
    assert not out.exists() and os.listdir(tmp_path) == []
    fam = build_family(4)
    assert sorted(fam) == [0, 1, 2, 3] and all(s.meta["straggler"] == r for r, s in fam.items())


# ------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("kw", [dict(straggler=8), dict(straggler=-1), dict(straggler="3"), dict(straggler=2.0),
                                dict(straggler=True), dict(pipeline=1.5), dict(pipeline=0),
                                dict(phase1="tree"), dict(collective="allgather")])
def test_bad_parameters(kw):
    with pytest.raises(CollsynthError):
        build(8, **kw)


def test_bad_n():
    for n in (1, 0, -3, 2.5, True):
        with pytest.raises(CollsynthError):
            build(n)


@pytest.mark.parametrize("argv", [["-n", "8", "--straggler", "8"], ["-n", "1"], ["-n", "8", "--straggler", "x"],
                                  ["-n", "8", "--straggler", "1.5"], ["-n", "8", "--pipeline", "0"]])
def test_cli_bad_input_exit_2(argv, capsys):
    assert cli_main(["synth", "-a", "stragglar", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("collsynth: error:")


def test_cli_synth_and_family(tmp_path, capsys):
    f = tmp_path / "s.json"
    assert cli_main(["synth", "-a", "stragglar", "-n", "6", "--straggler", "2", "-o", str(f)]) == 0
    assert json.loads(f.read_text())["meta"]["straggler"] == 2
    d = tmp_path / "fam"
    assert cli_main(["synth", "-a", "stragglar", "-n", "3", "--straggler", "all", "-o", str(d)]) == 0
    assert len(json.loads((d / "manifest.json").read_text())["schedules"]) == 3
    assert cli_main(["synth", "-a", "stragglar", "-n", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["nsteps"] == 1


# ------------------------------------------------------------------------------------ reproduce
def test_reproduce_json_and_plot(tmp_path, capsys):
    png = tmp_path / "speedup.png"
    assert cli_main(["reproduce", "stragglar", "-n", "4,6,8,16", "--json", "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = {r["n"]: r for r in out["rows"]}
    assert sorted(rows) == [4, 6, 8, 16]
    for n, r in rows.items():
        assert r["phase2_rounds"] == r["lower_bound"] == lower_bound(n)
        assert r["beta"] == pytest.approx(r["phase2_rounds"] / (n - 1))  # the straggler sends every round
        if is_pow2(n):  # stragglar.md's closed form, to 0.5%
            assert r["speedup_ideal"] == pytest.approx(r["closed_form_speedup_ideal"], rel=5e-3)
        assert r["speedup_ideal"] > 1 > r["speedup_worst"]
        assert 0 < r["critical_delay_s"] < r["stragglar_worst_s"]
        assert r["ring_ideal_s"] == pytest.approx(r["ring_worst_s"])


def test_critical_delay_is_the_crossover():
    from collsynth.synth.algorithms.stragglar.analysis import after_delay, stragglar_row

    r = stragglar_row(8)
    topo = make_topology("nvswitch", 8, alpha=3e-6, bandwidth=450 * 2**30)
    s = build(8)
    d = r["critical_delay_s"]
    assert after_delay(s, 2**30, topo, d) < r["ring_ideal_s"] <= after_delay(s, 2**30, topo, d * 0.999)


def test_reproduce_bad_input(capsys):
    assert cli_main(["reproduce", "stragglar", "-n", "4,x"]) == 2
    assert cli_main(["reproduce", "stragglar", "-n", "1"]) == 2
    assert cli_main(["reproduce", "stragglar", "-n", "4", "--plot", "out.jpg"]) == 2
    assert cli_main(["reproduce", "stragglar", "-n", "4", "--size", "-1"]) == 2
