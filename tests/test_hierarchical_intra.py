"""hierarchical's intra-node patterns (synth/composition.py ``intra_steps``; docs/cluster-algorithms.md): the
node's ReduceScatter and AllGather by the ring or by the mixed-radix steps, the model's choice on more than
one node, verified flat and by composition."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_cluster_algorithms import cluster

from collsynth.synth.algorithms import hierarchical
from collsynth.synth.composition import INTRA, intra_blocks, patterns, radix_factors
from collsynth.synth.ir import Schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.verify import verify

GiB = 2**30


@pytest.mark.parametrize("G", [2, 3, 4, 5, 6, 8, 12, 24, 40, 72])
def test_radix_node_patterns_are_exact_in_sum_of_factor_steps(G):
    rs, ag = intra_blocks(G, "radix")
    assert len(rs) == len(ag) == sum(f - 1 for f in radix_factors(G))  # 7 on 72 GPUs, where the ring takes 71
    pats = patterns(1, G, list(range(G)), "ring", "radix")
    assert len(pats) == 2
    for what, p in pats:
        r = verify(p)
        assert r.ok, (what, r.message)
        assert p.nsteps == len(rs)


def test_large_nodes_take_the_radix_steps_and_verify_both_ways():
    """2 x 24 at 900 GB/s: the model takes the radix steps (5 per phase instead of 23), faster in the
    simulator than the same slices with the ring; flat and composed verification agree, and a lost transfer
    fails."""
    t = cluster(2, 24, bw_nv=900e9, a_nv=3.4e-6, a_net=14e-6)
    s = hierarchical.build(48, topology=t, size=GiB)
    assert s.meta["intra"] == "radix" and s.meta["composition"]["intra"] == "radix"
    assert verify(s, method="flat").ok and verify(s, method="composed").ok
    broken = s.replace(**{c: getattr(s, c)[1:] for c in ("step", "src", "dst", "chunk", "count", "reduce")})
    assert not verify(broken, method="composed").ok
    ours = simulate(s, GiB, t).completion_s
    grid = np.arange(48).reshape(2, 24)
    ring = hierarchical.compose(grid, list(range(24)), s.meta["slice_weights"], s.meta["inter"],
                                hierarchical.link_model(t, grid), float(GiB), {"nodes": 2, "gpus_per_node": 24})
    assert verify(ring).ok and ours < 0.9 * simulate(ring, GiB, t).completion_s


def test_one_node_and_small_nodes_keep_the_ring():
    """On one node hierarchical stays the ring (the radix algorithm is that node's own); with 2 GPUs a node the
    two patterns are one step each (the ring kept)."""
    assert hierarchical.build(8, size=GiB).meta["intra"] == "ring"
    assert hierarchical.build(8, topology=cluster(4, 2), size=GiB).meta["intra"] == "ring"
    assert INTRA == ("ring", "radix")


def test_a_file_from_before_the_intra_patterns_is_still_verified_by_composition():
    """A composition without ``intra`` (files written before 2026-12-06) is the ring's."""
    grid = np.arange(24).reshape(3, 8)
    s = hierarchical.compose(grid, list(range(8)), [1, 1], "ring", hierarchical.link_model(cluster(3, 8), grid),
                             float(GiB), {"nodes": 3, "gpus_per_node": 8})
    meta = json.loads(json.dumps(s.meta))
    assert "intra" not in meta["composition"]
    old = Schedule.from_json(json.dumps({**json.loads(s.to_json()), "meta": meta}))
    r = verify(old, method="composed")
    assert r.ok and "by composition" in r.message and "intra-node ring" in r.message
    radix = hierarchical.compose(grid, list(range(8)), [1, 1], "ring", hierarchical.link_model(cluster(3, 8), grid),
                                 float(GiB), {"nodes": 3, "gpus_per_node": 8}, "radix")
    meta = json.loads(json.dumps(radix.meta))
    meta["composition"].pop("intra")  # a radix schedule that claims the ring: not its composition, verified flat
    claimed = Schedule.from_json(json.dumps({**json.loads(radix.to_json()), "meta": meta}))
    r = verify(claimed, method="composed")
    assert r.ok and "by composition" not in r.message
