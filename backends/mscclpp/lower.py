"""Lower a verified Schedule to per-rank MSCCL++ programs (thread blocks, channels, ops).

How the IR's semantics map onto the executor (synth/ir.py; docs/mscclpp-plan.md, "How collsynth emits"):

- Buffers. A location (rank, chunk) lives in the input ``i`` until it is first written, then in the
  output ``o`` (reducescatter: ``o`` for the rank's own block, scratch ``s`` for partial sums of the
  others'; allgather: ``o``, the own block copied there first out of place). The same plan is then
  correct in place (``o`` aliases ``i``) and out of place (``i`` is never written).
- Transfers (Simple). The sender puts the chunks into a scratch slot of the receiver that no other
  transfer of the launch uses, then ``nop`` and ``signal``; the receiver ``wait``s, ``nop``s and adds
  the slot to its accumulator (``re``) or copies it (``copy``). Reductions therefore come from
  scratch, and a put never overwrites data the receiver may still read. Inside a node the channel is
  a memory channel; across nodes a port channel: the data are staged in the sender's scratch (the
  proxy reads registered memory from its base) and sent with ``pws`` (put, then signal on the same
  channel, so the data land before the signal). The staging slot is written again only in the next
  launch, after the receiver's start-of-launch handshake, i.e. after the proxy has served it.
- Transfers (LL). ``ppkt`` writes packets into the receiver's slot; ``repkt``/``upkt`` spin on the
  packets' flags, so no semaphore is needed. Across nodes: ``cpkt`` into a local staging slot, then
  ``rppkt`` over the port channel. A double scratch buffer keeps consecutive launches apart.
- Order. A rank's ops run in the Schedule's step order; within a step its sends come before its
  receives (snapshot reads). A ``nop`` goes between two ops of a thread block only where a thread could
  touch bytes another thread touched before (different offsets), and around every signal and wait.
- Thread blocks. A rank's program is cut into consecutive segments, one thread block each, so that no
  thread block exceeds 64 ops or 16 channels or remote buffers per type; segment j+1 waits for segment
  j with a device semaphore (``sem_acquire``/``sem_release``, one per launch each, so it balances).
  Each (rank pair, sender segment, receiver segment) gets its own channel, and every thread block
  first signals and waits once on each of its channels (Simple): a peer writes into a scratch slot only
  after the receiver has started the launch, i.e. finished reading that slot in the previous launch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from collsynth.backends.layout import Layout, Loc, contiguous_runs
from collsynth.backends.mscclpp.model import MAX_CHANNELS_PER_OP, MAX_CHANNELS_PER_TB, MAX_OPS_PER_TB
from collsynth.errors import CollsynthError

MAX_SOURCES = 10  # src_buff entries per op
MAX_PAIRS = 8  # put/ppkt (src, dst) pairs per op: one channel or remote buffer each


@dataclass
class Piece:
    """A run of one schedule transfer that is contiguous in every buffer it touches."""

    t: int  # schedule transfer index
    step: int
    src: int
    dst: int
    cnt: int
    sloc: Loc
    wloc: Loc
    aloc: Loc | None  # the accumulator a reduce adds to (None: a copy)
    slot: int = -1  # receiver's scratch chunk the data land in
    stage: int = -1  # sender's staging chunk (port channels)
    port: bool = False
    id: int = -1  # index among all pieces


@dataclass
class Item:
    """One op before channel and table ids are known. Refs: ("l", buf, index, size) local or
    ("r", peer, index, size) the peer's scratch. ``sync``: (peer, transfer) per channel lane."""

    name: str
    ctype: str = "none"
    src: list[tuple[Any, ...]] = field(default_factory=list)
    dst: list[tuple[Any, ...]] = field(default_factory=list)
    sync: list[tuple[int, int]] = field(default_factory=list)  # (peer, piece id) per channel lane
    sems: list[int] = field(default_factory=list)
    movements: list[int] = field(default_factory=list)  # piece id per remote dst (put, pws, ppkt, rppkt)
    seg: int = -1
    prologue: bool = False  # runs once before a pipeline (the allgather's own-block copy)


def plan_chunks(s: Any, value: int | str | None) -> int:
    """Chunks the plan cuts each buffer into: the Schedule's (None), a number >= it, or "pow2": the Schedule's
    when that is a power of two, else the smallest power of two >= 8x it (schedule chunks then get floor
    or ceiling shares that differ by at most an eighth, and power-of-two messages are eligible: the executor
    needs the size to be a multiple of 16 bytes times the chunk count). ReduceScatter and AllGather need a
    multiple of the rank count."""
    N, n = s.nchunks, s.nranks
    if value is None:
        return int(N)
    if value == "pow2":
        if N & (N - 1) == 0:
            return int(N)
        M = 1 << (8 * N - 1).bit_length()
        return M if s.collective == "allreduce" or M % n == 0 else int(N)
    if isinstance(value, bool) or not isinstance(value, int) or value < N:
        raise CollsynthError(f"--plan-chunks must be at least the schedule's {N} chunks (or pow2), got {value!r}")
    if s.collective != "allreduce" and value % n:
        raise CollsynthError(f"--plan-chunks {value}: {s.collective} needs a multiple of the {n} ranks")
    return value


def pieces(s: Any, lay: Layout, node_of: list[int], M: int | None = None) -> tuple[list[Piece], list[int]]:
    """Every transfer's pieces with their locations (snapshot reads per step), receive slots and
    staging slots, in plan chunks (schedule chunk c starts at plan chunk c*M//N); returns the pieces and
    each rank's scratch chunks."""
    n, N = s.nranks, s.nchunks
    M = M or N

    def x(c: int) -> int:
        return c * M // N

    def plan_loc(loc: Loc, cc: int) -> Loc:
        return (loc[0], x(cc) - x(cc - loc[1]))

    written = lay.written0()
    nxt = [x(lay.scratch_base())] * n
    out: list[Piece] = []
    bounds = s.step_bounds.tolist()
    src_l, dst_l, chunk_l, count_l, red_l = (s.src.tolist(), s.dst.tolist(), s.chunk.tolist(), s.count.tolist(),
                                             s.reduce.tolist())
    for k in range(s.nsteps):
        landing: dict[int, list[tuple[int, int]]] = {}  # rank -> the (chunk, count) runs landing there this step
        now = []
        first = len(out)
        for t in range(bounds[k], bounds[k + 1]):
            a, b, c, cnt, red = src_l[t], dst_l[t], chunk_l[t], count_l[t], red_l[t]
            runs = landing.setdefault(b, [])
            for c2, cnt2 in runs:
                if c2 < c + cnt and c < c2 + cnt2 and (c2, cnt2) != (c, cnt):
                    raise CollsynthError(f"step {k}: transfers into rank {b} overlap partially (chunks {c}.."
                                         f"{c + cnt - 1} and {c2}..{c2 + cnt2 - 1}); the plan lowering "
                                         f"needs equal runs")
            runs.append((c, cnt))
            sl = [lay.read(a, y, bool(written[a, y])) for y in range(c, c + cnt)]
            wl = [lay.write(b, y) for y in range(c, c + cnt)]
            al = [lay.read(b, y, bool(written[b, y])) for y in range(c, c + cnt)] if red else []
            port = node_of[a] != node_of[b]
            for x0, x1 in contiguous_runs([sl, wl, al] if red else [sl, wl]):
                cc = c + x0
                p = Piece(t, k, a, b, x(c + x1) - x(cc), plan_loc(sl[x0], cc), plan_loc(wl[x0], cc),
                          plan_loc(al[x0], cc) if red else None, port=port, id=len(out))
                p.slot = nxt[b]
                nxt[b] += p.cnt
                out.append(p)
            now.append((b, c, cnt))
        for p in out[first:]:
            if p.port:
                p.stage = nxt[p.src]
                nxt[p.src] += p.cnt
        for b, c, cnt in now:
            written[b, c:c + cnt] = True
    return out, nxt


class Program:
    """One rank's ops in order, cut into segments (thread blocks) as they are appended."""

    def __init__(self, rank: int, budget_peers: int, packets: bool, pipeline: bool, slack: int = 0) -> None:
        self.rank = rank
        self.items: list[Item] = []
        self.seg = 0
        self.budget_peers = budget_peers
        self.slack = slack  # ops kept free in every segment (where the handshake estimate fell short)
        self.packets, self.pipeline = packets, pipeline
        self._open()

    def _open(self) -> None:
        self.count = 0
        self.peers: dict[str, set[int]] = {"memory": set(), "port": set()}
        self.rbufs: dict[str, set[int]] = {"memory": set(), "port": set()}
        self._synced()
        if self.seg > 0:
            self.count += 2  # sem_acquire and nop

    def _synced(self) -> None:
        self.pending: list[tuple[str, int, int, int, bool]] = []  # local (buf, lo, hi, base, write) since the nop
        self.dirty = False  # a data op since the last nop (a signal must not publish it before the nop)
        self.waited = False  # a wait since the last nop (only its thread knows)

    def _reserved(self, peers: dict[str, set[int]]) -> int:
        """Ops a segment needs besides its body: handshake (Simple), chain release, pipeline op."""
        extra = 2 + (1 if self.pipeline else 0) + self.slack  # nop + sem_release at the end, the pipeline op
        if not self.packets:
            hs = 0
            for t in ("memory", "port"):
                chans = min(2 * len(peers[t]), MAX_CHANNELS_PER_TB)
                hs += 2 * -(-chans // MAX_CHANNELS_PER_OP)
            extra += hs + (1 if hs else 0)
        return extra

    def _fits(self, add: int, item: Item) -> bool:
        t = item.ctype
        new_peers = {p for p, _ in item.sync} - self.peers[t] if t in self.peers else set()
        new_bufs = {ref[1] for ref in item.dst + item.src if ref[0] == "r"} - self.rbufs[t] if t in self.rbufs \
            else set()
        if new_peers and len(self.peers[t]) + len(new_peers) > self.budget_peers:
            return False
        if new_bufs and len(self.rbufs[t]) + len(new_bufs) > MAX_CHANNELS_PER_TB:
            return False
        if new_peers:
            peers = {k: (v | new_peers if k == t else v) for k, v in self.peers.items()}
            return self.count + add + self._reserved(peers) <= MAX_OPS_PER_TB
        return self.count + add + self._reserved(self.peers) <= MAX_OPS_PER_TB

    def _take(self, item: Item) -> None:
        for p, _ in item.sync:
            self.peers[item.ctype].add(p)
        for ref in item.dst + item.src:
            if ref[0] == "r":
                self.rbufs[item.ctype].add(ref[1])
        item.seg = self.seg
        self.items.append(item)
        self.count += 1

    def ensure_room(self, nops: int, ctype: str, peers: set[int]) -> None:
        """Start a new segment unless ``nops`` more ops with channels to ``peers`` fit in this one (a put
        and its signal must share a thread block: that block's start-of-call handshake with the peer is
        what lets the put write into the peer's scratch)."""
        new_peers = peers - self.peers[ctype]
        grown = {k: (v | new_peers if k == ctype else v) for k, v in self.peers.items()}
        if (len(grown[ctype]) > self.budget_peers or len(self.rbufs[ctype] | peers) > MAX_CHANNELS_PER_TB
                or self.count + nops + 1 + self._reserved(grown) > MAX_OPS_PER_TB):
            self._new_segment()

    def _new_segment(self) -> None:
        self.items.append(Item("nop", seg=self.seg))
        self.items.append(Item("sem_release", sems=[self.seg], seg=self.seg))
        self.seg += 1
        self.items.append(Item("sem_acquire", sems=[self.seg - 1], seg=self.seg))
        self.items.append(Item("nop", seg=self.seg))
        self._open()

    def _needs_nop(self, item: Item, publish: bool) -> bool:
        """A nop first? Before a signal or a proxy request that must see the block's data ops; before a
        data op after a wait; before a data op touching bytes another thread touched since the last nop."""
        if item.name in ("signal", "wait"):
            return publish and self.dirty
        if publish and self.dirty:
            return True
        if self.waited:
            return True
        for buf, lo, hi, base, write in _accesses(item):
            for b2, lo2, hi2, base2, w2 in self.pending:
                if b2 == buf and lo < hi2 and lo2 < hi and (write or w2) and base != base2:
                    return True
        return False

    def add(self, item: Item, *, publish: bool = False) -> None:
        """Append ``item``, with a nop first when needed, in a new segment when the current one is full."""
        for _ in range(2):
            if self._fits(1 + int(self._needs_nop(item, publish)), item):
                break
            if self.count == (2 if self.seg > 0 else 0):
                raise CollsynthError(f"rank {self.rank}: one op needs more than a thread block holds "
                                     f"({MAX_OPS_PER_TB} ops, {MAX_CHANNELS_PER_TB} channels per type)")
            self._new_segment()
        if self._needs_nop(item, publish):
            self.nop()
        self._take(item)
        if item.name == "wait":
            self.waited = True
        elif item.name != "signal":
            self.dirty = True
            self.pending.extend(_accesses(item))

    def nop(self) -> None:
        self.items.append(Item("nop", seg=self.seg))
        self.count += 1
        self._synced()


PACKET_NAMES = ("ppkt", "rppkt", "cpkt", "upkt", "repkt")


def _accesses(item: Item) -> list[tuple[str, int, int, int, bool]]:
    """Local chunk ranges an op touches: (buffer, lo, hi, (base, thread unit), write). A thread handles
    the same bytes in two ops only when both address them from the same base with the same unit. The input
    and output buffers count as one: an in-place plan (the default) aliases them, so a write to the output
    after a read of the same input bytes by another thread needs a nop too (a late GPU at 2 x 8 H100s, LL: a
    ppkt of input chunks 100..119, then an upkt into output chunks 108..110 in the same thread block)."""
    unit = 8 if item.name in PACKET_NAMES else 16
    out = []
    for refs, write in ((item.src, False), (item.dst, True)):
        for ref in refs:
            if ref[0] == "l":
                buf = "io" if ref[1] in ("i", "o") else ref[1]
                out.append((buf, ref[2], ref[2] + ref[3], ref[2] * 64 + unit, write))
    return out


def _group(xs: list[Any], size: int) -> list[list[Any]]:
    return [xs[i:i + size] for i in range(0, len(xs), size)]


def build_programs(s: Any, pcs: list[Piece], *, packets: bool, pipeline: bool, budget_peers: int | list[int],
                   allgather_copy: bool, M: int | None = None, previous: list[Program] | None = None,
                   only: set[int] | None = None, slack: list[int] | None = None) -> list[Program]:
    """Every rank's ops (items) in step order, segmented with at most ``budget_peers`` peers per thread block
    (one count, or one per rank) and ``slack[r]`` ops kept free in each of rank r's. A rank's program depends
    on its own pieces only: with ``previous`` and ``only``, the ranks outside ``only`` keep their previous
    programs."""
    n = s.nranks
    budgets = [budget_peers] * n if isinstance(budget_peers, int) else list(budget_peers)
    slacks = slack or [0] * n
    partial = previous is not None and only is not None
    todo: Sequence[int] = range(n)
    progs: list[Program] = []
    if previous is not None and only is not None:
        todo, progs = sorted(only), list(previous)
    events: dict[int, dict[int, tuple[list[Piece], list[Piece]]]] = {r: {} for r in todo}
    for p in pcs:
        if p.src in events:
            events[p.src].setdefault(p.step, ([], []))[0].append(p)
        if p.dst in events:
            events[p.dst].setdefault(p.step, ([], []))[1].append(p)
    for r in todo:
        prog = Program(r, budgets[r], packets, pipeline, slacks[r])
        if partial:
            progs[r] = prog
        else:
            progs.append(prog)  # ranks in order
        if allgather_copy:
            m = (M or s.nchunks) // n
            prog.add(Item("copy", src=[("l", "i", 0, m)], dst=[("l", "o", r * m, m)], prologue=True))
        for k in sorted(events[r]):
            out, inc = events[r][k]
            if out:
                _emit_sends(prog, out, packets)
            if inc:
                _emit_receives(prog, inc, packets)
    return progs


def _emit_sends(prog: Program, out: list[Piece], packets: bool) -> None:
    mem = [p for p in out if not p.port]
    port = [p for p in out if p.port]
    if packets:
        for btype in sorted({p.sloc[0] for p in mem}):
            for grp in _group([p for p in mem if p.sloc[0] == btype], MAX_PAIRS):
                prog.add(Item("ppkt", "memory", src=[("l", p.sloc[0], p.sloc[1], p.cnt) for p in grp],
                              dst=[("r", p.dst, p.slot, p.cnt) for p in grp], movements=[p.id for p in grp]))
        for p in port:
            prog.add(Item("cpkt", src=[("l", p.sloc[0], p.sloc[1], p.cnt)], dst=[("l", "s", p.stage, p.cnt)]))
        for p in port:  # rppkt reads the packets (waiting for their flags), syncs the block, then puts
            prog.add(Item("rppkt", "port", src=[("l", "s", p.stage, p.cnt)], dst=[("r", p.dst, p.slot, p.cnt)],
                          sync=[(p.dst, p.id)], movements=[p.id]))
        return
    for grp in _group(mem, min(MAX_CHANNELS_PER_OP, prog.budget_peers)):
        puts = [[p for p in grp if p.sloc[0] == btype] for btype in sorted({p.sloc[0] for p in grp})]
        prog.ensure_room(len(puts) + 2, "memory", {p.dst for p in grp})  # puts, nop, signal in one block
        for part in puts:
            prog.add(Item("put", "memory", src=[("l", p.sloc[0], p.sloc[1], p.cnt) for p in part],
                          dst=[("r", p.dst, p.slot, p.cnt) for p in part], movements=[p.id for p in part]))
        prog.add(Item("signal", "memory", sync=[(p.dst, p.id) for p in grp]), publish=True)
    for grp in _group(port, min(MAX_CHANNELS_PER_OP, prog.budget_peers)):
        # the proxy reads registered memory from its base: stage the data in scratch, in the thread block
        # that sends them (its handshake with the receiver orders the staging after the last call's send)
        prog.ensure_room(len(grp) + 2, "port", {p.dst for p in grp})
        for p in grp:
            prog.add(Item("copy", src=[("l", p.sloc[0], p.sloc[1], p.cnt)], dst=[("l", "s", p.stage, p.cnt)]))
        prog.add(Item("pws", "port", src=[("l", "s", p.stage, p.cnt) for p in grp],
                      dst=[("r", p.dst, p.slot, p.cnt) for p in grp], sync=[(p.dst, p.id) for p in grp],
                      movements=[p.id for p in grp]), publish=True)


def _emit_receives(prog: Program, inc: list[Piece], packets: bool) -> None:
    if not packets:
        for ctype in ("memory", "port"):
            for grp in _group([p for p in inc if (ctype == "port") == p.port], MAX_CHANNELS_PER_OP):
                prog.add(Item("wait", ctype, sync=[(p.src, p.id) for p in grp]))
    groups: dict[tuple[Loc, int], list[Piece]] = {}
    for p in inc:
        groups.setdefault((p.wloc, p.cnt), []).append(p)
    for (wloc, cnt), grp in groups.items():
        wref = ("l", wloc[0], wloc[1], cnt)
        for p in grp:
            if p.aloc is None:
                prog.add(Item("upkt" if packets else "copy", src=[("l", "s", p.slot, cnt)], dst=[wref]))
        reduces = [p for p in grp if p.aloc is not None]
        if reduces:
            acc = reduces[0].aloc
            assert acc is not None
            slots = [("l", "s", p.slot, cnt) for p in reduces]
            for i, part in enumerate(_group(slots, MAX_SOURCES - 1)):
                src = [("l", acc[0], acc[1], cnt) if i == 0 else wref, *part]
                prog.add(Item("repkt" if packets else "re", src=src, dst=[wref]))


@dataclass
class Channels:
    """Global channel lists per (rank, type) and each segment's table, from the items' sync lanes."""

    peers: dict[tuple[int, str], list[int]]  # (rank, type) -> peer of each global channel index
    index: dict[tuple[int, str, int, int, int], int]  # (rank, type, peer, my seg, peer seg) -> global index
    tables: dict[tuple[int, int, str], list[int]]  # (rank, seg, type) -> global indexes
    wait_seg: dict[tuple[int, int], int]  # (rank, piece) -> segment of the wait for it


def allocate_channels(progs: list[Program], packets: bool) -> Channels:
    """One channel per (rank pair, segment of each side) that a signal/wait pair (or an LL port put)
    uses; LL pairs inside a node declare one memory channel that no thread block uses (as DSL plans do)."""
    wait_seg: dict[tuple[int, int], int] = {}  # (rank, piece) -> segment of its wait
    for prog in progs:
        for it in prog.items:
            if it.name == "wait":
                for _, pid in it.sync:
                    wait_seg[(prog.rank, pid)] = it.seg
    keys: set[tuple[str, int, int, int, int]] = set()
    for prog in progs:
        for it in prog.items:
            for peer, pid in it.sync:
                if it.name in ("signal", "pws"):
                    keys.add(_ckey(it.ctype, prog.rank, it.seg, peer, wait_seg[(peer, pid)]))
                elif it.name == "rppkt":
                    keys.add(_ckey(it.ctype, prog.rank, it.seg, peer, -1))
            if packets and it.name == "ppkt":
                for ref in it.dst:
                    keys.add(_ckey("memory", prog.rank, -1, ref[1], -1))
    peers: dict[tuple[int, str], list[int]] = {}
    index: dict[tuple[int, str, int, int, int], int] = {}
    tables: dict[tuple[int, int, str], list[int]] = {}
    by_rank: dict[tuple[int, str], list[tuple[int, tuple[int, int], int, int]]] = {}
    for ctype, a, sa, b, sb in sorted(keys):
        by_rank.setdefault((a, ctype), []).append((b, (sa, sb), sa, sb))
        by_rank.setdefault((b, ctype), []).append((a, (sa, sb), sb, sa))
    for (r, ctype), lst in sorted(by_rank.items()):
        lst.sort(key=lambda e: (e[0], e[1]))  # the k-th channel from r to p pairs with the k-th from p to r
        for peer, _, mine, theirs in lst:
            gi = len(peers.setdefault((r, ctype), []))
            peers[(r, ctype)].append(peer)
            index[(r, ctype, peer, mine, theirs)] = gi
            if mine >= 0:
                tables.setdefault((r, mine, ctype), []).append(gi)
    return Channels(peers, index, tables, wait_seg)


def _ckey(ctype: str, a: int, sa: int, b: int, sb: int) -> tuple[str, int, int, int, int]:
    return (ctype, a, sa, b, sb) if a < b else (ctype, b, sb, a, sa)
