"""Topology presets, routes and JSON files (synth/topology/)."""

from __future__ import annotations

import json
import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.errors import CollsynthError
from collsynth.synth.topology import DGX1_LINKS, make_topology, topology_presets, torus_shape

A, B = 3e-6, 450 * 2**30
PRESETS = ["nvswitch", "full-mesh", "ring", "torus2d"]


def _walk(topo, src, dst):
    """Node sequence of a route; checks the links are contiguous."""
    nodes = [src]
    for link in topo.path_links(src, dst):
        u, v = topo.nodes[int(topo.link_src[link])], topo.nodes[int(topo.link_dst[link])]
        assert u == nodes[-1]
        nodes.append(v)
    return nodes


def test_presets_listed():
    p = topology_presets()
    assert {"nvswitch", "full-mesh", "ring", "dgx1", "torus2d"} <= set(p)
    assert all(isinstance(v, str) and v and "\n" not in v for v in p.values())


def test_nvswitch_shape_and_exact_alpha():
    t = make_topology("nvswitch", 5)
    assert t.nranks == 5 and t.nlinks == 10 and t.switches == ("sw0",)
    g = t.graph
    assert isinstance(g, nx.DiGraph) and set(g.nodes) == {0, 1, 2, 3, 4, "sw0"}
    assert g.edges[0, "sw0"]["bandwidth"] == B and g.edges["sw0", 3]["alpha"] == A / 2
    links, alpha = t.pair_table([(0, 3), (4, 1)])
    assert links.shape == (2, 2)
    assert alpha.tolist() == [A, A]  # alpha/2 + alpha/2 is exact
    assert [t.link_name(x) for x in t.path_links(0, 3)] == ["0->sw0", "sw0->3"]


def test_full_mesh_is_direct():
    t = make_topology("full-mesh", 4, alpha=1e-6, bandwidth=1e9)
    assert t.nlinks == 12
    for s in range(4):
        for d in range(4):
            if s != d:
                (link,) = t.path_links(s, d)
                assert (int(t.link_src[link]), int(t.link_dst[link])) == (s, d)
    assert set(t.link_alpha.tolist()) == {1e-6} and set(t.link_bw.tolist()) == {1e9}


@pytest.mark.parametrize("n", [2, 3, 6, 7])
def test_ring_routes_take_the_short_way(n):
    t = make_topology("ring", n)
    assert t.nlinks == (2 if n == 2 else 2 * n)
    for s in range(n):
        for d in range(n):
            if s != d:
                hops = len(t.path_links(s, d))
                assert hops == min((d - s) % n, (s - d) % n)


def test_ring_tie_goes_to_lowest_next_node():
    t = make_topology("ring", 6)
    assert _walk(t, 0, 3) == [0, 1, 2, 3]
    assert _walk(t, 3, 0) == [3, 2, 1, 0]


@pytest.mark.parametrize("n,shape", [(2, (1, 2)), (7, (1, 7)), (12, (3, 4)), (16, (4, 4)), (18, (3, 6))])
def test_torus_shape(n, shape):
    assert torus_shape(n) == shape
    t = make_topology("torus2d", n)
    assert t.nranks == n


def test_torus_degree():
    t = make_topology("torus2d", 16)
    assert all(t.graph.out_degree(r) == 4 for r in range(16))
    assert t.nlinks == 64


@settings(max_examples=40, deadline=None)
@given(spec=st.sampled_from(PRESETS), n=st.integers(2, 20), data=st.data())
def test_routes_are_shortest_paths(spec, n, data):
    t = make_topology(spec, n)
    s = data.draw(st.integers(0, n - 1))
    d = data.draw(st.integers(0, n - 1).filter(lambda x: x != s))
    nodes = _walk(t, s, d)
    assert nodes[0] == s and nodes[-1] == d
    assert len(nodes) - 1 == nx.shortest_path_length(t.graph, s, d)
    links, alpha = t.pair_table([(s, d)])
    path = t.path_links(s, d)
    assert tuple(x for x in links[0] if x >= 0) == path
    assert alpha[0] == pytest.approx(sum(t.link_alpha[list(path)]), rel=1e-15)


def test_pair_table_padding_and_batch_matches_single():
    t = make_topology("torus2d", 12)
    pairs = [(s, d) for s in range(12) for d in range(12) if s != d]
    links, alpha = t.pair_table(pairs)
    assert links.shape[0] == len(pairs)
    for (s, d), row in zip(pairs, links):
        assert tuple(int(x) for x in row if x >= 0) == t.path_links(s, d)
        k = len(t.path_links(s, d))
        assert np.all(row[k:] == -1)
    with pytest.raises(CollsynthError, match="GPUs 0..11"):
        t.pair_table([(0, 12)])


def test_dgx1_table():
    t = make_topology("dgx1", 8)
    assert t.nlinks == 32 and t.nranks == 8
    g = t.graph
    per_nvlink = 25e9
    for r in range(8):  # six NVLinks per V100
        out = sum(g.edges[r, v]["bandwidth"] for v in g.successors(r))
        assert out == pytest.approx(6 * per_nvlink)
        # fully connected quad plus the i <-> i+4 link
        quad = set(range(4)) if r < 4 else set(range(4, 8))
        assert set(g.successors(r)) == (quad - {r}) | {(r + 4) % 8}
    assert g.edges[0, 1]["bandwidth"] == 2 * per_nvlink and g.edges[0, 2]["bandwidth"] == per_nvlink
    assert sum(k for _, _, k in DGX1_LINKS) == 24
    assert set(t.link_alpha.tolist()) == {0.7e-6}
    assert len(t.path_links(0, 5)) == 2
    t2 = make_topology("dgx1", 8, bandwidth=1e9)
    assert t2.graph.edges[0, 1]["bandwidth"] == 2e9


def test_dgx1_needs_8():
    with pytest.raises(CollsynthError, match="dgx1 has 8 GPUs"):
        make_topology("dgx1", 4)


def test_overrides_and_bad_values():
    t = make_topology("nvswitch", 4, alpha=2e-6, bandwidth=1e9)
    assert t.pair_table([(0, 1)])[1][0] == 2e-6
    assert set(t.link_bw.tolist()) == {1e9}
    t = make_topology("ring", 4, alpha="1us", bandwidth="10GB/s")
    assert set(t.link_bw.tolist()) == {1e10}
    with pytest.raises(CollsynthError, match="bandwidth"):
        make_topology("ring", 4, bandwidth=0.0)
    with pytest.raises(CollsynthError, match="alpha"):
        make_topology("ring", 4, alpha=-1.0)
    with pytest.raises(CollsynthError, match="GPUs >= 2"):
        make_topology("ring", 1)


def test_unknown_preset_lists_presets():
    with pytest.raises(CollsynthError) as e:
        make_topology("hypercube", 8)
    msg = str(e.value)
    assert "\n" not in msg
    for name in topology_presets():
        assert name in msg


def test_large_presets_are_cheap_to_route():
    t = make_topology("nvswitch", 512)
    pairs = np.stack([np.arange(512), (np.arange(512) + 1) % 512], axis=1)
    links, alpha = t.pair_table(pairs)
    assert links.shape == (512, 2) and np.all(alpha == A)
    t = make_topology("ring", 256)
    links, _ = t.pair_table([(0, 128), (5, 250)])
    assert [int((row >= 0).sum()) for row in links] == [128, 11]


# ------------------------------------------------------------------------------- JSON files
def _write(tmp_path, d, name="box.json"):
    p = tmp_path / name
    p.write_text(json.dumps(d) if not isinstance(d, str) else d)
    return str(p)


STAR = {"name": "star", "gpus": 3, "switches": ["sw0"], "ports": 2,
        "links": [{"src": g, "dst": "sw0", "alpha": "1.5us", "bandwidth": "450GiB/s"} for g in range(3)]}


def test_json_star_matches_nvswitch(tmp_path):
    t = make_topology(_write(tmp_path, STAR), 3)
    ref = make_topology("nvswitch", 3)
    assert t.name == "star" and t.ports == 2 and t.switches == ("sw0",)
    assert t.link_src.tolist() == ref.link_src.tolist() and t.link_dst.tolist() == ref.link_dst.tolist()
    assert t.link_alpha.tolist() == ref.link_alpha.tolist() and t.link_bw.tolist() == ref.link_bw.tolist()
    assert t.pair_table([(0, 2)])[1][0] == 3e-6


def test_json_floats_defaults_and_one_way_links(tmp_path):
    d = {"gpus": 3, "alpha": 1e-6, "bandwidth": 1e9,
         "links": [{"src": 0, "dst": 1, "bidirectional": False}, {"src": 1, "dst": 2, "bidirectional": False},
                   {"src": 2, "dst": 0, "bidirectional": False, "bandwidth": 5e8, "alpha": 2e-6}]}
    t = make_topology(_write(tmp_path, d, "uni.json"), 3)
    assert t.name == "uni" and t.nlinks == 3 and t.ports == 1
    assert len(t.path_links(1, 0)) == 2  # one-way ring: 1 -> 2 -> 0
    assert t.pair_table([(1, 0)])[1][0] == pytest.approx(3e-6)
    t = make_topology(_write(tmp_path, d, "uni.json"), 3, alpha=5e-6, bandwidth=7e9)
    assert set(t.link_alpha.tolist()) == {5e-6} and set(t.link_bw.tolist()) == {7e9}


@pytest.mark.parametrize("content,match", [
    ("{not json", "not valid JSON"),
    ([1, 2], "JSON object"),
    ({"gpus": 1, "links": []}, "gpus"),
    ({"gpus": 3, "links": []}, "links"),
    ({"gpus": 3, "links": [{"src": 0, "dst": 1}, {"src": 1, "dst": 2, "bandwidth": 0}]}, "bandwidth"),
    ({"gpus": 3, "links": [{"src": 0, "dst": 1}, {"src": 1, "dst": 2, "bandwidth": "-3GB/s"}]}, "bandwidth"),
    ({"gpus": 3, "switches": ["sw"], "links": [{"src": 0, "dst": "sw"}, {"src": 1, "dst": "sw"}]},
     "GPU 2 has no links"),
    ({"gpus": 3, "links": [{"src": 0, "dst": 1}]}, "its 1 links reach at most 2 GPUs"),
    ({"gpus": 4, "links": [{"src": 0, "dst": 1}, {"src": 2, "dst": 3}]}, "GPU 2 is disconnected"),
    ({"gpus": 2, "links": [{"src": 0, "dst": 1, "bidirectional": False}]}, "disconnected"),
    ({"gpus": 2, "links": [{"src": 0, "dst": "sw9"}]}, "sw9"),
    ({"gpus": 2, "links": [{"src": 0, "dst": 5}]}, "GPU 0..1"),
    ({"gpus": 2, "links": [{"src": 0, "dst": 0}]}, "itself"),
    ({"gpus": 2, "links": [{"src": 0, "dst": 1}, {"src": 1, "dst": 0}]}, "twice"),
    ({"gpus": 2, "links": [{"src": 0, "dst": 1, "bandwith": 1e9}]}, "bandwith"),
    ({"gpus": 2, "link": []}, "unknown key 'link'"),
    ({"gpus": 2, "ports": 0, "links": [{"src": 0, "dst": 1}]}, "ports"),
    ({"gpus": 2, "switches": "sw0", "links": [{"src": 0, "dst": 1}]}, "switches"),
    ({"gpus": 2, "links": [{"src": 0, "dst": 1, "alpha": "3 parsecs"}]}, "unit"),
])
def test_json_errors(tmp_path, content, match):
    path = _write(tmp_path, content, "bad.json")
    with pytest.raises(CollsynthError, match=match) as e:
        make_topology(path, int(content["gpus"]) if isinstance(content, dict) and
                      isinstance(content.get("gpus"), int) and content["gpus"] >= 2 else 2)
    assert "\n" not in str(e.value)


def test_json_gpu_count_must_match(tmp_path):
    path = _write(tmp_path, STAR)
    with pytest.raises(CollsynthError, match="3 GPUs but 4"):
        make_topology(path, 4)


def test_missing_file(tmp_path):
    with pytest.raises(CollsynthError, match="cannot read"):
        make_topology(str(tmp_path / "nope.json"), 4)


def test_topology_is_deterministic():
    a, b = make_topology("torus2d", 12), make_topology("torus2d", 12)
    assert a.link_src.tolist() == b.link_src.tolist() and a.link_dst.tolist() == b.link_dst.tolist()
    assert [a.path_links(s, d) for s in range(12) for d in range(12) if s != d] == \
        [b.path_links(s, d) for s in range(12) for d in range(12) if s != d]
    assert not a.link_bw.flags.writeable
    assert math.isclose(a.summary()["bandwidth_Bps"][0], B)
