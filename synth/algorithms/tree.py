"""Double binary tree AllReduce (NCCL's tree algorithm), pipelined in K pieces per tree.

Source: Sanders, Speck & Traeff, "Two-tree algorithms for full bandwidth broadcast, reduction and scan",
Parallel Computing 2009; NCCL 2.4 uses two such trees, each carrying half of the buffer. See
docs/cluster-algorithms.md.

The ranks are placed in the topology's ring order (layout.ring_order, so tree neighbours are near each
other). Tree 1 is NCCL's binary tree over positions 0..n-1 (odd
positions are leaves, the parent of r clears r's lowest set bit and sets the next, root 0); tree 2 is
its mirror image (even n) or its shift by one (odd n), so the leaves of one are inner nodes of the other
(Sanders et al.'s complementary trees). Tree t carries half of the buffer in K pieces. Reduce: a node of height h
(leaves 0) sends piece j, summed over its subtree, to its parent in round j + h. Broadcast: a node at
depth d sends the finished piece j to its children in round j + H + d (H: the root's height), so the
two phases overlap. Rounds: K + H + D. Each round is split into steps in which every rank sends at
most one and receives at most one message (up from left children, up from right children, down to
left, down to right, per tree), so the schedule declares ports 1 (2 on a multi-node topology: one NVLink
and one NIC message at a time). Per round an inner node sends 3 and a leaf 1 message of s/(2K): about
(K + H + D)(4 alpha + 2 s/(K B)) on a single port.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.layout import check_topology, cluster_meta, node_grid, pair_model, ring_order
from collsynth.synth.ir import Schedule, ScheduleBuilder

DEFAULT_SIZE = float(2**30)
NVSWITCH_ALPHA, NVSWITCH_BW = 3e-6, 450.0 * 2**30  # the nvswitch preset's defaults (no topology given)
PIPELINES = (1, 2, 4, 8, 16, 32, 64)
ELEMENT_BYTES = 4


def btree(m: int) -> np.ndarray:
    """parent[r] of NCCL's binary tree over 0..m-1 (-1 at the root 0): r's parent clears r's lowest set
    bit and sets the next one up (just clears it when that is past m). Odd positions are leaves."""
    parent = np.full(m, -1, np.int64)
    for r in range(1, m):
        bit = r & -r
        up = (r ^ bit) | (bit << 1)
        parent[r] = up if up < m else r ^ bit
    return parent


def _shape(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
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
    h, d, _ = _shape(btree(m))
    return (K + int(h.max()) + int(d.max())) * (4 * alpha + 2 * size / (K * bw))


def build(n: int, collective: str = "allreduce", topology: Any = None, size: float | None = None,
          pipeline: int | str = "auto") -> Schedule:
    """Double binary tree AllReduce over the topology's ring order (rank order without a topology)."""
    check_topology(topology, n, "tree")
    if collective != "allreduce":
        raise CollsynthError(f"tree builds allreduce, not {collective!r}")
    s = DEFAULT_SIZE if size is None else float(size)
    if not s > 0:
        raise CollsynthError(f"--size must be positive, got {size!r}")
    order = np.asarray(ring_order(topology, n), np.int64)
    if pipeline == "auto":
        alpha, bw = (pair_model(topology, int(order[0]), int(order[1])) if topology is not None
                     else (NVSWITCH_ALPHA, NVSWITCH_BW))
        fits = [k for k in PIPELINES if k == 1 or s / (2 * k) >= ELEMENT_BYTES]
        K = min(fits, key=lambda k: (model_time(n, k, s, alpha, bw), k))
    elif isinstance(pipeline, bool) or not isinstance(pipeline, (int, np.integer)) or pipeline < 1:
        raise CollsynthError(f"--pipeline must be a positive integer or auto, got {pipeline!r}")
    else:
        K = int(pipeline)
    grid = node_grid(topology, n)
    b = ScheduleBuilder("allreduce", n, 2 * K, name=f"tree_allreduce_n{n}", ports=2 if grid.shape[0] > 1 else 1,
                        meta={"algorithm": "tree", "pipeline": K, **cluster_meta(topology, grid)})
    shapes = [_shape(p) for p in trees(n)]
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
    return b.build()
