"""The AllReduce of the ranks present before the late ones arrive, on a cluster (issue 15, points 1 to 3).

Shared by the late-GPU / late-node forms (cluster.py) and the waves of several late ranks (waves.py). N nodes
of G GPUs (``grid``, synth/algorithms/layout.py ``node_grid``); the chunks are G parts of M units (part g is
units [g M, (g+1) M)). A pipelined hierarchical AllReduce of the present ranks' buffers (docs/stragglar.md
section 10; the ring is Patarasuk & Yuan's):

- in every node a ReduceScatter of part g into its owner (local g, or the node's present GPUs piece by piece
  when local g is absent), pieces in the order its rail's ring needs them;
- a ring AllReduce of part g along rail g among the nodes whose rail-g GPU is present (P pieces per part); a
  node whose rail-g GPU is absent sends each piece of its part g over the piece holder's own rail into a
  spent copy at the ring node where the piece ends (then NVLink), and gets the final piece back the same way;
- an AllGather in every node, pieces in the order the ring finishes them there.

Moves are handed to ``add(src, dst, first chunk, count, reduce)`` in an order that respects their data
dependencies; the caller's list-scheduling model (listsched.Timeline, or ClusterPlan.add) starts each piece
as soon as it is ready, so the three stages overlap.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

LOCAL_ROUNDS = 8  # on large rings the in-node ReduceScatter and AllGather take about this many rounds


PRE_EVEN = 1.25  # pre_units: a ring's largest piece at most this many times an even share ...
PRE_LOCATIONS = 2**21  # ... with at most this many (rank, chunk) locations (verify's state: 0.5 GB at 1,024 GPUs)


def pre_units(grid: np.ndarray, absent: set[int], M: int, max_chunks: int) -> int:
    """Units per block k for the present ranks' AllReduce (``present_allreduce``): its ring along rail g cuts
    part g into P pieces, P the ring's nodes, and each piece crosses P - 1 links one after the other in
    each half, so the largest piece, at least one unit of M, sets the time: (P - 1)(alpha_net + T/M)
    where M < P (h100-cluster, 1 GiB, a late node at 64 x 8: 16 blocks per part, 30.2 ms before the
    arrival). The chunks are cut k times finer (the blocks after the arrival keep their bytes): the least k
    whose largest piece is within PRE_EVEN of an even share on every rail, else the k with the most even
    pieces, up to ``max_chunks`` chunks and PRE_LOCATIONS locations."""
    N, G = grid.shape
    rings = {sum(1 for b in range(N) if int(grid[b, g]) not in absent) for g in range(G)} - {0}
    rings = rings or {N}
    kmax = max(1, min(max_chunks // (G * M), PRE_LOCATIONS // (grid.size * G * M)))

    def spread(k: int) -> float:  # the largest piece over an even share, the worst rail
        return max(math.ceil(k * M / P) * P / (k * M) for P in rings)

    ks = range(1, kmax + 1)
    return next((k for k in ks if spread(k) <= PRE_EVEN), min(ks, key=lambda k: (spread(k), k)))


def _coalesce(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(first chunk, count) runs with the adjacent ones joined, in their first order otherwise."""
    out: list[tuple[int, int]] = []
    for lo, cnt in runs:
        if out and out[-1][0] + out[-1][1] == lo:
            out[-1] = (out[-1][0], out[-1][1] + cnt)
        elif out and lo + cnt == out[-1][0]:
            out[-1] = (lo, out[-1][1] + cnt)
        else:
            out.append((lo, cnt))
    return out


TRY_ONE_ROUND = 1.25  # local_spans: the one-round stages are tried where their estimate is within this of the default's


def ring_shape(grid: np.ndarray, hold: set[int]) -> tuple[int, int]:
    """(T, m) of ``present_allreduce`` for the ranks ``hold``: the most pieces of a part (ring nodes) and the most
    punctual GPUs of a node."""
    N, G = grid.shape
    nodes = [b for b in range(N) if any(int(x) in hold for x in grid[b])]
    T = max((sum(1 for b in nodes if int(grid[b, g]) in hold) or len(nodes)) for g in range(G))
    m = max(sum(1 for x in grid[b] if int(x) in hold) for b in nodes)
    return T, m


def default_span(T: int) -> int:
    """Pieces per in-node round of ``present_allreduce`` by default for rings of at most T pieces: 1, or on
    rings over 2 LOCAL_ROUNDS pieces enough for LOCAL_ROUNDS rounds."""
    return -(-T // LOCAL_ROUNDS) if T > 2 * LOCAL_ROUNDS else 1


def local_spans(T: int, m: int, size: float, G: int, model: tuple[float, ...] | None) -> list[int]:
    """Pieces per in-node round of ``present_allreduce`` worth building for rings of at most T pieces and nodes of
    at most m punctual GPUs: the default (``default_span``), and with a ``model`` (alpha_nv, B_nv, alpha_net,
    B_net) also T (one round per stage) where its alpha-beta estimate is within TRY_ONE_ROUND of the default's. R
    rounds of m - 1 messages (A = (m - 1) alpha_nv each) carry D = (m - 1)/m s / B_nv per stage; the rails' rings
    (2 (T - 1) steps of a piece) overlap the stages but for the first ReduceScatter round and the last AllGather
    round: max(2 (R A + D), ring + 2 (A + D / R)). The estimate holds where the NICs set the pace (h100-cluster:
    the default kept, one round is no candidate); where NVLink does, list scheduling packs several rounds of G - 1
    shifts poorly (2 x 72 at 900 GB/s, one GPU absent: 4.61 ms in two rounds, 3.70 in one; 2 x 40: 4.20 and 3.46),
    so ClusterPlan.pre builds both and keeps the faster."""
    span = default_span(T)
    if model is None or m < 2 or span >= T:
        return [span]
    a_nv, b_nv, a_net, b_net = model
    A = (m - 1) * a_nv
    D = (m - 1) / m * size / b_nv
    ring = 2 * (T - 1) * (a_net + size / (G * T * b_net))

    def est(k: int) -> float:
        R = -(-T // k)
        return max(2 * (R * A + D), ring + 2 * (A + D / R))

    return [span, T] if est(T) < TRY_ONE_ROUND * est(span) else [span]


def present_allreduce(grid: np.ndarray, hold: set[int], M: int, add: Callable[..., Any], span: int = 0) -> None:
    """Hand the moves of the pipelined hierarchical AllReduce of the ranks ``hold`` to ``add`` (module
    docstring); afterwards every rank of ``hold`` holds the sum of their buffers. ``span``: pieces per in-node
    round (``local_spans``; 0: the default)."""
    N, G = grid.shape
    nodes = [b for b in range(N) if any(int(x) in hold for x in grid[b])]
    present = {b: [int(x) for x in grid[b] if int(x) in hold] for b in nodes}
    local_of = np.empty(grid.size, np.int64)
    local_of[grid.reshape(-1)] = np.tile(np.arange(G), N)
    ring: list[list[int]] = []  # per part: the nodes whose rail-g GPU is punctual (all nodes if none is)
    edges: list[list[int]] = []
    for g in range(G):
        full = [b for b in nodes if int(grid[b, g]) in hold] or nodes
        ring.append(full)
        edges.append([g * M + (M * j) // len(full) for j in range(len(full) + 1)])

    place = [{b: i for i, b in enumerate(r)} for r in ring]  # rail g: ring node -> its index

    def owner(b: int, g: int, j: int) -> int:
        """Holder of piece j of part g in node b: its rail GPU, else a punctual GPU of the node (the
        pieces of an absent GPU's part spread over the node: NIC receive load)."""
        r = int(grid[b, g])
        return r if r in hold else present[b][(g + j) % len(present[b])]

    def piece(g: int, j: int) -> tuple[int, int]:
        return edges[g][j], edges[g][j + 1] - edges[g][j]

    def holders(b: int, g: int, j: int) -> list[tuple[int, int, int]]:
        """(holder, first chunk, count) of piece j of part g in node b: its rail GPU; else, where the ring has
        at most half as many pieces (P) as the node punctual GPUs (m; 2 x 72, one GPU late: one piece for the
        late GPU's part, whose one holder took 4.43 ms of NVLink sends against 3.30 for the others), the piece
        cut into about m / P sub-pieces on as many of them, each moving on its holder's own rail; else
        ``owner``."""
        lo, cnt = piece(g, j)
        r = int(grid[b, g])
        m, P = len(present[b]), len(ring[g])
        if r in hold or m < 2 * P or cnt < 2:
            return [(owner(b, g, j), lo, cnt)]
        c = min(cnt, -(-m // P))
        cuts = [lo + cnt * i // c for i in range(c + 1)]
        return [(present[b][(g + j * c + i) % m], cuts[i], cuts[i + 1] - cuts[i]) for i in range(c)]

    def local(b: int, j_of: Any, reduce: bool) -> None:
        """ReduceScatter (``reduce``) or AllGather of the pieces in node b, the t-th piece of each part
        (``j_of``) at a time, in rounds that pair each punctual GPU with one other (a permutation, so
        no port waits for another even where an absent GPU's part is spread over the node). With more than
        2 LOCAL_ROUNDS pieces per part (rings of over 16 nodes), or with a larger ``span``, consecutive
        ones go in one message (contiguous chunks): the in-node stages stay LOCAL_ROUNDS rounds deep, not one
        per ring node."""
        pres = present[b]
        m = len(pres)
        T = max(len(r) for r in ring)
        step = span or default_span(T)
        for t0 in range(0, T, step):
            owned: dict[int, list[tuple[int, int]]] = {}
            for g in range(G):
                for t in range(t0, min(t0 + step, len(ring[g]))):
                    for o, lo, cnt in holders(b, g, j_of(g, t)):
                        if cnt:
                            owned.setdefault(o, []).append((lo, cnt))
            for o, runs in owned.items():
                owned[o] = _coalesce(runs)
            for sh in range(1, m):
                for i in range(m):
                    y = pres[i]
                    o = pres[(i + sh) % m] if reduce else pres[(i - sh) % m]
                    for lo, cnt in owned.get(o, ()):
                        add(y, o, lo, cnt, True) if reduce else add(o, y, lo, cnt, False)

    def attach_in(b: int, t: int) -> None:
        """Node b off rail g's ring: its piece (t-th in its order) of part g into the ring node R where the
        piece ends. Its holder o (on rail h) copies it over its own NIC into R's rail-h GPU, whose copy
        of that piece is spent (sent in R's ReduceScatter, overwritten by the AllGather), which reduces
        it into R's owner over NVLink; through the absent GPU's NIC (PXN) if R's rail-h GPU is absent."""
        for g in range(G):
            P = len(ring[g])
            if b in place[g] or t >= P:
                continue
            j = (-t - 1) % P
            R = ring[g][j]
            for o, lo, cnt in holders(b, g, j):
                if not cnt:
                    continue
                mid = int(grid[R, int(local_of[o])])
                if mid in hold and mid != owner(R, g, j):
                    add(o, mid, lo, cnt, False)
                    add(mid, owner(R, g, j), lo, cnt, True)
                else:
                    add(o, owner(R, g, j), lo, cnt, True)

    def pos(b: int, g: int) -> int:  # a node's place in rail g's ring (attached nodes: the next one's)
        return place[g].get(b, 0)

    def out() -> None:
        """The final pieces back to the nodes off the ring (piece j is final first at ring node R = j): R's
        owner copies it over NVLink to R's GPU on the rail of the receiving holder (a spent piece there,
        the AllGather writes the same), which sends it over its NIC; PXN if that GPU is absent."""
        for g in range(G):
            for j in range(len(ring[g])):
                R = ring[g][j]
                for b in nodes:
                    if b in place[g]:
                        continue
                    for o, lo, cnt in holders(b, g, j):
                        if not cnt:
                            continue
                        mid = int(grid[R, int(local_of[o])])
                        if mid in hold and mid != owner(R, g, j):
                            add(owner(R, g, j), mid, lo, cnt, False)
                            add(mid, o, lo, cnt, False)
                        else:
                            add(owner(R, g, j), o, lo, cnt, False)

    for b in nodes:  # ReduceScatter in every node, pieces in the order its ring needs them
        local(b, lambda g, t, b=b: (pos(b, g) - t - 1) % len(ring[g]), True)
    for t in range(max(len(r) for r in ring)):  # (after every node's: the copies land on spent pieces)
        for b in nodes:
            attach_in(b, t)
    for rs in (True, False):  # ring AllReduce of part g along rail g (Patarasuk & Yuan)
        if not rs:
            out()
        for t in range(max(len(r) for r in ring) - 1):
            for g in range(G):
                P = len(ring[g])
                if t >= P - 1:
                    continue
                for i in range(P):
                    j = (i - t - 1) % P if rs else (i - t) % P
                    lo, cnt = piece(g, j)
                    if cnt:
                        add(owner(ring[g][i], g, j), owner(ring[g][(i + 1) % P], g, j), lo, cnt, rs)
    for b in nodes:  # AllGather in every node, pieces in the order the ring finishes them there
        local(b, lambda g, t, b=b: (pos(b, g) - t) % len(ring[g]), False)
