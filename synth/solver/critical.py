"""Simulator-guided local search around a verified schedule (issue 15 point 3): moves on the critical path
of the event simulation (synth/simulate.py), each kept only if the schedule verifies and simulates no
slower: strictly faster, or as fast with a lower chunk-weighted sum of transfer ends (``_flow``, a
plateau move that lets lockstep structures change one rank at a time).

The window MILP of lns.py sees steps, not time; here every candidate is simulated. The simulator
returns each transfer's start and end (``SimResult.start_s``/``end_s``), so the constraint that held a
transfer back is found exactly: a transfer starts at the end of some earlier transfer (or at an
arrival / phase gate), and that transfer is

- RAW: it wrote a location the transfer reads (its source's last write);
- a port: the same send or receive port (rank, link class) in an earlier or the same step;
- a link: the same link in an earlier step (the simulator keeps links FIFO across steps);
- WAW / WAR: it wrote or read the transfer's destination in an earlier step.

``critical_path`` walks back from a transfer that ends last along these edges (``search`` walks from
several when many end together). Moves on the path (``candidates``), from its end back:

- ahead / swap: a transfer held by a port or link of an earlier transfer moves into its own step just
  before that transfer's step (the port order changes), or the two exchange steps;
- early: a transfer held by anything but its data moves right after the last step its data (its source,
  its destination's accesses) waits for: into a step of its own, or into the existing step there;
- re-source: a copy of a final value (an AllReduce location no transfer writes after it holds the full
  sum) may come from any other rank that already holds the final value; the holders are ranked by an
  estimate of when they could send (their value's ready time, their send port's and the route's links'
  last use before the step, the route's alpha and bandwidth), and the copy stays in its step or gets
  its own step just before it;
- split: a multi-chunk transfer becomes two messages: halves (the first as early as its data allows,
  or the second in a step right after), or split-late: the chunks whose source value is ready last
  apart from the others, in a step right after;
- merge: two transfers with the same sender, receiver and operation over adjacent chunk runs become one
  message (one alpha instead of two), at either one's step;
- own step: the transfer leaves its step for one of its own just before it (its links are then not
  shared with the step's other transfers: the simulator divides a link's bandwidth in a step);
- whole steps, for lockstep constructions where one transfer alone cannot move the maximum: step-ahead
  and step-early (the step of a path transfer, as ahead and early), step-split-late (every transfer of
  the step), and chain-ahead: a port-held transfer's step together with the steps of the path
  transfers that wait for its data in turn, moved before the step holding the port (a reduction chain
  overtakes unrelated copies).

New steps are fractional keys renumbered afterwards; steps left empty disappear, and phases keep their
steps (moves never cross a phase boundary). A candidate over a per-class port limit is dropped before
simulating; every other one is simulated, and one that beats the incumbent is verified (synth/verify.py,
with the topology's per-class ports) before it is kept. Candidates are generated deterministically, so
with a move budget (``max_evals``) instead of a time limit the result is reproducible. The search stops when
no move on the paths improves, after PLATEAU plateau moves in a row, at its deadline or its budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collsynth.errors import CollsynthError
from collsynth.synth.ir import Schedule
from collsynth.synth.verify import VerificationError, check, class_port_violation

MAX_UNITS = 2_000_000  # chunk moves (sum of counts) above which the moves do not run (seconds per incumbent)
HOLDERS = 3  # holders tried per re-sourced copy (the best by the estimate)
PLATEAU = 30  # the search stops after this many kept moves in a row that leave the completion as it is
EPS = 1e-12  # relative: a candidate must beat the incumbent by more than this


@dataclass
class Move:
    """One candidate change: transfer ``t`` and a description (kind, parameters) used to build and to skip
    a candidate already tried on the same incumbent."""

    kind: str
    t: int
    args: tuple[int, ...] = ()


@dataclass
class SearchResult:
    schedule: Schedule
    time_s: float
    flow_s: float  # chunk-weighted sum of transfer ends (the tie-break, ``_flow``)
    evals: int = 0  # candidates simulated
    kept: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    stopped: str = ""


def _routes(s: Schedule, topology: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(send port entity, receive port entity, links T x L padded with -1, alpha sum) of every transfer,
    as the simulator defines them (one port entity per rank and link class)."""
    n = s.nranks
    classes = getattr(topology, "classes", ())
    K = max(1, len(classes))
    if K > 1:
        first, last = topology.route_classes(s.src, s.dst)
        sp, rp = s.src * K + first, s.dst * K + last
    else:
        sp, rp = s.src * K, s.dst * K
    if s.ntransfers == 0:
        return sp, rp, np.zeros((0, 0), np.int64), np.zeros(0)
    uniq, inv = np.unique(s.src * n + s.dst, return_inverse=True)
    links, alpha = topology.pair_table(np.stack(np.divmod(uniq, n), axis=1))
    return sp, rp, links[inv], alpha[inv]


def critical_path(s: Schedule, start: np.ndarray, end: np.ndarray, topology: Any,
                  routes: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
                  last: int | None = None) -> list[tuple[int, str, int]]:
    """The simulated schedule's critical path, last transfer first: (transfer, what held it, that transfer)
    with what = "raw", "send-port", "recv-port", "link", "wa" or "start" (an arrival or phase gate: the path
    ends; the third entry is then -1). Exact: the simulator's start is the maximum of the ends it waits for.
    ``last``: the transfer to walk back from (default: the one that ends last)."""
    if s.ntransfers == 0:
        return []
    sp, rp, links, _ = routes if routes is not None else _routes(s, topology)
    step, src, dst, c0 = s.step, s.src, s.dst, s.chunk
    c1 = s.chunk + s.count
    t = int(np.argmax(end)) if last is None else int(last)
    out: list[tuple[int, str, int]] = []
    seen = set()
    while t not in seen:
        seen.add(t)
        cand = np.flatnonzero((end == start[t]) & (step <= step[t]))
        cand = cand[cand != t]
        if not len(cand):
            out.append((t, "start", -1))
            break
        earlier = step[cand] < step[t]
        overlap_src = (c0[cand] < c1[t]) & (c0[t] < c1[cand])
        kinds = (
            ("raw", earlier & (dst[cand] == src[t]) & overlap_src),
            ("send-port", sp[cand] == sp[t]),
            ("recv-port", rp[cand] == rp[t]),
            ("link", earlier & _shares_link(links[cand], links[t])),
            ("wa", earlier & ((dst[cand] == dst[t]) | (src[cand] == dst[t])) & overlap_src),
        )
        for name, mask in kinds:
            hit = np.flatnonzero(mask)
            if len(hit):
                u = int(cand[hit[0]])
                out.append((t, name, u))
                t = u
                break
        else:
            out.append((t, "start", -1))
            break
    return out


def _shares_link(rows: np.ndarray, row: np.ndarray) -> np.ndarray:
    mine = row[row >= 0]
    if not len(mine) or not rows.size:
        return np.zeros(len(rows), np.bool_)
    return np.asarray(np.isin(rows, mine).any(axis=1), np.bool_)


class _State:
    """The incumbent with what the move generators need (computed once per incumbent)."""

    def __init__(self, s: Schedule, start: np.ndarray, end: np.ndarray, topology: Any) -> None:
        self.s, self.start, self.end, self.topology = s, start, end, topology
        self.routes = _routes(s, topology)
        n, C = s.nranks, s.nchunks
        self.phase = s.phase_of_step()
        # last write (step, end) of every location (rank, chunk); -1 when never written
        counts = s.count.astype(np.int64)
        rep = np.repeat(np.arange(s.ntransfers), counts)
        offs = np.arange(len(rep)) - np.repeat(np.cumsum(counts) - counts, counts)
        loc = s.dst[rep] * C + s.chunk[rep] + offs
        self.lw_step = np.full(n * C, -1, np.int64)
        np.maximum.at(self.lw_step, loc, s.step[rep])
        self.lw_end = np.zeros(n * C, np.float64)
        np.maximum.at(self.lw_end, loc, end[rep])
        # per send port: the latest end among its transfers up to each step (a running max per port)
        sp = self.routes[0]
        S1 = s.nsteps + 1
        key = sp * S1 + s.step
        order = np.argsort(key, kind="stable")
        self.port_key = key[order]
        big = 2.0 * (float(end.max()) + 1.0) if len(end) else 1.0
        off = sp[order].astype(np.float64) * big
        self.port_busy = np.maximum.accumulate(end[order] + off) - off
        self.S1 = S1
        # per link likewise (the simulator keeps a link FIFO across steps)
        links = self.routes[2]
        L = links.shape[1] if links.ndim == 2 else 0
        lt = np.repeat(np.arange(s.ntransfers), L)
        ll = links.reshape(-1)
        m = ll >= 0
        lkey = ll[m] * S1 + s.step[lt[m]]
        lorder = np.argsort(lkey, kind="stable")
        self.link_key = lkey[lorder]
        loff = ll[m][lorder].astype(np.float64) * big
        self.link_busy = np.maximum.accumulate(end[lt[m]][lorder] + loff) - loff
        self.K = max(1, len(getattr(topology, "classes", ())))

    def port_free(self, port: np.ndarray, before_step: int) -> np.ndarray:
        """When each send port entity last ends a transfer of a step before ``before_step`` (0: never)."""
        q = port * self.S1 + before_step
        i = np.searchsorted(self.port_key, q, side="left") - 1
        ok = (i >= 0) & ((self.port_key[np.maximum(i, 0)] // self.S1) == port)
        return np.where(ok, self.port_busy[np.maximum(i, 0)], 0.0)

    def link_free(self, links: np.ndarray, before_step: int) -> np.ndarray:
        """Per row of ``links`` (-1 padded): when its links last end a transfer of a step before ``before_step``."""
        if not links.size:
            return np.zeros(len(links))
        q = np.maximum(links, 0) * self.S1 + before_step
        i = np.searchsorted(self.link_key, q, side="left") - 1
        ok = (i >= 0) & (links >= 0) & ((self.link_key[np.maximum(i, 0)] // self.S1) == links)
        return np.where(ok, self.link_busy[np.maximum(i, 0)], 0.0).max(axis=1)

    def is_final_copy(self, t: int) -> bool:
        s = self.s
        if s.collective != "allreduce" or s.reduce[t]:
            return False
        C = s.nchunks
        locs = int(s.src[t]) * C + np.arange(int(s.chunk[t]), int(s.chunk[t] + s.count[t]))
        lw = self.lw_step[locs]
        return bool(np.all(lw >= 0) and np.all(lw < s.step[t]))

    def holders(self, t: int, size: float) -> list[int]:
        """Other ranks holding the final value t copies before its step, best first by an estimate of when
        they could deliver it (ready time, send port free, the route's alpha and bandwidth)."""
        s, C, n = self.s, self.s.nchunks, self.s.nranks
        k, a, b = int(s.step[t]), int(s.src[t]), int(s.dst[t])
        chunks = np.arange(int(s.chunk[t]), int(s.chunk[t] + s.count[t]))
        lw = self.lw_step.reshape(n, C)[:, chunks]
        ok = np.all((lw >= 0) & (lw < k), axis=1)
        ok[[a, b]] = False
        js = np.flatnonzero(ok)
        if not len(js):
            return []
        ready = self.lw_end.reshape(n, C)[js][:, chunks].max(axis=1)
        topo = self.topology
        links, alpha = topo.pair_table(np.stack([js, np.full(len(js), b)], axis=1))
        bw = np.where(links >= 0, topo.link_bw[np.maximum(links, 0)], np.inf).min(axis=1)
        if self.K > 1:
            first, _ = topo.route_classes(js, np.full(len(js), b))
            port = js * self.K + first
        else:
            port = js * self.K
        free = np.maximum(self.port_free(port, k), self.link_free(links, k))
        nbytes = size * len(chunks) / C
        est = np.maximum(ready, free) + alpha + nbytes / bw
        order = np.lexsort((js, est))
        return [int(js[i]) for i in order[:HOLDERS]]

    def same_phase(self, k1: int, k2: int) -> bool:
        return 0 <= k1 < self.s.nsteps and 0 <= k2 < self.s.nsteps and self.phase[k1] == self.phase[k2]


def _data_step(s: Schedule, t: int, c0: int, c1: int) -> int:
    """The last step before t's that writes the source chunks c0..c1-1 of t, or writes or reads its
    destination's (-1: none): t may not move to or before it."""
    k = int(s.step[t])
    hi = int(s.step_bounds[k])
    ov = (s.chunk[:hi] < c1) & (c0 < s.chunk[:hi] + s.count[:hi])
    m = ov & ((s.dst[:hi] == s.src[t]) | (s.dst[:hi] == s.dst[t]) | (s.src[:hi] == s.dst[t]))
    idx = np.flatnonzero(m)
    return int(s.step[idx[-1]]) if len(idx) else -1


def _units(s: Schedule, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(transfer, source location, destination location) of every chunk moved by transfers lo..hi-1
    (location = rank * nchunks + chunk)."""
    rep, ch = s.units(np.arange(lo, hi))
    return rep, s.src[rep] * s.nchunks + ch, s.dst[rep] * s.nchunks + ch


def _step_data_step(s: Schedule, k: int) -> int:
    """The last step before k that writes a location step k reads, or writes or reads one it writes (-1:
    none): the whole step may not move to or before it."""
    b = s.step_bounds
    _, rd, wr = _units(s, int(b[k]), int(b[k + 1]))
    reads = np.zeros(s.nranks * s.nchunks, np.bool_)
    writes = np.zeros_like(reads)
    reads[rd] = True
    writes[wr] = True
    rep, srcl, dstl = _units(s, 0, int(b[k]))
    hit = reads[dstl] | writes[dstl] | writes[srcl]
    idx = np.flatnonzero(hit)
    return int(s.step[rep[idx[-1]]]) if len(idx) else -1


def _ready_before(s: Schedule, end: np.ndarray, k: int) -> np.ndarray:
    """Per location (rank * nchunks + chunk): the end of its last write in a step before k (0: none)."""
    rep, _, dstl = _units(s, 0, int(s.step_bounds[k]))
    out = np.zeros(s.nranks * s.nchunks)
    np.maximum.at(out, dstl, end[rep])
    return out


def _late_split(s: Schedule, ready: np.ndarray, t: int) -> int:
    """Where to split t's chunk run so that the chunks whose source value is ready last travel apart, the
    widest gap between the parts' ready times: p > 0 when the first p chunks are ready first, -p when the
    last p are; 0 when the ready times of no two parts are apart."""
    cnt = int(s.count[t])
    if cnt < 2:
        return 0
    r = ready[int(s.src[t]) * s.nchunks + int(s.chunk[t]) + np.arange(cnt)]
    best, at = 0.0, 0
    for p in range(1, cnt):
        a, b = r[:p], r[p:]
        if float(b.min() - a.max()) > best:
            best, at = float(b.min() - a.max()), p
        if float(a.min() - b.max()) > best:
            best, at = float(a.min() - b.max()), -(cnt - p)
    return at


def candidates(st: _State, path: list[tuple[int, str, int]], size: float) -> Iterator[Move]:
    """Moves on the critical path, from its last transfer back (module docstring), generated lazily (the
    search checks its deadline between them)."""
    s = st.s
    steps_done: set[int] = set()
    for i, (t, why, u) in enumerate(path):
        k = int(s.step[t])
        c0, cnt = int(s.chunk[t]), int(s.count[t])
        if why in ("send-port", "recv-port", "link") and u >= 0 and int(s.step[u]) < k:
            # the steps of t and of the transfers that wait for t's data in turn (the path towards its end)
            # move together before u's step
            block = [k]
            j = i - 1
            while j >= 0 and path[j][1] == "raw" and path[j][2] == path[j + 1][0]:
                block.append(int(s.step[path[j][0]]))
                j -= 1
            ku = int(s.step[u])
            blk = tuple(sorted(set(block)))
            if len(blk) > 1 and st.same_phase(ku - 1, ku) and all(st.same_phase(ku, b) for b in blk):
                yield Move("chain-ahead", t, (ku, *blk))
        if why in ("send-port", "recv-port", "link") and u >= 0 and int(s.step[u]) < k:
            ku = int(s.step[u])
            if st.same_phase(ku - 1, ku) and st.same_phase(ku, k):
                yield Move("ahead", t, (u,))
            if st.same_phase(ku, k):
                yield Move("swap", t, (u,))
        if why != "raw":
            d = _data_step(s, t, c0, c0 + cnt)
            if d + 1 < k and st.same_phase(d + 1, k) and (d < 0 or st.same_phase(d, k)):
                yield Move("early", t, (d, 0))
                yield Move("early", t, (d, 1))  # into the existing step after d (no new step)
        if st.is_final_copy(t):
            for j in st.holders(t, size):
                yield Move("resource", t, (j, 0))
                if st.same_phase(k - 1, k):
                    yield Move("resource", t, (j, 1))
        if cnt > 1:
            h = cnt // 2
            d = _data_step(s, t, c0, c0 + h)
            if d + 1 < k and st.same_phase(d + 1, k) and (d < 0 or st.same_phase(d, k)):
                yield Move("split", t, (d,))  # the first half as early as its data allows
            yield Move("split", t, (k,))  # the second half in a step right after
        for v in _mergeable(s, t):
            yield Move("merge", t, (v, 0))
            yield Move("merge", t, (v, 1))
        if st.same_phase(k - 1, k) and int(s.step_bounds[k + 1] - s.step_bounds[k]) > 1:
            yield Move("own", t)
        if cnt > 1:
            ready = _ready_before(s, st.end, k)
            p = _late_split(s, ready, t)
            if p:
                yield Move("split-late", t, (p,))
        # the same for the whole step (lockstep constructions: every rank's transfer of the step moves)
        if k not in steps_done and int(s.step_bounds[k + 1] - s.step_bounds[k]) > 1:
            steps_done.add(k)
            b0, b1 = int(s.step_bounds[k]), int(s.step_bounds[k + 1])
            if int(s.count[b0:b1].max()) > 1:
                ready = _ready_before(s, st.end, k)
                cuts = [(v, _late_split(s, ready, v)) for v in range(b0, b1)]
                flat = tuple(a for v, p in cuts if p for a in (v, p))
                if flat:
                    yield Move("step-split-late", t, flat)
            if why in ("send-port", "recv-port", "link") and u >= 0 and int(s.step[u]) < k:
                ku = int(s.step[u])
                if st.same_phase(ku - 1, ku) and st.same_phase(ku, k):
                    yield Move("step-ahead", t, (ku,))
            d = _step_data_step(s, k)
            if d + 1 < k and st.same_phase(d + 1, k) and (d < 0 or st.same_phase(d, k)):
                yield Move("step-early", t, (d, 0))
                yield Move("step-early", t, (d, 1))  # joins the step after d


MERGE_STEPS = 8  # a merge partner is at most this many steps away


def _mergeable(s: Schedule, t: int) -> list[int]:
    """Transfers with t's sender, receiver and operation over the chunk run right after or before t's, within
    MERGE_STEPS steps and in t's phase."""
    k = int(s.step[t])
    b = s.step_bounds
    lo, hi = int(b[max(0, k - MERGE_STEPS)]), int(b[min(s.nsteps, k + MERGE_STEPS + 1)])
    idx = np.arange(lo, hi)
    m = ((s.src[lo:hi] == s.src[t]) & (s.dst[lo:hi] == s.dst[t]) & (s.reduce[lo:hi] == s.reduce[t])
         & ((s.chunk[lo:hi] == s.chunk[t] + s.count[t]) | (s.chunk[lo:hi] + s.count[lo:hi] == s.chunk[t])))
    ph = s.phase_of_step()
    return [int(v) for v in idx[m] if v != t and ph[int(s.step[v])] == ph[k]]


def apply_move(s: Schedule, mv: Move) -> Schedule | None:
    """The schedule with ``mv`` applied (steps renumbered, empty steps dropped), or None when it is a no-op."""
    key = s.step.astype(np.float64)
    src, dst, chunk, count, red = s.src.copy(), s.dst, s.chunk, s.count, s.reduce
    t = mv.t
    k = float(s.step[t])
    extra: tuple[np.ndarray, ...] | None = None
    drop = -1
    if mv.kind == "resource":
        j, own = mv.args
        src[t] = j
        if own:
            key[t] = k - 0.5
    elif mv.kind == "ahead":
        key[t] = float(s.step[mv.args[0]]) - 0.5
    elif mv.kind == "swap":
        u = mv.args[0]
        key[t], key[u] = key[u], key[t]
    elif mv.kind == "own":
        key[t] = k - 0.5
    elif mv.kind == "merge":
        v, at_v = mv.args
        lo = min(int(s.chunk[t]), int(s.chunk[v]))
        chunk = chunk.copy()
        count = count.copy()
        chunk[t], count[t] = lo, int(s.count[t]) + int(s.count[v])
        if at_v:
            key[t] = float(s.step[v])
        drop = v
    elif mv.kind in ("split-late", "step-split-late"):
        pairs = [(t, mv.args[0])] if mv.kind == "split-late" else list(zip(mv.args[::2], mv.args[1::2]))
        count, chunk = count.copy(), chunk.copy()
        rows: list[tuple[float, int, int, int, int, bool]] = []
        for v, p in pairs:
            c, n = int(s.chunk[v]), int(s.count[v])
            if p > 0:  # the first p chunks are ready first: they stay, the rest follows in a step after
                count[v] = p
                late = (c + p, n - p)
            else:  # the last -p chunks are ready first
                chunk[v], count[v] = c - p, n + p
                late = (c, -p)
            rows.append((float(s.step[v]) + 0.5, int(src[v]), int(dst[v]), late[0], late[1], bool(red[v])))
        extra = tuple(np.array([r[i] for r in rows], dt) for i, dt in
                      enumerate((np.float64, np.int64, np.int64, np.int64, np.int64, np.bool_)))
    elif mv.kind == "chain-ahead":
        ku, blk = mv.args[0], mv.args[1:]
        for i, b in enumerate(blk):
            key[s.step == b] = ku - 0.5 + 0.4 * i / len(blk)
    elif mv.kind == "step-ahead":
        key[s.step == s.step[t]] = mv.args[0] - 0.5
    elif mv.kind == "step-early":
        key[s.step == s.step[t]] = mv.args[0] + (1.0 if mv.args[1] else 0.5)
    elif mv.kind == "early":  # right after the last step its data waits for: a step of its own, or the next one
        key[t] = mv.args[0] + (1.0 if mv.args[1] else 0.5)
    elif mv.kind == "split":
        h = int(s.count[t]) // 2
        count = count.copy()
        count[t] = h
        at = mv.args[0]
        second = k + 0.5 if at == k else k
        if at != k:
            key[t] = at + 0.5
        extra = (np.array([float(second)]), src[t:t + 1].copy(), dst[t:t + 1].copy(), chunk[t:t + 1] + h,
                 count[t:t + 1] * 0 + (int(s.count[t]) - h), red[t:t + 1].copy())
    else:
        raise CollsynthError(f"unknown move {mv.kind!r}")
    cols = [key, src, dst, chunk, count, red]
    if drop >= 0:
        keep = np.arange(s.ntransfers) != drop
        cols = [c[keep] for c in cols]
    if extra is not None:
        cols = [np.concatenate([c, e]) for c, e in zip(cols, extra)]
    key, src, dst, chunk, count, red = cols
    uniq = np.unique(key)
    steps = np.searchsorted(uniq, key)
    phases = tuple(ph.__class__(ph.name, int(np.searchsorted(uniq, ph.start)), int(np.searchsorted(uniq, ph.stop)),
                                ph.waits_for) for ph in s.phases)
    out = Schedule.from_arrays(s.collective, s.nranks, s.nchunks, step=steps, src=src, dst=dst, chunk=chunk,
                               count=count, reduce=red, nsteps=len(uniq), phases=phases, owner=s.owner, ports=s.ports,
                               name=s.name, meta=s.meta)
    if (out.nsteps == s.nsteps and out.ntransfers == s.ntransfers and np.array_equal(out.step, s.step)
            and np.array_equal(out.src, s.src) and np.array_equal(out.chunk, s.chunk)
            and np.array_equal(out.count, s.count) and np.array_equal(out.dst, s.dst)):
        return None
    return out


ENDPOINTS = 6  # critical paths walked per round: from transfers that end last on distinct receivers


def endpoints(end: np.ndarray) -> list[int]:
    """Transfers to walk critical paths back from: those that end at the completion (ties: several ranks
    finish together, one path alone cannot move the maximum), at most ENDPOINTS, spread over them."""
    top = np.flatnonzero(end >= end.max())
    if len(top) <= ENDPOINTS:
        return [int(t) for t in top]
    pick = np.linspace(0, len(top) - 1, ENDPOINTS).round().astype(np.int64)
    return [int(top[i]) for i in np.unique(pick)]


def _flow(s: Schedule, sim: Any) -> float:
    """The tie-break: chunk-weighted sum of transfer end times (lower: data lands sooner); a split or merge
    keeps the total chunk count, so it compares across them."""
    if sim.end_s is None:
        return float(sum(sim.rank_finish_s))
    return float(np.dot(s.count.astype(np.float64), np.asarray(sim.end_s)))


def search(s: Schedule, simulate_fn: Callable[[Schedule], Any], *, topology: Any, size: float,
           deadline: float | None = None, max_evals: int | None = None, verify_topology: Any = None,
           first: Any = None) -> SearchResult:
    """First-improvement local search from ``s`` (verified) by critical-path moves until no move on the
    current path improves, ``deadline`` (time.monotonic()) passes or ``max_evals`` candidates were simulated.
    ``simulate_fn`` returns a SimResult (start_s, end_s, completion_s, rank_finish_s); ``first`` is its
    result for ``s`` when the caller has it. ``verify_topology``: the topology whose per-class ports a kept
    schedule must respect (None: the schedule's own ports)."""
    sim = first if first is not None else simulate_fn(s)
    best, best_t, best_f = s, float(sim.completion_s), _flow(s, sim)
    res = SearchResult(s, best_t, best_f)
    if sim.start_s is None or sim.end_s is None or not s.ntransfers:
        res.stopped = "no timeline"
        return res
    if int(s.count.sum()) > MAX_UNITS:
        res.stopped = "too large"  # each incumbent's state and move costs scale with the chunk moves
        return res
    state = _State(s, np.asarray(sim.start_s), np.asarray(sim.end_s), topology)
    plateau = 0  # moves kept in a row that did not lower the completion
    while True:
        improved = False
        seen: set[tuple[str, int, tuple[int, ...]]] = set()
        for last in endpoints(state.end):
            path = critical_path(best, state.start, state.end, topology, state.routes, last)
            for mv in candidates(state, path, size):
                sig = (mv.kind, mv.t, mv.args)
                if sig in seen:
                    continue
                seen.add(sig)
                if max_evals is not None and res.evals >= max_evals:
                    res.stopped = "move budget"
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    res.stopped = "time limit"
                    break
                cand = apply_move(best, mv)
                if cand is None:
                    continue
                res.evals += 1
                if verify_topology is not None and class_port_violation(cand, verify_topology) is not None:
                    continue  # over a port limit: it would not verify (cheap to tell before simulating)
                r = simulate_fn(cand)
                c, f = float(r.completion_s), _flow(cand, r)
                if not (c < best_t * (1 - EPS) or (c <= best_t and f < best_f * (1 - EPS))):
                    continue
                try:
                    check(cand, topology=verify_topology)
                except VerificationError:
                    continue
                plateau = 0 if c < best_t * (1 - EPS) else plateau + 1
                best, best_t, best_f = cand, c, f
                res.kept += 1
                res.by_kind[mv.kind] = res.by_kind.get(mv.kind, 0) + 1
                state = _State(best, np.asarray(r.start_s), np.asarray(r.end_s), topology)
                improved = True
                if plateau >= PLATEAU:
                    res.stopped = "plateau"
                break
            if improved or res.stopped:
                break
        if res.stopped or not improved:
            break
    res.stopped = res.stopped or "no improving move"
    res.schedule, res.time_s, res.flow_s = best, best_t, best_f
    return res


__all__ = ["MAX_UNITS", "Move", "SearchResult", "apply_move", "candidates", "critical_path", "endpoints", "search"]
