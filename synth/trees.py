"""Double binary trees (Sanders, Speck & Traeff, "Two-tree algorithms for full bandwidth broadcast,
reduction and scan", Parallel Computing 2009; NCCL's tree AllReduce) and their pipelined AllReduce steps:
the pattern shared by the `tree` algorithm (synth/algorithms/tree.py, which documents the schedule) and
the rail AllReduce of composed schedules (synth/composition.py). Also the two broadcast-tree shapes of the
cluster straggler forms (``inorder_edges``, ``heap_two_trees``), which differ from NCCL's: a source outside
the tree and receivers ordered by readiness."""

from __future__ import annotations

import numpy as np

from collsynth.synth.ir import ScheduleBuilder


def btree(m: int) -> np.ndarray:
    """parent[r] of NCCL's binary tree over 0..m-1 (-1 at the root 0): r's parent clears r's lowest set
    bit and sets the next one up (just clears it when that is past m). Odd positions are leaves."""
    parent = np.full(m, -1, np.int64)
    for r in range(1, m):
        bit = r & -r
        up = (r ^ bit) | (bit << 1)
        parent[r] = up if up < m else r ^ bit
    return parent


def shape(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    """(height, depth, children sorted by position) of every node."""
    m = len(parent)
    kids: list[list[int]] = [[] for _ in range(m)]
    for v in range(m):
        if parent[v] >= 0:
            kids[int(parent[v])].append(v)
    depth = np.zeros(m, np.int64)
    root = int(np.flatnonzero(parent < 0)[0])
    order = [root]
    for v in order:
        for c in kids[v]:
            depth[c] = depth[v] + 1
            order.append(c)
    height = np.zeros(m, np.int64)
    for v in reversed(order):
        for c in kids[v]:
            height[v] = max(height[v], height[c] + 1)
    return height, depth, [sorted(k) for k in kids]


def trees(m: int) -> list[np.ndarray]:
    """The two parent arrays over positions 0..m-1: tree 2 is tree 1 mirrored (position q -> m-1-q) for
    even m, shifted by one (q -> q+1 mod m) for odd m, so leaves of one are inner nodes of the other."""
    t1 = btree(m)
    q = np.arange(m)
    place = m - 1 - q if m % 2 == 0 else (q + 1) % m  # tree-1 position q becomes position place[q]
    t2 = np.full(m, -1, np.int64)
    has = t1 >= 0
    t2[place[has]] = place[t1[has]]
    return [t1, t2]


def model_time(m: int, K: int, size: float, alpha: float, bw: float) -> float:
    """The cost formula of the module docstring."""
    h, d, _ = shape(btree(m))
    return (K + int(h.max()) + int(d.max())) * (4 * alpha + 2 * size / (K * bw))


def add_steps(b: ScheduleBuilder, order: np.ndarray, K: int) -> None:
    """Add the pipelined double binary tree AllReduce over ranks ``order`` (position q is rank
    order[q]) to ``b``: tree t carries chunks t K .. t K + K - 1, one message per rank and step."""
    n = len(order)
    shapes = [shape(p) for p in trees(n)]
    H = [int(h[np.flatnonzero(p < 0)[0]]) for (h, _, _), p in zip(shapes, trees(n))]
    rounds = K + max(H) + max(int(d.max()) for _, d, _ in shapes)
    # per tree: (child position, parent position, which child 0/1) edges
    edges = []
    for (h, d, kids), p in zip(shapes, trees(n)):
        rows = [(c, int(p[c]), kids[int(p[c])].index(c)) for c in range(n) if p[c] >= 0]
        arr = np.array(rows, np.int64).reshape(-1, 3)
        edges.append((arr, h, d))
    max_kids = max(max((len(k) for k in kids), default=0) for _, _, kids in shapes)
    for r in range(rounds):
        for up in (True, False):
            for side in range(max_kids):
                for t, (arr, h, d) in enumerate(edges):
                    e = arr[arr[:, 2] == side]
                    if up:  # child c sends piece r - h[c]
                        piece = r - h[e[:, 0]]
                        src, dst = e[:, 0], e[:, 1]
                    else:  # parent at depth d sends piece r - H - d
                        piece = r - H[t] - d[e[:, 1]]
                        src, dst = e[:, 1], e[:, 0]
                    ok = (piece >= 0) & (piece < K)
                    if ok.any():
                        b.new_step()
                        b.add_many(order[src[ok]], order[dst[ok]], t * K + piece[ok], 1, up)


# ---------------------------------------------------------------- broadcast trees of the cluster forms
def _inorder(lo: int, hi: int, parent: int, out: list[tuple[int, int]]) -> None:
    """Edges (parent, child) of the in-order binary tree over positions lo..hi, breadth first per call."""
    if lo > hi:
        return
    mid = (lo + hi + 1) // 2
    out.append((parent, mid))
    _inorder(mid + 1, hi, mid, out)  # the upper part first (with the upper median it is the smaller or equal half)
    _inorder(lo, mid - 1, mid, out)


def inorder_edges(R: int, mirror: bool) -> list[tuple[int, int]]:
    """Edges (parent, child) over receiver positions 0..R-1 (-1 is the source): the in-order binary tree,
    or its mirror image (interior positions of one are mostly leaves of the other: the two-tree idea of
    Sanders, Speck and Traeff, Parallel Computing 2009). The waves form's rail
    broadcast (synth/algorithms/stragglar/waves.py)."""
    out: list[tuple[int, int]] = []
    _inorder(0, R - 1, -1, out)
    if mirror:
        out = [(-1 if p < 0 else R - 1 - p, R - 1 - c) for p, c in out]
    depth = {-1: 0}
    for p, c in out:  # breadth first per call: a parent's edge comes before its children's
        depth[c] = depth[p] + 1
    return sorted(out, key=lambda e: depth[e[1]])


def heap_two_trees(nodes: list[int]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Two broadcast trees over ``nodes`` (least busy first) as (parent, child) edges in breadth-first
    order, -1 the source: heap-shaped binary trees whose interior nodes are disjoint (the first
    floor(R/2) nodes interior in one, the next ones in the other; with R odd the last node is a leaf in
    both). Each node then forwards about one stream when the blocks alternate between the trees (the
    two-tree idea of Sanders, Speck and Traeff, Parallel Computing 2009). The funnel form's broadcast
    (synth/algorithms/stragglar/funnel.py), and reversed (child to parent) its ``reduce_trees``."""
    R = len(nodes)
    inner = R // 2
    out: list[list[tuple[int, int]]] = []
    for k in range(2):
        if k == 0:
            heap = list(nodes)
        else:
            mine = nodes[inner:2 * inner] if R > 1 else list(nodes)
            heap = mine + [x for x in nodes if x not in mine]
        edges = [(-1, heap[0])] if heap else []
        edges += [(heap[(i - 1) // 2], heap[i]) for i in range(1, R)]
        out.append(edges)
    return out[0], out[1]
