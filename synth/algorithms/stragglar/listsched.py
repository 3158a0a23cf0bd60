"""A list-scheduling model of moves on a topology, for the constructive cluster schedules (issue 15).

Moves are added one at a time, in an order that respects their data dependencies (what running them one
after another computes). Each gets the earliest start that the model allows:

- after the arrival of its src and dst rank;
- after the end of the last move writing any chunk it reads or writes, and (for a copy or a reduce)
  after the end of the last move reading any chunk it writes (a move never overtakes one it depends on);
- when its src's send port and its dst's receive port of the route's first and last link class (NVLink,
  network, ...: topology.route_classes) and every link of its route (a PXN route crosses another GPU's
  NVLink and NIC, which that GPU's own messages use too) all have a free gap of its duration (one message
  per port and link at a time; a later move may fill an earlier gap: list scheduling with backfill).

A move's duration is what synth/simulate.py charges a lone message: the route's alpha sum plus its bytes
over the route's bottleneck bandwidth. Ordering the moves by modelled start and packing them into steps
(multi.pack) gives a schedule whose simulated time follows the model (docs/stragglar.md).

Everything per move is a list or dict operation (no numpy scalars), and the routes of many pairs are
looked up at once (``prime``), so a million moves take seconds.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import numpy as np

Move = tuple[int, int, int, int, bool]  # (src rank, dst rank, first chunk, count, reduce), as multi.Move


class Busy:
    """Busy intervals of one port or link in a list-scheduling model (sorted, disjoint): ``fit`` finds the
    earliest free gap (backfill), ``take`` books one. Shared by ``Timeline`` and cluster.py's ClusterPlan."""

    __slots__ = ("lo", "hi")

    def __init__(self) -> None:
        self.lo: list[float] = []  # starts
        self.hi: list[float] = []  # ends

    def fit(self, t: float, dur: float) -> float:
        """The earliest start >= t of a free gap of length dur."""
        hi = self.hi
        if not hi or t >= hi[-1]:  # after every busy interval (the common case)
            return t
        lo = self.lo
        i = bisect.bisect_right(hi, t)
        while i < len(lo):
            if t + dur <= lo[i] * (1 + 1e-12):
                return t
            if hi[i] > t:
                t = hi[i]
            i += 1
        return t

    def take(self, start: float, end: float) -> None:
        """Book [start, end) (it fits: ``fit`` found it). An interval that touches its neighbour joins it: a
        gap of length 0 fits no message (but one shorter than ``fit``'s 1e-12 relative slack), so ``fit``
        answers as before, over fewer intervals (the 16 x 8 late-GPU build: 19% faster, byte-identical)."""
        lo, hi = self.lo, self.hi
        if not lo or start >= lo[-1]:
            if hi and hi[-1] == start:
                hi[-1] = end
            else:
                lo.append(start)
                hi.append(end)
            return
        i = bisect.bisect_left(lo, start)
        if i > 0 and hi[i - 1] == start:  # joins the one before
            if lo[i] == end:  # ... and the one after
                hi[i - 1] = hi[i]
                del lo[i], hi[i]
            else:
                hi[i - 1] = end
        elif lo[i] == end:  # joins the one after
            lo[i] = start
        else:
            lo.insert(i, start)
            hi.insert(i, end)

    def last_end(self) -> float:
        """End of the last busy interval (0 when never used)."""
        return self.hi[-1] if self.hi else 0.0


def common_fit(ports: Sequence[Busy], t: float, dur: float) -> float:
    """The earliest start >= t at which every one of ``ports`` has a free gap of length dur.

    Each ``fit`` returns the earliest start >= t that its port allows, so no common start is ever
    skipped; cycling through the ports until all of them accept t in a row gives the least one (the
    same whatever the order), and a port is asked again only after another one moved t."""
    n = len(ports)
    i = ok = 0
    while ok < n:
        t2 = ports[i].fit(t, dur)
        if t2 > t:
            t, ok = t2, 1
        else:
            ok += 1
        i = i + 1 if i + 1 < n else 0
    return t


class Timeline:
    """The model's state: per-port busy intervals, per-(rank, chunk) ends of the last write and read."""

    def __init__(self, topology: Any, nchunks: int, arrival: Sequence[float] | np.ndarray,
                 chunk_bytes: float) -> None:
        self.topo = topology
        self.n = int(topology.nranks)
        self.C = int(nchunks)
        self.K = len(topology.classes)
        self.arrival = [float(x) for x in arrival]
        self.chunk_bytes = float(chunk_bytes)
        self.written = [0.0] * (self.n * self.C)
        self.read = [0.0] * (self.n * self.C)
        # port key (2 * (rank * K + class) + send 0 / receive 1), then link keys -> busy intervals
        self.busy: dict[int, Busy] = {}
        # src * n + dst -> (resources: send port, receive port, every link of the route; alpha; bandwidth)
        self.pairs: dict[int, tuple[tuple[int, ...], float, float]] = {}
        self.moves: list[Move] = []
        self.start: list[float] = []
        self.end: list[float] = []

    # ------------------------------------------------------------------ routes
    def prime(self, src: Sequence[int] | np.ndarray, dst: Sequence[int] | np.ndarray) -> None:
        """Look up the routes of these (src, dst) pairs at once (pairs not primed are looked up one by one)."""
        s = np.asarray(src, np.int64)
        d = np.asarray(dst, np.int64)
        keep = s != d
        s, d = s[keep], d[keep]
        if not len(s):
            return
        key = np.unique(s * self.n + d)
        s, d = np.divmod(key, self.n)
        links, alpha = self.topo.pair_table(np.stack([s, d], axis=1))
        ok = links >= 0
        bw = np.where(ok, np.asarray(self.topo.link_bw)[np.maximum(links, 0)], np.inf).min(axis=1)
        first, last = self.topo.route_classes(s, d)
        sk = 2 * (s * self.K + first)
        rk = 2 * (d * self.K + last) + 1
        nh = ok.sum(axis=1).tolist()
        base = 2 * self.n * self.K  # link keys follow the port keys
        rows = links.tolist()
        for i, (k, a, b, c, e) in enumerate(zip(key.tolist(), sk.tolist(), rk.tolist(), alpha.tolist(),
                                                bw.tolist())):
            self.pairs[k] = ((a, b, *(base + x for x in rows[i][:nh[i]])), c, e)

    def pair(self, src: int, dst: int) -> tuple[tuple[int, ...], float, float]:
        """(resource keys: send port, receive port, every route link; alpha; bandwidth) of src -> dst."""
        got = self.pairs.get(src * self.n + dst)
        if got is None:
            self.prime([src], [dst])
            got = self.pairs[src * self.n + dst]
        return got

    def classes(self, src: int, dst: int) -> tuple[int, int]:
        """(send, receive) link class index of src -> dst (multi.pack's ``port``)."""
        res = self.pair(src, dst)[0]
        return (res[0] // 2) % self.K, (res[1] // 2) % self.K

    def duration(self, src: int, dst: int, count: int) -> float:
        """Modelled time of one message of ``count`` chunks from src to dst."""
        _, a, bw = self.pair(src, dst)
        return a + count * self.chunk_bytes / bw

    # ------------------------------------------------------------------ moves
    def earliest(self, src: int, dst: int, chunk: int, count: int, after: float = 0.0) -> float:
        """The modelled start ``add`` would give this move (not before ``after``), without adding it."""
        return self._place(src, dst, chunk, count, after)[0]

    def _place(self, src: int, dst: int, chunk: int, count: int,
               after: float) -> tuple[float, float, tuple[int, ...]]:
        """(start, duration, resources) of a move added now."""
        res, a, bw = self.pair(src, dst)
        dur = a + count * self.chunk_bytes / bw
        arr = self.arrival
        t = max(arr[src], arr[dst], after)
        ls, ld = src * self.C + chunk, dst * self.C + chunk
        w, r = self.written, self.read
        if count == 1:
            t = max(t, w[ls], w[ld], r[ld])
        else:
            t = max(t, max(w[ls:ls + count]), max(w[ld:ld + count]), max(r[ld:ld + count]))
        busy = self.busy
        ports = [busy.get(x) or busy.setdefault(x, Busy()) for x in res]
        return common_fit(ports, t, dur), dur, res

    def add(self, src: int, dst: int, chunk: int, count: int, reduce: bool, after: float = 0.0) -> float:
        """Append one move (not before ``after``); returns its modelled start."""
        t1, dur, res = self._place(src, dst, chunk, count, after)
        end = t1 + dur
        ls, ld = src * self.C + chunk, dst * self.C + chunk
        w, r = self.written, self.read
        busy = self.busy
        for x in res:
            busy[x].take(t1, end)
        if count == 1:
            w[ld] = end
            if r[ls] < end:
                r[ls] = end
        else:
            w[ld:ld + count] = [end] * count
            r[ls:ls + count] = [max(x, end) for x in r[ls:ls + count]]
        self.moves.append((src, dst, chunk, count, reduce))
        self.start.append(t1)
        self.end.append(end)
        return t1

    def ready(self, rank: int, chunk: int, count: int = 1) -> float:
        """When the location's value is final in the model (end of its last write)."""
        b = rank * self.C + chunk
        return max(self.written[b:b + count])

    def port_free(self, rank: int, cls: int, receive: bool = False) -> float:
        """End of the last busy interval of a port (0 when it was never used)."""
        q = self.busy.get(2 * (rank * self.K + cls) + int(receive))
        return q.last_end() if q is not None else 0.0

    def ordered(self) -> list[list[Move]]:
        """The moves as one-move atoms by modelled start (order of adding on ties)."""
        st = self.start
        order = sorted(range(len(st)), key=lambda i: (st[i], i))
        mv = self.moves
        return [[mv[i]] for i in order]
