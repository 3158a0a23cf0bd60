"""synth/trees.py's broadcast-tree shapes of the cluster forms (inorder_edges: waves.py's rail broadcast;
heap_two_trees: funnel.py's), checked against their definitions."""

from __future__ import annotations

import pytest

from collsynth.synth.trees import inorder_edges


@pytest.mark.parametrize("R", range(1, 20))
def test_inorder_tree_roots_every_range_at_its_upper_median(R: int) -> None:
    """Each subtree covers a contiguous range lo..hi of receiver positions, rooted at (lo + hi + 1) // 2
    (the upper median), the positions above it in one child's subtree and those below in the other's;
    the mirror image roots at the lower median. Edges are breadth first, and of a parent's two edges the
    one to the positions above it comes first (the two trees alternate between units: waves.py)."""
    for mirror in (False, True):
        edges = inorder_edges(R, mirror)
        assert sorted(c for _, c in edges) == list(range(R))
        kids: dict[int, list[int]] = {}
        depth = {-1: 0}
        for p, c in edges:
            assert p in depth  # breadth first: the parent was reached before
            depth[c] = depth[p] + 1
            kids.setdefault(p, []).append(c)
        assert [depth[c] for _, c in edges] == sorted(depth[c] for _, c in edges)

        def check(v: int, lo: int, hi: int) -> None:
            """v roots lo..hi: its median, children root the ranges on either side."""
            assert v == ((lo + hi + 1) // 2 if not mirror else (lo + hi) // 2), (R, mirror, v, lo, hi)
            below = [c for c in kids.get(v, []) if c < v]
            above = [c for c in kids.get(v, []) if c > v]
            assert len(below) == (v > lo) and len(above) == (v < hi)
            order = kids.get(v, [])
            if len(order) == 2:  # the range above first (mirror: below, the image of above)
                assert order == (above + below if not mirror else below + above)
            for c in below:
                check(c, lo, v - 1)
            for c in above:
                check(c, v + 1, hi)

        assert len(kids[-1]) == 1
        check(kids[-1][0], 0, R - 1)
        assert max(depth.values()) == R.bit_length()  # balanced: a source edge and floor(log2 R) + 1 levels


def test_nccl_binary_tree_shape_and_cost() -> None:
    """btree: r's parent clears r's lowest set bit and sets the next one up (just clears it past m); the
    mirror (even m) or shift by one (odd m) is the second tree; model_time is (K + H + D)(4 alpha +
    2 s / (K B)) with H the root's height and D the deepest depth (synth/algorithms/tree.py)."""
    import numpy as np

    from collsynth.synth.trees import btree, model_time, shape, trees

    assert btree(8).tolist() == [-1, 2, 4, 2, 0, 6, 4, 6]
    assert btree(6).tolist() == [-1, 2, 4, 2, 0, 4]  # 4: 8 is past 6, so 0; 5: 6 is past 6, so 4
    assert btree(1).tolist() == [-1] and btree(2).tolist() == [-1, 0]
    h, d, kids = shape(btree(8))
    assert h.tolist() == [3, 0, 1, 0, 2, 0, 1, 0] and d.tolist() == [0, 3, 2, 3, 1, 3, 2, 3]
    assert kids == [[4], [], [1, 3], [], [2, 6], [], [5, 7], []]
    t1, t2 = trees(6)
    assert t2.tolist() == [5 - p if p >= 0 else -1 for p in t1[::-1]]  # mirrored: position q -> 5 - q
    t1, t2 = trees(5)
    assert t1.tolist() == [-1, 2, 4, 2, 0] and t2.tolist() == [1, -1, 3, 0, 3]  # shifted: q -> q + 1 mod 5
    assert model_time(8, 4, 1e6, 1e-6, 1e9) == pytest.approx((4 + 3 + 3) * (4e-6 + 2e6 / (4 * 1e9)), rel=1e-12)
    assert model_time(6, 2, 1e6, 0.0, 1e9) == pytest.approx((2 + 3 + 3) * 2e6 / (2 * 1e9), rel=1e-12)
    assert np.array_equal(shape(btree(6))[0], [3, 0, 1, 0, 2, 0])


def test_shape_of_a_tree_rooted_anywhere() -> None:
    """shape() takes any parent array: the root is the node without a parent, wherever it is."""
    import numpy as np

    from collsynth.synth.trees import shape

    h, d, kids = shape(np.array([2, 0, -1, 2]))  # 2 -> 0 -> 1, 2 -> 3
    assert h.tolist() == [1, 0, 2, 0] and d.tolist() == [1, 2, 0, 1] and kids == [[1], [], [0, 3], []]


@pytest.mark.parametrize("R", [3, 5, 7, 9, 11])
def test_two_heaps_reach_the_busiest_node_last_when_it_is_a_leaf_of_both(R: int) -> None:
    """heap_two_trees (nodes least busy first): with R odd the last (busiest) node is a leaf of both
    trees, reached by the last edge of each; the rest keep their order among the leaves."""
    from collsynth.synth.trees import heap_two_trees

    nodes = [10 + 3 * i for i in range(R)]
    for edges in heap_two_trees(nodes):
        assert edges[-1][1] == nodes[-1] and nodes[-1] not in {p for p, _ in edges}
        parents = {p for p, _ in edges}
        leaves = [c for _, c in edges if c not in parents]
        assert leaves == sorted(leaves)  # least busy first among the leaves too


@pytest.mark.parametrize("n", [4, 5, 8, 13, 16])
def test_tree_allreduce_broadcasts_a_piece_in_the_round_after_its_reduction(n: int) -> None:
    """add_steps: a node of height h sends piece j up in round j + h, a node at depth d sends it down in
    round j + H + d, so the root sends piece 0 down one round after the last contribution reached it;
    with K = 5 every round has its 8 steps (up/down x 2 sides x 2 trees), so the first broadcast message
    of chunk 0 is 8 steps after its last reduce message (pinned: a round later would be 12)."""
    from collsynth.synth.algorithms import tree

    s = tree.build(n, pipeline=5)
    c = s.chunk == 0
    assert int(s.step[c & ~s.reduce].min()) - int(s.step[c & s.reduce].max()) == 8
