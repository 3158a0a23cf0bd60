"""Several late ranks on a cluster (issue 15, point 3): reduce toward the last node, then broadcast ("funnel").

Our construction (docs/stragglar.md section 11; the bounds are the brief's clusters.md section 4). N nodes
of G GPUs (synth/algorithms/layout.py ``node_grid``; GPU grid[b, g] has local index g, the GPUs with local
index g form rail g); s bytes per rank; the buffer is G parts of M blocks (block j of part g is chunk
j G + g: a row, block j of every part, is contiguous). Let L be the last rank to arrive (``latest_rank``)
and m its node. Nobody but node m needs a partial sum, so:

1. Every node b reduce-scatters its GPUs' buffers over NVLink, block by block: grid[b, g] gets the node
   sum of part g, each GPU joining when it arrives. A late GPU x has *helpers*, the node peers that arrived
   first (if before x): helper j mod k collects the node's block j of x's part (so the punctual peers
   reduce before x arrives) and hands it to x, and later spreads x's final block j (so x's NVLink port
   sends and receives about s after its arrival). L's part gets the same treatment in node m.
2. Per rail g, a pipelined reduce of part g toward node m, by blocks: a chain of the nodes in ready order
   (the latest arrival in the node, L left out) whose rail-g GPU is punctual, ending in m (variant ``fan``
   = f: its last f nodes each send straight into m); a node whose rail-g GPU is late takes in nothing on
   rail g (its NIC's ingress stays free for the broadcast) and sends into the next chain node after it;
   those after the last chain node join the chain's end instead (variant ``tail``), taking in through
   their helpers over PXN, so node m's NIC does not take several streams. With ``inline`` every node but
   the last one ready before L is a chain node on every rail (a late rail GPU receives once it is there),
   so no chain node takes two streams in; that last one too when its own stream (T = s/(G B_net) from its
   ready time, ``rail_time``) ends before L arrives.
   With ``reduce_trees`` (from TREE_MIN_NODES such nodes) the nodes whose GPUs are all punctual do not
   head the chains: they reduce by two binary trees over themselves (``trees.heap_two_trees`` reversed:
   even blocks up one, odd blocks up the other, each node interior in at most one, so its NIC takes in
   about one block per block as in the chain), whose roots send into the head of the chain of the other
   nodes (or into m): T + O(log N) block times before their sum is in, instead of T + N (the chains took
   T + 63 rounds on 64 nodes, 10.8 ms at 24 blocks, so the funnel lost to the synchronous schedule there).
   A chain node's rail GPU receives the upstream blocks whenever they come (before its node's late GPUs
   arrive: ingress early), adds its node's part, and sends each block on once it is complete. Into node m
   (variant ``pxn``) a late rail GPU's blocks go to its helpers (over PXN), the blocks of L's part too:
   after its arrival L takes each of these sums in from its helper over NVLink and adds its own block, so
   its NVLink port sends only the G - 1 other parts (its last rail's first block leaves G - 1 NVLink
   messages after L arrives, not G) and its NIC only sends; otherwise L takes them in on its NIC, but
   the first ``pxn_first`` blocks, which take the PXN way (L's rail then starts one NVLink message after
   L arrives, not one network message). A late GPU (not L) that arrived ``settled`` or more before the
   last arrival in its node (in node m: L) has no helpers: it holds its own part; in node m L's block of
   it goes straight to it, not through a helper and back (one NVLink message per block); elsewhere the
   upstream blocks of its part come in on its own NIC, not over PXN into its helpers, whose NICs carry
   their own rails' chains.
   With ``early`` each node's reductions (its ReduceScatter and the upstream blocks) are listed by their
   modelled earliest start rather than by when their data is ready, so an upstream block is not reduced
   behind a late GPU's block of the same row (whose NVLink port may still be busy with earlier rows).
   With ``relay`` an upstream block for a GPU off the sender's rail (a helper) goes over NVLink to the
   sending node's GPU on the receiver's rail, then over that GPU's NIC: a PXN message would hold the
   sender's NVLink port for the whole network transfer (the model reserves every port of a route), so a
   late rail GPU that also reduce-scatters its node's blocks would fall behind.
3. Node m's rail-g GPU then holds the final blocks of part g once L's contribution is in: each is broadcast
   along rail g (receivers copy) and every node spreads it over NVLink from the GPU that received it. The
   broadcast is either two binary trees over the other nodes (``trees.heap_two_trees``: even blocks down one, odd
   down the other; each node interior in at most one, the node ready last a leaf in both where the count
   allows, as it may still be sending its own stream) or the hypercube rounds (bcast.broadcast_rounds);
   with ``leaves`` = w the nodes ready less than w before L (still sending their own stream) are left out
   of the rounds and get each block, in order, from the node holding it that the model delivers first
   (a broadcast leaf sends nothing); with ``mute`` as well they stay in the rounds but only receive
   (``bcast.muted_cube_rounds``: at 8 nodes with one muted node still nblocks + 2 rounds, the one-port optimum, as the
   7 others send every round); without ``pxn`` the nodes that send rail lL's blocks into L itself (after
   L's arrival, so their NIC is busy during the whole broadcast on that rail) are muted too, whatever the
   window (a window of 0 mutes only them). With ``spread`` a late rail GPU spreads a final block over NVLink
   itself when its NVLink port frees up before its helper's (a late GPU that arrived long before L is
   idle by then, and its helper has its own part to spread). With ``rows`` the nodes idle when L arrives
   spread whole rows by recursive doubling (log2 G messages per GPU and row instead of G - 1); rows = 2:
   every node but L's; rows = 3: the idle ones, and every node but L's its last TAIL_ROWS rows (a node
   still streaming when L arrives is idle by then, and its star spread of the last block was the tail).
   With ``ahead`` = a the broadcast's rounds are listed interleaved with the funnel (as cluster.py's
   merge does: each round once the blocks it sends and a more are listed) instead of after it, so that in
   the list-scheduling model L's reductions into its node peers do not take its NVLink port for every
   block before the final blocks' spreads get it (at 28 blocks they then fell 600 us behind); L then
   leaves its final blocks' spreads to its helpers.
   With ``rotate`` = k the last k nodes of the ready order still streaming when L arrives take turns at the
   end of the chains, block by block (block j: their order rotated by j mod k): with one order the chain's
   last node takes in every block of the others' stream and then the whole broadcast, T + T on each NIC's
   ingress after its own arrival; with two nodes taking turns each takes in half the stream (bench vector
   75, the last two nodes ready 1.32 and 0.42 ms before L: 5.61 -> 4.81 ms after L).

After the last arrival the work is about the late-GPU form's: L's s bytes over NVLink, one part per rail
out of node m, the broadcast's extra hops and the last spread, when the chains have kept ahead of the
arrivals; a node ready shortly before L adds its own stream (pipelined: one part per rail, not one per
late rank). Every node's NIC ingress carries at most one part per rail before the last arrival and one
after, whatever the number of late ranks (the waves form carries one per late rank).

Moves are placed by listsched.Timeline, ordered by modelled start and packed into steps (multi.pack), as
waves.py does; each step's phase is the set of ranks that have taken part so far (ir.derived_phases).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from collsynth.apitypes import Arrivals
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.layout import node_grid
from collsynth.synth.algorithms.stragglar.bcast import broadcast_rounds, muted_cube_rounds
from collsynth.synth.algorithms.stragglar.listsched import Timeline
from collsynth.synth.algorithms.stragglar.multi import Move, timeline_schedule
from collsynth.synth.arrivals import arrival_vector, latest_rank
from collsynth.synth.ir import Schedule
from collsynth.synth.trees import heap_two_trees

MAX_CHUNKS = 4096
TREE_MIN_NODES = 4  # reduce_trees: fewer fully punctual nodes than this keep the chain
TAIL_ROWS = 6  # rows = 3: the last rows every node but L's spreads by recursive doubling


class _Funnel:
    """One schedule under construction (module docstring)."""

    def __init__(self, grid: np.ndarray, times: np.ndarray, M: int, size: float, topology: Any, fan: int,
                 pxn: bool, tail: bool = True, inline: bool = False, spread: bool = False, leaves: float = 0.0,
                 rows: int = 0, mute: bool = False, early: bool = False, relay: bool = False,
                 ahead: int = -1, first: bool = False, rotate: int = 1,
                 pxn_first: int = 0, settled: float = math.inf, backnow: bool = False,
                 reduce_trees: bool = False) -> None:
        self.backnow = backnow  # L's final block of its own part back to the helper right after L took it in
        self.grid, self.M, self.times, self.pxn = grid, M, times, pxn
        # without pxn: the first pxn_first blocks of L's part still go to its helpers (L pulls them)
        self.pxn_first = M if pxn else pxn_first
        self.settled: list[int] = []  # late GPUs that hold their own part (``settled``)
        # first (with ahead): the other nodes' funnel moves are all listed before node m's and the rounds
        self.first = first and ahead >= 0
        # ahead >= 0: the broadcast's rounds are listed as soon as the funnel has listed the blocks they
        # send plus ``ahead`` more (interleaved, as cluster.py's merge does), not after the whole funnel
        self.ahead = ahead
        self.relay = relay  # an upstream block for a GPU off its rail: NVLink copy to the sender node's GPU on
        # the receiver's rail, then over that GPU's NIC (instead of a PXN message holding the sender's port)
        self.early = early  # a node's reductions added in order of their modelled earliest start
        self.mute = mute  # leaves inside the rounds, receiving only (bcast.muted_cube_rounds), not fed after them
        self.inline = inline
        self.selfspread = spread
        self.leaf_window = leaves
        self.rows = rows  # nodes idle at L's arrival (2: every node but m) spread whole rows by doubling
        self.row_nodes: set[int] = set()
        self.row_count: dict[tuple[int, int], int] = {}
        self.N, self.G = N, G = grid.shape
        n = grid.size
        self.tl = Timeline(topology, G * M, times, size / (G * M))
        ranks = grid.reshape(-1)
        same_node = np.repeat(grid, G, axis=0).reshape(-1)
        same_rail = np.repeat(grid.T, N, axis=0).reshape(-1)
        self.tl.prime(np.concatenate([np.repeat(ranks, G), np.repeat(grid.T.reshape(-1), N)]),
                      np.concatenate([same_node, same_rail]))
        self.node_of = np.empty(n, np.int64)
        self.node_of[ranks] = np.repeat(np.arange(N), G)
        self.local_of = np.empty(n, np.int64)
        self.local_of[ranks] = np.tile(np.arange(G), N)
        self.L = L = latest_rank(times, n)
        self.m = m = int(self.node_of[L])
        self.lL = int(self.local_of[L])
        t0 = float(times.min())
        # a late GPU x -> its helpers: the node peers that arrived first (if before x); helper j mod k
        # collects the node's block j of x's part before x arrives and spreads x's final block j
        self.helpers: dict[int, list[int]] = {}
        ready = [max((float(times[x]) for x in grid[b] if int(x) != L), default=0.0) for b in range(N)]
        last_in = [float(times[L]) if b == m else ready[b] for b in range(N)]  # each node's last arrival
        for b in range(N):
            row = [int(y) for y in grid[b]]
            for i, x in enumerate(row):
                earliest = min(float(times[y]) for y in row if y != x)
                if earliest < float(times[x]) or (earliest == float(times[x]) and x == L):
                    if x != L and float(times[x]) + settled <= last_in[b]:
                        self.settled.append(x)  # arrived long before its node's last: it holds its own part
                        continue
                    self.helpers[x] = sorted((y for y in row if y != x and float(times[y]) == earliest),
                                             key=lambda y: (int(self.local_of[y]) - i) % G)
        others = sorted((b for b in range(N) if b != m), key=lambda b: (ready[b], b))
        self.ready = ready
        self.fan = max(1, min(fan, len(others)))
        # upstream[b, g]: the nodes whose rail-g GPUs send into node b's: per rail a chain of the nodes in
        # ready order whose rail-g GPU is punctual, its last ``fan`` nodes straight into m; a node whose
        # rail-g GPU is late takes in nothing on rail g (its NIC's ingress stays free for the broadcast)
        # and sends into the next chain node after it; the late-rail nodes after the last chain node
        # (which would all send into m's one NIC) join the chain's end, taking in through their helpers
        # (PXN, ``into_helpers``); without ``tail`` they send into m too
        # upstream[b, g, p]: the same for the blocks j with j mod k = p, the chain order rotated by p among
        # its last k nodes (``rotate``)
        self.upstream: dict[tuple[int, int, int], list[int]] = {}
        self.into_helpers: set[tuple[int, int, int]] = set()
        # the nodes whose own stream (s/G per NIC, T = rail_time from their ready time) ends before L arrives
        T = rail_time(topology, n, size)
        done = {b for b in others if ready[b] + T <= float(times[L])}
        self.done = done
        # reduce_trees: the nodes whose GPUs are all punctual reduce by two binary trees (even blocks up one,
        # odd blocks up the other) into the chain of the others instead of heading it: T + O(log N) rounds
        # for them instead of T + N
        punct = [b for b in others if ready[b] <= t0] if reduce_trees else []
        if len(punct) < TREE_MIN_NODES:
            punct = []
        chained = [b for b in others if b not in punct]
        self.tree_nodes = punct
        up_trees = heap_two_trees(punct) if punct else ([], [])
        # rotate = k: the last k nodes still streaming when L arrives take turns at the chain's end, block by
        # block, so that none takes in every block of the others and then the whole broadcast too
        k = max(1, min(rotate, sum(1 for b in chained if b not in done)))
        fixed, turns = chained[:len(chained) - k], chained[len(chained) - k:]
        self.rotate = k
        kk = math.lcm(2, k) if punct else k  # block j: parity tree j mod 2, chain order j mod k
        self.orders = []
        for p in range(kk):
            below = [c for _, c in reversed(up_trees[p % 2])] if punct else []  # every child before its parent
            self.orders.append([*below, *fixed, *turns[p % k:], *turns[:p % k], m])
        for p, order in enumerate(self.orders):
            ring = order[len(punct):-1]
            for g in range(G):
                chain = [b for b in ring if (self.inline and (b != ring[-1] or b in done))
                         or float(times[int(grid[b, g])]) <= t0]
                after = ring[ring.index(chain[-1]) + 1:] if chain else list(ring)
                if tail:
                    chain += after
                    self.into_helpers.update((b, g, p) for b in after if int(grid[b, g]) in self.helpers)
                head = chain[:max(1, len(chain) - self.fan + 1)]
                nxt = {a: b for a, b in zip(head, head[1:])}
                for a in chain[len(head):] + head[-1:]:
                    nxt[a] = m
                for i, a in enumerate(ring):
                    if a not in nxt:
                        nxt[a] = next((b for b in ring[i + 1:] if b in chain), m)
                for a in ring:
                    self.upstream.setdefault((nxt[a], g, p), []).append(a)
                sink = chain[0] if chain else m  # the trees' roots send into the chain's head
                for x, y in up_trees[p % 2]:
                    self.upstream.setdefault((sink if x < 0 else x, g, p), []).append(y)
        self.order = [*others, m]  # in ready order, not rotated (the broadcast's and the meta's)

    def owner(self, b: int, g: int, j: int) -> int:
        """Who holds node b's sum of block j of part g after its ReduceScatter (a helper of the rail GPU if
        it is late)."""
        r = int(self.grid[b, g])
        h = self.helpers.get(r)
        return h[j % len(h)] if h else r

    def target(self, b: int, g: int) -> int:
        """Where node b's rail g receives the upstream blocks (and, in node m, holds the final part)."""
        return int(self.grid[b, g])

    # ------------------------------------------------------------------ 1 and 2: toward node m
    def funnel(self, trees: bool | None = None) -> None:
        """Steps 1 and 2 (module docstring); with ``trees`` given also the broadcast (step 3, ``_rounds``):
        after the funnel, or with ``ahead`` interleaved with it, each round listed once the blocks it sends
        and ``ahead`` more are."""
        tl, grid, G, M = self.tl, self.grid, self.G, self.M
        arr = [float(x) for x in self.times]
        bc = self._rounds(trees) if trees is not None else iter(())
        need = next(bc, None)  # the last funnel block the next broadcast round needs (None: all listed)
        k = len(self.orders)  # (block j's chain order: orders[j mod k], every node after its upstream nodes)
        if self.first:  # every other node's blocks, then node m's interleaved with the rounds
            pairs = [(j, b) for j in range(M) for b in self.orders[j % k][:-1]] + [(j, self.m) for j in range(M)]
        else:
            pairs = [(j, b) for j in range(M) for b in self.orders[j % k]]
        for j, b in pairs:
            ev: list[tuple[float, int, list[Move]]] = []  # (key, order, moves added together)
            for sh in range(1, G):  # ReduceScatter rounds: local i sends part i + sh
                for i in range(G):
                    x = int(grid[b, i])
                    g = (i + sh) % G
                    o = self.owner(b, g, j)
                    if x == o:  # (L sends every part but its own: i + sh != i)
                        continue
                    ev.append((arr[x], len(ev), [(x, o, g + G * j, 1, True)]))
            for g in range(G):
                c = g + G * j
                for a in self.upstream.get((b, g, j % k), ()):
                    src = self.target(a, g)
                    into = (b == self.m and (self.pxn or (g == self.lL and j < self.pxn_first))) \
                        or (b, g, j % k) in self.into_helpers
                    dst = self.owner(b, g, j) if into else self.target(b, g)
                    h = int(self.local_of[dst])
                    via = int(grid[a, h])  # node a's GPU on dst's rail (its block c is spent by now)
                    if self.relay and h != g and arr[via] <= arr[src]:
                        ev.append((tl.ready(src, c), len(ev),
                                   [(src, via, c, 1, False), (via, dst, c, 1, True)]))
                    else:
                        ev.append((tl.ready(src, c), len(ev), [(src, dst, c, 1, True)]))
            if self.early:  # by the model's earliest start: a reduction whose data is ready does not
                # queue behind a late GPU's (whose NVLink port is still busy with earlier rows)
                ev = [(tl.earliest(mvs[0][0], mvs[0][1], mvs[0][2], 1), i, mvs) for _, i, mvs in ev]
            ev.sort(key=lambda e: (e[0], e[1]))
            for _, _, mvs in ev:
                for mv in mvs:
                    tl.add(*mv)
            for g in range(G):  # a late rail GPU takes its node's block in from its helper (L: the sum of
                r, o = int(grid[b, g]), self.owner(b, g, j)  # all but its own, where the helper summed the
                if o != r:  # upstream blocks, pxn; else its node's part and L takes the rest on its NIC)
                    tl.add(o, r, g + G * j, 1, True)
                    if self._back(r, j):
                        tl.add(r, o, g + G * j, 1, False)  # the final block back at once (it spreads it)
            while b == self.m and self.ahead >= 0 and need is not None and need + self.ahead <= j:
                need = next(bc, None)
        while need is not None:
            need = next(bc, None)

    # ------------------------------------------------------------------ 3: the final blocks out
    def _spread(self, b: int, g: int, j: int) -> None:
        """Block j of part g over NVLink in node b from the GPU that holds it to the others; a late GPU hands
        it to its helper, which spreads it (so its own NVLink port sends about s after its arrival)."""
        if b in self.row_nodes or (self.rows == 3 and b != self.m and j >= self.M - TAIL_ROWS
                                   and not self.G & (self.G - 1)):  # the row by recursive doubling once all here
            key = (b, j)
            self.row_count[key] = self.row_count.get(key, 0) + 1
            if self.row_count[key] == self.G:
                self._row(b, j)
            return
        tl, c = self.tl, g + self.G * j
        r = self.target(b, g)
        h = self.owner(b, g, j)
        back = self._back(r, j)  # (the helper has it already)
        if h != r and self.selfspread and not (self.ahead >= 0 and r == self.L) and not back:
            nv = tl.classes(r, h)[0]
            if tl.port_free(r, nv) <= tl.port_free(h, nv):  # the rail GPU's port is free first: it spreads
                for x in self.grid[b]:
                    x = int(x)
                    if x != r:
                        tl.add(r, x, c, 1, False)
                return
        if h != r and not back:
            tl.add(r, h, c, 1, False)
        for x in self.grid[b]:
            x = int(x)
            if x != h and x != r:
                tl.add(h, x, c, 1, False)

    def _back(self, r: int, j: int) -> bool:
        """Whether ``r`` is L and sends its final block j of its own part back to the helper as soon as it
        has summed it (``backnow``; the blocks L took in from a helper's sum)."""
        return self.backnow and r == self.L and j < self.pxn_first

    def _row(self, b: int, j: int) -> None:
        """Row j (block j of every part, chunks j G .. j G + G - 1) in node b, where GPU g holds part g's
        final block, to every GPU of the node: recursive doubling, log2 G messages per GPU (Thakur,
        Rabenseifner & Gropp, IJHPCA 2005) instead of G - 1 star copies."""
        row = [int(x) for x in self.grid[b]]
        G, w = self.G, 1
        while w < G:
            for h in range(G):
                self.tl.add(row[h], row[h ^ w], (h // w) * w + G * j, w, False)
            w *= 2

    def _pick_row_nodes(self) -> None:
        """Nodes that spread whole rows (``rows``): G a power of two, not L's node (its GPUs spread star-wise
        while L still sends its own data), every GPU's NVLink port idle by L's arrival in the model (with
        ``ahead``, when the funnel is not all listed yet: the node's own stream ends before L arrives); with
        rows = 2 every node but L's."""
        self.row_count = {}
        self.row_nodes = set()
        if not self.rows or self.G & (self.G - 1):
            return
        tL = float(self.times[self.L])
        row0 = [int(x) for x in self.grid[0]]
        nv = self.tl.classes(row0[0], row0[1])[0]
        for b in range(self.N):
            if b == self.m:
                continue
            if self.rows == 2:
                self.row_nodes.add(b)
            elif self.ahead >= 0:  # the funnel is not all listed yet: the nodes whose own stream ends before L
                if b in self.done:
                    self.row_nodes.add(b)
            elif all(self.tl.port_free(int(x), nv) <= tL for x in self.grid[b]):
                self.row_nodes.add(b)

    def _rounds(self, trees: bool) -> Iterator[int]:
        """Each final block from node m along its rail to every other node, then spread in each node.
        ``trees``: two binary trees (``trees.heap_two_trees``) over the other nodes, even blocks down one and odd
        blocks down the other; every node is interior in at most one of them, and the node that was ready
        last (still sending its own stream when L arrives) is a leaf in both where the count allows;
        otherwise the hypercube rounds (bcast.broadcast_rounds; receivers in reverse chain order). A generator:
        before listing each round it yields the last block the root sends in it (``funnel`` lists the
        funnel's blocks up to there first)."""
        tl, G, M, m = self.tl, self.G, self.M, self.m
        tgt = self.target
        if self.ahead < 0:
            yield M - 1  # after the whole funnel
        self._pick_row_nodes()
        if trees:
            pair = heap_two_trees(self.order[:-1])
            for j in range(M):
                yield j
                for g in range(G):
                    c = g + G * j
                    self._spread(m, g, j)
                    for x, y in pair[j % 2]:
                        tl.add(tgt(m if x < 0 else x, g), tgt(y, g), c, 1, False)
                        self._spread(y, g, j)
            return
        tL = float(self.times[self.L])
        rest = list(reversed(self.order[:-1]))
        # with mute and without pxn the nodes streaming rail lL into L itself (after L arrives: their NIC is
        # busy all through the broadcast on that rail) are muted too, whatever the window
        feeders = {a for p in range(len(self.orders)) for a in self.upstream.get((m, self.lL, p), ())
                   } if self.mute and not self.pxn else set()
        leaves = [b for b in rest if self.ready[b] > tL - self.leaf_window or b in feeders][:max(0, len(rest) - 1)]
        if self.mute and leaves:  # every node in the rounds, the leaves receiving only
            nodes = [m, *rest]
            muted = frozenset(nodes.index(b) for b in leaves)
            spread: set[tuple[int, int, int]] = set()
            for mr in muted_cube_rounds(len(nodes), M, muted):
                yield max((j for x, _, j in mr if x == 0), default=-1)
                for g in range(G):
                    for x, y, j in mr:
                        tl.add(tgt(nodes[x], g), tgt(nodes[y], g), g + G * j, 1, False)
                for g in range(G):
                    for x, y, j in mr:
                        for b in ((m, nodes[y]) if x == 0 else (nodes[y],)):
                            if (b, g, j) not in spread:  # (the root may send a block twice)
                                spread.add((b, g, j))
                                self._spread(b, g, j)
            return
        nodes = [m, *(b for b in rest if b not in leaves)]  # position 0 is the root
        # a leaf (a node still sending its own stream) gets the blocks in order, each from the core node
        # holding it that can deliver it first (the root only for the last block)
        holders: list[list[list[int]]] = [[[] for _ in range(M)] for _ in range(G)]
        fed = [[0] * len(leaves) for _ in range(G)]
        done: set[tuple[int, int, int]] = set()

        def feed(g: int) -> None:
            for q, lf in enumerate(leaves):
                while fed[g][q] < M:
                    j = fed[g][q]
                    cands = holders[g][j] or ([m] if rounds_done and j == M - 1 else [])
                    if not cands:
                        break
                    c, d = g + G * j, tgt(lf, g)
                    x = min(cands, key=lambda x: (tl.earliest(tgt(x, g), d, c, 1), x))
                    tl.add(tgt(x, g), d, c, 1, False)
                    spread_once(lf, g, j)
                    fed[g][q] += 1

        def spread_once(b: int, g: int, j: int) -> None:
            if (b, g, j) not in done:
                done.add((b, g, j))
                self._spread(b, g, j)

        rounds_done = False
        for rnd in broadcast_rounds(len(nodes), M):
            yield max((j for x, _, j in rnd if x == 0), default=-1)
            for g in range(G):
                for x, y, j in rnd:
                    tl.add(tgt(nodes[x], g), tgt(nodes[y], g), g + G * j, 1, False)
            for g in range(G):
                for x, y, j in rnd:
                    if x == 0:
                        spread_once(m, g, j)
                    spread_once(nodes[y], g, j)
                    holders[g][j].append(nodes[y])
                if leaves:
                    feed(g)
        rounds_done = True
        for g in range(G):
            if leaves:
                feed(g)
        for g in range(G):
            for j in range(M):
                spread_once(m, g, j)

    def schedule(self, n: int, meta: dict[str, object], name: str) -> Schedule:
        return timeline_schedule(self.tl, n, self.G * self.M, self.times, meta, name)


def rail_time(topology: Any, n: int, size: float) -> float:
    """T = s/(G B_net): the time one part (s/G bytes) takes on the link of a rail message (node 0 to node 1,
    local index 0) without latency; the unit of waves.FUNNEL_CHOICES' leaf windows (the late-GPU bound of
    the brief's clusters.md section 4 on a rail-optimized cluster)."""
    grid = node_grid(topology, n)
    links, _ = topology.pair_table(np.array([[int(grid[0, 0]), int(grid[1, 0])]], np.int64))
    bw = min(float(np.asarray(topology.link_bw)[x]) for x in links[0] if x >= 0)
    return float(size) / grid.shape[1] / bw


def construct(n: int, arrivals: Arrivals, size: float, topology: Any, M: int, fan: int = 1,
              trees: bool = True, pxn: bool = True, tail: bool = True, spread: bool = False,
              leaves: float = 0.0, rows: int = 0, inline: bool = False, mute: bool = False,
              early: bool = False, relay: bool = False, ahead: int = -1, first: bool = False,
              rotate: int = 1, pxn_first: int = 0, settled: float = math.inf, backnow: bool = False,
              reduce_trees: bool = False) -> Schedule:
    """The funnel schedule for M blocks per part, ``fan`` chains ending at the last rank's node, the
    broadcast by two ``trees`` (else hypercube rounds), L's part collected at its helpers, which L takes in
    (``pxn``), and the
    late-rail nodes at a rail's end joining its chain (``tail``); ``spread``: a late rail GPU spreads a
    final block itself when its NVLink port is free before its helper's; ``leaves`` (seconds, hypercube
    only): the nodes ready less than this before L are leaves of the broadcast, fed by the others, or with
    ``mute`` receivers only inside its rounds (``bcast.muted_cube_rounds``);
    ``rows``: the nodes whose NVLink ports are idle when L arrives (with ``ahead``: whose own stream ends
    before L arrives) spread whole rows by recursive doubling, 2: every node but L's, 3: also every node but
    L's its last TAIL_ROWS rows;
    ``ahead`` >= 0: each broadcast round is listed as soon as the funnel's blocks it sends and ``ahead``
    more are listed, and L spreads none of its final blocks itself (``spread``), so L's reductions into
    its node peers and the spreads of the final blocks share its NVLink port block by block (-1: the
    broadcast after the whole funnel);
    ``inline``: a node whose rail GPU is late takes its place in that rail's chain (receiving once the GPU
    is there), unless it is the last node ready before L and still streaming then (module docstring);
    ``early``: the reductions into
    each node (its ReduceScatter and the upstream blocks) are listed by their modelled earliest start, not
    by when their data is ready (a reduction is commutative: the upstream block need not wait behind a
    late GPU's); ``rotate`` = k >= 2: the last
    k nodes of the chains still streaming when L arrives take turns at the chain's end (block j: the chain
    order rotated by j mod k among them; ``inline``'s last node ready before L is then the last of the
    rotated order); ``pxn_first`` (without ``pxn``): the first blocks of L's part summed at its helpers,
    ``settled`` (seconds): the late GPUs (not L) that arrived this long before their node's last arrival
    hold their own part (module docstring); ``backnow``: L sends each final block of its own part that it
    summed from a helper's sum (``pxn``, ``pxn_first``) back to that helper right after, not when the
    broadcast's rounds spread it (L's NVLink port then carries it between its rows instead of several at
    once); ``reduce_trees``: the fully punctual nodes reduce by two binary trees into the chain of the others
    (module docstring, step 2). Needs a topology of at least 2 nodes of at least 2 GPUs."""
    grid = node_grid(topology, n)
    N, G = grid.shape
    if N < 2 or G < 2:
        raise CollsynthError("the funnel form of clusterstraggler needs a topology with at least 2 nodes of at "
                             "least 2 GPUs")
    if isinstance(M, bool) or not isinstance(M, (int, np.integer)) or not 1 <= M <= MAX_CHUNKS // G:
        raise CollsynthError(f"the funnel form needs 1 to {MAX_CHUNKS // G} blocks per part, got {M!r}")
    times = arrival_vector(arrivals, n)
    if not (isinstance(leaves, (int, float)) and math.isfinite(leaves) and leaves >= 0):
        raise CollsynthError(f"the funnel form needs a finite leaf window >= 0 seconds, got {leaves!r}")
    if int(rows) not in (0, 1, 2, 3) or rows != int(rows):
        raise CollsynthError(f"the funnel form's rows must be 0, 1, 2 or 3, got {rows!r}")
    if isinstance(ahead, bool) or not isinstance(ahead, (int, np.integer)) or ahead < -1:
        raise CollsynthError(f"the funnel form's ahead must be an integer >= -1 (blocks), got {ahead!r}")
    if isinstance(rotate, bool) or not isinstance(rotate, (int, np.integer)) or rotate < 1:
        raise CollsynthError(f"the funnel form's rotate must be an integer >= 1 (nodes), got {rotate!r}")
    if isinstance(pxn_first, bool) or not isinstance(pxn_first, (int, np.integer)) or not 0 <= pxn_first <= M:
        raise CollsynthError(f"the funnel form's pxn_first must be an integer from 0 to {M} (blocks), "
                             f"got {pxn_first!r}")
    if isinstance(settled, bool) or not isinstance(settled, (int, float)) or not settled >= 0:
        raise CollsynthError(f"the funnel form's settled must be a time >= 0 seconds (inf: never), got {settled!r}")
    plan = _Funnel(grid, times, int(M), float(size), topology, fan, pxn, tail, bool(inline), bool(spread),
                   float(leaves), int(rows), bool(mute), bool(early), bool(relay), int(ahead), bool(first),
                   int(rotate), int(pxn_first), float(settled), bool(backnow), bool(reduce_trees))
    plan.funnel(trees)
    t0 = float(times.min())
    late = sorted((r for r in range(n) if times[r] > t0), key=lambda r: (float(times[r]), r))
    meta: dict[str, object] = {"algorithm": "clusterstraggler", "form": "funnel",
                               "late": [[r, float(times[r])] for r in late], "last": plan.L,
                               "nodes": N, "gpus_per_node": G, "pipeline": int(M), "fan": plan.fan,
                               "pxn": pxn, "tail": tail, "spread": bool(spread), "leaves_s": float(leaves),
                               "rows": bool(rows) if int(rows) <= 1 else int(rows), "inline": bool(inline),
                               "mute": bool(mute),
                               "early": bool(early), "relay": bool(relay),
                               "broadcast": "two-tree" if trees else "hypercube",
                               "chain": [int(b) for b in plan.order], "topology_name": topology.name}
    if plan.rotate > 1:
        meta["rotate"] = plan.rotate
    if plan.tree_nodes:
        meta["reduce_trees"] = [int(b) for b in plan.tree_nodes]
    if plan.pxn_first and not pxn:
        meta["pxn_first"] = plan.pxn_first
    if plan.settled:
        meta["settled"] = plan.settled
    if backnow and plan.pxn_first:
        meta["backnow"] = True
    if ahead >= 0:
        meta["ahead"] = int(ahead)
        meta["first"] = bool(first)
    spec = getattr(topology, "spec", None)
    if spec is not None:
        meta["topology"] = spec
    return plan.schedule(n, meta, f"clusterstraggler_funnel_n{n}_l{plan.L}")
