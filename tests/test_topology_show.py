"""`collsynth topology show` and synth.topology_view: description, bisection bandwidth (max flow, checked
against hand counts), the plot, imported files."""

from __future__ import annotations

import json
import os

import pytest
from shared_paths import vectors

from collsynth.cli import main
from collsynth.synth.topology import make_topology, topology_from_dict
from collsynth.synth.topology_import import import_topology
from collsynth.synth.topology_view import bisection_bandwidth, describe

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "topologies")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_bisection_by_hand():
    # dgx1: links between the quads 0-4 (2 NVLinks), 1-5 (1), 2-6 (2), 3-7 (1) at 25 GB/s each
    assert bisection_bandwidth(make_topology("dgx1", 8)) == (pytest.approx(6 * 25e9), "GPUs 0-3 | 4-7")
    # nvswitch: 4 GPUs' ports into the switch
    assert bisection_bandwidth(make_topology("nvswitch", 8, bandwidth=1e9))[0] == pytest.approx(4e9)
    # ring of 8: two links cross the cut
    assert bisection_bandwidth(make_topology("ring", 8, bandwidth=1e9))[0] == pytest.approx(2e9)
    # rail cluster of 4 nodes: the 16 NICs of nodes 0-1 at 50 GB/s
    value, how = bisection_bandwidth(make_topology(os.path.join(FIX, "dgx_h100_x4_rail.json"), 32))
    assert (value, how) == (pytest.approx(16 * 50e9), "nodes 0-1 | 2-3")


def test_bisection_sees_oversubscription():
    t = import_topology(os.path.join(FIX, "dgx_h100_8nic.xml"), nodes=4, fabric="fat-tree", oversubscription=4)
    topo = topology_from_dict(t.topology)
    # leaf -> spine carries 8 x 50 / 4 = 100 GB/s per node: two nodes send 200 GB/s across
    assert bisection_bandwidth(topo)[0] == pytest.approx(200e9)


def test_describe_cluster_classes():
    d = describe(make_topology(os.path.join(FIX, "dgx_h100_x4_rail.json"), 32))
    assert (d["gpus"], d["nodes"], d["gpus_per_node"], d["fabric"]) == (32, 4, [8], "rail")
    assert d["classes"]["nvlink"]["bandwidth_Bps"] == pytest.approx(18 * 20.6e9)
    assert d["classes"]["net"]["bandwidth_Bps"] == pytest.approx(50e9)


def test_show_cli_text_json_and_plot(capsys, tmp_path):
    code, out, _ = run(capsys, "topology", "show", "dgx1")
    assert code == 0 and "8 GPUs in one node" in out and "bisection bandwidth (GPUs 0-3 | 4-7): 150 GB/s" in out
    png = tmp_path / "t.png"
    code, out, _ = run(capsys, "topology", "show", os.path.join(FIX, "dgx_h100_x4_rail.json"), "--plot", str(png),
                       "--json")
    d = json.loads(out)
    assert code == 0 and d["bisection_Bps"] == pytest.approx(800e9) and d["plot"] == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    first = png.read_bytes()
    run(capsys, "topology", "show", os.path.join(FIX, "dgx_h100_x4_rail.json"), "--plot", str(png))
    assert png.read_bytes() == first  # deterministic


def test_show_imports_xml_and_smi_on_the_fly(capsys):
    code, out, _ = run(capsys, "topology", "show", os.path.join(FIX, "dgx_h100_8nic.xml"))
    assert code == 0 and out.startswith("imported ") and "nvlink  1 port, alpha 3.400 us, 370.8 GB/s" in out
    assert "  - 4 NVSwitch chips modelled as one non-blocking switch" in out
    code, out, _ = run(capsys, "topology", "show", vectors("topologies", "smi", "dgx1-v100-msccl-tools-test.txt"))
    assert code == 0 and "bisection bandwidth (GPUs 0-3 | 4-7): 120 GB/s" in out  # 6 NVLinks x 20 GB/s


@pytest.mark.parametrize("argv, msg", [
    (["nosuch"], "unknown topology 'nosuch'"),
    (["dgx1", "--plot", "x.jpg"], "--plot writes PNG"),
    (["nvswitch", "--bandwidth", "net=50GB/s"], "names link class 'net'"),
])
def test_show_bad_input(capsys, argv, msg):
    code, _, err = run(capsys, "topology", "show", *argv)
    assert code == 2 and msg in err and err.count("\n") == 1


IMPORTABLE = [p for p in sorted(os.listdir(vectors("topologies", "nccl-xml"))) if p != "azure-ndv5-topo.xml"]


@pytest.mark.parametrize("name", IMPORTABLE + ["smi/" + p for p in sorted(os.listdir(vectors("topologies", "smi")))])
def test_every_import_loads_as_a_topology(name):
    path = vectors("topologies", name if name.startswith("smi/") else os.path.join("nccl-xml", name))
    res = import_topology(path)
    topo = topology_from_dict(res.topology)
    assert topo.nranks == len(res.model.gpus) and set(topo.classes) == set(res.topology["ports"])
    if res.model.nics:
        for fabric in ("rail", "fat-tree"):
            c = topology_from_dict(import_topology(path, nodes=3, fabric=fabric).topology)
            assert c.node_count == 3 and c.fabric == fabric and "net" in c.classes
            assert c.transfer_class(0, topo.nranks) == ("net", "net")  # GPU 0 to its peer in node 1


def test_rail_routes_cross_nvlink_first_like_pxn():
    topo = make_topology(os.path.join(FIX, "dgx_h100_x4_rail.json"), 32)
    hops = lambda s, d: [topo.nodes[int(topo.link_dst[x])] for x in topo.path_links(s, d)]  # noqa: E731
    assert hops(0, 8) == ["rail0", 8]  # same rail: one switch hop
    assert hops(0, 9) == ["n0.nvswitch", 1, "rail1", 9]  # other rail: NVLink to GPU 1 first (PXN)
    assert hops(0, 3) == ["n0.nvswitch", 3]
    assert topo.transfer_class(0, 9) == ("nvlink", "net")
