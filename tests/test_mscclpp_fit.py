"""MSCCL++ plans that need more thread blocks than can be resident: the count ``fits`` and ``thread_blocks``
report is the emitter's own (the ranks whose blocks overflow cut again, alone), and `synth --format
mscclpp-plan` fits clusterstraggler's automatic block count to the limit (backends/mscclpp/fit.py)."""

from __future__ import annotations

import json
import re

import pytest
from shared_paths import vectors

from collsynth.backends.layout import nodes_of
from collsynth.backends.mscclpp import emit as emit_module
from collsynth.backends.mscclpp import emit_plan, fit_cluster_pipeline
from collsynth.backends.mscclpp.emit import fits, plan_chunks, thread_blocks
from collsynth.backends.mscclpp.fit import fit_hint, largest_within
from collsynth.backends.mscclpp.lower import Layout, build_programs, pieces
from collsynth.cli import main
from collsynth.errors import CollsynthError
from collsynth.synth.registry import build_schedule
from collsynth.synth.topology import make_topology
from collsynth.synth.topology_import import dumps_topology, import_topology

H200_XML = vectors("topologies", "nccl-xml", "vastai-hgx-h200-8x-container.xml")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_only_the_ranks_that_overflow_get_smaller_thread_blocks(tmp_path, monkeypatch):
    """Four H200 nodes sharing one NIC each, 16 blocks per part: cut with 8 peers per thread block, one rank's
    block renders more than 64 ops (its channels to a peer outnumber the handshake estimate). The emitter
    used to halve every rank's peers until none overflowed (23 -> 139 thread blocks, more than 132 SMs); it
    now keeps ops free on that rank only, so the plan needs as many blocks as the first cut and emits. fits()
    and thread_blocks() report the emitter's own count."""
    path = tmp_path / "h200x4.json"
    path.write_text(dumps_topology(import_topology(H200_XML, nodes=4, fabric="rail").topology))
    t = make_topology(str(path), 32)
    s = build_schedule("clusterstraggler", 32, arrivals={5: 2.0}, size=2**28, topology=t, pipeline=16)
    lay = Layout(s.collective, s.nranks, s.nchunks)
    M = plan_chunks(s, None)
    pcs, _ = pieces(s, lay, nodes_of(s, None), M)

    def cut(budget):
        return [p.seg + 1 for p in build_programs(s, pcs, packets=False, pipeline=False, budget_peers=budget,
                                                  allgather_copy=False, M=M)]

    first_try = cut(8)
    calls = []

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return build_programs(*args, **kwargs)

    monkeypatch.setattr(emit_module, "build_programs", recording)
    worst, need = thread_blocks(s)
    assert len(calls) >= 2 and calls[0].get("only") is None
    again = set().union(*(c["only"] for c in calls[1:]))
    assert 1 <= len(again) < s.nranks // 4  # the first cut overflowed, on a few ranks only, which are cut again
    assert all(c["slack"][r] > 0 for c in calls[1:] for r in c["only"])  # with ops kept free, not fewer peers
    assert all(b == 8 for c in calls for b in c["budget_peers"])
    monkeypatch.undo()
    assert max(first_try) <= need < max(cut(4)) < 132 < max(cut(2))  # the case this test is about
    plan = json.loads(emit_plan(s))  # checked by the emitter
    counts = [len(g["threadblocks"]) for g in plan["gpus"]]
    assert max(counts) == need and counts.index(need) == worst
    for g in plan["gpus"]:
        for tb in g["threadblocks"]:
            assert len(tb["ops"]) <= 64 and all(len(c["channel_ids"]) <= 16 for c in tb["channels"])
    assert fits(s)[0]
    ok, why = fits(s, sms=need - 1)
    assert not ok and f"rank {worst} needs {need} thread blocks" in why
    with pytest.raises(CollsynthError) as e:
        emit_plan(s, sms=need - 1)
    assert f"rank {worst} needs {need} thread blocks" in str(e.value)


def test_synth_fits_the_automatic_block_count(tmp_path, capsys):
    out = tmp_path / "plan.json"
    argv = ["synth", "-a", "clusterstraggler", "-n", "16", "-t", "h100-cluster", "--arrival", "5=50ms",
            "-f", "mscclpp-plan", "--sms", "20"]
    code, _, err = run(capsys, *argv, "-o", str(out))
    assert code == 0, err
    m = re.search(r"--pipeline auto: (\d+) blocks per part need (\d+) thread blocks per rank, more than the 20 that "
                  r"can be resident; built with (\d+), the most whose plan fits \(after the arrival, estimated", err)
    assert m, err
    auto, need, best = map(int, m.groups())
    assert need > 20 and 1 <= best < auto
    assert run(capsys, "verify", str(out))[0] == 0
    t = make_topology("h100-cluster", 16)

    def blocks(x):
        return thread_blocks(build_schedule("clusterstraggler", 16, arrivals={5: 0.05}, size=2**30, topology=t,
                                            pipeline=x))[1]

    assert blocks(best) <= 20 < blocks(best + 1)
    assert blocks(auto) == need
    # a block count the user gives is kept: refused, naming the most that fit
    code, _, err = run(capsys, *argv, "--pipeline", str(auto), "-o", str(tmp_path / "x.json"))
    assert code == 2 and err.count("\n") == 1 and not (tmp_path / "x.json").exists()
    assert f"needs {need} thread blocks" in err and f"the largest --pipeline that fits is {best}," in err


def test_a_late_node_is_fitted_too_and_other_schedules_are_left_alone():
    t = make_topology("h100-cluster", 32)  # 4 x 8: 9 blocks per part (2 x 8: 3, the fewest of a tie)
    late = {r: 0.05 for r in range(8, 16)}
    params = {"arrivals": late, "size": 2**30, "topology": t}
    s = build_schedule("clusterstraggler", 32, **params)
    sms = 6
    assert s.meta["form"] == "node" and thread_blocks(s)[1] > sms
    fitted, note = fit_cluster_pipeline(s, params, sms=sms)
    assert fitted.meta["form"] == "node" and fitted.meta["pipeline"] < s.meta["pipeline"]
    assert thread_blocks(fitted)[1] <= sms and "the most whose plan fits" in note
    more = build_schedule("clusterstraggler", 32, **params, pipeline=fitted.meta["pipeline"] + 1)
    assert thread_blocks(more)[1] > sms  # the most, not just some
    # 9 blocks per part need 14 thread blocks and 8 need 13: with 13 resident, the search reaches M - 1 = 8
    assert s.meta["pipeline"] == 9 and fit_cluster_pipeline(s, params, sms=13)[0].meta["pipeline"] == 8
    assert fit_cluster_pipeline(s, params)[1] == ""  # 132 SMs hold it as built
    ring = build_schedule("ring", 16)
    assert fit_cluster_pipeline(ring, {}, sms=1) == (ring, "")  # emit_plan names the limit for the rest
    with pytest.raises(CollsynthError, match="the largest --pipeline that fits is"):
        fit_cluster_pipeline(s, {**params, "pipeline": s.meta["pipeline"]}, sms=sms)


@pytest.mark.parametrize("shape", ["linear", "offset", "steps", "unusable", "none"])
def test_largest_within_matches_a_scan_and_probes_linear_counts_a_few_times(shape):
    counts = {"linear": lambda x: 6 * x + 4, "offset": lambda x: 40 + 2 * x,
              "steps": lambda x: 10 * x + (300 if x >= 17 else 0),
              "unusable": lambda x: None if 12 <= x <= 14 else 5 * x, "none": lambda x: 500 + x}[shape]
    for limit in (60, 100, 132, 400):
        probes = []

        def count(x):
            probes.append(x)
            return counts(x)

        M = 70  # the block count the build chose, whose count is over the limit
        if counts(M) <= limit:
            continue
        best = largest_within(1, M - 1, count, limit, (M, counts(M)))
        ok = [x for x in range(1, M) if counts(x) is not None and counts(x) <= limit]
        expected = max(ok) if ok and shape != "unusable" else (max(ok, default=0))
        if shape == "unusable":  # the search treats unusable counts as too many, like a bisection would
            assert best in ok or best == 0
        else:
            assert best == expected
        # a range that ends below the known count: never beyond hi
        assert largest_within(1, 9, counts, limit, (M, counts(M))) == max([x for x in ok if x <= 9], default=0) \
            or shape == "unusable"
        assert len(probes) == len(set(probes)) and all(1 <= x < M for x in probes)
        if shape == "linear":
            assert len(probes) <= 3, probes



def test_the_hint_for_a_pipelined_stragglar_names_the_largest_pipeline_or_says_none_fits():
    """With 2 resident thread blocks (--sms 2): StragglAR on 8 GPUs needs 2 at --pipeline 1 and 3 at 2, on 16 GPUs 4
    and 6, so the hint is --pipeline 1 for the first and none for the second (not "the largest is 0")."""
    assert [thread_blocks(build_schedule("stragglar", n, pipeline=k))[1] for n in (8, 16) for k in (1, 2)] == \
        [2, 3, 4, 6]
    assert fit_hint(build_schedule("stragglar", 8, pipeline=2), sms=2) == "the largest --pipeline that fits is 1"
    assert fit_hint(build_schedule("stragglar", 16, pipeline=2), sms=2) == "no --pipeline fits on this many GPUs"

def test_the_lowering_that_counted_the_thread_blocks_is_the_one_emitted(monkeypatch):
    """synth counts a clusterstraggler schedule's thread blocks before it emits it: one lowering, not two (30 s
    at 512 GPUs). The memo holds one lowering, of the same schedule object with the same options."""
    lowerings = []
    real = emit_module.pieces

    def counting(s, *args, **kwargs):
        lowerings.append(s.nranks)
        return real(s, *args, **kwargs)

    monkeypatch.setattr(emit_module, "pieces", counting)
    s = build_schedule("clusterstraggler", 16, arrivals={5: 0.05}, size=2**30, topology="h100-cluster")
    need = thread_blocks(s)[1]
    text = emit_plan(s)
    assert len(lowerings) == 1
    plan = json.loads(text)
    assert max(len(g["threadblocks"]) for g in plan["gpus"]) == need
    assert emit_plan(s) == text and len(lowerings) == 2  # emitting took the memo: lowered again, same text
    assert fits(s)[0] and len(lowerings) == 3
    assert emit_plan(s, proto="LL") and len(lowerings) == 4  # other options: not the memo's lowering
    ring = build_schedule("ring", 16)
    thread_blocks(s)
    thread_blocks(ring)  # the memo now holds the ring's
    emit_plan(s)
    assert len(lowerings) == 7


def test_a_rank_whose_channel_table_overflows_gets_fewer_peers_per_thread_block(monkeypatch):
    """8 x 8 H100s, 4 blocks per part: cut with 8 peers per thread block, one block of one rank has more than
    16 channels (one per peer and peer's segment): that rank alone is cut again with 4 peers per block, and
    the plan (checked by the emitter) keeps every table within 16."""
    s = build_schedule("clusterstraggler", 64, arrivals={5: 0.05}, size=2**30, topology="h100-cluster", pipeline=4)
    calls = []
    real = emit_module.build_programs

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(emit_module, "build_programs", recording)
    need = thread_blocks(s)[1]
    assert len(calls) == 2
    halved = [r for r, b in enumerate(calls[1]["budget_peers"]) if b != 8]
    assert len(halved) == 1 and calls[1]["budget_peers"][halved[0]] == 4 and calls[1]["only"] == set(halved)
    plan = json.loads(emit_plan(s))
    assert max(len(g["threadblocks"]) for g in plan["gpus"]) == need
    assert all(len(c["channel_ids"]) <= 16 for g in plan["gpus"] for tb in g["threadblocks"] for c in tb["channels"])
