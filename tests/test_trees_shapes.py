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
