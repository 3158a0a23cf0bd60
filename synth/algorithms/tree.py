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
from collsynth.synth.trees import add_steps, model_time

DEFAULT_SIZE = float(2**30)
NVSWITCH_ALPHA, NVSWITCH_BW = 3e-6, 450.0 * 2**30  # the nvswitch preset's defaults (no topology given)
PIPELINES = (1, 2, 4, 8, 16, 32, 64)
ELEMENT_BYTES = 4


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
    add_steps(b, order, K)
    return b.build()
