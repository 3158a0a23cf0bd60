"""The MSCCL++ plan checker: the real plans from MSCCL++'s repository are accepted except reduce_tbg (a real
race), plans the loader would refuse or misread are one-line format errors naming gpu, thread block and op
(exit 2), and plans that race, hang, leave semaphores unbalanced or compute the wrong result are reports
naming rank, thread block and op (exit 1). Mutations of emitted plans are caught."""

from __future__ import annotations

import copy
import dataclasses
import json
import os

import numpy as np
import pytest
from shared_paths import vectors

from collsynth.backends.mscclpp import PlanFormatError, check_plan_text, emit_plan, read_plan_text
from collsynth.cli import main
from collsynth.synth.registry import build_schedule
from collsynth.synth.verify import verify

VEC = vectors("mscclpp")
GOOD = ["mscclpp_executor-tests_reduce.json", "mscclpp_executor-tests_reduce_nvls.json",
        "mscclpp_executor-tests_reduce_pack.json", "mscclpp_executor-tests_transfer_pack.json",
        "mscclpp_test_allreduce.json", "mscclpp_test_allreduce_packet.json"]
TBG = "mscclpp_executor-tests_reduce_tbg.json"


def _vector(name: str) -> dict:
    with open(os.path.join(VEC, name), encoding="utf-8") as f:
        return json.load(f)


def _check(obj: dict):
    return check_plan_text(json.dumps(obj), "plan.json")


@pytest.mark.parametrize("name", GOOD)
def test_real_plans_verify(name):
    report = _check(_vector(name))
    assert report.ok, report.message
    assert report.message.startswith("OK ") and "\n" not in report.message


def test_reduce_tbg_has_the_race_between_thread_block_groups():
    report = _check(_vector(TBG))
    assert not report.ok and report.kind == "race"
    assert report.message.startswith("FAIL race: gpu 0 thread block ")
    # rank 0's thread block 1 reads bytes of rank 1's scratch that rank 1's thread block 0 wrote
    assert any(d.startswith("race: gpu 0 thread block 1 ") and "reads" in d and "of gpu 1's scratch that gpu 1 "
               "thread block 0 op 0 (copy) wrote, without synchronizing with gpu 1 thread block 0" in d
               for d in report.details), report.details


def test_cli_verify_exit_codes(tmp_path, capsys):
    good = tmp_path / "good.plan"  # told apart by content, not by the name
    good.write_text(json.dumps(_vector(GOOD[0])))
    assert main(["verify", str(good)]) == 0
    assert capsys.readouterr().out.startswith("OK allreduce on 2 GPUs (MSCCL++ 0.9.0 plan")
    assert main(["verify", os.path.join(VEC, TBG)]) == 1
    assert capsys.readouterr().out.startswith("FAIL race:")
    bad = _vector(GOOD[0])
    bad["gpus"][0]["threadblocks"][0]["ops"][0]["name"] = "glre"
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    assert main(["verify", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "gpu 0 thread block 0 op 0 (glre)" in err and "unknown op 'glre'" in err


def _op(obj, g=0, t=0, k=0):
    return obj["gpus"][g]["threadblocks"][t]["ops"][k]


LOADER = [
    ("unknown op", lambda p: _op(p).update(name="fused_copy"), "gpu 0 thread block 0 op 0 (fused_copy): unknown op"),
    ("channel id out of range", lambda p: _op(p, k=2).update(channel_ids=[3]),
     "gpu 0 thread block 0 op 2 (signal): channel id 3 is out of range"),
    ("buffer id out of range", lambda p: _op(p, k=6)["src_buff"][1].update(buffer_id=5),
     "gpu 0 thread block 0 op 6 (rres): src_buff[1] buffer_id 5 is out of range"),
    ("chunk past its buffer", lambda p: _op(p, k=0)["dst_buff"][0].update(index=3),
     "gpu 0 thread block 0 op 0 (copy): dst_buff[0] chunks 3..4 run past its buffer 's' (4 chunk(s))"),
    ("remote chunk past its buffer", lambda p: _op(p, k=6)["dst_buff"][1].update(size=9),
     "gpu 0 thread block 0 op 6 (rres): dst_buff[1] chunks 0..8 run past gpu 1's buffer 'i'"),
    ("more than 64 ops", lambda p: _op(p, k=0) and p["gpus"][0]["threadblocks"][0]["ops"].extend(
        [{"name": "nop"}] * 60), "gpu 0 thread block 0: 75 ops (pipeline bodies included); the executor allows 64"),
    ("channel table overflow", lambda p: (p["gpus"][0]["channels"][0].update(connected_to=[1] * 17),
                                          p["gpus"][0]["threadblocks"][0]["channels"][0].update(
                                              channel_ids=list(range(17)))),
     "gpu 0 thread block 0: 17 memory channels in its table; the device table holds 16"),
    ("missing key", lambda p: _op(p, k=0)["src_buff"][0].pop("size"),
     "gpu 0 thread block 0 op 0 (copy) src_buff[0]: missing key 'size'"),
    ("wrong type", lambda p: p["gpus"][1].update(scratch_chunks="4"),
     "gpu 1 'scratch_chunks': must be an integer, not the string '4'"),
    ("top-level key", lambda p: p.pop("inplace"), "missing key 'inplace'"),
    ("float index", lambda p: _op(p, k=0)["src_buff"][0].update(index=1.5),
     "must be an integer, not the number 1.5 (the executor would truncate it)"),
    ("gpu id", lambda p: p["gpus"][1].update(id=0), "gpus[1] must have \"id\": 1"),
    ("thread block id", lambda p: p["gpus"][0]["threadblocks"][0].update(id=3), "threadblocks[0] must have \"id\": 0"),
    ("reduce op", lambda p: _op(p, k=6).update(reduce_op="max"), "the executor ignores reduce_op and always sums"),
    ("remote access type", lambda p: p["gpus"][0]["remote_buffers"][0].update(access_channel_types=["port"]),
     "remote buffer 0 is listed for memory access but declares access_channel_types ['port']"),
    ("peer is itself", lambda p: p["gpus"][0]["channels"][0].update(connected_to=[0]),
     "gpu 0: memory channel 0 connects to rank 0"),
    ("zero chunks", lambda p: p["gpus"][0].update(input_chunks=0), "'input_chunks' is 0"),
    ("inconsistent chunks", lambda p: p["gpus"][0].update(output_chunks=2),
     "allreduce buffers need input_chunks == output_chunks"),
    ("mixed union", lambda p: _op(p, k=2).update(semaphore_ids=[0]), "mixes channel_ids, semaphore_ids"),
    ("not JSON", None, "not valid JSON"),
]


@pytest.mark.parametrize("what, mutate, expect", LOADER, ids=[x[0] for x in LOADER])
def test_loader_rules_are_one_line_errors_naming_the_element(what, mutate, expect):
    plan = _vector(GOOD[0])
    if mutate is None:
        text = json.dumps(plan)[:-3]
    else:
        mutate(plan)
        text = json.dumps(plan)
    with pytest.raises(PlanFormatError) as e:
        read_plan_text(text, "plan.json")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("plan.json: ") and expect in msg, msg


def _plan(alg="ring", n=4, **opts):
    return json.loads(emit_plan(build_schedule(alg, n), **opts))


def test_dropping_the_nop_before_a_signal_is_a_race():
    plan = _plan()
    ops = plan["gpus"][1]["threadblocks"][0]["ops"]
    k = next(i for i in range(1, len(ops)) if ops[i]["name"] == "signal" and ops[i - 1]["name"] == "nop"
             and ops[i - 2]["name"] == "put")
    del ops[k - 1]
    report = _check(plan)
    assert not report.ok and report.kind == "race" and "without synchronizing" in report.message


def test_dropping_a_wait_unbalances_the_semaphores():
    plan = _plan()
    ops = plan["gpus"][2]["threadblocks"][0]["ops"]
    k = max(i for i, o in enumerate(ops) if o["name"] == "wait")
    del ops[k]
    report = _check(plan)
    assert not report.ok and report.kind == "semaphore"
    assert report.message.startswith("FAIL unbalanced semaphores: gpu 2's memory channel")
    assert "the counter carries over, so the next launch starts out of step" in report.message


def _two_buffer_transfer():
    """A 3-rank ring ReduceScatter whose last transfer moves 2 chunks, one from the input and one from scratch:
    it lowers to two puts to one peer in one step, so the signal and the wait name the same channel twice."""
    s = build_schedule("ring", 3, collective="reducescatter")
    count = s.count.copy()
    count[(s.step == 1) & (s.src == 2)] = 2
    s = dataclasses.replace(s, count=count)
    assert verify(s).ok
    return s


def test_a_wait_naming_one_channel_twice_takes_two_tickets():
    # fuzz run 6 (issue 13): this crashed the checker (KeyError, exit 3). The executor takes each lane's ticket
    # with an atomic increment (semaphore_device.hpp incExpectedInbound), so the two lanes wait for two signals
    plan = json.loads(emit_plan(_two_buffer_transfer()))
    lanes = [(g["id"], o["name"], o["channel_ids"]) for g in plan["gpus"] for tb in g["threadblocks"]
             for o in tb["ops"] if o["name"] in ("signal", "wait")
             and len(set(o["channel_ids"])) < len(o["channel_ids"])]
    assert [x[1] for x in lanes] == ["wait", "signal"], lanes
    assert _check(plan).ok
    # one signal less: the second lane's ticket is never reached
    g = next(g for g in plan["gpus"] if g["id"] == lanes[1][0])
    op = next(o for tb in g["threadblocks"] for o in tb["ops"]
              if o["name"] == "signal" and o["channel_ids"] == lanes[1][2])
    op["channel_ids"] = op["channel_ids"][:1]
    report = _check(plan)
    assert not report.ok and report.kind in ("deadlock", "semaphore"), report.message


def test_waiting_before_signalling_deadlocks():
    plan = _vector(GOOD[0])
    for g in plan["gpus"]:
        ops = g["threadblocks"][0]["ops"]
        ops[2], ops[4] = ops[4], ops[2]  # wait first, then signal: both ranks wait forever
    report = _check(plan)
    assert not report.ok and report.kind == "deadlock"
    assert "deadlock: gpu 0 thread block 0 op 2 (wait) waits on gpu 0's memory channel 0" in report.message


def test_reading_the_wrong_chunk_is_a_wrong_result_naming_the_op():
    plan = _plan("ring", 4)
    ops = plan["gpus"][3]["threadblocks"][0]["ops"]
    re = [o for o in ops if o["name"] == "re"][-1]
    re["src_buff"][0]["index"] = (re["src_buff"][0]["index"] + 1) % 4
    report = _check(plan)
    assert not report.ok and report.kind == "result"
    assert report.message == ("FAIL wrong result on gpu 1: output bytes 48..63 (chunk 3): gpu 3 thread block 0 op 20 "
                              "(re) adds element 48 to element 0 (different data)")


def test_a_barrier_that_counts_a_different_number_of_blocks_hangs():
    plan = _vector(GOOD[4])
    tbs = plan["gpus"][0]["threadblocks"]
    tbs[0]["ops"].insert(0, {"name": "barrier", "barrier_id": 0, "num_threadblocks": 8})
    tbs[1]["ops"].insert(0, {"name": "barrier", "barrier_id": 0, "num_threadblocks": 2})
    report = _check(plan)
    assert not report.ok and report.kind == "deadlock" and "barrier 0 on gpu 0" in report.message


@pytest.mark.parametrize("alg, n, proto", [("stragglar", 6, "Simple"), ("stragglar", 6, "LL"), ("rhd", 4, "Simple")])
def test_every_changed_index_of_an_emitted_plan_is_caught(alg, n, proto):
    plan = _plan(alg, n, proto=proto)
    tried = 0
    for g, gpu in enumerate(plan["gpus"]):
        for t, tb in enumerate(gpu["threadblocks"]):
            for k, op in enumerate(tb["ops"]):
                for side in ("src_buff", "dst_buff"):
                    for i, ref in enumerate(op.get(side, [])):
                        if (g + k + i) % 3:  # a third of them keeps the test fast
                            continue
                        p2 = copy.deepcopy(plan)
                        r2 = p2["gpus"][g]["threadblocks"][t]["ops"][k][side][i]
                        r2["index"] = ref["index"] + 1 if ref["index"] == 0 else ref["index"] - 1
                        tried += 1
                        try:
                            report = _check(p2)
                        except PlanFormatError:
                            continue
                        assert not report.ok, (g, t, k, side, i)
    assert tried > 20


def test_every_nop_of_a_pipelined_port_plan_matters_or_is_provably_redundant():
    plan = _plan("ring", 4, gpus_per_node=2, pipeline=256)
    body_ops = [(g, t, k) for g, gpu in enumerate(plan["gpus"]) for t, tb in enumerate(gpu["threadblocks"])
                for k, op in enumerate(tb["ops"][-1]["ops"]) if op["name"] == "nop"]
    caught = 0
    for g, t, k in body_ops:
        p2 = copy.deepcopy(plan)
        del p2["gpus"][g]["threadblocks"][t]["ops"][-1]["ops"][k]
        caught += not _check(p2).ok
    assert caught >= len(body_ops) // 2  # the rest only separate chain links (sem_release after a nop)


def test_checking_at_a_given_size(tmp_path, capsys):
    text = emit_plan(build_schedule("ring", 4), pipeline=4096)
    p = tmp_path / "p.json"
    p.write_text(text)
    assert main(["verify", str(p), "--size", "64KiB"]) == 0
    assert "run at 16384-byte chunks" in capsys.readouterr().out
    assert main(["verify", str(p), "--size", "100"]) == 2
    assert "cannot be cut into 4 chunks" in capsys.readouterr().err


def _two_releasers_plan() -> dict:
    """Ring n = 2 plus four thread blocks on gpu 0 around device semaphore 0: A writes a scratch chunk and
    releases it, B releases it once D has released semaphore 1, C acquires it twice and reads A's chunk after
    the first. The executor runs B's release last, but on a GPU D and B can run first, so C's first acquire
    may count B's release: C's read races with A's write."""
    plan = _plan("ring", 2)
    g = plan["gpus"][0]
    base = g["scratch_chunks"]
    g["scratch_chunks"] = base + 3
    g["semaphores"] = [{"init_value": 0}, {"init_value": 0}]

    def s(k: int) -> dict:
        return {"type": "s", "index": base + k, "size": 1}

    blocks = ([{"name": "copy", "src_buff": [s(1)], "dst_buff": [s(0)]}, {"name": "nop"},
               {"name": "sem_release", "semaphore_ids": [0]}],
              [{"name": "sem_acquire", "semaphore_ids": [1]}, {"name": "sem_release", "semaphore_ids": [0]}],
              [{"name": "sem_acquire", "semaphore_ids": [0]}, {"name": "nop"},
               {"name": "copy", "src_buff": [s(0)], "dst_buff": [s(2)]}, {"name": "sem_acquire", "semaphore_ids": [0]}],
              [{"name": "sem_release", "semaphore_ids": [1]}])
    n0 = len(g["threadblocks"])
    for k, ops in enumerate(blocks):
        g["threadblocks"].append({"id": n0 + k, "channels": [], "remote_buffer_refs": [], "ops": ops})
    return plan


def test_a_wait_counts_only_the_signals_it_is_sure_of_when_several_blocks_signal():
    # a counter that several thread blocks signal in the whole plan: a wait is sure only of the signals that
    # come first whatever the others do, even while only one of them has signalled so far (before: the race
    # showed only in launch 2, once both had signalled)
    report = _check(_two_releasers_plan())
    assert not report.ok and report.kind == "race"
    assert report.message.startswith("FAIL race: gpu 0 thread block 3 op 2 (copy) reads bytes 32..47 (chunk 2) of "
                                     "gpu 0's scratch that gpu 0 thread block 1 op 0 (copy) wrote"), report.message
    # A releases twice and B not at all: C's first acquire counts A's first release, so the read is ordered
    plan = _two_releasers_plan()
    tbs = plan["gpus"][0]["threadblocks"]
    tbs[1]["ops"].append(tbs[2]["ops"].pop())
    assert [o["name"] for o in tbs[1]["ops"]] == ["copy", "nop", "sem_release", "sem_release"]
    assert _check(plan).ok


def test_clocks_too_small_for_the_ticks_start_over_with_larger_ones(monkeypatch):
    from collsynth.backends.mscclpp import execute

    plan = json.dumps(_plan("ring", 4, gpus_per_node=2, pipeline=256))
    race = json.dumps(_vector(TBG))
    want = [check_plan_text(t, "p") for t in (plan, race)]
    assert want[0].ok and not want[1].ok
    used: list[type] = []
    real = execute.Executor

    def spy(*args):
        used.append(args[-1])
        return real(*args)

    monkeypatch.setattr(execute, "CLOCKS", (np.int8, np.int32))
    monkeypatch.setattr(execute, "Executor", spy)
    monkeypatch.setattr(execute, "least_ticks", lambda *a: 0)  # try 8 bits: the run finds out
    got = [check_plan_text(t, "p") for t in (plan, race)]
    assert [(r.ok, r.message, r.details) for r in got] == [(r.ok, r.message, r.details) for r in want]
    assert used[:2] == [np.int8, np.int32]  # the plan's ticks outgrow 8 bits


def test_a_plan_whose_longest_block_outgrows_the_small_clocks_starts_with_larger_ones(monkeypatch):
    from collsynth.backends.mscclpp import execute
    from collsynth.backends.mscclpp.load import choose_chunk

    text = emit_plan(build_schedule("ring", 4), gpus_per_node=2, pipeline=256)
    plan = read_plan_text(text, "p")
    ticks = execute.least_ticks(plan, choose_chunk(plan), 2)
    assert 127 < ticks < 32767  # 8 bits cannot hold them, 16 can
    used: list[type] = []
    real = execute.Executor

    def spy(*args):
        used.append(args[-1])
        return real(*args)

    monkeypatch.setattr(execute, "Executor", spy)
    monkeypatch.setattr(execute, "CLOCKS", (np.int8, np.int16, np.int32))
    assert check_plan_text(text, "p").ok
    assert used == [np.int16]  # int8 not even tried: the longest block alone outgrows it


def _light(obj: dict) -> set:
    """The proxies of a plan that get no clock entry (exec_proxies.light_proxies)."""
    from collsynth.backends.mscclpp.exec_proxies import light_proxies
    from collsynth.backends.mscclpp.load import channel_pairs, choose_chunk, flatten

    plan = read_plan_text(json.dumps(obj), "p")
    tbs = [(g.id, tb) for g in plan.gpus for tb in g.tbs]
    return light_proxies(plan, tbs, [flatten(plan, tb, choose_chunk(plan)) for _, tb in tbs], channel_pairs(plan))


def _relay_plan(nop_before_relay: bool = False) -> dict:
    """Two ranks over port channels: rank 0 puts its scratch chunk to rank 1 (pws), waits for rank 1's reply
    and then overwrites the chunk it sent; rank 1 replies on the thread that waited, before any nop. Only
    that thread knows the put was served, so the reply publishes it (the proxy keeps its clock entry)."""
    def ref(t: str, k: int = 0) -> dict:
        return {"type": t, "index": k, "size": 1}

    def port(name: str, **kw) -> dict:
        return {"name": name, "channel_ids": [0], "channel_type": "port", **kw}

    rank0 = [{"name": "copy", "src_buff": [ref("i")], "dst_buff": [ref("s")]}, {"name": "nop"},
             port("pws", src_buff=[ref("s")], dst_buff=[{"buffer_id": 0, "index": 0, "size": 1}]),
             port("wait"), {"name": "nop"}, {"name": "copy", "src_buff": [ref("i")], "dst_buff": [ref("s")]},
             port("wait")]
    rank1 = [port("wait"), *([{"name": "nop"}] if nop_before_relay else []), port("signal"), {"name": "nop"},
             {"name": "copy", "src_buff": [ref("s")], "dst_buff": [ref("o")]}, {"name": "nop"}, port("signal")]
    gpus = [{"id": r, "input_chunks": 1, "output_chunks": 1, "scratch_chunks": 1,
             "threadblocks": [{"id": 0, "ops": ops, "channels": [{"channel_type": "port", "channel_ids": [0]}],
                               "remote_buffer_refs": [{"access_channel_type": "port", "remote_buffer_ids": [0]}]}],
             "channels": [{"channel_type": "port", "connected_to": [1 - r]}],
             "remote_buffers": [{"rank": 1 - r, "type": "s", "access_channel_types": ["port"]}], "semaphores": []}
            for r, ops in enumerate((rank0, rank1))]
    return {"name": "relay", "collective": "sendrecv", "protocol": "Simple", "inplace": False,
            "reuse_resources": False, "gpus": gpus}


def test_a_wait_relayed_before_a_nop_keeps_the_proxy_clock_entry(monkeypatch):
    # a proxy gets no clock entry when its one waiter and its one pusher publish what they learn of it only
    # with their own tick (exec_proxies.py); rank 1 here replies from the lane that waited, before a nop
    from collsynth.backends.mscclpp import check

    assert _light(_relay_plan()) == {(1, 0)}  # rank 0's proxy keeps its entry: rank 1 relays its signal
    assert _light(_relay_plan(nop_before_relay=True)) == {(0, 0), (1, 0)}
    assert _check(_relay_plan()).ok and _check(_relay_plan(nop_before_relay=True)).ok
    # were rank 0's proxy light all the same, rank 0 could not know the put was served: a (false) race
    monkeypatch.setattr(check, "plan_light_proxies", lambda plan, *a: {(0, 0), (1, 0)})
    report = _check(_relay_plan())
    assert not report.ok and report.kind == "race" and "gpu 0's proxy for port channel 0" in report.message, \
        report.message
    assert _check(_relay_plan(nop_before_relay=True)).ok


def _port_mutants() -> list[str]:
    """Plans with port channels (a ring over two nodes, clusterstraggler's late-GPU form on 2 x 8 H100s) and
    mutants of each (16 and 10), spread evenly over their nops, waits, signals, flushes and puts: a nop
    deleted, another op swapped with the next one (races, deadlocks, wrong results)."""
    cs = build_schedule("clusterstraggler", 16, topology="h100-cluster", size=2**26, arrivals={5: 0.01})
    out = []
    for plan, count in ((_plan("ring", 4, gpus_per_node=2), 16), (json.loads(emit_plan(cs)), 10)):
        out.append(json.dumps(plan))
        where = [(g, t, i) for g, gpu in enumerate(plan["gpus"]) for t, tb in enumerate(gpu["threadblocks"])
                 for i, op in enumerate(tb["ops"]) if op["name"] in ("nop", "wait", "signal", "flush", "put", "pws",
                                                                      "pwsf")]
        for k in range(count):
            g, t, i = where[k * len(where) // count]
            ops = plan["gpus"][g]["threadblocks"][t]["ops"]
            kept = ops[:]
            if ops[i]["name"] == "nop" or i + 1 == len(ops):
                del ops[i]
            else:
                ops[i], ops[i + 1] = ops[i + 1], ops[i]
            out.append(json.dumps(plan))
            ops[:] = kept
    return out


def test_light_proxies_give_the_verdicts_of_proxies_with_clock_entries(monkeypatch):
    from collsynth.backends.mscclpp import check

    plans = _port_mutants()

    def run() -> list:
        out = []
        for text in plans:
            try:
                r = check_plan_text(text, "p")
                out.append((r.ok, r.kind, r.message, r.details))
            except PlanFormatError as e:
                out.append(("format", str(e)))
        return out

    light = run()
    monkeypatch.setattr(check, "plan_light_proxies", lambda *a: set())
    assert run() == light
    assert light[0][0] is True and light[17][0] is True and sum(x[1] == "race" for x in light) >= 10, light
    for k in (0, 17):  # every proxy of the unmutated plans is light: the test runs the light path
        plan = json.loads(plans[k])
        assert len(_light(plan)) == sum(len(c["connected_to"]) for g in plan["gpus"] for c in g["channels"]
                                        if c["channel_type"] == "port") > 0
