"""Multi-node topologies of issue 14: link classes, per-class ports, server nodes, rail / fat-tree fabrics,
PXN and spine routing, cluster presets, per-class alpha/bandwidth overrides and the JSON extensions
(synth/topology/; docs/topologies.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from collsynth.cli import main
from collsynth.errors import CollsynthError
from collsynth.synth.topology import (
    H100_NET_ALPHA,
    H100_NET_BANDWIDTH,
    H100_NVLINK_ALPHA,
    H100_NVLINK_BANDWIDTH,
    Topology,
    cluster_topology,
    make_topology,
    topology_from_dict,
    topology_from_spec,
    topology_presets,
)


def _walk(topo, src, dst):
    nodes = [src]
    for link in topo.path_links(src, dst):
        u, v = topo.nodes[int(topo.link_src[link])], topo.nodes[int(topo.link_dst[link])]
        assert u == nodes[-1]
        nodes.append(v)
    assert nodes[-1] == dst
    return nodes


def _generic_copy(t):
    """The same links as a plain Topology: routes by the generic BFS (shortest, ties to the lowest node)."""
    return Topology(t.name, t.nranks, t.link_src, t.link_dst, t.link_alpha, t.link_bw, switches=t.switches,
                    link_class=t.link_class, classes=t.classes, class_ports=t.class_ports)


def test_presets_listed():
    assert {"dgx-h100", "h100-cluster", "gb200-nvl72"} <= set(topology_presets())


def test_h100_cluster_attributes():
    t = make_topology("h100-cluster", 32)
    assert t.classes == ("nvlink", "net")
    assert t.class_ports == {"nvlink": 1, "net": 1} and t.ports == 2
    assert t.node_count == 4 and t.fabric == "rail" and t.routing == "pxn"
    assert t.node_of.tolist() == [r // 8 for r in range(32)]
    assert t.local_index.tolist() == [r % 8 for r in range(32)]
    assert t.node_gpus(2) == tuple(range(16, 24))
    assert t.class_bandwidth("nvlink") == H100_NVLINK_BANDWIDTH == 450e9
    assert t.class_bandwidth("net") == H100_NET_BANDWIDTH == 50e9
    assert t.class_alpha("nvlink") == H100_NVLINK_ALPHA and t.class_alpha("net") == H100_NET_ALPHA
    # rails, not per-pair links: 2 x (GPU-NVSwitch + GPU-NIC) per GPU plus 2 x rails x spines
    assert t.nlinks == 4 * 32 + 2 * 8 * 8
    assert set(t.link_class.tolist()) == {0, 1}
    with pytest.raises(CollsynthError, match="no link class 'ib'"):
        t.class_bandwidth("ib")


def test_pxn_routes_match_shortest_path_bfs():
    """PXN routes computed arithmetically equal the generic BFS routes on the same links (NVSwitches are
    numbered before rails, so BFS ties pick NVLink first: the PXN route)."""
    t = make_topology("h100-cluster", 24)
    pairs = np.array([(s, d) for s in range(24) for d in range(24)])
    a_links, a_alpha = t.pair_table(pairs)
    b_links, b_alpha = _generic_copy(t).pair_table(pairs)
    assert np.array_equal(a_links, b_links) and np.array_equal(a_alpha, b_alpha)
    assert _walk(t, 0, 1) == [0, "nvsw0", 1]
    assert _walk(t, 0, 8) == [0, "rail0", 8]
    assert _walk(t, 0, 9) == [0, "nvsw0", 1, "rail1", 9]
    assert t.transfer_class(0, 9) == ("nvlink", "net")
    assert t.transfer_class(0, 8) == ("net", "net")
    assert t.transfer_class(3, 5) == ("nvlink", "nvlink")
    assert t.pair_table([(0, 9)])[1][0] == pytest.approx(H100_NVLINK_ALPHA + H100_NET_ALPHA)


def test_route_classes_vectorised():
    t = make_topology("h100-cluster", 16)
    src, dst = np.array([0, 0, 0, 5]), np.array([1, 8, 9, 13])
    first, last = t.route_classes(src, dst)
    got = [(t.classes[f], t.classes[g]) for f, g in zip(first, last)]
    assert got == [t.transfer_class(int(s), int(d)) for s, d in zip(src, dst)]


def test_route_classes_of_many_transfers_over_few_pairs():
    """Many transfers over few pairs (multiring: 4 million over 262,144 pairs) take a table over all pairs
    instead of a sort: the same classes as one pair at a time, repeats and every order included."""
    t = make_topology("h100-cluster", 16)
    rng = np.random.default_rng(7)
    src = rng.integers(0, 16, 5000)
    dst = (src + rng.integers(1, 16, 5000)) % 16
    first, last = t.route_classes(src, dst)
    assert 4 * len(src) >= 16 * 16  # the table's case
    want = {(s, d): t.transfer_class(s, d) for s in range(16) for d in range(16) if s != d}
    assert [(t.classes[f], t.classes[g]) for f, g in zip(first, last)] == [want[int(s), int(d)]
                                                                           for s, d in zip(src, dst)]


def test_spine_routing_on_rails():
    t = cluster_topology(4, 4, routing="spine")
    assert t.routing == "spine"
    path = _walk(t, 0, 5)  # node 0 local 0 -> node 1 local 1
    assert path[0:2] == [0, "rail0"] and path[2].startswith("spine") and path[3:] == ["rail1", 5]
    assert t.transfer_class(0, 5) == ("net", "net")
    assert _walk(t, 0, 4) == [0, "rail0", 4]
    # the spines of one node pair's flows differ by local index (no two flows share an uplink)
    spines = {_walk(t, s, 4 + (s + 1) % 4)[2] for s in range(4)}
    assert len(spines) == 4


def test_fat_tree_oversubscription():
    t = cluster_topology(4, 8, fabric="fat-tree", routing="spine", oversubscription=2.0,
                         net_bandwidth=50e9, net_alpha=2e-6)
    assert t.fabric == "fat-tree" and "leaf3" in t.switches and "rail0" not in t.switches
    path = _walk(t, 1, 17)
    assert path[:2] == [1, "leaf0"] and path[2].startswith("spine") and path[3:] == ["leaf2", 17]
    up = [lk for lk in t.path_links(1, 17)][1]
    assert t.link_bw[up] == 8 * 50e9 / (2.0 * 8)
    assert t.pair_table([(1, 17)])[1][0] == pytest.approx(4e-6)  # two switch hops of net_alpha each
    with pytest.raises(CollsynthError, match="fat-tree .* use routing spine"):
        cluster_topology(2, 8, fabric="fat-tree", routing="pxn")
    with pytest.raises(CollsynthError, match="oversubscription"):
        cluster_topology(2, 8, fabric="fat-tree", routing="spine", oversubscription=0.5)
    with pytest.raises(CollsynthError, match="unknown fabric"):
        cluster_topology(2, 8, fabric="torus")


@pytest.mark.parametrize("preset,n,nodes", [("dgx-h100", 8, 1), ("h100-cluster", 128, 16), ("gb200-nvl72", 72, 1)])
def test_cluster_presets(preset, n, nodes):
    t = make_topology(preset, n)
    assert t.nranks == n and t.node_count == nodes and t.classes == ("nvlink", "net")
    if preset == "gb200-nvl72":
        assert t.class_bandwidth("nvlink") == 900e9
    assert t.spec == {"preset": preset, "gpus": n,
                      "alpha": {"nvlink": t.class_alpha("nvlink"), "net": t.class_alpha("net")},
                      "bandwidth": {"nvlink": t.class_bandwidth("nvlink"), "net": t.class_bandwidth("net")}}


@pytest.mark.parametrize("preset,n,msg", [("h100-cluster", 12, "multiple of 8, got 12"),
                                          ("dgx-h100", 16, "has 8 GPUs, not 16"),
                                          ("gb200-nvl72", 64, "has 72 GPUs, not 64")])
def test_cluster_preset_sizes(preset, n, msg):
    with pytest.raises(CollsynthError, match=msg):
        make_topology(preset, n)


def test_per_class_overrides():
    t = make_topology("h100-cluster", 16, bandwidth="nvlink=400GB/s,net=25GB/s", alpha={"net": "5us"})
    assert t.class_bandwidth("nvlink") == 400e9 and t.class_bandwidth("net") == 25e9
    assert t.class_alpha("net") == pytest.approx(5e-6) and t.class_alpha("nvlink") == H100_NVLINK_ALPHA
    one = make_topology("h100-cluster", 16, bandwidth="100GB/s")  # a single value: every class
    assert one.class_bandwidth("nvlink") == one.class_bandwidth("net") == 100e9
    old = make_topology("nvswitch", 4, bandwidth="default=100GB/s")
    assert old.class_bandwidth("default") == 100e9
    with pytest.raises(CollsynthError, match="--bandwidth names link class 'ib'.*nvlink, net"):
        make_topology("h100-cluster", 16, bandwidth="ib=1GB/s")
    with pytest.raises(CollsynthError, match="--alpha names link class 'nvlink'.*default"):
        make_topology("nvswitch", 4, alpha="nvlink=1us")
    with pytest.raises(CollsynthError, match="CLASS=VALUE"):
        make_topology("h100-cluster", 16, bandwidth="nvlink=400GB/s,50GB/s")
    with pytest.raises(CollsynthError, match="positive"):
        make_topology("h100-cluster", 16, bandwidth="net=0GB/s")


def test_spec_round_trip():
    for t in (make_topology("h100-cluster", 16, bandwidth="net=25GB/s"),
              cluster_topology(3, 4, fabric="fat-tree", routing="spine", oversubscription=3.0),
              make_topology("dgx1", 8)):
        spec = json.loads(json.dumps(t.spec))
        u = topology_from_spec(spec)
        assert u.name == t.name and u.classes == t.classes and u.class_ports == t.class_ports
        for a in ("link_src", "link_dst", "link_alpha", "link_bw", "link_class", "node_of", "local_index"):
            assert np.array_equal(getattr(u, a), getattr(t, a)), a
        pairs = [(s, d) for s in range(t.nranks) for d in range(t.nranks)]
        assert np.array_equal(u.pair_table(pairs)[0], t.pair_table(pairs)[0])


def test_spec_with_overrides_is_the_topology_built_with_them():
    """topology_from_spec(spec, alpha, bandwidth): the recorded values with the given ones on top, as
    make_topology applies them (one value for every class, or some classes), for preset and cluster specs."""
    def same(u, t):
        return all(np.allclose(getattr(u, a), getattr(t, a), rtol=1e-12, atol=0) for a in ("link_alpha", "link_bw")) \
            and np.array_equal(u.link_class, t.link_class)

    rec = make_topology("h100-cluster", 16, bandwidth="net=25GB/s")
    spec = json.loads(json.dumps(rec.spec))
    assert same(topology_from_spec(spec, alpha="net=20us"),
                make_topology("h100-cluster", 16, alpha="net=20us", bandwidth="net=25GB/s"))
    assert same(topology_from_spec(spec, bandwidth="nvlink=900GB/s"),
                make_topology("h100-cluster", 16, bandwidth="nvlink=900GB/s,net=25GB/s"))
    assert same(topology_from_spec(spec, alpha="5us", bandwidth="100GB/s"),
                make_topology("h100-cluster", 16, alpha="5us", bandwidth="100GB/s"))
    own = cluster_topology(3, 4, fabric="fat-tree", routing="spine", oversubscription=3.0)
    over = topology_from_spec(json.loads(json.dumps(own.spec)), bandwidth="net=10GB/s")
    assert over.fabric == "fat-tree" and not same(over, own)
    assert same(over, cluster_topology(3, 4, fabric="fat-tree", routing="spine", oversubscription=3.0,
                                       net_bandwidth=10e9))
    assert same(topology_from_spec(json.loads(json.dumps(own.spec)), alpha="5us"),  # one value: every class
                cluster_topology(3, 4, fabric="fat-tree", routing="spine", oversubscription=3.0, nvlink_alpha=5e-6,
                                 net_alpha=5e-6))
    assert same(topology_from_spec(spec), rec)  # no override: as recorded
    with pytest.raises(CollsynthError, match="link class"):
        topology_from_spec(spec, alpha="pcie=1us")


def _two_node_file():
    """2 nodes x 2 GPUs: NVSwitch per node (nvlink), NIC per GPU into one of 2 rails (net)."""
    links = []
    for r in range(4):
        links.append({"src": r, "dst": f"nv{r // 2}", "class": "nvlink", "bandwidth": "400GB/s", "alpha": "1us"})
        links.append({"src": r, "dst": f"rail{r % 2}", "class": "net"})
    return {"name": "two-node", "gpus": 4, "switches": ["nv0", "nv1", "rail0", "rail1"],
            "bandwidth": {"net": "50GB/s"}, "alpha": {"net": "3us"},
            "ports": {"nvlink": 1, "net": 2}, "nodes": [[0, 1], [2, 3]], "fabric": "rail", "links": links}


def test_json_classes_ports_nodes():
    t = topology_from_dict(_two_node_file())
    assert t.classes == ("nvlink", "net") and t.class_ports == {"nvlink": 1, "net": 2} and t.ports == 3
    assert t.node_count == 2 and t.node_gpus(1) == (2, 3) and t.local_index.tolist() == [0, 1, 0, 1]
    assert t.fabric == "rail" and t.routing == "shortest"
    assert t.class_bandwidth("net") == 50e9 and t.class_alpha("net") == pytest.approx(6e-6)  # two 3us links
    assert t.class_bandwidth("nvlink") == 400e9 and t.class_alpha("nvlink") == pytest.approx(2e-6)
    assert t.transfer_class(0, 3) == ("nvlink", "net")  # NVLink first (nv0 is declared before the rails)
    assert t.transfer_class(0, 2) == ("net", "net")
    u = topology_from_dict(_two_node_file(), bandwidth="net=10GB/s")
    assert u.class_bandwidth("net") == 10e9 and u.class_bandwidth("nvlink") == 400e9
    default = topology_from_dict({"gpus": 2, "links": [{"src": 0, "dst": 1}]})
    assert default.classes == ("default",) and default.class_ports == {"default": 1}
    assert default.node_count == 1 and default.fabric is None


@pytest.mark.parametrize("change,msg", [
    (lambda d: d.update(ports=1), "\"ports\" must be an object per class"),
    (lambda d: d.update(ports={"nvlink": 1}), "no entry for link class 'net'"),
    (lambda d: d.update(ports={"nvlink": 1, "net": 1, "pcie": 1}), "names link class 'pcie' that no link has"),
    (lambda d: d.update(ports={"nvlink": 0, "net": 1}), r"must be an integer in 1\.\.1024"),
    (lambda d: d.update(nodes=[[0, 1], [1, 2, 3]]), "GPU 1 is in \"nodes\" twice"),
    (lambda d: d.update(nodes=[[0, 1], [2]]), "GPU 3 is in no entry"),
    (lambda d: d.update(nodes=[[0, 1], [2, 7]]), "names 7"),
    (lambda d: d.update(fabric="mesh"), "\"fabric\" 'mesh' is unknown"),
    (lambda d: d.update(routing="pxn"), "\"routing\" 'pxn'"),
    (lambda d: d["links"][0].update({"class": 3}), "\"class\" must be a non-empty string"),
    (lambda d: d["links"][1].update(bandwidth="-5GB/s"), "link 1"),
    (lambda d: d.update(bandwidth={"ib": "1GB/s"}), "names link class 'ib' that no link has"),
    (lambda d: d.update(gpus=5), "GPU 4 has no links"),
    (lambda d: d["links"].append({"src": 0, "dst": "nv9"}), "names node 'nv9'"),
])
def test_json_bad_input(change, msg):
    d = _two_node_file()
    change(d)
    with pytest.raises(CollsynthError, match=msg):
        topology_from_dict(d)


def test_json_unknown_class_override():
    with pytest.raises(CollsynthError, match="--bandwidth names link class 'ib'"):
        topology_from_dict(_two_node_file(), bandwidth={"ib": 1e9})


def test_large_cluster_builds_and_routes():
    t = make_topology("h100-cluster", 8192)
    assert t.node_count == 1024 and len(t.switches) == 1024 + 8 + 8
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 8192, size=(20000, 2))
    links, alpha = t.pair_table(pairs)
    hops = (links >= 0).sum(axis=1)
    s, d = pairs[:, 0], pairs[:, 1]
    want = np.where(s == d, 0, np.where(s // 8 == d // 8, 2, np.where(s % 8 == d % 8, 2, 4)))
    assert np.array_equal(hops, want)
    last = links[np.arange(len(links)), np.maximum(hops - 1, 0)]
    m = hops > 0
    assert np.array_equal(t.link_dst[last[m]], d[m])  # every route ends at its destination


def test_cli_per_class_flags(capsys, tmp_path):
    path = tmp_path / "ring16.json"
    assert main(["synth", "-a", "ring", "-n", "16", "-o", str(path)]) == 0
    capsys.readouterr()
    code = main(["simulate", str(path), "--size", "1GiB", "-t", "h100-cluster", "--bandwidth",
                 "nvlink=450GB/s,net=50GB/s", "--alpha", "nvlink=1us,net=3us", "--json"])
    out, _ = capsys.readouterr()
    assert code == 0 and json.loads(out)["ranks"] == 16
    slow = main(["simulate", str(path), "--size", "1GiB", "-t", "h100-cluster", "--bandwidth",
                 "nvlink=450GB/s,net=25GB/s", "--json"])
    out2, _ = capsys.readouterr()
    assert slow == 0 and json.loads(out2)["completion_s"] > json.loads(out)["completion_s"]
    code = main(["simulate", str(path), "--size", "1GiB", "-t", "h100-cluster", "--bandwidth", "ib=50GB/s"])
    _, err = capsys.readouterr()
    assert code == 2 and "ib" in err and len(err.strip().splitlines()) == 1
    code = main(["compare", "--gpus", "12", "--size", "1MiB", "-t", "h100-cluster"])
    _, err = capsys.readouterr()
    assert code == 2 and "multiple of 8" in err


# ---------------------------------------------------------------------------------- per-class ports
def _sched(n, steps, ports=2, collective="allreduce", nchunks=1):
    """A schedule from (step, src, dst, reduce) tuples, one chunk."""
    from collsynth.synth.ir import Schedule
    st, sr, ds, rd = zip(*steps)
    return Schedule.from_arrays(collective, n, nchunks, step=st, src=sr, dst=ds, chunk=[0] * len(st),
                                reduce=rd, ports=ports)


def test_verify_rejects_a_transfer_over_only_the_net_port():
    from collsynth.synth.verify import verify
    t = make_topology("h100-cluster", 24)
    # rank 0 sends to 8 and 16 (same rail, other nodes: both leave through its NIC) and nothing else:
    # 2 messages <= the declared 2 ports, 0 NVLink messages, but 2 > 1 through the net port
    s = _sched(24, [(0, 0, 8, True), (0, 0, 16, True)])
    rep = verify(s, topology=t)
    assert not rep.ok and rep.violation.kind == "ports" and rep.violation.index == 1
    assert "rank 0 sends 2 messages through its net port" in rep.message and "net port limit 1" in rep.message
    assert verify(s).violation.kind != "ports"  # without the topology the ports are fine
    # receiving: 8 and 16 both send to 0 over the rails in one step
    rep = verify(_sched(24, [(0, 8, 0, True), (0, 16, 0, True)]), topology=t)
    assert not rep.ok and "rank 0 receives 2 messages through its net port" in rep.message
    # one NVLink and one NIC message of a rank in one step fit
    rep = verify(_sched(24, [(0, 0, 1, True), (0, 0, 8, True)]), topology=t)
    assert rep.violation is None or rep.violation.kind != "ports"
    # two NVLink messages do not, whatever the declared ports
    rep = verify(_sched(24, [(0, 0, 1, True), (0, 0, 2, True)], ports=4), topology=t)
    assert not rep.ok and "through its nvlink port" in rep.message


def _fit_allreduce():
    """AllReduce on the 2 x 2 file topology; in step 2 rank 2 sends over its NIC and its NVLink at once."""
    return _sched(4, [(0, 1, 0, True), (0, 3, 2, True), (1, 0, 2, True), (2, 2, 0, False), (2, 2, 3, False),
                      (3, 0, 1, False)])


def test_verify_valid_schedule_with_both_classes_and_recorded_topology(tmp_path, capsys):
    from collsynth.synth.ir import Schedule
    from collsynth.synth.verify import record_topology, verify
    d = _two_node_file()
    d["ports"] = {"nvlink": 1, "net": 1}
    t = topology_from_dict(d)
    s = _fit_allreduce()
    rep = verify(s, topology=t)
    assert rep.ok and "per link class (nvlink 1, net 1)" in rep.message and rep.stats["class_ports"]["net"] == 1
    assert not verify(s, ports=1).ok  # rank 2 sends 2 messages in step 2: needs the two classes
    # recorded in meta: verifying the file enforces the classes again
    bad = _sched(4, [(0, 1, 0, True), (0, 3, 2, True), (1, 0, 2, True), (2, 2, 0, False), (2, 2, 1, False),
                     (2, 2, 3, False)], ports=3)  # rank 2: 2->1 (via nv1, 3, rail1) and 2->3 both on NVLink
    assert verify(bad).ok
    record_topology(bad, t)
    path = tmp_path / "bad.json"
    path.write_text(bad.to_json())
    again = Schedule.from_json(path.read_text()) if hasattr(Schedule, "from_json") else None
    code = main(["verify", str(path)])
    out, _ = capsys.readouterr()
    assert code == 1 and "rank 2 sends 2 messages through its nvlink port" in out, out
    if again is not None:
        assert again.meta["topology"] == json.loads(json.dumps(t.spec))


def test_synth_records_cluster_topology(tmp_path, capsys):
    path = tmp_path / "ring16.json"
    assert main(["synth", "-a", "ring", "-n", "16", "-t", "h100-cluster", "-o", str(path)]) == 0
    meta = json.loads(path.read_text())["meta"]
    assert meta["topology"]["preset"] == "h100-cluster" and meta["topology"]["gpus"] == 16
    capsys.readouterr()
    assert main(["verify", str(path)]) == 0
    out, _ = capsys.readouterr()
    assert "per link class (nvlink 1, net 1) on topology h100-cluster" in out
    code = main(["synth", "-a", "twoshot", "-n", "16", "-t", "h100-cluster", "-o", str(tmp_path / "t.json")])
    _, err = capsys.readouterr()
    assert code != 0 and "nvlink port" in err and not (tmp_path / "t.json").exists()


def test_simulate_port_slots_per_class():
    from collsynth.synth.simulate import simulate
    t = make_topology("h100-cluster", 16)
    both = simulate(_sched(16, [(0, 0, 1, True), (0, 0, 8, True)]), 1e9, t, timeline=True)
    assert [row["start_s"] for row in both.timeline] == [0.0, 0.0]  # NVLink and NIC at once
    same = simulate(_sched(16, [(0, 0, 1, True), (0, 0, 2, True)]), 1e9, t, timeline=True)
    first, second = same.timeline
    assert first["start_s"] == 0.0 and second["start_s"] == pytest.approx(first["end_s"])  # one NVLink port
    # the NVLink transfer of a later step need not wait for the NIC transfer of an earlier one
    pipe = simulate(_sched(16, [(0, 0, 8, True), (1, 0, 1, True)]), 1e9, t, timeline=True)
    assert pipe.timeline[1]["start_s"] == 0.0
    flat = simulate(_sched(16, [(0, 0, 8, True), (1, 0, 1, True)], ports=1), 1e9, make_topology("nvswitch", 16),
                    timeline=True)
    assert flat.timeline[1]["start_s"] == pytest.approx(flat.timeline[0]["end_s"])  # one port: queued


def test_preset_options_fat_tree_and_spine():
    t = make_topology("h100-cluster:fabric=fat-tree,oversubscription=2", 32)
    assert t.fabric == "fat-tree" and t.routing == "spine" and "leaf3" in t.switches
    up = t.path_links(1, 9)[1]
    assert t.link_bw[up] == pytest.approx(50e9 / 2)
    assert topology_from_spec(json.loads(json.dumps(t.spec))).fabric == "fat-tree"
    s = make_topology("h100-cluster:routing=spine", 16)
    assert s.fabric == "rail" and _walk(s, 0, 9)[2].startswith("spine")


def _file(tmp_path, d):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(d))
    return str(p)


@pytest.mark.parametrize("argv,needle", [
    (["--gpus", "12", "-t", "h100-cluster"], "multiple of 8"),
    (["--gpus", "16", "-t", "h100-cluster", "--bandwidth", "ib=1GB/s"], "link class 'ib'"),
    (["--gpus", "16", "-t", "h100-cluster", "--alpha", "nvlink=1us,3us"], "CLASS=VALUE"),
    (["--gpus", "16", "-t", "h100-cluster:fabric=torus"], "unknown fabric"),
    (["--gpus", "16", "-t", "h100-cluster:fabric=fat-tree,routing=pxn"], "use routing spine"),
    (["--gpus", "16", "-t", "h100-cluster:oversubscription=0.5"], "oversubscription"),
    # a fat-tree at 1e300:1 printed completion times of 300 digits
    (["--gpus", "16", "-t", "h100-cluster:fabric=fat-tree,oversubscription=1e300"],
     "oversubscription 1e+300 must be a number from 1 (non-blocking) to 1000"),
    (["--gpus", "16", "-t", "h100-cluster:color=red"], "unknown option 'color'"),
    (["--gpus", "8", "-t", "nvswitch:fabric=rail"], "takes no options"),
    (["--gpus", "3", "-t", "FILE:lonely"], "GPU 2 has no links"),
    (["--gpus", "2", "-t", "FILE:unknown"], "names node 'sw9'"),
    (["--gpus", "2", "-t", "FILE:zero"], "bandwidth"),
    (["--gpus", "4", "-t", "FILE:split"], "disconnected"),
])
def test_cli_bad_topology_input(tmp_path, capsys, argv, needle):
    files = {"lonely": {"gpus": 3, "switches": ["sw"], "links": [{"src": 0, "dst": "sw"}, {"src": 1, "dst": "sw"}]},
             "unknown": {"gpus": 2, "links": [{"src": 0, "dst": "sw9"}]},
             "zero": {"gpus": 2, "links": [{"src": 0, "dst": 1, "bandwidth": "0GB/s"}]},
             "split": {"gpus": 4, "links": [{"src": 0, "dst": 1}, {"src": 2, "dst": 3}]}}
    argv = [_file(tmp_path, files[a[5:]]) if a.startswith("FILE:") else a for a in argv]
    code = main(["compare", "--size", "1MiB", "--algorithms", "ring", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1 and not out, err
