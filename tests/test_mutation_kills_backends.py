"""Tests for behaviour of backends/ that mutants of the sampled mutation run (docs/mutation.md) changed
with every other test still passing."""

from __future__ import annotations

import pytest

from collsynth.backends import emit
from collsynth.backends.layout import Layout
from collsynth.backends.msccl import XmlFormatError, check_xml_text
from collsynth.backends.msccl import emit as msccl_emit_module
from collsynth.backends.msccl.execute import ExecFailure, execute
from collsynth.backends.msccl.load import resolve
from collsynth.backends.msccl.parse import parse_xml_text
from collsynth.backends.msccl.schedule import straggler_independence
from collsynth.backends.mscclpp.check import launches_for, read_plan_text
from collsynth.backends.mscclpp.library import entries as mscclpp_entries
from collsynth.errors import CollsynthError
from collsynth.synth.ir import Schedule
from collsynth.synth.registry import build_schedule

HEAD = ('<algo name="t" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" inplace="1" '
        'outofplace="1" minBytes="0" maxBytes="0">')


def _direct2(srcoff: int = 0) -> str:
    """2-GPU allreduce of 2 chunks: swap both chunks and reduce; GPU 0 sends from ``srcoff`` (and declares
    an input buffer that holds it: the loader's check passes, the checker's must decide)."""
    out = [HEAD]
    for g in range(2):
        off = srcoff if g == 0 else 0
        out += [f'  <gpu id="{g}" i_chunks="{max(2, off + 2)}" o_chunks="2" s_chunks="0">',
                f'    <tb id="0" send="{1 - g}" recv="{1 - g}" chan="0">',
                f'      <step s="0" type="s" srcbuf="i" srcoff="{off}" dstbuf="o" dstoff="0" cnt="2" depid="-1" '
                'deps="-1" hasdep="0"/>',
                '      <step s="1" type="rrc" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="2" depid="-1" '
                'deps="-1" hasdep="0"/>',
                "    </tb>", "  </gpu>"]
    return "\n".join([*out, "</algo>"]) + "\n"


# ---------------------------------------------------------------------- msccl check
@pytest.mark.parametrize("off,kind", [(0, None), (32767, "bounds"), (32768, "limit")])
def test_msccl_offsets_up_to_int16_max_are_only_bounds_checked(off: int, kind: str | None) -> None:
    r = check_xml_text(_direct2(off), "t.xml")
    assert r.ok == (kind is None) and (kind is None or r.kind == kind), r.message
    if kind == "limit":
        assert "srcoff=32768 exceeds 32767" in r.message


# ---------------------------------------------------------------------- emit options, layouts
def _ring2() -> Schedule:
    return Schedule.from_arrays("allgather", 2, 2, step=[0, 0], src=[0, 1], dst=[1, 0], chunk=[0, 1])


def test_unknown_emit_option_lists_the_options_or_none() -> None:
    with pytest.raises(CollsynthError, match=r"takes no 'bogus' option \(it takes name, dtypes\)$"):
        emit(_ring2(), "nccl-cuda", bogus=1)
    with pytest.raises(CollsynthError, match=r"takes no 'bogus' option \(it takes none\)$"):
        emit(_ring2(), "mscclpp-selector", bogus=1)


def test_allgather_layout_starts_with_each_rank_holding_its_own_blocks() -> None:
    assert Layout("allgather", 2, 4).written0().tolist() == [[True, True, False, False], [False, False, True, True]]
    assert not Layout("allreduce", 2, 4).written0().any()


def test_straggler_independence_of_xml_text_names_it_xml() -> None:
    with pytest.raises(XmlFormatError, match=r"^<xml>:1: <algo> is never closed"):
        straggler_independence('<algo name="t">', 0, text=True)


# ---------------------------------------------------------------------- mscclpp
@pytest.mark.parametrize("proto,double,launches", [("LL", True, 3), ("Simple", False, 2)])
def test_mscclpp_double_scratch_plans_are_checked_over_three_launches(proto: str, double: bool,
                                                                      launches: int) -> None:
    plan = read_plan_text(emit(build_schedule("ring", 4, "allreduce"), "mscclpp-plan", proto=proto), "p.json")
    assert plan.double_scratch == double and launches_for(plan) == launches  # launch k and k+2 share a half


def test_mscclpp_library_has_in_and_out_of_place_general_plans() -> None:
    general = {(e.algorithm, e.inplace) for e in mscclpp_entries() if e.straggler is None}
    algs = {a for a, _ in general}
    assert {"ring", "direct", "rhd"} <= algs and general == {(a, p) for a in algs for p in (True, False)}


# ---------------------------------------------------------------------- msccl emit
def test_too_many_thread_blocks_names_channels_only_when_split(monkeypatch) -> None:
    # the lowered count (after the check before lowering, which refuses these peer counts first)
    monkeypatch.setattr(msccl_emit_module, "check_peer_limits", lambda *a, **k: None)
    with pytest.raises(CollsynthError, match=r"^rank 0 needs 66 thread blocks; MSCCL allows at most 64"):
        emit(build_schedule("direct", 23, "allreduce"), "msccl-xml", instances=3)  # one channel per instance
    with pytest.raises(CollsynthError, match=r"^rank 0 needs 66 thread blocks \(on 2 channels, to keep steps"):
        emit(build_schedule("direct", 34, "allreduce"), "msccl-xml", instances=2)


def _rrs2(dstoff: int) -> str:
    """2-GPU allreduce through an rrs: GPU 0 sends, GPU 1 receives, reduces with its input and sends the
    sum back (rrs writes nothing locally: its dstoff is never read), GPU 0 keeps it and sends it on (rcs),
    GPU 1 receives it."""
    steps = {0: [("s", 0, "o", 0), ("rcs", 0, "o", 0)], 1: [("rrs", 0, "o", dstoff), ("r", 0, "o", 0)]}
    out = [HEAD]
    for g in range(2):
        out += [f'  <gpu id="{g}" i_chunks="2" o_chunks="2" s_chunks="0">',
                f'    <tb id="0" send="{1 - g}" recv="{1 - g}" chan="0">']
        out += [f'      <step s="{k}" type="{t}" srcbuf="i" srcoff="{so}" dstbuf="{db}" dstoff="{do}" cnt="2" '
                'depid="-1" deps="-1" hasdep="0"/>' for k, (t, so, db, do) in enumerate(steps[g])]
        out += ["    </tb>", "  </gpu>"]
    return "\n".join([*out, "</algo>"]) + "\n"


@pytest.mark.parametrize("dstoff", [0, 99])
def test_msccl_rrs_dstoff_is_not_bounds_checked(dstoff: int) -> None:
    r = check_xml_text(_rrs2(dstoff), "t.xml")
    assert r.ok, r.message


@pytest.mark.parametrize("coll", ["allreduce", "reducescatter"])
def test_msccl_nop_steps_have_no_location(coll: str) -> None:
    """A nop (a dependency-only step) names no buffer location: offsets -1, not a mapped chunk."""
    import re

    xml = emit(build_schedule("direct", 4, coll), "msccl-xml")
    nops = [ln for ln in xml.splitlines() if 'type="nop"' in ln]
    assert nops and all(re.search(r'srcoff="-1" dstbuf="i" dstoff="-1" cnt="0"', ln) for ln in nops), nops[:2]


def test_mscclpp_thread_count_limits_port_puts_only() -> None:
    """Thread k of a port put serves dst_buff[k], so a port put needs a thread per destination; other
    operations on a port channel (here a recpkt, which writes two local buffers) do not."""
    import json

    plan = json.loads(emit(build_schedule("ring", 4, "allreduce"), "mscclpp-plan", proto="LL"))
    plan["num_threads_per_block"] = 1
    op = next(op for op in plan["gpus"][0]["threadblocks"][0]["ops"] if op["name"] == "repkt")
    op.update(name="recpkt", channel_type="port", dst_buff=[*op["dst_buff"], {"type": "o", "index": 0, "size": 1}])
    read_plan_text(json.dumps(plan), "p.json")  # loads: one thread is enough


# ---------------------------------------------------------------------- torch launcher
def _fake_torch(monkeypatch: pytest.MonkeyPatch, items: list[tuple[int, str, str]], landed: float) -> list[float]:
    """Stand-ins for torch's clock, queue and processes in the launcher (no process is started): the
    queue holds ``items`` from time ``landed`` on; returns the times at which items were taken."""
    import sys
    import types

    from collsynth.backends.torch import launch as launch_module

    now = [0.0]
    taken: list[float] = []

    class Queue:
        def __init__(self) -> None:
            self.items = list(items)

        def empty(self) -> bool:
            return now[0] < landed or not self.items

        def get(self) -> tuple[int, str, str]:
            taken.append(now[0])
            return self.items.pop(0)

    class Process:
        exitcode = None

        def __init__(self, **_kw: object) -> None:
            pass

        def start(self) -> None:
            pass

        def is_alive(self) -> bool:
            return True

        def kill(self) -> None:
            pass

        def join(self, _t: float) -> None:
            pass

    ctx = types.SimpleNamespace(SimpleQueue=Queue, Process=Process)
    mp = types.SimpleNamespace(get_context=lambda _how: ctx)
    dist = types.SimpleNamespace(TCPStore=lambda *_a, **_kw: types.SimpleNamespace(port=1))
    torch = types.SimpleNamespace(distributed=dist, multiprocessing=mp)
    for name, mod in (("torch", torch), ("torch.distributed", dist), ("torch.multiprocessing", mp)):
        monkeypatch.setitem(sys.modules, name, mod)

    def sleep(dt: float) -> None:
        now[0] += dt

    monkeypatch.setattr(launch_module, "time", types.SimpleNamespace(monotonic=lambda: now[0], sleep=sleep))
    return taken


def test_launcher_picks_up_results_within_50_ms(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher polls its result queue: a result that lands while it waits is taken within 50 ms."""
    from collsynth.backends.torch.launch import launch

    taken = _fake_torch(monkeypatch, [(0, "ok", "a"), (1, "ok", "b")], landed=0.1)
    assert launch(print, 2, timeout=60) == {0: "a", 1: "b"}
    assert taken and min(taken) >= 0.1 and max(taken) <= 0.1 + 0.05


def test_launcher_reports_a_rank_without_a_result_at_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    from collsynth.backends.torch.launch import LaunchError, launch

    _fake_torch(monkeypatch, [(0, "ok", "a")], landed=0.1)  # rank 1 never answers (and stays alive)
    res = launch(print, 2, timeout=5, allow_failures=True)
    assert res == {0: "a", 1: {"error": "timeout", "message": "no result within 5 s (killed)"}}
    _fake_torch(monkeypatch, [(0, "ok", "a")], landed=0.1)
    with pytest.raises(LaunchError, match=r"^rank 1 failed: no result within 5 s \(killed\)"):
        launch(print, 2, timeout=5)


def test_msccl_unmatched_send_names_the_first_unreceived_send() -> None:
    """GPU 0 sends twice, GPU 1 receives once: the executor blames GPU 0's second send (step 1)."""
    out = [HEAD]
    for g, steps in ((0, ["s", "s"]), (1, ["r"])):
        out += [f'  <gpu id="{g}" i_chunks="2" o_chunks="2" s_chunks="0">',
                f'    <tb id="0" send="{1 - g}" recv="{1 - g}" chan="0">']
        out += [f'      <step s="{k}" type="{t}" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="2" depid="-1" '
                'deps="-1" hasdep="0"/>' for k, t in enumerate(steps)]
        out += ["    </tb>", "  </gpu>"]
    text = "\n".join([*out, "</algo>"]) + "\n"
    r = check_xml_text(text, "t.xml")  # the static count check catches it first
    assert not r.ok and r.kind == "fifo" and "gpu 0 sends 2 time(s) to gpu 1 but gpu 1 receives 1" in r.message
    with pytest.raises(ExecFailure, match=r"never receives it \(1 send\(s\) unmatched\)") as e:  # the executor's
        execute(resolve(parse_xml_text(text, "t.xml"), "t.xml"), "inplace")
    assert (e.value.kind, e.value.gpu, e.value.tb, e.value.step) == ("fifo", 0, 0, 1), e.value


# ---------------------------------------------------------------------- nccl plugin, layout
@pytest.mark.parametrize("bad", [2.5, "2", b"2", [1, "2"], {"r": 1}])
def test_scheduler_straggler_entry_must_be_a_rank_or_ranks(tmp_path, bad: object) -> None:
    from collsynth.backends.nccl.plugin import render_msccl_scheduler

    (tmp_path / "ring_n4_Simple.xml").write_text(emit(build_schedule("ring", 4, "allreduce"), "msccl-xml"))
    with pytest.raises(CollsynthError, match="must be a rank or a list of ranks, got"):
        render_msccl_scheduler(str(tmp_path), stragglers={"ring_n4_Simple.xml": bad})


@pytest.mark.parametrize("n,m", [(3, 1), (4, 2)])
def test_reducescatter_partial_sums_fill_the_scratch_in_chunk_order(n: int, m: int) -> None:
    """Rank r keeps a partial sum of every chunk outside its own block in scratch: chunks below its block
    at their index, those above it one block lower (docs: the rank's own block left out)."""
    lay = Layout("reducescatter", n, n * m)
    for r in range(n):
        want = [("s", c if c < r * m else c - m) for c in range(n * m) if c // m != r]
        assert [lay.write(r, c) for c in range(n * m) if c // m != r] == want
        assert [k for _, k in want] == list(range((n - 1) * m))
        assert [lay.write(r, r * m + j) for j in range(m)] == [("o", j) for j in range(m)]


@pytest.mark.parametrize("alg,n", [("tree", 4), ("rhd", 5), ("stragglar", 3), ("stragglar", 5),
                                   ("multistraggler", 5)])
def test_msccl_order_dependencies_cross_thread_blocks_only(alg: str, n: int) -> None:
    """The order dependencies the emitter adds for transfers that could run early point at another
    thread block (a thread block runs its steps in order anyway), and the file checks."""
    import re

    xml = emit(build_schedule(alg, n, "allreduce"), "msccl-xml")
    for tb in re.finditer(r'<tb id="(\d+)"(.*?)</tb>', xml, re.S):
        assert f'depid="{tb.group(1)}"' not in tb.group(2)
    r = check_xml_text(xml, "t.xml")
    assert r.ok, r.message


@pytest.mark.parametrize("peer", [0, 4])
def test_mscclpp_channel_peer_message_quotes_the_rank_range(peer: int) -> None:
    import json

    plan = json.loads(emit(build_schedule("ring", 4, "allreduce"), "mscclpp-plan", proto="LL"))
    plan["gpus"][0]["channels"][0]["connected_to"][0] = peer
    with pytest.raises(CollsynthError, match=rf"memory channel 0 connects to rank {peer}; peers are the other ranks "
                                             r"0\.\.3$"):
        read_plan_text(json.dumps(plan), "p.json")


def test_mscclpp_offsets_stop_exactly_at_4_gib():
    """Byte offsets are uint32 on the device: a buffer whose last byte offset reaches 2^32 is refused, one
    chunk less is accepted (kills MAX_OFFSET = 1 << 32 -> 2 << 32 in backends/mscclpp/model.py)."""
    from collsynth.backends.mscclpp.load import check_offsets
    from collsynth.backends.mscclpp.model import PlanFormatError

    plan = read_plan_text(emit(build_schedule("ring", 4), "mscclpp-plan"))
    assert not plan.packets and not plan.double_scratch  # Simple: the scratch buffer is scratch_chunks chunks
    k = max(max(g.input_chunks, g.output_chunks, g.scratch_chunks) for g in plan.gpus)
    assert k >= 1
    over = -(-(1 << 32) // k)  # the smallest chunk at which some buffer reaches 2^32 bytes
    with pytest.raises(PlanFormatError, match="4 GiB"):
        check_offsets(plan, over)
    check_offsets(plan, over - 1)  # every buffer ends below 2^32 bytes


def test_mscclpp_semaphore_initial_value_lets_the_first_acquire_pass():
    """A device semaphore with init_value 1 lets a thread block acquire it before any release (the value
    persists across launches: acquire then release per call is balanced); kills `signals + init < ticket`
    -> `signals - init < ticket` in backends/mscclpp/exec_sync.py, which reports a deadlock."""
    import json

    from collsynth.backends.mscclpp.check import check_plan

    d = json.loads(emit(build_schedule("ring", 4), "mscclpp-plan"))
    g = d["gpus"][0]
    g["semaphores"] = [{"init_value": 1}]
    ops = g["threadblocks"][0]["ops"]
    ops.insert(0, {"name": "sem_acquire", "semaphore_ids": [0]})
    ops.append({"name": "sem_release", "semaphore_ids": [0]})
    assert check_plan(read_plan_text(json.dumps(d))).ok
    g["semaphores"] = [{"init_value": 0}]  # nobody releases before the acquire: a deadlock
    assert not check_plan(read_plan_text(json.dumps(d))).ok


def test_mscclpp_pipeline_past_a_reference_wraps_its_size_as_uint32():
    """A pipeline iteration that starts past the end of its reference has a negative remaining size,
    which the kernel's uint32 arithmetic wraps: it accesses min(2^32 - (offset - size), unit) bytes.
    Here a 2-chunk pipeline over 1-chunk references at chunk 2^31 - 16 and unit 3 * 2^30: iteration 1
    starts 2^30 + 16 bytes past the reference and reads 3 * 2^30 - 16 bytes, not the whole unit (kills
    `% (1 << 32)` -> `% (1 << 33)` in backends/mscclpp/exec_access.py)."""
    import json

    from collsynth.backends.mscclpp.check import check_plan

    unit, chunk = 3 << 30, (1 << 31) - 16
    d = json.loads(emit(build_schedule("ring", 2, "allgather"), "mscclpp-plan", pipeline=1024))
    d["max_message_size"] = 1 << 40
    for g in d["gpus"]:  # no scratch (so that 2-chunk buffers stay below 4 GiB): put straight into the output
        g["scratch_chunks"] = 0
        g["remote_buffers"][0]["type"] = "o"
        pipe = g["threadblocks"][0]["ops"][4]
        assert pipe["name"] == "pipeline"
        pipe["iter_context"] = {"unit_size": unit, "num_chunks": 2}
        pipe["ops"] = pipe["ops"][:4]  # put, nop, signal, wait
        pipe["ops"][0]["dst_buff"][0]["index"] = g["id"]
    r = check_plan(read_plan_text(json.dumps(d)), size=2 * chunk)
    assert not r.ok and r.kind == "bounds", r.message
    lo, size = unit, (1 << 32) - (unit - chunk)
    assert size < unit
    assert f"op 4 body op 0 (put) accesses bytes {lo}..{lo + size - 1} of gpu 0's output buffer" in r.message


@pytest.mark.parametrize("hi", [10, 40, 100])
def test_mscclpp_fit_search_never_retries_a_size_that_failed(hi: int) -> None:
    """``fit.largest_passing`` finds the largest size that fits (each probe builds and lowers a schedule) and
    never probes a size at or above one that already failed (kills the bisection's upper end
    `lo + step - 1` -> `lo + step + 1` in backends/mscclpp/fit.py, which probes the failed size again)."""
    from collsynth.backends.mscclpp.fit import largest_passing

    for lo in (1, 3):  # a range not starting at 1: none passing there answers lo - 1, never a size below lo
        for guess in [None, *range(2, hi)]:
            for top in range(hi + 2):
                calls: list[int] = []

                def ok(x: int) -> bool:
                    calls.append(x)
                    return x <= top

                assert largest_passing(lo, hi, ok, guess) == max(lo - 1, min(top, hi)), (lo, guess, top)
                assert all(lo <= x <= hi for x in calls) and len(calls) == len(set(calls)), (lo, guess, top, calls)
                for i, x in enumerate(calls):
                    if x > top:
                        assert all(y < x for y in calls[i + 1:]), (lo, guess, top, calls)


def test_mscclpp_remote_buffers_count_only_remote_references():
    """A thread block declares at most 16 remote buffers per channel type; sends to peers it already
    declared add none. LL twoshot on 17 GPUs sends to the same 16 peers twice: one thread block per GPU;
    on 18 GPUs the 17 peers need a second block and no block declares more than 16 (kills `ref[0] == "r"`
    -> `!= "r"` in the lowering's room check, backends/mscclpp/lower.py)."""
    import json

    for n, tbs in ((17, 1), (18, 3)):
        d = json.loads(emit(build_schedule("twoshot", n, "allreduce"), "mscclpp-plan", proto="LL"))
        assert max(len(g["threadblocks"]) for g in d["gpus"]) == tbs
        assert max(len(ref["remote_buffer_ids"]) for g in d["gpus"] for tb in g["threadblocks"]
                   for ref in tb.get("remote_buffer_refs", [])) == 16


def test_nccl_run_plan_refuses_inputs_of_unequal_length():
    """Every rank passes the same count (NCCL's contract): the interpreter refuses unequal inputs, naming
    the first rank that differs from rank 0 (kills `full = len(inputs[0])` -> `len(inputs[-1])` in
    backends/nccl/plan.py, which measures against the last rank and blames rank 0)."""
    import numpy as np

    from collsynth.backends.nccl import build_plan, run_plan

    plan = build_plan(build_schedule("ring", 3, "allreduce"))
    good = [np.arange(6, dtype=np.float32) + r for r in range(3)]
    assert all(np.array_equal(o, sum(good)) for o in run_plan(plan, good))
    bad = [good[0], np.arange(9, dtype=np.float32), np.arange(9, dtype=np.float32)]
    with pytest.raises(CollsynthError, match=r"^run_plan needs input arrays of one length and dtype: rank 1's has 9 "
                                             r"float32 elements, rank 0's 6 float32$"):
        run_plan(plan, bad)
    with pytest.raises(CollsynthError, match=r"rank 2's has 6 float64 elements, rank 0's 6 float32$"):
        run_plan(plan, [good[0], good[1], good[2].astype(np.float64)])


@pytest.mark.parametrize("alg,n,coll,proto", [("ring", 4, "allgather", "Simple"), ("ring", 2, "allreduce", "Simple"),
                                              ("ring", 4, "allreduce", "Simple"), ("direct", 4, "allreduce", "LL"),
                                              ("ring", 8, "allreduce", "LL")])
def test_mscclpp_plan_max_message_size_is_the_largest_that_fits(alg: str, n: int, coll: str, proto: str):
    """An emitted plan's max_message_size is the largest message whose byte offsets all stay below 2^32 (in
    16-byte steps): the checker accepts that size's chunk and refuses the next one (kills `UINT32 - 1` ->
    `UINT32 + 1` in backends/mscclpp/emit.py, whose allgather plan on 4 GPUs then reaches exactly 4 GiB;
    before 2026-12-02 the checker counted every scratch buffer 4 times and refused Simple plans at their
    own maximum)."""
    from collsynth.backends.mscclpp.load import check_offsets, message_sizes
    from collsynth.backends.mscclpp.model import PlanFormatError

    plan = read_plan_text(emit(build_schedule(alg, n, coll), "mscclpp-plan", proto=proto))
    g = plan.gpus[0]
    per = g.output_chunks if coll == "allgather" else g.input_chunks
    assert plan.max_size % (per * 16) == 0
    chunk = plan.max_size // per
    assert message_sizes(plan, chunk)[2] == plan.max_size
    check_offsets(plan, chunk)
    with pytest.raises(PlanFormatError, match="4 GiB"):
        check_offsets(plan, chunk + 16)


def test_mscclpp_barrier_mismatch_report_names_the_thread_block():
    """Two thread blocks of one GPU at one barrier with different counts hang: the report names the GPU
    and the thread block that found the mismatch, in its fields as in its message (kills `a.tb.id if
    a.tb` -> `if not a.tb` in the MSCCL++ executor's barrier, which reports no thread block)."""
    import json
    import re

    from collsynth.backends.mscclpp.check import check_plan

    d = json.loads(emit(build_schedule("ring", 17), "mscclpp-plan"))
    tbs = d["gpus"][0]["threadblocks"]
    assert len(tbs) >= 3
    tbs[0]["ops"].insert(0, {"name": "barrier", "barrier_id": 0, "num_threadblocks": 3})
    tbs[1]["ops"].insert(0, {"name": "barrier", "barrier_id": 0, "num_threadblocks": 2})
    r = check_plan(read_plan_text(json.dumps(d)))
    assert not r.ok and r.kind == "deadlock" and r.gpu == 0, r.message
    m = re.search(r"barrier 0 on gpu 0: thread block (\d+) ", r.message)
    assert m and r.tb == int(m.group(1)) and r.tb in (0, 1), (r.tb, r.message)


def test_mscclpp_reduce_reads_its_launchs_half_of_a_double_scratch():
    """With a double scratch buffer, a thread block's local scratch references address the launch's half
    (the second one in even launches), while plain puts land at the peer's scratch base (only packet
    puts add the half). A Simple direct plan marked double-scratch therefore reduces data that never
    landed in launch 2, and is refused (kills the `re` source's local_scratch True -> False in
    backends/mscclpp/exec_ops.py, which reads the first half and passes)."""
    import json

    from collsynth.backends.mscclpp.check import check_plan

    d = json.loads(emit(build_schedule("direct", 4), "mscclpp-plan"))
    assert check_plan(read_plan_text(json.dumps(d))).ok
    d["use_double_scratch_buffer"] = True
    r = check_plan(read_plan_text(json.dumps(d)))
    assert not r.ok and r.kind == "result", r.message
    assert "(re) (launch 2) adds undefined data" in r.message


def test_mscclpp_plan_read_back_takes_the_recorded_name_only_with_the_record():
    """A plan read back into a Schedule takes the schedule name of collsynth's record only when the record
    is used (it matches the plan); otherwise the plan's own name and its levels (kills `used_record and
    isinstance(...)` -> `or` in backends/mscclpp/schedule.py)."""
    import json

    from collsynth.backends.mscclpp import plan_text_to_schedule

    d = json.loads(emit(build_schedule("ring", 4), "mscclpp-plan"))
    d["name"] = "mine"
    s = plan_text_to_schedule(json.dumps(d))
    assert (s.name, s.meta["timing"]) == ("ring_allreduce_n4", "recorded steps")
    d["collsynth"]["send_steps"] = d["collsynth"]["send_steps"][:-1]  # no longer one entry per sending op
    s = plan_text_to_schedule(json.dumps(d))
    assert (s.name, s.meta["timing"]) == ("mine", "levels")


def test_msccl_too_many_channels_names_the_channel_range():
    """Ring on 34 GPUs needs two channel segments (66 steps per connection, 64 per thread block): 17
    instances need 34 channels; the error names the valid range chan 0..31 (kills `MAX_CHANNELS - 1` ->
    `+ 1` in the message of backends/msccl/emit.py)."""
    with pytest.raises(CollsynthError, match=r"^the program needs 34 channels \(2 per instance x 17 instance\(s\)\); "
                                             r"MSCCL allows at most 32 \(chan 0\.\.31\): use fewer --instances$"):
        emit(build_schedule("ring", 34), "msccl-xml", instances=17)


def test_msccl_unseparated_attributes_message_quotes_60_characters():
    """An element whose attributes run together is refused naming the first 60 characters of the tag
    (kills `tag[:60]` -> `tag[:61]` in backends/msccl/parse.py)."""
    head = HEAD.replace('inplace="1" ', 'inplace="1"')
    with pytest.raises(XmlFormatError, match="attributes must be separated by a space") as e:
        parse_xml_text(head + "\n</algo>\n", "t.xml")
    assert str(e.value) == f"t.xml:1: attributes must be separated by a space in {head[:60]!r}"


@pytest.mark.parametrize("sizes", [[4096], [4096, 4096], [4096, 4096, 4096]])
def test_calibration_fit_needs_two_different_sizes(sizes: list[int]) -> None:
    """One size, or several equal ones, cannot separate latency from bandwidth (kills `or` -> `and` in
    backends/torch/bench.fit_alpha_beta, which fits equal sizes)."""
    from collsynth.backends.torch.bench import fit_alpha_beta

    with pytest.raises(CollsynthError, match="^calibration needs at least two different sizes$"):
        fit_alpha_beta(sizes, [1e-5 * (1 + 0.1 * k) for k in range(len(sizes))])
    alpha, bw = fit_alpha_beta([4096, 1 << 20], [1e-5 + 4096 / 1e10, 1e-5 + (1 << 20) / 1e10])
    assert alpha == pytest.approx(1e-5) and bw == pytest.approx(1e10)


class _AgreementStore:
    """The few c10d store calls the late-rank agreement makes, in memory; ``on_check`` runs at each poll
    (other ranks arriving meanwhile), and ``wait`` stands for the other ranks' decision ("ring": the
    last two ranks late together) when none was made here."""

    def __init__(self, on_check: object = None) -> None:
        self.kv: dict[str, bytes] = {}
        self.counts: dict[str, int] = {}
        self.on_check = on_check

    def add(self, key: str, v: int) -> int:
        self.counts[key] = self.counts.get(key, 0) + v
        return self.counts[key]

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        if key not in self.kv and expected == "":
            self.kv[key] = desired.encode()
        return self.kv[key]

    def check(self, keys: list[str]) -> bool:
        if callable(self.on_check):
            self.on_check(self)
        return all(k in self.kv for k in keys)

    def wait(self, keys: list[str], timeout: object) -> None:
        for k in keys:
            self.kv.setdefault(k, b"ring")

    def get(self, key: str) -> bytes:
        return self.kv[key]


@pytest.mark.parametrize("another_arrives,decision", [(False, "3,4,5"), (True, "ring")])
def test_late_node_is_named_only_if_nobody_else_arrived_in_the_window(another_arrives: bool, decision: str):
    """6 GPUs in nodes of 3: rank 2 arrives third, node {3, 4, 5} missing. It proposes that node as the
    late set when the window closes with nobody else arrived; when rank 3 arrived meanwhile the node is
    not late, and the decision is left to the last arrivals (kills `left == 2 or` -> `left != 2 or` in
    backends/torch/straggler.py, which names the node anyway)."""
    import types

    from collsynth.backends.torch.straggler import StragglerAwareAllReduce

    def rank3_arrives(st: _AgreementStore) -> None:
        if another_arrives and not st.counts.get("seen"):
            st.counts["seen"] = 1
            st.add("0/m0", 1 << 3)

    sar = object.__new__(StragglerAwareAllReduce)
    sar.n, sar.rank, sar.window, sar.timeout, sar._bits, sar._words = 6, 2, 0.01, 1.0, 62, 1
    sar.family = {}
    sar.cluster = types.SimpleNamespace(gpus_per_node=3, serves=lambda late: late == frozenset({3, 4, 5}),
                                        missing_counts=lambda: {1, 3})
    sar._store = _AgreementStore(rank3_arrives)
    sar._store.add("0/m0", 0b011)  # ranks 0 and 1 are there
    assert sar._decide(0) == (decision, 3)
