"""MSCCL++ plans that need more thread blocks than can be resident: the count ``fits`` and ``thread_blocks``
report is the emitter's own (fewer peers per block where channel tables overflow), and `synth --format
mscclpp-plan` fits clusterstraggler's automatic block count to the limit (backends/mscclpp/fit.py)."""

from __future__ import annotations

import re

import pytest
from shared_paths import vectors

from collsynth.backends.layout import nodes_of
from collsynth.backends.mscclpp import emit_plan, fit_cluster_pipeline
from collsynth.backends.mscclpp.emit import fits, plan_chunks, thread_blocks
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


def test_fits_counts_the_thread_blocks_the_emitter_needs(tmp_path):
    """Four H200 nodes sharing one NIC each: at 16 blocks per part the channel tables overflow with 8 peers per
    thread block, so the emitter uses fewer and needs far more blocks; fits() used to count the first try."""
    path = tmp_path / "h200x4.json"
    path.write_text(dumps_topology(import_topology(H200_XML, nodes=4, fabric="rail").topology))
    t = make_topology(str(path), 32)
    s = build_schedule("clusterstraggler", 32, arrivals={5: 2.0}, size=2**28, topology=t, pipeline=16)
    lay = Layout(s.collective, s.nranks, s.nchunks)
    M = plan_chunks(s, None)
    pcs, _ = pieces(s, lay, nodes_of(s, None), M)
    first_try = max(p.seg + 1 for p in build_programs(s, pcs, packets=False, pipeline=False, budget_peers=8,
                                                         allgather_copy=False, M=M))
    worst, need = thread_blocks(s)
    assert first_try <= 132 < need  # the case this test is about
    ok, why = fits(s)
    assert not ok and f"rank {worst} needs {need} thread blocks" in why
    with pytest.raises(CollsynthError) as e:
        emit_plan(s)
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
    t = make_topology("h100-cluster", 16)
    late = {r: 0.05 for r in range(8, 16)}
    params = {"arrivals": late, "size": 2**30, "topology": t}
    s = build_schedule("clusterstraggler", 16, **params)
    assert s.meta["form"] == "node" and thread_blocks(s)[1] > 6
    fitted, note = fit_cluster_pipeline(s, params, sms=6)
    assert fitted.meta["form"] == "node" and fitted.meta["pipeline"] < s.meta["pipeline"]
    assert thread_blocks(fitted)[1] <= 6 and "the most whose plan fits" in note
    assert fit_cluster_pipeline(s, params)[1] == ""  # 132 SMs hold it as built
    ring = build_schedule("ring", 16)
    assert fit_cluster_pipeline(ring, {}, sms=1) == (ring, "")  # emit_plan names the limit for the rest
    with pytest.raises(CollsynthError, match="the largest --pipeline that fits is"):
        fit_cluster_pipeline(s, {**params, "pipeline": s.meta["pipeline"]}, sms=6)
