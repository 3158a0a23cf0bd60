"""Lower a verified Schedule to per-rank MSCCL thread-block programs (one instance, before numbering).

How the IR's semantics map onto the runtime (synth/ir.py, docs/msccl-xml.md):

- Buffers. A location (rank, chunk) lives in the input buffer ``i`` until it is first written, then in
  the output ``o`` (reducescatter: ``o`` for the rank's own chunks, scratch ``s`` for partial sums of
  the others'). The same program is then correct in place (where ``o`` aliases ``i``) and out of place
  (where ``i`` is never written). An allgather first copies the rank's input into its output slot.
- Transfers. A copy is ``s`` on the sender and ``r`` on the receiver; a reduce is ``s`` and ``rrc``
  (receive, add the local value, store). Snapshot reads within a step hold because a thread block runs
  a step's sends before its receives, and a receive into a location another thread block sends in the
  same step waits for that send. When several reduces land on one location in one step (direct
  allreduce), the first is an ``rrc`` and the others are received into scratch and added with ``re``.
- Fusion. A receive at step k followed by the rank's only send of the same chunks at step k+1 becomes
  ``rcs`` (copy) or ``rrcs`` / ``rrs`` (reduce; ``rrs`` when the stored value is dead), when the two
  peers can share one thread block.
- Thread blocks: one per (send peer, receive peer, channel); per channel a peer has one sending and one
  receiving thread block, so each FIFO sees sends and receives in the same order (the Schedule's).
- Dependencies (``deps.py``): read-after-write, write-after-read and write-after-write between
  thread blocks of a rank, then ordering dependencies so that no transfer runs before its step.
- Channels: when a thread block would exceed the step limit, the Schedule's steps are cut into
  segments, each on its own channel (and its own thread blocks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collsynth.backends.layout import Layout, Loc, check_block_owners, contiguous_runs
from collsynth.backends.msccl.model import MAX_CHANNELS, MAX_COUNT, MAX_TB_PER_CHANNEL
from collsynth.errors import CollsynthError


class Op:
    """One step of one thread block (before nops are added)."""

    __slots__ = ("rank", "step", "phase", "tie", "type", "send", "recv", "seg", "src", "dst", "cnt", "c0", "reads",
                 "writes", "xin", "xout", "anchor", "tb", "pos", "deps", "known", "hasdep")

    def __init__(self, rank: int, step: int, phase: int, tie: int, type_: str, seg: int) -> None:
        self.rank, self.step, self.phase, self.tie, self.type, self.seg = rank, step, phase, tie, type_, seg
        self.send = -1
        self.recv = -1
        self.src: Loc = ("i", -1)
        self.dst: Loc = ("i", -1)
        self.cnt = 0
        self.c0 = 0  # the Schedule chunk the run starts at (the emitter maps chunks to MSCCL offsets)
        self.reads: list[Loc] = []  # hazard keys (physical in-place locations), one per chunk
        self.writes: list[Loc] = []
        self.xin = -1  # piece received
        self.xout = -1  # piece sent
        self.anchor: Op | None = None  # an ``re`` runs in the thread block of the reduce it completes
        self.tb: TbPlan | None = None
        self.pos = -1
        self.deps: list[Op] = []
        self.known: dict[int, int] = {}
        self.hasdep = False

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.step, self.phase, self.tie)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Op(r{self.rank} k{self.step} {self.type} s{self.send} r{self.recv} {self.src}->{self.dst} x{self.cnt})"


@dataclass
class TbPlan:
    rank: int
    seg: int
    send: int
    recv: int
    ops: list[Op] = field(default_factory=list)
    idx: int = -1  # thread block id within the rank (one instance)


@dataclass
class Piece:
    """A run of chunks of one transfer that is contiguous in every buffer it touches."""

    t: int
    step: int
    a: int
    b: int
    x0: int
    cnt: int
    sloc: Loc
    aloc: Loc | None  # accumulator read by a reduce
    wloc: Loc  # where the result lands
    reduce: bool
    tmp: int = -1  # scratch slot when the reduce lands via scratch (several reduces on one location)
    first: int = -1  # the piece whose rrc this scratch reduce completes


@dataclass
class Lowered:
    """One instance of the program; ``emit.py`` numbers steps, adds nops and replicates instances."""

    collective: str
    nranks: int
    nchunks: int
    nsegments: int
    tbs: list[list[TbPlan]]  # per rank
    scratch: list[int]  # scratch chunks one instance uses, per rank
    pieces: list[Piece]
    ops: list[list[Op]]  # per rank, in program-wide order
    stats: dict[str, Any] = field(default_factory=dict)

    def endpoints(self) -> tuple[dict[int, Op], dict[int, Op]]:
        """The op that sends and the op that receives each piece, by piece id."""
        sender: dict[int, Op] = {}
        receiver: dict[int, Op] = {}
        for rops in self.ops:
            for op in rops:
                if op.xout >= 0:
                    sender[op.xout] = op
                if op.xin >= 0:
                    receiver[op.xin] = op
        return sender, receiver


def check_lowerable(s: Any) -> None:
    """Refuse Schedules MSCCL cannot express (naming the limit or rule)."""
    if s.collective not in ("allreduce", "reducescatter", "allgather"):
        raise CollsynthError(f"MSCCL XML lowering supports allreduce, reducescatter and allgather, not {s.collective}")
    check_block_owners(s, "MSCCL")
    if s.ntransfers and int(s.count.max()) >= MAX_COUNT:
        raise CollsynthError(f"a transfer moves {int(s.count.max())} chunks; MSCCL's cnt limit is {MAX_COUNT - 1} "
                             f"chunks per step: build the schedule with fewer, larger chunks")


def segments(s: Any, nseg: int) -> list[int]:
    """Segment of every step: up to nseg contiguous step ranges. Phase boundaries are cut first (a
    rank that only takes part in one phase then keeps its thread blocks on one channel); the other
    cuts split the phases with the most transfers per segment, evenly by transfers."""
    if nseg <= 1 or s.nsteps <= 1:
        return [0] * max(s.nsteps, 1)
    per_step = np.bincount(s.step, minlength=s.nsteps).astype(np.float64)
    starts = sorted({0, *(ph.start for ph in s.phases if 0 < ph.start < s.nsteps),
                     *(ph.stop for ph in s.phases if 0 < ph.stop < s.nsteps)})
    ranges = list(zip(starts, starts[1:] + [s.nsteps]))[:nseg]
    if len(ranges) < len(starts):  # more phases than segments: merge the tail
        ranges[-1] = (ranges[-1][0], s.nsteps)
    parts = [1] * len(ranges)
    load = [float(per_step[a:b].sum()) for a, b in ranges]
    for _ in range(nseg - len(ranges)):
        i = max(range(len(ranges)), key=lambda j: (load[j] / parts[j], -j))
        if ranges[i][1] - ranges[i][0] <= parts[i]:
            break
        parts[i] += 1
    out: list[int] = []
    base = 0
    for (a, b), k in zip(ranges, parts):
        ps = per_step[a:b]
        cum = np.cumsum(ps)
        total = max(float(cum[-1]) if len(cum) else 0.0, 1.0)
        seg = np.minimum(((cum - ps / 2) * k) // total, k - 1).astype(np.int64)
        seg = np.maximum.accumulate(seg)
        out += (seg + base).tolist()
        base += k
    # renumber so that segments are 0..S-1 without gaps
    uniq = {v: i for i, v in enumerate(sorted(set(out)))}
    return [uniq[v] for v in out]


def _pieces(s: Any, lay: Layout) -> tuple[list[Piece], dict[int, list[int]], list[int]]:
    """Pass 1: every transfer's pieces with their locations (snapshot reads per step)."""
    n = s.nranks
    written = lay.written0()
    scratch = [lay.scratch_base()] * n
    pieces: list[Piece] = []
    of_t: dict[int, list[int]] = {}
    bounds = s.step_bounds.tolist()
    src_l, dst_l, chunk_l, count_l, red_l = (s.src.tolist(), s.dst.tolist(), s.chunk.tolist(), s.count.tolist(),
                                             s.reduce.tolist())
    for k in range(s.nsteps):
        land: dict[tuple[int, int, int], int] = {}
        land_at: dict[int, list[tuple[int, int]]] = {}  # rank -> (chunk, count) of this step's reduces into it
        now: list[tuple[int, int, int]] = []
        for t in range(bounds[k], bounds[k + 1]):
            a, b, c, cnt, red = src_l[t], dst_l[t], chunk_l[t], count_l[t], red_l[t]
            sl = [lay.read(a, x, bool(written[a, x])) for x in range(c, c + cnt)]
            wl = [lay.write(b, x) for x in range(c, c + cnt)]
            al = [lay.read(b, x, bool(written[b, x])) for x in range(c, c + cnt)] if red else []
            now.append((b, c, cnt))
            if red and (b, c, cnt) in land:
                if land[(b, c, cnt)] < 0 or len(contiguous_runs([sl])) != 1:
                    raise CollsynthError(f"step {k}: a reduce into rank {b} spans buffers that MSCCL cannot address "
                                         f"in one step; split the transfer")
                first = land[(b, c, cnt)]
                p = Piece(t, k, a, b, 0, cnt, sl[0], None, pieces[first].wloc, True, scratch[b], first)
                scratch[b] += cnt
                of_t[t] = [len(pieces)]
                pieces.append(p)
                continue
            if red and any(c0 < c + cnt and c < c0 + n0 for c0, n0 in land_at.get(b, ())):
                raise CollsynthError(f"step {k}: reduces into rank {b} overlap partially; the MSCCL lowering needs "
                                     f"equal runs")
            runs = contiguous_runs([sl, wl, al] if red else [sl, wl])
            of_t[t] = []
            for x0, x1 in runs:
                of_t[t].append(len(pieces))
                pieces.append(Piece(t, k, a, b, x0, x1 - x0, sl[x0], al[x0] if red else None, wl[x0], red))
            if red:
                land[(b, c, cnt)] = of_t[t][0] if len(runs) == 1 else -1
                land_at.setdefault(b, []).append((c, cnt))
        for b, c, cnt in now:
            written[b, c:c + cnt] = True
    return pieces, of_t, scratch


def _liveness(s: Any, lay: Layout) -> Callable[[int, int, int, int], bool]:
    """live(rank, chunk, count, k): after the reads of step k, is one of those locations read (or reduced
    into) before a copy overwrites it, or read by the postcondition?"""
    events: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for t in range(s.ntransfers):
        k, a, b, c, cnt, red = (int(s.step[t]), int(s.src[t]), int(s.dst[t]), int(s.chunk[t]), int(s.count[t]),
                                bool(s.reduce[t]))
        for x in range(c, c + cnt):
            events.setdefault((a, x), []).append((k, 0))  # a read happens before the step's writes
            events.setdefault((b, x), []).append((k, 1 if red else 2))  # 1: reduce (reads too), 2: copy
    for v in events.values():
        v.sort()
    coll, m = s.collective, lay.m

    def live(r: int, c: int, cnt: int, k: int) -> bool:
        for x in range(c, c + cnt):
            ev = [e for e in events.get((r, x), ()) if e[0] > k or (e[0] == k and e[1] != 0)]
            if not ev:
                if coll != "reducescatter" or x // m == r:
                    return True
            elif ev[0][1] != 2:
                return True
        return False

    return live


def _fusion(s: Any, pieces: list[Piece], of_t: dict[int, list[int]], chan: Callable[[int, int, int], int]
            ) -> tuple[dict[int, int], dict[tuple[int, int], dict[int, int]]]:
    """Pass 2: pairs (piece received at step k, piece sent at k+1) that become one fused step."""
    n = s.nranks
    steps = max(s.nsteps, 1)
    nrecv = np.zeros((n, steps + 1), np.int64)
    nsend = np.zeros((n, steps + 1), np.int64)
    np.add.at(nrecv, (s.dst, s.step), 1)
    np.add.at(nsend, (s.src, s.step), 1)
    send_at = {(int(a), int(k)): t for t, (a, k) in enumerate(zip(s.src.tolist(), s.step.tolist()))}
    fuse: dict[int, int] = {}
    pairing: dict[tuple[int, int], dict[int, int]] = {}  # (rank, seg) -> {send peer: recv peer}
    rpairing: dict[tuple[int, int], dict[int, int]] = {}
    for pid, p in enumerate(pieces):
        k, r = p.step, p.b
        if p.tmp >= 0 or len(of_t[p.t]) != 1 or k + 1 >= s.nsteps:
            continue
        if nrecv[r, k] != 1 or nsend[r, k + 1] != 1:
            continue
        u = send_at[(r, k + 1)]
        if len(of_t[u]) != 1:
            continue
        q = pieces[of_t[u][0]]
        if int(s.chunk[u]) != int(s.chunk[p.t]) or int(s.count[u]) != int(s.count[p.t]) or q.sloc != p.wloc:
            continue
        sp, rp = q.b, p.a
        if chan(p.a, p.b, k) != chan(q.a, q.b, k + 1):
            continue
        key = (r, chan(p.a, p.b, k))
        smap, rmap = pairing.setdefault(key, {}), rpairing.setdefault(key, {})
        if smap.get(sp, rp) != rp or rmap.get(rp, sp) != sp:
            continue
        smap[sp], rmap[rp] = rp, sp
        fuse[pid] = of_t[u][0]
    return fuse, pairing


def _ops(s: Any, lay: Layout, pieces: list[Piece], fuse: dict[int, int], chan: Callable[[int, int, int], int]
         ) -> list[list[Op]]:
    """Pass 3: the steps of every rank."""
    n = s.nranks
    live = _liveness(s, lay)
    ops: list[list[Op]] = [[] for _ in range(n)]
    fused_out = {v: k for k, v in fuse.items()}
    sender_of: dict[int, Op] = {}
    rrc_of: dict[int, Op] = {}
    if s.collective == "allgather":
        m = lay.m
        for r in range(n):
            for a0 in range(0, m, MAX_COUNT - 1):
                op = Op(r, -1, 0, a0, "cpy", 0)
                op.cnt = min(MAX_COUNT - 1, m - a0)
                op.c0 = r * m + a0
                op.src, op.dst = ("i", a0), ("o", r * m + a0)
                op.reads = [lay.hazard(r, ("i", a0 + x)) for x in range(op.cnt)]
                op.writes = [lay.hazard(r, ("o", r * m + a0 + x)) for x in range(op.cnt)]
                ops[r].append(op)
    for pid, p in enumerate(pieces):
        k, seg, tie = p.step, chan(p.a, p.b, p.step), p.t * 64 + p.x0
        c0 = int(s.chunk[p.t]) + p.x0
        if pid in fused_out:
            assert sender_of[pid].xout == pid  # the fused op of the previous step sends it
        else:
            op = Op(p.a, k, 0, tie, "s", seg)
            op.send, op.src, op.cnt, op.xout, op.c0 = p.b, p.sloc, p.cnt, pid, c0
            op.reads = [lay.hazard(p.a, (p.sloc[0], p.sloc[1] + x)) for x in range(p.cnt)]
            ops[p.a].append(op)
            sender_of[pid] = op
        rcv = Op(p.b, k, 1, tie, "r", seg)
        rcv.recv, rcv.cnt, rcv.xin, rcv.c0 = p.a, p.cnt, pid, c0
        wl = [lay.hazard(p.b, (p.wloc[0], p.wloc[1] + x)) for x in range(p.cnt)]
        if p.tmp >= 0:
            rcv.dst = ("s", p.tmp)
            rcv.writes = [("s", p.tmp + x) for x in range(p.cnt)]
            ops[p.b].append(rcv)
            re = Op(p.b, k, 2, tie, "re", rrc_of[p.first].seg)
            re.src, re.dst, re.cnt, re.c0 = ("s", p.tmp), p.wloc, p.cnt, c0
            re.reads = list(rcv.writes) + wl
            re.writes = wl
            re.anchor = rrc_of[p.first]
            ops[p.b].append(re)
            continue
        rcv.dst, rcv.writes = p.wloc, wl
        if p.reduce:
            assert p.aloc is not None
            rcv.type, rcv.src = "rrc", p.aloc
            rcv.reads = [lay.hazard(p.b, (p.aloc[0], p.aloc[1] + x)) for x in range(p.cnt)]
            rrc_of[pid] = rcv
        if pid in fuse:
            q = pieces[fuse[pid]]
            rcv.send = q.b
            if p.reduce:
                rcv.type = "rrcs" if live(p.b, int(s.chunk[p.t]) + p.x0, p.cnt, k + 1) else "rrs"
                if rcv.type == "rrs":
                    rcv.writes = []
            else:
                rcv.type = "rcs"
            sender_of[fuse[pid]] = rcv
            rcv.xout = fuse[pid]
        ops[p.b].append(rcv)
    for r in range(n):
        ops[r].sort(key=lambda o: o.key)
    return ops


def _assign_tbs(s: Any, ops: list[list[Op]], pairing: dict[tuple[int, int], dict[int, int]],
                nseg: int) -> list[list[TbPlan]]:
    """Thread blocks per rank: one per (channel, send peer, receive peer)."""
    n = s.nranks
    out: list[list[TbPlan]] = []
    for r in range(n):
        tbs: list[TbPlan] = []
        for seg in range(nseg):
            mine = [o for o in ops[r] if o.seg == seg and o.type not in ("re", "cpy")]
            sends = sorted({o.send for o in mine if o.send >= 0})
            recvs = sorted({o.recv for o in mine if o.recv >= 0})
            pairs = dict(pairing.get((r, seg), {}))
            used_r = set(pairs.values())
            for p in sends:
                if p not in pairs and p in recvs and p not in used_r:
                    pairs[p] = p
                    used_r.add(p)
            free_s = [p for p in sends if p not in pairs]
            free_r = [q for q in recvs if q not in used_r]
            for p, q in zip(free_s, free_r):
                pairs[p] = q
            plans = [TbPlan(r, seg, p, q) for p, q in pairs.items()]
            plans += [TbPlan(r, seg, p, -1) for p in free_s[len(free_r):]]
            plans += [TbPlan(r, seg, -1, q) for q in free_r[len(free_s):]]
            by_send = {t.send: t for t in plans if t.send >= 0}
            by_recv = {t.recv: t for t in plans if t.recv >= 0}
            for o in mine:
                tb = by_send[o.send] if o.send >= 0 else by_recv[o.recv]
                if o.recv >= 0 and by_recv[o.recv] is not tb:
                    raise AssertionError("fused op split across thread blocks")  # pragma: no cover
                o.tb = tb
            tbs += plans
        if not tbs and ops[r]:
            tbs.append(TbPlan(r, 0, -1, -1))
        for o in ops[r]:
            if o.type == "re":
                assert o.anchor is not None
                o.tb = o.anchor.tb
            elif o.type == "cpy":
                o.tb = next((x.tb for x in ops[r] if x.tb is not None), tbs[0])
        big = n + 1
        tbs.sort(key=lambda t: (t.seg, t.send if t.send >= 0 else big, t.recv if t.recv >= 0 else big))
        for i, tb in enumerate(tbs):
            tb.idx = i
        for o in ops[r]:
            assert o.tb is not None
            o.tb.ops.append(o)
        for tb in tbs:
            tb.ops.sort(key=lambda o: o.key)
            for i, o in enumerate(tb.ops):
                o.pos = i
        out.append(tbs)
    return out


def _lanes(s: Any, segs: list[int]) -> int:
    """Channels per segment: a rank may have at most 32 sending (and 32 receiving) thread blocks on a
    channel, so the connections of a segment are spread over L lanes, peer pair {a, b} on lane
    (a + b) mod L (both directions of a pair share a lane, so exchanges share a thread block)."""
    S = max(segs) + 1 if segs else 1
    step_seg = np.asarray(segs, np.int64)[s.step] if s.ntransfers else np.zeros(0, np.int64)
    pairs = {(int(g), int(a), int(b)) for g, a, b in zip(step_seg, s.src, s.dst)}
    for L in range(1, MAX_CHANNELS + 1):
        outs: dict[tuple[int, int, int], int] = {}
        ins: dict[tuple[int, int, int], int] = {}
        for g, a, b in pairs:
            lane = (a + b) % L
            outs[(a, g, lane)] = outs.get((a, g, lane), 0) + 1
            ins[(b, g, lane)] = ins.get((b, g, lane), 0) + 1
        if max(outs.values(), default=0) <= MAX_TB_PER_CHANNEL and max(ins.values(), default=0) <= MAX_TB_PER_CHANNEL:
            return L
        if S * (L + 1) > MAX_CHANNELS:
            break
    raise CollsynthError(f"a rank talks to more than {MAX_TB_PER_CHANNEL} peers per channel and the peers cannot be "
                         f"spread over the {MAX_CHANNELS - 1} channels MSCCL allows")


def lower(s: Any, *, inplace: bool, nseg: int = 1) -> Lowered:
    """One instance's thread-block programs (ops, thread blocks) for Schedule ``s``; no dependencies yet."""
    check_lowerable(s)
    lay = Layout(s.collective, s.nranks, s.nchunks, inplace)
    segs = segments(s, nseg)
    L = _lanes(s, segs)
    nchan = (max(segs) + 1 if segs else 1) * L

    def chan(a: int, b: int, k: int) -> int:
        return segs[k] * L + (a + b) % L

    pieces, of_t, scratch = _pieces(s, lay)
    fuse, pairing = _fusion(s, pieces, of_t, chan)
    ops = _ops(s, lay, pieces, fuse, chan)
    tbs = _assign_tbs(s, ops, pairing, nchan)
    stats = {"fused": len(fuse), "pieces": len(pieces), "segments": nchan // L, "lanes": L}
    return Lowered(s.collective, s.nranks, s.nchunks, nchan, tbs, scratch, pieces, ops, stats)
