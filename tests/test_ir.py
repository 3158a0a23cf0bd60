"""Schedule IR: construction, derived views, JSON round trip and rejection of bad files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from collsynth.errors import CollsynthError, ScheduleFileError
from collsynth.synth.ir import Schedule, ScheduleBuilder, load_schedule, save_schedule
from collsynth.synth.registry import build_schedule


def small() -> Schedule:
    b = ScheduleBuilder("allreduce", 3, 3, name="t", meta={"algorithm": "test"})
    b.begin_phase("first", [0, 1])
    b.new_step()
    b.add(0, 1, 0, 1, True)
    b.new_step()  # empty: dropped
    b.end_phase()
    b.new_step()
    b.add_many([1, 2], [2, 0], [1, 2], 1, False)
    return b.build()


def test_builder_drops_empty_steps_and_renumbers_phases():
    s = small()
    assert s.nsteps == 2
    assert s.phases[0].start == 0 and s.phases[0].stop == 1 and s.phases[0].waits_for == (0, 1)
    assert [t.step for t in s.transfers()] == [0, 1, 1]
    assert s.phase_waits() == [(0, 1), (0, 1, 2)]
    assert s.steps_per_phase() == {"first": 1, "(all ranks)": 1}


def test_columns_are_read_only():
    s = small()
    with pytest.raises(ValueError):
        s.src[0] = 2


@pytest.mark.parametrize("alg", ["ring", "rhd", "direct", "twoshot"])
def test_json_round_trip_exact(alg):
    s = build_schedule(alg, 6)
    text = s.to_json()
    t = Schedule.from_json(text)
    assert t.to_json() == text
    for k in ("step", "src", "dst", "chunk", "count", "reduce"):
        assert np.array_equal(getattr(s, k), getattr(t, k))
    assert (t.nranks, t.nchunks, t.nsteps, t.ports, t.phases, t.owner, t.meta) == \
           (s.nranks, s.nchunks, s.nsteps, s.ports, s.phases, s.owner, s.meta)


def test_save_and_load(tmp_path):
    s = small()
    path = tmp_path / "s.json"
    save_schedule(s, str(path))
    assert load_schedule(str(path)).to_json() == s.to_json()


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.update(version=99), "version 99 is not supported"),
    (lambda d: d.pop("format"), "not a collsynth schedule"),
    (lambda d: d["transfers"].pop("src"), "malformed"),
    (lambda d: d.update(nranks=1), "at least 2 ranks"),
    (lambda d: d["transfers"]["src"].append(0), "different lengths"),
    (lambda d: d.update(collective="broadcast"), "unknown collective"),
    (lambda d: d["transfers"].update(step=[1, 0, 0]), "sorted by step"),
])
def test_bad_files_rejected(mutate, needle):
    d = json.loads(small().to_json())
    mutate(d)
    with pytest.raises(ScheduleFileError, match=needle):
        Schedule.from_json(json.dumps(d))


def test_not_json_and_missing_file(tmp_path):
    with pytest.raises(ScheduleFileError, match="not valid JSON"):
        Schedule.from_json("{oops")
    with pytest.raises(ScheduleFileError, match="cannot read"):
        load_schedule(str(tmp_path / "nope.json"))


def test_relabel_maps_ranks_phases_and_owner():
    s = build_schedule("ring", 4, "reducescatter")
    perm = [2, 3, 0, 1]
    t = s.relabel(perm)
    assert t.owner == tuple(perm[o] for o in s.owner)
    assert np.array_equal(t.src, np.asarray(perm)[s.src])
    with pytest.raises(CollsynthError):
        s.relabel([0, 0, 1, 2])


def test_rank_programs_and_dag():
    s = build_schedule("ring", 3)
    progs = s.rank_programs()
    assert sum(len(p) for p in progs.values()) == 2 * s.ntransfers
    assert progs[0][0][:3] == ("send", 0, 1)
    g = s.dependency_dag()
    assert g.number_of_nodes() == s.ntransfers
    # in a ring every transfer after the first step depends on an earlier one
    assert all(g.in_degree(i) > 0 for i in range(3, s.ntransfers))
    import networkx as nx
    assert nx.is_directed_acyclic_graph(g)


def test_bytes_sent_per_rank():
    s = build_schedule("ring", 4)
    assert np.allclose(s.bytes_sent_per_rank(), 2 * 3 / 4)
    assert np.allclose(build_schedule("direct", 4).bytes_sent_per_rank(), 3.0)


@pytest.mark.parametrize("top", [9, 10, 11, 99, 100, 101, 999, 1000, 1001, (1 << 20) - 1, 1 << 20, 10**7, 10**12])
def test_json_columns_exact_at_powers_of_ten(top):
    # the vectorised writer counts digits per value: a column whose maximum is exactly 10**k is the edge
    vals = sorted({0, 1, 9, 10, top - 1, top} - {-1})
    m = len(vals)
    s = Schedule.from_arrays("allreduce", top + 1, top + 1, step=list(range(m)), src=vals, dst=vals[::-1],
                             chunk=vals, count=[1] * m, nsteps=m)
    cols = json.loads(s.to_json())["transfers"]
    assert cols["src"] == vals and cols["chunk"] == vals and cols["dst"] == vals[::-1]
    assert cols["step"] == list(range(m))
    assert Schedule.from_json(s.to_json()).to_json() == s.to_json()


def test_json_columns_negative_values():
    vals = [-1000, -100, -10, -1, 0, 10, 100]
    s = Schedule.from_arrays("allreduce", 2, 1, step=[0] * 7, src=vals, dst=vals, chunk=vals, nsteps=1)
    assert json.loads(s.to_json())["transfers"]["src"] == vals


def test_bytes_sent_per_rank_counts_every_chunk_of_a_run():
    # rank 0 sends a run of 3 of 4 chunks, rank 1 one chunk: 3/4 and 1/4 of a buffer
    s = Schedule.from_arrays("allreduce", 3, 4, step=[0, 1], src=[0, 1], dst=[1, 2], chunk=[0, 3], count=[3, 1])
    assert s.bytes_sent_per_rank().tolist() == [0.75, 0.25, 0.0]
    assert s.summary()["bytes_sent_per_buffer_byte"] == [0.75, 0.25, 0.0]
