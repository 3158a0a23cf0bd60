"""The MSCCL++ plan emitter: every algorithm and collective becomes a verified plan (Simple and LL, in place and
out of place, memory and port channels, the pipeline form, power-of-two chunk grids) that reads back into the
same Schedule and simulates identically; output is deterministic; limits are one-line errors naming the
largest size that fits."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.backends import emit
from collsynth.backends.mscclpp import FORMAT_VERSION, check_plan_text, emit_plan, plan_text_to_schedule
from collsynth.backends.mscclpp.emit import fits
from collsynth.cli import main
from collsynth.errors import CollsynthError
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate_model
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import record_topology


def rows(s):
    return sorted(map(tuple, np.c_[s.step, s.src, s.dst, s.chunk, s.count, s.reduce].tolist()))


def sim(s, late):
    return simulate_model(s, 2 ** 30, 3e-6, 450 * 2 ** 30, arrivals={late: 5e-3}).completion_s


def round_trip(s, **opts):
    text = emit_plan(s, **opts)
    back = plan_text_to_schedule(text, "plan.json")
    assert rows(back) == rows(s)
    assert (back.nsteps, back.nchunks, back.ports, back.phases) == (s.nsteps, s.nchunks, s.ports, s.phases)
    late = s.nranks - 1
    assert sim(back, late) == sim(s, late)
    return text, back


CASES = ([(a, n, c, {}) for a in ("ring", "direct") for c in ("allreduce", "reducescatter", "allgather")
          for n in (2, 3, 5)]
         + [("rhd", n, "allreduce", {}) for n in (2, 4, 6)] + [("twoshot", n, "allreduce", {}) for n in (3, 4)]
         + [("stragglar", n, "allreduce", {"straggler": r}) for n, r in ((3, 2), (4, 0), (8, 7), (8, 3), (12, 5))]
         + [("stragglar", 6, "allreduce", {"pipeline": 3})])


@pytest.mark.parametrize("alg, n, coll, kw", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("proto", ["Simple", "LL"])
def test_every_algorithm_round_trips_exactly(alg, n, coll, kw, proto):
    s = build_schedule(alg, n, coll, **kw)
    round_trip(s, proto=proto, inplace=(n % 2 == 0))


@settings(max_examples=10, deadline=None)
@given(n=st.integers(3, 16), data=st.data())
def test_stragglar_any_n_and_straggler(n, data):
    r = data.draw(st.integers(0, n - 1))
    proto = data.draw(st.sampled_from(["Simple", "LL"]))
    round_trip(build_schedule("stragglar", n, straggler=r), proto=proto, chunks="pow2")


def test_plan_shape_and_metadata():
    s = build_schedule("stragglar", 8, straggler=7)
    plan = json.loads(emit_plan(s))
    assert list(plan)[:5] == ["name", "collective", "protocol", "inplace", "reuse_resources"]
    meta = plan["collsynth"]
    assert meta["format_version"] == FORMAT_VERSION == "0.9.0"
    assert (meta["straggler"], meta["algorithm"], meta["nchunks"]) == (7, "stragglar", 7)
    for g in plan["gpus"]:
        assert g["semaphores"] == [{"init_value": 0}] * (len(g["threadblocks"]) - 1)
        for tb in g["threadblocks"]:
            assert len(tb["ops"]) <= 64
            assert all(len(c["channel_ids"]) <= 16 for c in tb["channels"])
            names = [o["name"] for o in tb["ops"]]
            # every thread block starts with the handshake on its channels, and reduces only from scratch
            first = names.index("nop")
            assert names[0] == "signal" and set(names[:first]) == {"signal", "wait"}
            for o in tb["ops"]:
                if o["name"] == "re":
                    assert all(ref["type"] == "s" for ref in o["src_buff"][1:])
    assert emit_plan(s) == emit_plan(s)  # deterministic


@pytest.mark.parametrize("key", ["send_steps", "send_transfers"])
def test_a_record_with_an_index_beyond_64_bits_is_not_used(key, tmp_path, capsys):
    """A plan's "collsynth" record naming a step or transfer at or above 2^62 (a fuzzed file had a 418-digit
    one) is no record collsynth wrote: the plan is timed by levels, as with a record of the wrong length
    (before: an internal error, exit 3, converting it to an int64 column); `collsynth info` exits 0."""
    d = json.loads(emit(build_schedule("ring", 4), "mscclpp-plan"))
    d["collsynth"][key][-1] = 2**62 - 1  # still read
    assert plan_text_to_schedule(json.dumps(d)).meta["timing"] == "recorded steps"
    d["collsynth"][key][-1] = int("1" * 418)
    s = plan_text_to_schedule(json.dumps(d))
    assert (s.meta["timing"], s.ntransfers, s.nsteps) == ("levels", 24, 6)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(d))
    assert main(["info", str(path)]) == 0
    assert "24 transfers" in capsys.readouterr().out


def test_record_chunk_grid_maps_plan_bytes_to_schedule_chunks():
    """_columns maps each piece's bytes to the schedule's chunks through the record's nchunks N and plan_chunks
    M (schedule chunk k starts at plan chunk k M // N): round trips with more plan chunks than schedule chunks
    keep every row (an arithmetic inverse replaced a table of N + 1 entries)."""
    s = build_schedule("stragglar", 6, straggler=5)
    for chunks in (12, 30, 35, "pow2", None):
        text, _ = round_trip(s, chunks=chunks)
        assert json.loads(text)["collsynth"]["plan_chunks"] >= s.nchunks


def test_port_channels_across_nodes_and_memory_channels_inside():
    s = build_schedule("ring", 8)
    plan = json.loads(emit_plan(s, gpus_per_node=4))
    for g in plan["gpus"]:
        for ch in g["channels"]:
            node_peers = {p // 4 == g["id"] // 4 for p in ch["connected_to"]}
            assert node_peers == {ch["channel_type"] == "memory"}
    ops = [o["name"] for g in plan["gpus"] for tb in g["threadblocks"] for o in tb["ops"]]
    assert "pws" in ops and "put" in ops
    round_trip(s, gpus_per_node=4)
    round_trip(s, gpus_per_node=2, proto="LL")  # LL across nodes: cpkt + rppkt over port channels


def test_pipeline_form():
    s = build_schedule("stragglar", 8)
    text, _ = round_trip(s, pipeline=1 << 20)
    plan = json.loads(text)
    for g in plan["gpus"]:
        for tb in g["threadblocks"]:
            pipe = tb["ops"][-1]
            assert pipe["name"] == "pipeline" and pipe["iter_context"] == {"unit_size": 1 << 20, "num_chunks": 1}
            assert len(tb["ops"]) + len(pipe["ops"]) <= 64
    report = check_plan_text(text, "p.json", size=7 * (2 << 20) + 7 * 4096)  # two and a bit iterations
    assert report.ok, report.message


def test_power_of_two_chunk_grid_makes_power_of_two_sizes_eligible():
    s = build_schedule("stragglar", 8)
    plan = json.loads(emit_plan(s, chunks="pow2", proto="LL"))
    assert plan["gpus"][0]["input_chunks"] == 64
    assert check_plan_text(json.dumps(plan), "p.json", size=1 << 20).ok


def test_registry_and_cli(tmp_path, capsys):
    s = build_schedule("ring", 4)
    assert emit(s, "mscclpp-plan", proto="LL", inplace=False) == emit_plan(s, proto="LL", inplace=False)
    out = tmp_path / "r4.json"
    assert main(["synth", "-a", "ring", "-n", "4", "--format", "mscclpp-plan", "--no-inplace", "--max-bytes",
                 "1MiB", "-o", str(out)]) == 0
    plan = json.loads(out.read_text())
    assert (plan["inplace"], plan["max_message_size"]) == (False, 1 << 20)
    sched = tmp_path / "s.json"
    assert main(["synth", "-a", "stragglar", "-n", "4", "-o", str(sched)]) == 0
    p2 = tmp_path / "s.plan.json"
    assert main(["emit", str(sched), "--format", "mscclpp-plan", "--proto", "LL", "--plan-chunks", "pow2",
                 "-o", str(p2)]) == 0
    assert main(["info", str(p2)]) == 0
    assert "stragglar_n4_s3: allreduce, 4 ranks, 3 chunks" in capsys.readouterr().out
    assert main(["simulate", str(p2), "--size", "1MiB"]) == 0
    assert main(["emit", str(p2), "--format", "mscclpp-plan", "-o", str(tmp_path / "x.json")]) == 2
    assert "emit reads a schedule JSON file" in capsys.readouterr().err


@pytest.mark.parametrize("opts, expect", [
    ({"proto": "LL128"}, "unknown --proto 'LL128' for mscclpp-plan: use Simple or LL"),
    ({"proto": "LL", "pipeline": 4096}, "--pipeline-unit applies to --proto Simple"),
    ({"max_bytes": 1 << 40}, "the largest size that fits is"),
    ({"pipeline": 100}, "--pipeline-unit must be a multiple of 16 bytes"),
    ({"chunks": 3}, "--plan-chunks must be at least the schedule's 7 chunks"),
    ({"gpus_per_node": 3}, "--gpus-per-node 3 does not divide the schedule's 8 ranks"),
])
def test_bad_options_are_one_line_errors(opts, expect):
    with pytest.raises(CollsynthError) as e:
        emit_plan(build_schedule("stragglar", 8), **opts)
    assert expect in str(e.value) and "\n" not in str(e.value)


def test_a_schedule_that_needs_too_many_thread_blocks_names_the_largest_that_fits():
    s = build_schedule("stragglar", 4, pipeline=400)
    with pytest.raises(CollsynthError) as e:
        emit_plan(s)
    msg = str(e.value)
    assert "\n" not in msg and "thread blocks of at most 64 ops; at most 108 can be resident" in msg
    k = int(msg.rsplit("the largest --pipeline that fits is ", 1)[1])
    assert 1 <= k < 400
    assert fits(build_schedule("stragglar", 4, pipeline=k))[0]
    assert not fits(build_schedule("stragglar", 4, pipeline=k + 1))[0]


def test_the_solvers_schedule_round_trips():
    s = build_schedule("solver", 4, arrivals={3: 1e-3}, size=64 << 20, time_limit=5)
    for proto in ("Simple", "LL"):
        round_trip(s, proto=proto)


@pytest.mark.parametrize("n, gpus_per_node", [(16, None), (12, 2)])
def test_wide_fan_out_keeps_each_put_with_its_signal_and_handshake(n, gpus_per_node):
    """More peers than a thread block's channels: the puts (port: staging copies and pws) to a group of peers
    and their signals share one thread block, whose start-of-call handshake with those peers orders the
    writes after the peers' previous call."""
    text, _ = round_trip(build_schedule("direct", n), gpus_per_node=gpus_per_node)
    plan = json.loads(text)
    for g in plan["gpus"]:
        for tb in g["threadblocks"]:
            table = {ch["channel_type"]: ch["channel_ids"] for ch in tb["channels"]}
            peers = {t: {g["channels"][[c["channel_type"] for c in g["channels"]].index(t)]["connected_to"][i]
                         for i in ids} for t, ids in table.items()}
            rbufs = {rb["access_channel_type"]: rb["remote_buffer_ids"] for rb in tb["remote_buffer_refs"]}
            for t, ids in rbufs.items():
                assert {g["remote_buffers"][i]["rank"] for i in ids} <= peers.get(t, set())


def _channel_sides(plan):
    """(memory channels that cross nodes, port channels inside a node) of a plan with 8 GPUs a node."""
    wrong_memory = wrong_port = 0
    for g in plan["gpus"]:
        for ch in g["channels"]:
            for p in ch.get("connected_to", []):
                same = p // 8 == g["id"] // 8
                wrong_memory += ch["channel_type"] == "memory" and not same
                wrong_port += ch["channel_type"] == "port" and same
    return wrong_memory, wrong_port


@pytest.mark.parametrize("alg, kw, proto", [("ring", {}, "Simple"), ("multiring", {}, "Simple"), ("tree", {}, "Simple"),
                                            ("hierarchical", {}, "Simple"), ("stragglar", {"straggler": 5}, "Simple"),
                                            ("hierarchical", {}, "LL")])  # LL's packet puts: one schedule suffices
def test_cluster_schedules_use_port_channels_across_nodes(alg, kw, proto):
    # 2 nodes x 8 GPUs: the schedule records its topology, so the plan knows which peers share a node
    params = dict(kw, topology="h100-cluster") if alg != "stragglar" else kw
    s = build_schedule(alg, 16, **params)
    if alg == "stragglar":  # it takes no topology: record the one it runs on, as `collsynth synth -t` does
        record_topology(s, make_topology("h100-cluster", 16))
    text, _ = round_trip(s, proto=proto)
    plan = json.loads(text)
    assert plan["collsynth"]["gpus_per_node"] == 8
    assert _channel_sides(plan) == (0, 0)
    kinds = {ch["channel_type"] for g in plan["gpus"] for ch in g["channels"]}
    assert {"memory", "port"} <= kinds
    assert check_plan_text(text, "plan.json").ok


def test_synth_on_a_cluster_topology_emits_port_channels(tmp_path):
    out = tmp_path / "ring.plan.json"
    assert main(["synth", "-a", "ring", "-n", "16", "--topology", "h100-cluster", "--format", "mscclpp-plan",
                 "-o", str(out)]) == 0
    assert _channel_sides(json.loads(out.read_text())) == (0, 0)
    sched = tmp_path / "ring.json"  # a saved schedule keeps its topology: `emit` finds the nodes again
    assert main(["synth", "-a", "ring", "-n", "16", "--topology", "h100-cluster", "-o", str(sched)]) == 0
    plan = tmp_path / "again.plan.json"
    assert main(["emit", str(sched), "--format", "mscclpp-plan", "-o", str(plan)]) == 0
    assert plan.read_bytes() == out.read_bytes()


def test_a_cluster_schedule_with_too_many_thread_blocks_points_to_fewer_blocks_per_part():
    """clusterstraggler's shape follows its arrivals and topology, so the hint is not a GPU count (rebuilding
    it without them measures another schedule) but fewer blocks per part, which does fit here."""
    from collsynth.synth.topology import make_topology

    t = make_topology("h100-cluster", 16)
    s = build_schedule("clusterstraggler", 16, arrivals={5: 0.05}, size=2**30, topology=t, pipeline=200)
    with pytest.raises(CollsynthError) as e:
        emit_plan(s)
    msg = str(e.value)
    assert "\n" not in msg and "with fewer blocks per part (--pipeline below 200)" in msg
    assert "GPU count" not in msg
    assert fits(build_schedule("clusterstraggler", 16, arrivals={5: 0.05}, size=2**30, topology=t, pipeline=100))[0]


def test_a_schedule_built_for_h100s_may_use_their_132_sms():
    """emit.resident_limit: a schedule whose meta records an H100 topology preset (h100-cluster, dgx-h100) may
    need up to 132 resident thread blocks (an H100 SXM5's SMs); the same schedule without its topology keeps
    the A100's 108."""
    from collsynth.backends.mscclpp.emit import resident_limit
    from collsynth.synth.topology import make_topology

    t = make_topology("h100-cluster", 16)
    s = build_schedule("clusterstraggler", 16, arrivals={5: 0.05}, size=2**30, topology=t, pipeline=120)
    assert resident_limit(s) == (132, "132 SMs of the H100 SXM5 its topology names")
    ok, why = fits(s)
    assert ok, why
    bare = s.replace(meta={k: v for k, v in s.meta.items() if k != "topology"})
    ok, why = fits(bare)
    assert not ok and "at most 108 can be resident" in why and "108 SMs of an A100, assumed" in why
    assert fits(bare, sms=132)[0]
    big = build_schedule("clusterstraggler", 16, arrivals={5: 0.05}, size=2**30, topology=t, pipeline=200)
    with pytest.raises(CollsynthError) as e:
        emit_plan(big)
    assert "at most 132 can be resident at once (they wait on each other, one 1024-thread block per SM: 132 SMs " \
           "of the H100 SXM5" in str(e.value)
