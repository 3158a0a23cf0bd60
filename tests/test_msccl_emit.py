"""The MSCCL XML emitter: every algorithm round-trips (emit, read back, verify, same transfers in the same
steps, simulated within 1%), options and dialects, limits refused with the limit named, and StragglAR's
punctual ranks never wait for the straggler during phase 1 (no barrier)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.backends.msccl import check_xml_text, emit_xml, plan, straggler_independence, xml_text_to_schedule
from collsynth.errors import CollsynthError
from collsynth.synth.ir import ScheduleBuilder
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate_model
from collsynth.synth.verify import verify


def rows(s):
    return sorted(map(tuple, np.c_[s.step, s.src, s.dst, s.chunk, s.count, s.reduce].tolist()))


def roundtrip(s, **kw):
    text = emit_xml(s, **kw)
    report = check_xml_text(text, "emitted.xml")
    assert report.ok, report.message
    return text, xml_text_to_schedule(text)


def anchored(s):
    """Every transfer after step 0 has its sender busy, or its receiver receiving, in the step before: then
    the emitter can pin every transfer to its step (otherwise the runtime may run it earlier)."""
    busy = {(int(k), int(r)) for k, a, b in zip(s.step, s.src, s.dst) for r in (a, b)}
    recv = {(int(k), int(b)) for k, b in zip(s.step, s.dst)}
    return all(k == 0 or (k - 1, a) in busy or (k - 1, b) in recv
               for k, a, b in zip(s.step.tolist(), s.src.tolist(), s.dst.tolist()))


def header(text):
    return next(ln for ln in text.splitlines() if ln.startswith("<algo "))


def sim(s, arrivals=None):
    return simulate_model(s, 2 ** 30, 3e-6, 450 * 2 ** 30, arrivals=arrivals).completion_s


CASES = ([("ring", n, "allreduce", {}) for n in (2, 3, 4, 5, 8, 12)]
         + [("rhd", n, "allreduce", {}) for n in (2, 4, 6, 8, 16)]
         + [("direct", n, "allreduce", {}) for n in (2, 3, 4, 8)]
         + [("twoshot", n, "allreduce", {}) for n in (3, 4, 8)]
         + [(a, n, c, {}) for a in ("ring", "direct") for c in ("reducescatter", "allgather") for n in (2, 4, 7)]
         + [("stragglar", n, "allreduce", {"straggler": r}) for n, r in ((3, 2), (4, 3), (4, 0), (6, 2), (8, 7),
                                                                         (8, 3), (12, 5), (16, 15))])


@pytest.mark.parametrize("alg, n, coll, kw", CASES, ids=lambda v: str(v))
def test_round_trip_is_exact(alg, n, coll, kw):
    s = build_schedule(alg, n, coll, **kw)
    _, back = roundtrip(s)
    assert back.collective == s.collective and back.nranks == n and back.nchunks == s.nchunks
    assert sorted(r[1:] for r in rows(back)) == sorted(r[1:] for r in rows(s))
    if anchored(s):
        assert [(p.name, p.start, p.stop, p.waits_for) for p in back.phases] == [
            (p.name, p.start, p.stop, p.waits_for) for p in s.phases]
        assert back.nsteps == s.nsteps
        assert rows(back) == rows(s)
    late = kw.get("straggler", n - 1)
    for arrivals in (None, {late: 5e-3}):
        a, b = sim(s, arrivals), sim(back, arrivals)
        assert abs(a - b) <= 0.01 * a, (a, b)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(3, 20), data=st.data())
def test_stragglar_any_n_and_straggler_round_trips(n, data):
    r = data.draw(st.integers(0, n - 1))
    s = build_schedule("stragglar", n, straggler=r)
    _, back = roundtrip(s)
    assert sorted(r[1:] for r in rows(back)) == sorted(r[1:] for r in rows(s))
    if anchored(s):
        assert rows(back) == rows(s) and back.phases == s.phases


@pytest.mark.parametrize("n, r", [(4, 3), (8, 0), (8, 5), (16, 15), (34, 7)])
def test_stragglar_needs_no_barrier(n, r):
    """Punctual ranks run all of phase 1 before anything of theirs waits for the straggler."""
    s = build_schedule("stragglar", n, straggler=r)
    text = emit_xml(s)
    info = straggler_independence(text, r, text=True)
    phase1 = s.phases[0].stop
    assert info["first_level"] == phase1
    assert info["early"] == []
    assert info["before"] > 0 and info["waiting"] > 0  # phase 1 exists, and phase 2 does wait for it


def _three(first_src):
    b = ScheduleBuilder("allreduce", 3, 1)
    b.begin_phase("reducescatter", [0, 1])
    b.new_step()
    b.add(first_src, 1, 0, reduce=True)
    b.begin_phase("completion", [0, 1, 2])
    b.new_step()
    b.add(2 if first_src == 0 else 0, 1, 0, reduce=True)
    b.new_step()
    b.add(1, 0, 0)
    b.new_step()
    b.add(0, 2, 0)
    return b.build()


def test_barrier_property_can_fail():
    """The same check flags a program whose first phase already needs the late rank."""
    from collsynth.synth.verify import check

    good, bad = check(_three(0)), check(_three(2))
    info = straggler_independence(emit_xml(good), 2, text=True)
    assert info["first_level"] == good.phases[0].stop and info["waiting"] > 0
    info = straggler_independence(emit_xml(bad), 2, text=True)
    assert info["first_level"] == 0 != bad.phases[0].stop


def test_lanes_for_more_than_32_peers():
    s = build_schedule("stragglar", 34, straggler=33)
    low, _, stats = plan(s)
    assert stats["lanes"] >= 2
    text, back = roundtrip(s)
    assert sorted(r[1:] for r in rows(back)) == sorted(r[1:] for r in rows(s))


def test_anchored_cases_include_the_common_ones():
    for alg, n in (("ring", 8), ("rhd", 8), ("direct", 8), ("twoshot", 8), ("stragglar", 8), ("stragglar", 16)):
        assert anchored(build_schedule(alg, n))
    assert not anchored(build_schedule("rhd", 5)) and not anchored(build_schedule("stragglar", 12))


def test_options_and_header():
    s = build_schedule("ring", 4)
    text = emit_xml(s, proto="LL128", min_bytes=1024, max_bytes=1 << 20, name="myring", instances=2)
    head = header(text)
    assert text.startswith("<!-- collsynth phases: none -->\n<algo ")
    assert head == ('<algo name="myring" proto="LL128" nchannels="2" nchunksperloop="8" ngpus="4" coll="allreduce" '
                    'inplace="1" outofplace="1" minBytes="1024" maxBytes="1048576">')
    assert check_xml_text(text).ok
    only_oop = emit_xml(s, inplace=False)
    assert 'inplace="0" outofplace="1"' in only_oop and check_xml_text(only_oop).stats["modes"] == ["outofplace"]


def test_lexical_rules_of_the_tokenizer():
    text = emit_xml(build_schedule("stragglar", 8))
    assert not text.startswith("<?") and "\t" not in text and "'" not in text
    for line in text.splitlines():
        assert line.count("<") == 1 and line.rstrip().endswith(">")


def test_legacy_dialect():
    s = build_schedule("ring", 4, "reducescatter")
    text = emit_xml(s, dialect="legacy")
    head = header(text)
    assert 'coll="reduce_scatter"' in head and "outofplace" not in head and "minBytes" not in head
    r = check_xml_text(text)
    assert r.ok and r.stats["dialect"] == "legacy"
    oop = emit_xml(s, dialect="legacy", inplace=False)
    assert 'inplace="0"' in oop and check_xml_text(oop).stats["modes"] == ["outofplace"]


def test_deterministic():
    s = build_schedule("stragglar", 8, straggler=2)
    assert emit_xml(s) == emit_xml(s)


def test_pow2_chunk_grid_makes_power_of_two_buffers_eligible():
    s = build_schedule("stragglar", 8)
    text, back = roundtrip(s, nchunksperloop="pow2")
    assert 'nchunksperloop="256"' in text
    assert abs(sim(back) - sim(s)) <= 0.02 * sim(s)
    with pytest.raises(CollsynthError, match="at least the schedule's 7 chunks"):
        emit_xml(s, nchunksperloop=4)


def test_fusion_matches_the_classic_ring_program():
    text = emit_xml(build_schedule("ring", 4), inplace=True)
    lines = text.splitlines()
    start = lines.index('  <gpu id="0" i_chunks="4" o_chunks="4" s_chunks="0">')
    gpu0 = [ln for ln in lines[start:start + 10] if "<step" in ln]
    assert [ln.split('type="')[1].split('"')[0] for ln in gpu0] == ["s", "rrs", "rrs", "rrcs", "rcs", "rcs", "r"]


@pytest.mark.parametrize("build, needle", [
    (lambda: build_schedule("direct", 40), "64 per thread block"),
    (lambda: build_schedule("stragglar", 66), "at most 64 per GPU"),
    (lambda: build_schedule("ring", 4), "32 channels"),
    (lambda: build_schedule("ring", 64), "at most 32"),
])
def test_limits_are_refused_with_the_limit_named(build, needle):
    kw = {"instances": 40} if needle == "32 channels" else {"instances": 17} if needle == "at most 32" else {}
    with pytest.raises(CollsynthError, match=needle):
        emit_xml(build(), **kw)


@pytest.mark.parametrize("kw, needle", [
    ({"dialect": "new"}, "--dialect"), ({"proto": "ll"}, "--proto"), ({"min_bytes": -1}, "--min-bytes"),
    ({"min_bytes": 10, "max_bytes": 5}, "--max-bytes"), ({"inplace": False, "outofplace": False}, "never use"),
    ({"instances": 0}, "--instances"), ({"name": 'a"b'}, "--name"),
])
def test_bad_options(kw, needle):
    with pytest.raises(CollsynthError, match=needle):
        emit_xml(build_schedule("ring", 4), **kw)


def test_schedule_msccl_cannot_express():
    b = ScheduleBuilder("allgather", 2, 2, owner=[1, 0])
    b.new_step()
    b.add(1, 0, 0)
    b.add(0, 1, 1)
    with pytest.raises(CollsynthError, match="contiguous"):
        emit_xml(b.build())
    b = ScheduleBuilder("allreduce", 2, 80)
    b.new_step()
    b.add(0, 1, 0, 80, True)
    b.new_step()
    b.add(1, 0, 0, 80, False)
    with pytest.raises(CollsynthError, match="cnt limit"):
        emit_xml(b.build())


# ------------------------------------------------------------------ cases mutation testing found untested
def _fused_re_runs(text):
    """Lengths of the runs of ``re`` steps the runtime fuses: consecutive, one destination, only the first
    carrying a dependency (docs/msccl-xml.md 2.3)."""
    runs = []
    for tb in text.split("<tb ")[1:]:
        prev, length = None, 0
        for ln in tb.splitlines():
            if "<step " not in ln:
                continue
            a = dict(re.findall(r'(\w+)="([^"]*)"', ln))
            dst = (a["dstbuf"], a["dstoff"])
            if a["type"] == "re" and prev == dst and a["depid"] == "-1":
                length += 1
                continue
            if length:
                runs.append(length)
            prev, length = (dst, 1) if a["type"] == "re" else (None, 0)
            if a["hasdep"] == "1":
                prev = None
        if length:
            runs.append(length)
    return runs


def test_reduce_chains_are_cut_at_the_runtimes_16_fused_steps():
    # direct on 20 ranks: 19 contributions per chunk, 18 of them added with re steps into one destination
    text = emit_xml(build_schedule("direct", 20))
    runs = _fused_re_runs(text)
    assert max(runs) == 16 and 2 in runs, sorted(set(runs))
    assert check_xml_text(text, "direct20.xml").ok
    # below the limit nothing is cut: 15 re steps per chain on 17 ranks
    assert set(_fused_re_runs(emit_xml(build_schedule("direct", 17)))) == {15}


@pytest.mark.parametrize("alg, n", [("ring", 3), ("ring", 4), ("direct", 3), ("direct", 5)])
@pytest.mark.parametrize("mult, instances", [(2, 1), (3, 1), (5, 1), (3, 2)])
def test_reducescatter_scratch_offsets_on_a_finer_chunk_grid(alg, n, mult, instances):
    s = build_schedule(alg, n, "reducescatter")
    M = s.nchunks * mult
    text, back = roundtrip(s, nchunksperloop=M, instances=instances)
    assert f'nchunksperloop="{M * instances}"' in text
    # read back on the finer grid, the program still computes the ReduceScatter (checked independently)
    assert back.nchunks == M * instances and verify(back).ok, verify(back).message
    # scratch holds the partial sums in flight: at least one rank block of them
    sizes = {int(v) for v in re.findall(r's_chunks="(\d+)"', text)}
    assert min(sizes) >= M // n * instances


def test_too_many_thread_blocks_for_a_cluster_schedule_names_fewer_blocks_per_part(monkeypatch):
    # clusterstraggler at 16 x 8 needs 65 thread blocks on rank 0 where MSCCL allows 64: with 16 blocks per
    # part it fits (measured), so the line names --pipeline; here the same with the limit lowered to 12
    from collsynth.backends.msccl import emit as msccl_emit

    s = build_schedule("clusterstraggler", 16, topology="h100-cluster", arrivals={5: 0.01}, size=float(2**30))
    monkeypatch.setitem(msccl_emit.MAX_TBS, "executor", 12)
    with pytest.raises(CollsynthError) as e:
        emit_xml(s)
    msg = str(e.value)
    assert re.search(r"^rank \d+ needs \d+ thread blocks", msg), msg
    assert f"fewer blocks per part (--pipeline below {s.meta['pipeline']})" in msg and "--format mscclpp-plan" in msg
