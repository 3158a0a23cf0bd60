"""`collsynth topology import`: every real file in ../shared/vectors/topologies, our DGX H100 fixture,
the cluster replication, hostile and malformed input, and the `topology` command group."""

from __future__ import annotations

import glob
import json
import os
import re

import pytest
from shared_paths import vectors

from collsynth.cli import main
from collsynth.errors import CollsynthError
from collsynth.synth import topology_import as ti
from collsynth.synth.topology import DGX1_LINKS
from collsynth.synth.topology_import import dumps_topology, import_topology, parse_nic_speed

H200_XML = vectors("topologies", "nccl-xml", "vastai-hgx-h200-8x-container.xml")
HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures", "topologies")
VEC = vectors("topologies")
XML = sorted(glob.glob(os.path.join(VEC, "nccl-xml", "*.xml")))
SMI = sorted(glob.glob(os.path.join(VEC, "smi", "*.txt")))
SKELETONS = {"azure-ndv5-topo.xml"}


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def links_of(topo, cls=None):
    return [ln for ln in topo["links"] if cls is None or ln["class"] == cls]


def test_the_vectors_are_there():
    assert len(XML) == 6 and len(SMI) == 5


@pytest.mark.parametrize("path", XML + SMI, ids=os.path.basename)
def test_every_vector_file_imports_or_is_refused_as_a_skeleton(path):
    if os.path.basename(path) in SKELETONS:
        with pytest.raises(CollsynthError, match="vendor topology skeleton.*NCCL_TOPO_DUMP_FILE"):
            import_topology(path)
        return
    res = import_topology(path)
    topo = res.topology
    assert topo["gpus"] == len(res.model.gpus) >= 2
    gpus_with_links = {x for ln in topo["links"] for x in (ln["src"], ln["dst"]) if isinstance(x, int)}
    assert gpus_with_links == set(range(topo["gpus"]))
    assert all(ln["bandwidth"] > 0 and ln["alpha"] >= 0 for ln in topo["links"])
    assert set(topo["ports"]) == {ln["class"] for ln in topo["links"]}
    assert res.assumptions  # something is always assumed (at least the per-link constants)
    if not res.model.nics:  # nvidia-smi does not list Perlmutter's Slingshot NICs
        with pytest.raises(CollsynthError, match="lists no NIC"):
            import_topology(path, nodes=2, fabric="rail")
        return
    two = import_topology(path, nodes=2, fabric="rail")
    assert two.topology["gpus"] == 2 * topo["gpus"] and two.topology["nodes"][1][0] == topo["gpus"]
    # the fabric's latency sits on its NIC-to-rail links: `topology show` printed "net ... alpha 0.0 ns" before,
    # the cheapest GPU link of the class; it is the route's, as the import says (NCCL's 14 us, tuning.cc)
    from collsynth.synth.topology import topology_from_dict

    t = topology_from_dict(two.topology)
    pairs = [(s, d) for s in range(t.nranks) for d in range(t.nranks) if s != d]
    net = [p for p in pairs if t.transfer_class(*p) == ("net", "net")]
    assert net and t.class_alpha("net") == pytest.approx(min(float(t.pair_table([p])[1][0]) for p in net))
    assert t.class_alpha("net") == pytest.approx(14e-6) and any("14us" in a for a in two.assumptions)


def test_h200_dump_nvswitch_chips_merged_and_socket_nic_deduplicated():
    res = import_topology(os.path.join(VEC, "nccl-xml", "vastai-hgx-h200-8x-container.xml"))
    assert res.model.switch_chips == 4 and res.model.switch_links == {g: 18 for g in range(8)}
    assert [ln["bandwidth"] for ln in links_of(res.topology)] == [18 * 20.6e9] * 8
    assert [(n.name, n.bandwidth, n.gpus, n.gdr) for n in res.model.nics] == [("eth0", 10e9 / 8, list(range(8)), False)]
    assert res.topology["switches"] == ["nvswitch"] and res.topology["ports"] == {"nvlink": 1}


def test_b200_hidden_nvswitch_uses_the_total_count_at_sm100():
    res = import_topology(os.path.join(VEC, "nccl-xml", "vastai-hgx-b200-8x-container-hidden-nvswitch.xml"))
    assert res.model.switch_chips == 0
    assert [ln["bandwidth"] for ln in links_of(res.topology)] == pytest.approx([18 * 40.1e9] * 8)
    assert any("hidden NVSwitch" in a for a in res.assumptions)


def test_a100_five_bonds_two_gpus_per_nic_behind_their_pcie_switches():
    res = import_topology(os.path.join(VEC, "nccl-xml", "aliyun-simai-8xa100-sxm4-80g-5bond-nic.xml"))
    assert {ln["bandwidth"] for ln in links_of(res.topology)} == {12 * 20e9}
    assert res.model.switch_chips == 6
    assert {n.name: n.gpus for n in res.model.nics} == {"mlx5_bond_0": [], "mlx5_bond_1": [0, 1],
                                                        "mlx5_bond_2": [2, 3], "mlx5_bond_3": [4, 5],
                                                        "mlx5_bond_4": [6, 7]}
    assert all(n.bandwidth == 200e9 / 8 for n in res.model.nics)


def test_perlmutter_direct_links_same_from_xml_and_smi():
    x = import_topology(os.path.join(VEC, "nccl-xml", "nersc-perlmutter-a100-4x-direct-nvlink.xml"))
    s = import_topology(os.path.join(VEC, "smi", "nersc-perlmutter-a100-4x.txt"))
    assert x.model.direct == s.model.direct == {(a, b): 4 for a in range(4) for b in range(a + 1, 4)}
    assert x.topology["links"] == s.topology["links"]
    assert [ln["bandwidth"] for ln in x.topology["links"]] == [4 * 20e9] * 6
    # every GPU has its own Slingshot NIC in the XML; nvidia-smi does not list them
    assert sorted(len(n.gpus) for n in x.model.nics) == [1, 1, 1, 1] and s.model.nics == []


def test_h200_same_machine_from_xml_and_smi():
    x = import_topology(os.path.join(VEC, "nccl-xml", "vastai-hgx-h200-8x-container.xml"))
    s = import_topology(os.path.join(VEC, "smi", "vastai-hgx-h200-8x-container.txt"))
    assert x.topology["links"] == s.topology["links"]
    assert [n.gpus for n in s.model.nics] == [[g] for g in range(8)]  # NIC k is PIX to GPU k


def test_pcie_only_box_goes_through_the_cpus():
    res = import_topology(os.path.join(VEC, "nccl-xml", "nccl-issue2397-2xa100-pcie-roce-gin-attrs.xml"))
    t = res.topology
    assert t["ports"] == {"pcie": 1} and t["switches"] == ["cpu0", "cpu1"]
    by = {(ln["src"], ln["dst"]): ln["bandwidth"] for ln in t["links"]}
    # Gen4 x16: 16 lanes x 120 / 80 = 24 GB/s (NCCL's formula); Intel model 106 >= 0x55: SKL_QPI_BW 10 GB/s
    assert by == {(0, "cpu0"): 24e9, (1, "cpu1"): 24e9, ("cpu0", "cpu1"): 10e9}
    assert [n.gpus for n in res.model.nics] == [[0], [1]]


def test_dgx1_matrix_is_the_dgx1_preset_up_to_gpu_numbering():
    import networkx as nx
    res = import_topology(os.path.join(VEC, "smi", "dgx1-v100-msccl-tools-test.txt"))
    assert sorted(res.model.direct.values()) == [1] * 8 + [2] * 8
    # the real machine numbers its GPUs differently from SCCL's table (0-3 is double here, 0-1 there)
    assert res.model.direct[0, 3] == 2 and res.model.direct[0, 1] == 1
    real, preset = nx.Graph(), nx.Graph()
    real.add_weighted_edges_from((a, b, k) for (a, b), k in res.model.direct.items())
    preset.add_weighted_edges_from(DGX1_LINKS)
    assert nx.is_isomorphic(real, preset, edge_match=lambda e, f: e["weight"] == f["weight"])
    assert {n.name: n.gpus for n in res.model.nics} == {"mlx5_0": [0, 1], "mlx5_2": [4, 5], "mlx5_1": [2, 3],
                                                        "mlx5_3": [6, 7]}


def test_smi_switch_detection_and_quirks():
    a100 = import_topology(os.path.join(VEC, "smi", "dgx-a100-gengwg-cheatsheets.txt"))
    assert a100.model.switch_links == {g: 12 for g in range(8)} and a100.model.direct == {}
    assert [n.name for n in a100.model.nics if not n.gpus] == ["mlx5_4", "mlx5_5", "mlx5_10", "mlx5_11"]
    vm = import_topology(os.path.join(VEC, "smi", "cloud-vm-8xa100-sxm4-40g-all-phb.txt"))
    assert any("PH0-115" in a for a in vm.assumptions)
    assert [n.gpus for n in vm.model.nics] == [[g] for g in range(8)]  # all PHB: spread one per GPU
    h = import_topology(os.path.join(VEC, "smi", "vastai-hgx-h200-8x-container.txt"), sm=100,
                        nic_speed=parse_nic_speed("400Gb/s"))
    assert [ln["bandwidth"] for ln in h.topology["links"]] == pytest.approx([18 * 40.1e9] * 8)
    assert {n.bandwidth for n in h.model.nics} == {50e9}


def test_nic_speed_overrides_the_xml():
    res = import_topology(H200_XML, nic_speed=50e9)
    assert [n.bandwidth for n in res.model.nics] == [50e9] and any("replaces" in a for a in res.assumptions)


def test_dgx_h100_fixture():
    res = import_topology(os.path.join(FIX, "dgx_h100_8nic.xml"))
    assert res.model.switch_chips == 4 and res.model.switch_links == {g: 18 for g in range(8)}
    assert [(n.name, n.bandwidth, n.gpus) for n in res.model.nics] == [(f"mlx5_{g}", 50e9, [g]) for g in range(8)]
    assert res.report()["node_gpus"][0]["nvlink_GBps"] == pytest.approx(370.8)


def test_cluster_fixture_is_what_the_command_writes(tmp_path, capsys):
    out = tmp_path / "c.json"
    code, _, _ = run(capsys, "topology", "import", os.path.join(FIX, "dgx_h100_8nic.xml"), "-o", str(out),
                     "--nodes", "4", "--fabric", "rail", "--name", "dgx-h100-x4-rail")
    assert code == 0
    with open(os.path.join(FIX, "dgx_h100_x4_rail.json")) as f:
        assert out.read_text() == f.read()


def test_rail_cluster_structure():
    t = import_topology(os.path.join(FIX, "dgx_h100_8nic.xml"), nodes=3, fabric="rail").topology
    assert t["gpus"] == 24 and t["nodes"] == [list(range(k * 8, k * 8 + 8)) for k in range(3)]
    net = links_of(t, "net")
    to_rail = {(ln["src"], ln["dst"]) for ln in net if isinstance(ln["src"], int)}
    assert to_rail == {(k * 8 + g, f"rail{g}") for k in range(3) for g in range(8)}
    spine = [ln for ln in net if ln["dst"] == "spine"]
    assert len(spine) == 8 and {ln["bandwidth"] for ln in spine} == {3 * 50e9}
    # node switches come before the fabric's, so ties between NVLink-first and spine routes go to NVLink
    assert t["switches"].index("n2.nvswitch") < t["switches"].index("rail0")


def test_fat_tree_oversubscription_and_shared_nics():
    t = import_topology(os.path.join(VEC, "smi", "dgx1-v100-msccl-tools-test.txt"), nodes=2, fabric="fat-tree",
                        oversubscription=2).topology
    spine = [ln for ln in t["links"] if ln["dst"] == "spine"]
    assert [(ln["src"], ln["bandwidth"]) for ln in spine] == [("leaf0", 4 * 12.5e9 / 2), ("leaf1", 4 * 12.5e9 / 2)]
    hubs = [s for s in t["switches"] if ".nic" in s]
    assert hubs == [f"n{k}.nic{j}" for k in range(2) for j in range(4)]
    gpu_to_hub = {(ln["src"], ln["dst"]) for ln in t["links"] if ln["dst"] in hubs}
    assert (0, "n0.nic0") in gpu_to_hub and (1, "n0.nic0") in gpu_to_hub and (9, "n1.nic0") in gpu_to_hub


@pytest.mark.parametrize("kwargs, msg", [
    ({"nodes": 2}, "needs a fabric"),
    ({"nodes": 0, "fabric": "rail"}, "--nodes must be an integer >= 1"),
    ({"nodes": 2, "fabric": "torus"}, "unknown fabric"),
    ({"nodes": 2, "fabric": "rail", "oversubscription": 0.5}, r"--oversubscription must be a number from 1 "),
    # above 1000 the spine links' bandwidth could fall under 1 B/s: a file the loader refuses was written
    ({"nodes": 2, "fabric": "rail", "oversubscription": 1e30}, r"from 1 \(non-blocking\) to 1000, got 1e\+30"),
    ({"sm": 7}, "--sm is the compute capability"),
])
def test_bad_cluster_arguments(kwargs, msg):
    with pytest.raises(CollsynthError, match=msg):
        import_topology(os.path.join(FIX, "dgx_h100_8nic.xml"), **kwargs)


def test_a_node_without_nics_cannot_be_replicated():
    with pytest.raises(CollsynthError, match="lists no NIC"):
        import_topology(os.path.join(VEC, "smi", "nersc-perlmutter-a100-4x.txt"), nodes=2, fabric="rail")


H200 = os.path.join(VEC, "nccl-xml", "vastai-hgx-h200-8x-container.xml")


def _h200_text() -> str:
    with open(H200) as f:
        return f.read()


@pytest.mark.parametrize("edit, msg", [
    (lambda t: t.replace("</system>", ""), "not well-formed XML at line"),
    (lambda t: '<!DOCTYPE system [<!ENTITY a "aaaa">]>\n' + t, "DOCTYPE or ENTITY"),
    (lambda t: t.replace("<system", "<systems", 1).replace("</system>", "</systems>"), "root element is <systems>"),
    (lambda t: t.replace('count="5"', 'count="five"', 1), r"<nvlink> of GPU 0 .* count='five', not an integer"),
    (lambda t: t.replace('count="5"', 'count="0"', 1), "count=0; a link count must be positive"),
    (lambda t: t.replace(' count="5"', "", 1), r"<nvlink> of GPU 0 .* has no count="),
    (lambda t: t.replace('tclass="0x068000"', 'tclass="0x030200"', 1), "which is no GPU in this file"),
    (lambda t: t.replace('tclass="0x068000"', 'tclass="0x123456"', 1), "tclass='0x123456'"),
    (lambda t: t.replace('link_speed="32.0 GT/s PCIe"', 'link_speed="fast"', 1), "link_speed='fast'"),
    (lambda t: t.replace('host_hash="0x50209f10baa0faf1" numaid="1"', 'host_hash="0x2" numaid="1"'),
     "describes 2 hosts"),
    (lambda t: "<system>" + "<pci>" * 100 + "</pci>" * 100 + "</system>", "nested deeper than 64"),
    (lambda t: "hello", "neither NCCL topology XML"),
    (lambda t: "<html></html>", "root is not NCCL's <system>"),
])
def test_malformed_xml_one_line_naming_the_element(tmp_path, edit, msg):
    p = tmp_path / "bad.xml"
    p.write_text(edit(_h200_text()))
    with pytest.raises(CollsynthError, match=msg) as e:
        import_topology(str(p))
    assert "\n" not in str(e.value)


# inputs that were imported (or only noted) before and are refused now: (edit of the H200 dump, message)
NEWLY_REFUSED = {
    "duplicate-rank": (lambda t: t.replace('rank="1"', 'rank="0"', 1),
                       r"<gpu> under <pci busid='0000:8b:00.0'> has rank=0, as does <gpu> under "
                       r"<pci busid='0000:83:00.0'>; give each GPU its own rank"),
    "negative-rank": (lambda t: t.replace('rank="0"', 'rank="-1"', 1),
                      r"<gpu> under <pci busid='0000:83:00.0'> has rank='-1'; a rank is 0 or more"),
    "absurd-nvlink-count": (lambda t: t.replace('count="5"', 'count="999999999999"', 1),
                            r"<nvlink> of GPU 0 \(0000:83:00.0\) has count=999999999999; a GPU has at most 36 "
                            "NVLinks"),
    "nvlink-count-total": (lambda t: t.replace('count="5"', 'count="20"', 2),
                           r"the <nvlink> count attributes of GPU 0 \(0000:83:00.0\) add up to 40; a GPU has at "
                           "most 36"),
    "switch-link-to-a-gpu": (lambda t: t.replace('target="0000:c5:00.0"', 'target="0000:8b:00.0"', 1),
                             r"<nvlink> of GPU 0 \(0000:83:00.0\) has target='0000:8b:00.0', which is GPU 1, but "
                             r"tclass='0x068000' \(an NVSwitch\)"),
    "nvlink-without-target": (lambda t: t.replace(' target="0000:c5:00.0"', "", 1),
                              r"<nvlink> of GPU 0 \(0000:83:00.0\) has no target="),
    "nvlink-target-not-a-busid": (lambda t: t.replace('target="0000:c5:00.0"', 'target="c5"', 1),
                                  r"<nvlink> of GPU 0 \(0000:83:00.0\) has target='c5', not a PCI bus id; write "
                                  "domain:bus:device.function"),
    "pci-busid-not-hex": (lambda t: t.replace('busid="0000:83:00.0"', 'busid="0000:8g:00.0"', 1),
                          r"<pci> has busid='0000:8g:00.0', not a PCI bus id"),
    "pci-busid-no-function": (lambda t: t.replace('busid="0000:81:00.0"', 'busid="0000:81:00"', 1),
                              r"<pci> has busid='0000:81:00', not a PCI bus id"),
    "negative-sm": (lambda t: t.replace('sm="90" rank="0"', 'sm="-90" rank="0"', 1),
                    r"<gpu> under <pci busid='0000:83:00.0'> has sm='-90'; sm is the compute capability x10, a "
                    "positive integer"),
    "zero-sm": (lambda t: t.replace('sm="90" rank="3"', 'sm="0" rank="3"', 1), r"<gpu> under .* has sm='0'"),
    "link-width-not-a-number": (lambda t: t.replace('link_width="16"', 'link_width="abc"', 1),
                                r"<pci busid='0000:81:00.0'> has link_width='abc'; expected the lane count"),
    "negative-link-width": (lambda t: t.replace('link_width="16"', 'link_width="-16"', 1),
                            r"<pci busid='0000:81:00.0'> has link_width='-16'"),
}


@pytest.mark.parametrize("case", NEWLY_REFUSED)
def test_newly_refused_xml_raises_naming_element_and_attribute(tmp_path, case):
    edit, msg = NEWLY_REFUSED[case]
    p = tmp_path / "bad.xml"
    p.write_bytes(edit(_h200_text()).encode())
    with pytest.raises(CollsynthError, match=msg) as e:
        import_topology(str(p))
    assert "\n" not in str(e.value) and str(e.value).startswith(f"topology file {p}: ")


@pytest.mark.parametrize("case", NEWLY_REFUSED)
def test_newly_refused_xml_cli_exit_2_one_line_nothing_written(tmp_path, capsys, case):
    edit, msg = NEWLY_REFUSED[case]
    p, out = tmp_path / "bad.xml", tmp_path / "out.json"
    p.write_bytes(edit(_h200_text()).encode())
    code, _, err = run(capsys, "topology", "import", str(p), "-o", str(out))
    assert code == 2 and err.count("\n") == 1 and re.search(msg, err), err
    assert not out.exists()


@pytest.mark.parametrize("edit", [
    lambda t: t.replace('link_width="16"', 'link_width="0"', 1),  # IBM VSI, Azure NCv4
    lambda t: t.replace('link_width="16"', 'link_width=""', 1),
    lambda t: t.replace('busid="0000:81:00.0"', 'busid="ffff:ff:01.0"', 1),  # Azure/AWS placeholder switches
    lambda t: t.replace('busid="0000:81:00.0"', 'busid="00000000:81:00.0"', 1),  # 8-digit domain (nvidia-smi)
    lambda t: t.replace(' sm="90"', "", 1),  # no sm: noted, not refused
    lambda t: t.replace(' rank="0"', "", 1),  # no rank: ordered by dev
    lambda t: t.replace('count="5"', 'count="18"', 1),  # a hidden NVSwitch's total, on one element
    lambda t: re.sub(r'rank="(\d+)"', lambda m: f'rank="{int(m.group(1)) + 8}"', t),  # node 1 of a job: 8..15
], ids=["width-0", "width-empty", "placeholder-busid", "long-domain", "no-sm", "no-rank", "count-18",
        "global-ranks"])
def test_quirks_real_dumps_have_still_import(tmp_path, edit):
    p = tmp_path / "ok.xml"
    p.write_text(edit(_h200_text()))
    assert import_topology(str(p)).topology["gpus"] == 8


def test_grace_c2c_is_reported_not_modelled(tmp_path):
    p = tmp_path / "c2c.xml"
    p.write_text(_h200_text().replace('<gpu dev="0" sm="90" rank="0" gdr="1">',
                                      '<gpu dev="0" sm="90" rank="0" gdr="1">\n<c2c bw="40.0" count="10"/>'))
    res = import_topology(str(p))
    assert any("C2C" in a for a in res.assumptions)
    assert res.topology["links"] == import_topology(H200).topology["links"]


def test_oversized_file_refused_without_parsing(tmp_path, monkeypatch):
    p = tmp_path / "big.xml"
    p.write_text(_h200_text())
    monkeypatch.setattr(ti, "MAX_FILE_BYTES", 1000)
    with pytest.raises(CollsynthError, match="larger than 1000 bytes"):
        import_topology(str(p))


SMI_H200 = os.path.join(VEC, "smi", "vastai-hgx-h200-8x-container.txt")


@pytest.mark.parametrize("edit, msg", [
    (lambda t: t.replace("NV18", "NVX", 1), r"row GPU0, column GPU1: cell 'NVX' is not X"),
    (lambda t: t.replace("GPU3\t", "GPUx\t", 1).replace("\nGPU3", "\nGPUx"), "expected GPU0..GPU<n-1>"),
    (lambda t: "\n".join(ln for ln in t.splitlines() if not ln.startswith("NIC2\t")), "no row for NIC2"),
    (lambda t: t.replace(" X ", "NV18", 1), "X belongs on the diagonal"),
])
def test_malformed_smi(tmp_path, edit, msg):
    with open(SMI_H200) as f:
        text = f.read()
    p = tmp_path / "bad.txt"
    p.write_text(edit(text))
    with pytest.raises(CollsynthError, match=msg):
        import_topology(str(p))


def test_space_aligned_copy_reads_like_the_tabbed_one(tmp_path):
    with open(SMI_H200) as f:
        text = f.read()
    p = tmp_path / "spaces.txt"
    p.write_text(text.replace("\t", "  "))
    a, b = import_topology(SMI_H200), import_topology(str(p))
    assert a.topology["links"] == b.topology["links"]
    assert [n.gpus for n in a.model.nics] == [n.gpus for n in b.model.nics]


@pytest.mark.parametrize("text, bps", [("400Gb/s", 50e9), ("400Gbps", 50e9), ("100Gbit/s", 12.5e9),
                                       ("200000Mb/s", 25e9), ("50GB/s", 50e9)])
def test_parse_nic_speed(text, bps):
    assert parse_nic_speed(text) == bps


def test_parse_nic_speed_rejects():
    with pytest.raises(CollsynthError, match="400Gb/s"):
        parse_nic_speed("fast")


# ---------------------------------------------------------------------------- the command group
def test_topology_list_is_the_topologies_alias(capsys):
    a = run(capsys, "topologies")
    b = run(capsys, "topology", "list")
    assert a == b and a[0] == 0 and "nvswitch" in a[1]


def test_import_cli_prints_assumptions_and_writes_json(tmp_path, capsys):
    out = tmp_path / "node.json"
    code, text, _ = run(capsys, "topology", "import", H200, "-o", str(out))
    assert code == 0
    assert "8 GPUs (sm 90; H200 SXM 141GB, 132 SMs)" in text and "through 4 NVSwitch chips, 18 links per GPU" in text
    assert "assumed:\n  - " in text and "eth0: 10 Gb/s" in text
    first = out.read_bytes()
    assert json.loads(first) == import_topology(H200).topology
    run(capsys, "topology", "import", H200, "-o", str(out))
    assert out.read_bytes() == first  # deterministic
    code, text, _ = run(capsys, "topology", "import", H200, "-o", str(out), "--json")
    rep = json.loads(text)
    assert rep["gpus"] == 8 and rep["nvlink"] == "nvswitch" and rep["assumptions"] and rep["output"] == str(out)


def test_import_cli_refuses_output_equal_to_input(tmp_path, capsys):
    p = tmp_path / "t.xml"
    p.write_text(_h200_text())
    code, out, err = run(capsys, "topology", "import", str(p), "-o", str(p))
    assert code == 2 and "is the input file" in err and err.count("\n") == 1
    assert p.read_text() == _h200_text()


def test_import_cli_skeleton_exit_2_and_nothing_written(tmp_path, capsys):
    out = tmp_path / "x.json"
    code, _, err = run(capsys, "topology", "import", os.path.join(VEC, "nccl-xml", "azure-ndv5-topo.xml"),
                       "-o", str(out))
    assert code == 2 and "vendor topology skeleton" in err and err.count("\n") == 1
    assert not out.exists()


def test_import_cli_bad_nodes_exit_2(tmp_path, capsys):
    code, _, err = run(capsys, "topology", "import", H200, "-o", str(tmp_path / "x.json"), "--nodes", "4")
    assert code == 2 and "--fabric rail" in err


def test_topology_without_action_prints_help(capsys):
    code, out, _ = run(capsys, "topology")
    assert code == 2 and "import" in out and "show" in out


def test_dumps_topology_is_json():
    t = import_topology(os.path.join(FIX, "dgx_h100_8nic.xml"), nodes=2, fabric="fat-tree").topology
    assert json.loads(dumps_topology(t)) == t


@pytest.mark.parametrize("path", [H200, SMI_H200])
def test_a_machine_file_given_as_topology_says_to_import_it(capsys, path):
    code, _, err = run(capsys, "compare", "--gpus", "8", "--size", "1MiB", "-t", path)
    assert code == 2 and "collsynth topology import" in err and err.count("\n") == 1
