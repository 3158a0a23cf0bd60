"""Where ranks sit on a Topology, for the topology-aware algorithms (ring, multiring, hierarchical, tree).

- ``node_grid``: the server nodes as an N x G grid of ranks (row = node, column = local index, which is
  the rail on a rail-optimized fabric), from the topology's ``node_of``/``local_index``; one row of every
  GPU when the topology has no node structure or its nodes differ in size.
- ``pair_model``: the (alpha, bandwidth) of the route between two GPUs: the sum of the route's link
  alphas and its bottleneck link bandwidth (what synth.simulate charges a lone message).
- ``ring_order``: the topology's best ring (docs/cluster-algorithms.md). Inside one NVLink domain: a
  Hamiltonian cycle of the pairs with the highest route bandwidth and, among those, the fewest links
  per route (as NCCL builds its rings along NVLinks: on ``dgx1`` the doubled-NVLink cycle
  0-1-3-2-6-7-5-4, never the missing 3-4 or 7-0 links); rank order when it is already such a cycle
  (``nvswitch``, ``full-mesh``, ``ring`` keep it). Across nodes: every node walks the same intra-node
  path, alternately forward and backward, so each node-to-node hop joins two GPUs on one rail (one
  leaf hop; N slow hops, the fewest a ring through N nodes can have).
- ``disjoint_cycles``: Hamiltonian cycles packed into the links' capacity one after another (each
  takes its bottleneck bandwidth off every link of its routes), for multiring inside a node.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collsynth.errors import CollsynthError

SEARCH_MAX_GPUS = 128  # above this, one NVLink domain keeps rank order (the search is exponential)
_SEARCH_BUDGET = 200_000  # DFS expansions per (bandwidth, hops) level


def check_topology(topology: Any, n: int, algorithm: str) -> None:
    """CollsynthError unless ``topology`` has ``n`` GPUs."""
    if topology is not None and int(topology.nranks) != n:
        raise CollsynthError(f"{algorithm}: topology {topology.name!r} has {topology.nranks} GPUs, not {n}: "
                             f"use --gpus {topology.nranks} or a topology with {n} GPUs")


def node_grid(topology: Any, n: int) -> np.ndarray:
    """N x G int64 array: row a lists node a's ranks in local order (one row when there are no nodes)."""
    flat = np.arange(n, dtype=np.int64).reshape(1, n)
    node_of = getattr(topology, "node_of", None) if topology is not None else None
    if node_of is None:
        return flat
    node_of = np.asarray(node_of, np.int64)
    count = int(node_of.max()) + 1 if len(node_of) else 1
    if count <= 1:
        return flat
    sizes = np.bincount(node_of, minlength=count)
    if np.any(sizes != sizes[0]):
        return flat
    local = getattr(topology, "local_index", None)
    key = np.asarray(local, np.int64) if local is not None else np.zeros(n, np.int64)
    order = np.lexsort((np.arange(n), key, node_of))  # by node, then local index, then rank
    return order.reshape(count, int(sizes[0])).astype(np.int64)


def cluster_meta(topology: Any, grid: np.ndarray) -> dict[str, object]:
    """What a schedule built for several nodes records: ``gpus_per_node`` (backends place port channels
    by it) and ``topology`` (its spec, so verifying the file enforces the per-class ports again)."""
    if grid.shape[0] <= 1:
        return {}
    out: dict[str, object] = {"gpus_per_node": int(grid.shape[1])}
    spec = getattr(topology, "spec", None)
    if spec is not None:
        out["topology"] = spec
    return out


def route_stats(topology: Any, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(alpha sum, bottleneck bandwidth, link count) of each (src, dst) route."""
    links, alpha = topology.pair_table(pairs)
    ok = links >= 0
    bw = np.where(ok, np.asarray(topology.link_bw)[np.maximum(links, 0)], np.inf).min(axis=1)
    return alpha, bw, ok.sum(axis=1)


def pair_model(topology: Any, src: int, dst: int) -> tuple[float, float]:
    """(alpha seconds, bandwidth bytes/s) of one message from src to dst on its route."""
    a, b, _ = route_stats(topology, np.array([[src, dst]], np.int64))
    return float(a[0]), float(b[0])


def _hamiltonian(m: int, ok: np.ndarray, budget: int) -> list[int] | None:
    """A Hamiltonian cycle 0 -> ... -> 0 of the directed graph ok[u, v] (None if none found in budget)."""
    nbrs = [np.flatnonzero(ok[u]).tolist() for u in range(m)]
    path = [0]
    seen = np.zeros(m, np.bool_)
    seen[0] = True
    stack = [iter(_warnsdorff(0, nbrs, seen))]
    steps = 0
    while stack:
        steps += 1
        if steps > budget:
            return None
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            seen[path.pop()] = False
            continue
        path.append(nxt)
        seen[nxt] = True
        if len(path) == m:
            if ok[nxt, 0]:
                return path
            seen[path.pop()] = False
            continue
        stack.append(iter(_warnsdorff(nxt, nbrs, seen)))
    return None


def _warnsdorff(u: int, nbrs: list[list[int]], seen: np.ndarray) -> list[int]:
    """Unvisited successors of u, fewest onward options first (ties: lower index)."""
    cand = [v for v in nbrs[u] if not seen[v]]
    return sorted(cand, key=lambda v: (sum(1 for w in nbrs[v] if not seen[w]), v))


def _levels(bw: np.ndarray, hops: np.ndarray, mask: np.ndarray) -> list[tuple[float, int]]:
    """(bandwidth threshold, hop limit) levels, best first."""
    out = []
    for t in sorted(set(bw[mask].tolist()), reverse=True):
        for h in sorted(set(hops[mask & (bw >= t)].tolist())):
            out.append((t, int(h)))
    return out


def cycle_in(topology: Any, members: np.ndarray, capacity: np.ndarray | None = None) -> tuple[list[int], float]:
    """Best ring through ``members`` (positions into members) and its bottleneck bandwidth.

    With ``capacity`` (per-link residual bandwidth) routes are rated by their residual bottleneck.
    Returns ([], 0.0) when no cycle has positive bandwidth.
    """
    m = len(members)
    ident = list(range(m))
    if m == 2:
        pairs = np.array([[members[0], members[1]], [members[1], members[0]]], np.int64)
        return ident, float(_rated(topology, pairs, capacity)[1].min())
    if m > SEARCH_MAX_GPUS:
        pairs = np.stack([members, np.roll(members, -1)], 1)
        return ident, float(_rated(topology, pairs, capacity)[1].min())
    u, v = np.divmod(np.arange(m * m), m)
    off = u != v
    pairs = np.stack([members[u[off]], members[v[off]]], 1)
    _, b, h = _rated(topology, pairs, capacity)
    bw = np.zeros((m, m))
    hops = np.zeros((m, m), np.int64)
    bw[u[off], v[off]] = b
    hops[u[off], v[off]] = h
    mask = np.zeros((m, m), np.bool_)
    mask[u[off], v[off]] = b > 0
    for t, hmax in _levels(bw, hops, mask):
        ok = mask & (bw >= t) & (hops <= hmax)
        if all(ok[i, (i + 1) % m] for i in range(m)):
            return ident, t
        found = _hamiltonian(m, ok, _SEARCH_BUDGET)
        if found is not None:
            return found, t
    return [], 0.0


def _rated(topology: Any, pairs: np.ndarray, capacity: np.ndarray | None) -> tuple[np.ndarray, np.ndarray,
                                                                                    np.ndarray]:
    if capacity is None:
        return route_stats(topology, pairs)
    links, alpha = topology.pair_table(pairs)
    ok = links >= 0
    bw = np.where(ok, capacity[np.maximum(links, 0)], np.inf).min(axis=1)
    return alpha, bw, ok.sum(axis=1)


def intra_order(topology: Any, grid: np.ndarray) -> list[int]:
    """Local indices in ring order inside a node (node 0 stands for all: nodes are alike)."""
    if topology is None or grid.shape[1] <= 2:
        return list(range(grid.shape[1]))
    order, _ = cycle_in(topology, grid[0])
    return order or list(range(grid.shape[1]))


def ring_order(topology: Any, n: int) -> list[int]:
    """The topology's best ring as a rank sequence (see the module docstring); rank order without one."""
    if topology is None:
        return list(range(n))
    grid = node_grid(topology, n)
    local = intra_order(topology, grid)
    rows = [grid[a, local] if a % 2 == 0 else grid[a, local[::-1]] for a in range(grid.shape[0])]
    return [int(r) for r in np.concatenate(rows)]


def disjoint_cycles(topology: Any, members: np.ndarray, limit: int) -> list[tuple[list[int], float]]:
    """Up to ``limit`` rings through ``members`` packed into the link capacities, each with the
    bandwidth it gets: the least over its routes' links of the capacity left by the earlier rings divided
    by how many of its own routes cross the link; that bandwidth is then taken off every link it uses."""
    cap = np.asarray(topology.link_bw, np.float64).copy()
    out: list[tuple[list[int], float]] = []
    while len(out) < limit:
        order, bw = cycle_in(topology, members, cap)
        if not order or not bw > 0 or not np.isfinite(bw):
            break
        idx = np.asarray(order, np.int64)
        pairs = np.stack([members[idx], members[np.roll(idx, -1)]], 1)
        links, _ = topology.pair_table(pairs)
        used = links[links >= 0]
        mult = np.bincount(used, minlength=len(cap))
        hit = mult > 0
        share = float((cap[hit] / mult[hit]).min())
        if not share > 0:
            break
        cap = np.maximum(cap - mult * share, 0.0)
        out.append((order, share))
        if len(members) <= 2:
            break
    return out
