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


def _naive_units(s: Schedule, idx: list[int]) -> tuple[list[int], list[int]]:
    pairs = [(i, int(s.chunk[i]) + k) for i in idx for k in range(int(s.count[i]))]
    return [i for i, _ in pairs], [c for _, c in pairs]


@pytest.mark.parametrize("seed", range(6))
def test_units_expand_every_run_into_its_chunks_in_the_order_given(seed):
    rng = np.random.default_rng(seed)
    m, C = int(rng.integers(1, 40)), 24
    chunk = rng.integers(0, C, m)
    count = np.array([int(rng.integers(1, C - c + 1)) for c in chunk])
    s = Schedule.from_arrays("allreduce", 4, C, step=np.sort(rng.integers(0, 5, m)), src=rng.integers(0, 4, m),
                             dst=rng.integers(0, 4, m), chunk=chunk, count=count)
    rep, ch = s.units()
    assert (rep.tolist(), ch.tolist()) == _naive_units(s, list(range(m)))
    assert len(rep) == int(count.sum())
    pick = rng.permutation(m)[: int(rng.integers(0, m + 1))].tolist() + [0, 0]  # any order, repeats, some left out
    rep, ch = s.units(np.array(pick))
    assert (rep.tolist(), ch.tolist()) == _naive_units(s, pick)


def test_units_of_no_transfers_are_empty():
    s = Schedule.from_arrays("allreduce", 3, 4, step=[0], src=[0], dst=[1], chunk=[1], count=[3])
    rep, ch = s.units(np.array([], np.int64))
    assert rep.tolist() == [] and ch.tolist() == []
    assert [x.tolist() for x in s.units()] == [[0, 0, 0], [1, 2, 3]]


# ------------------------------------------------------------------ exact behaviour (mutation survivors)
def test_to_json_text_is_exact():
    s = Schedule.from_arrays("allreduce", 2, 1, step=[0, 0], src=[0, 1], dst=[1, 0], chunk=[0, 0],
                             reduce=[True, True], name="x")
    assert s.to_json() == (
        '{\n "format": "collsynth-schedule",\n "version": 1,\n "name": "x",\n "collective": "allreduce",\n'
        ' "nranks": 2,\n "nchunks": 1,\n "nsteps": 1,\n "ports": 1,\n "owner": null,\n "phases": [],\n'
        ' "meta": {},\n "transfers": {\n  "step": [0,0],\n  "src": [0,1],\n  "dst": [1,0],\n  "chunk": [0,0],\n'
        '  "count": [1,1],\n  "reduce": [1,1]\n }\n}\n')
    assert "transfers" in s.to_json_dict() and "transfers" not in s.to_json_dict(columns=False)


def test_a_version_1_file_without_optional_fields_loads():
    text = ('{"format": "collsynth-schedule", "version": 1, "collective": "allreduce", "nranks": 2, "nchunks": 1,'
            ' "nsteps": 1, "transfers": {"step": [0], "src": [0], "dst": [1], "chunk": [0], "count": [1],'
            ' "reduce": [true]}}')
    s = Schedule.from_json(text)
    assert (s.ports, s.name, s.phases, s.meta, s.owner) == (1, "", (), {}, None)


@pytest.mark.parametrize("vals, text", [([-1, 0, 5], "-1,0,5"), ([-1000, -100, -10, -1, 0, 10, 100],
                                                                   "-1000,-100,-10,-1,0,10,100"),
                                        ([0, 1 << 20], "0,1048576"), ([7], "7")])
def test_json_columns_text(vals, text):
    m = len(vals)
    s = Schedule.from_arrays("allreduce", 2, 1, step=[0] * m, src=vals, dst=vals, chunk=vals, nsteps=1)
    assert f'"src": [{text}]' in s.to_json()
    assert Schedule.from_json(s.to_json()).to_json() == s.to_json()


def test_empty_schedule_round_trips():
    s = ScheduleBuilder("allreduce", 2, 1).build()
    assert (s.ntransfers, s.nsteps, s.reduce.dtype) == (0, 0, np.bool_)
    assert '"step": []' in s.to_json() and Schedule.from_json(s.to_json()).ntransfers == 0


@pytest.mark.parametrize("col, needle", [([[0]], "list of integers"), ([0.5], "list of integers")])
def test_columns_must_be_flat_integer_lists(col, needle):
    d = json.loads(small().to_json())
    d["transfers"]["src"] = col
    with pytest.raises(ScheduleFileError, match=needle):
        Schedule.from_json(json.dumps(d))


def test_validation_messages_and_boundaries():
    def mk(step, nsteps=3, nchunks=1, ports=1, phases=()):
        m = len(step)
        return Schedule("allreduce", 2, nchunks, nsteps, step, [0] * m, [1] * m, [0] * m, [1] * m, [True] * m,
                        phases=phases, ports=ports)

    assert mk([0, 2]).nsteps == 3
    for bad in ([0, 3], [-1, 0]):
        with pytest.raises(CollsynthError, match=r"a transfer names a step outside 0\.\.2$"):
            mk(bad)
    with pytest.raises(CollsynthError, match="at least 1 chunk, got 0"):
        mk([0], nchunks=0)
    with pytest.raises(CollsynthError, match="ports must be at least 1, got 0"):
        mk([0], ports=0)
    from collsynth.synth.ir import Phase

    assert mk([0], phases=(Phase("a", 0, 3, (0,)), Phase("b", 1, 1, (1,)))).phases[0].stop == 3
    for ph in (Phase("a", 0, 4, (0,)), Phase("a", 2, 1, (0,)), Phase("a", -1, 1, (0,))):
        with pytest.raises(CollsynthError, match=rf"phase 'a' covers steps {ph.start}\.\.{ph.stop} outside 0\.\.3"):
            mk([0], phases=(ph,))
    with pytest.raises(CollsynthError, match=r"relabel needs a permutation of 0\.\.1$"):
        mk([0]).relabel([0, 0])


def test_two_dimensional_columns_are_flattened_and_views_read_only():
    s = Schedule("allreduce", 2, 1, 1, [[0, 0]], [[0, 1]], [[1, 0]], [[0, 0]], [[1, 1]], [[True, True]])
    assert s.src.shape == (2,) and verify_ok(s)
    assert len(s.step_bounds) == s.nsteps + 1 and not s.step_bounds.flags.writeable
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        s.nranks = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.phases = ()
    assert s != Schedule.from_json(s.to_json()) and s == s  # identity, never an element-wise comparison


def verify_ok(s):
    from collsynth.synth.verify import verify

    return verify(s).ok


def test_builder_defaults_and_implicit_first_step():
    b = ScheduleBuilder("allreduce", 2, 2)
    b.add(0, 1, 0)  # no new_step: step 0 is opened
    b.add_many([1], 0, 1)
    s = b.build()
    assert s.nsteps == 1 and s.ports == 1
    assert s.count.tolist() == [1, 1] and s.reduce.tolist() == [False, False]
    b = ScheduleBuilder("allreduce", 2, 1)
    b.add_many([0], 1, 0)
    b.new_step()
    b.add(1, 0, 0)
    assert b.build().step.tolist() == [0, 1]
    assert Schedule.from_arrays("allreduce", 2, 1, step=[0, 4], src=[0, 1], dst=[1, 0], chunk=[0, 0]).nsteps == 5
    assert Schedule.from_arrays("allreduce", 2, 1, step=[], src=[], dst=[], chunk=[]).nsteps == 0


def test_begin_phase_closes_the_open_one_and_steps_per_phase():
    b = ScheduleBuilder("allreduce", 3, 1)
    b.begin_phase("a", [0, 1])
    b.new_step()
    b.add(0, 1, 0, 1, True)
    b.begin_phase("b", [0, 1, 2])
    b.new_step()
    b.add(1, 2, 0, 1, True)
    s = b.build()
    assert [(p.name, p.start, p.stop) for p in s.phases] == [("a", 0, 1), ("b", 1, 2)]
    assert s.steps_per_phase() == {"a": 1, "b": 1}  # every step covered: no "(all ranks)" entry


def test_default_owner_is_contiguous():
    from collsynth.synth.ir import default_owner

    assert default_owner(4, 8) == (0, 0, 1, 1, 2, 2, 3, 3)
    assert default_owner(3, 7) == (0, 0, 0, 1, 1, 2, 2)


def test_derived_phases_follow_the_ranks_that_took_part():
    from collsynth.synth.ir import Phase, derived_phases

    # steps: 0->1, 1->2, 2->0, 3->0: ranks {0,1}, then {0,1,2} twice, then everyone
    got = derived_phases(4, [0, 1, 2, 3], [0, 1, 2, 3], [1, 2, 0, 0], 4)
    assert got == (Phase("ranks-2", 0, 1, (0, 1)), Phase("ranks-3", 1, 3, (0, 1, 2)))
    # never everyone: the last phase runs to the end
    assert derived_phases(4, [0, 1], [0, 1], [1, 2], 2) == (Phase("ranks-2", 0, 1, (0, 1)),
                                                            Phase("ranks-3", 1, 2, (0, 1, 2)))


def test_dependency_dag_with_chunk_runs():
    # step 0 writes rank 1 chunks 0..1 (one run); step 1 reads rank 1 chunk 1; step 2 overwrites what step 1 read
    s = Schedule.from_arrays("allreduce", 3, 2, step=[0, 1, 2], src=[0, 1, 0], dst=[1, 2, 1], chunk=[0, 1, 1],
                             count=[2, 1, 1])
    g = s.dependency_dag()
    assert set(g.edges()) == {(0, 1), (0, 2), (1, 2)}


def test_summary_rounds_to_twelve_digits():
    s = build_schedule("ring", 3)
    assert s.summary()["bytes_sent_per_buffer_byte"] == [round(4 / 3, 12)] * 3
