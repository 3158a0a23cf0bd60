"""Symbolic execution of an MSCCL program with the interpreter's semantics.

Each thread block runs its transmissions in order. A transmission first waits for its dependencies:
(tb, value) is met once that thread block has published a counter >= value (it publishes after each
transmission with hasdep=1; ``msccl_kernel`` COMPUTE_FLAG). A receiving transmission then takes the
head of the FIFO of its (sender, receiver, channel) connection, which must carry the same ``cnt``.
Sends never block (the FIFO is unbounded here; the real one has a few slots per connection).

Data are symbolic: every chunk holds (contributions, label, taint): the set of ranks whose data it
sums (a Python int bit set), the global index of the chunk the data came from, and why the value is
wrong whatever the data (double counting, mixing different chunks, reducing undefined data). A
reduction of two values whose rank sets intersect is a double count.

Races: every access to a chunk is compared with the last write (and, for a write, the reads since)
by other thread blocks of the same GPU. Accesses must be ordered by happens-before: program order,
dependency waits, and FIFO send -> receive (also through other GPUs). A per-GPU vector clock over the
GPU's own dependency edges filters the common case; a candidate race is confirmed by an exact search
of the happens-before graph recorded so far.

Buffers are modelled per call mode. In place, the runtime's aliasing applies: allreduce/alltoall
``o`` is ``i``; allgather ``i`` is ``o`` at offset rank*(chunks per rank); reducescatter ``o`` is ``i``
at that offset (docs/msccl-xml.md 2.5). Out of place, writing ``i`` is an error (the caller's send
buffer is read-only).
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from collsynth.backends.msccl.model import Program, PTb, Tx, XAlgo, XGpu, where

Value = tuple  # (mask: int | None, label: int | None, taint: str | None)
_UNDEF: Value = (None, None, None)


class ExecFailure(Exception):
    """A problem found while executing (kind, message, gpu, tb, step)."""

    def __init__(self, kind: str, message: str, gpu: int | None = None, tb: int | None = None,
                 step: int | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.gpu, self.tb, self.step = kind, message, gpu, tb, step


@dataclass
class ExecResult:
    """Final buffers, and the trace the timing model needs."""

    mode: str
    memory: list[dict[str, list[Value]]]  # per gpu, physical buffers
    layout: list[dict[str, tuple[str, int]]]  # per gpu: logical buffer -> (physical buffer, offset)
    order: list[tuple[int, int]]  # (global tb index, tx index) in execution order
    recv_from: dict[tuple[int, int], tuple[int, int]]  # receiving tx -> the sending tx it paired with
    dep_on: dict[tuple[int, int], list[tuple[int, int]]]  # tx -> publisher txs that released it
    labels_sent: dict[tuple[int, int], int | None]  # sending tx -> label of the first chunk it sent
    reduced_into: set[tuple[int, int]] = field(default_factory=set)  # receiving txs whose data got reduced
    max_fifo: int = 0


def _bit(r: int) -> int:
    return 1 << r


def logical_sizes(a: XAlgo, g: XGpu) -> dict[str, int]:
    """Chunks in each buffer as the caller allocates them (docs/msccl-xml.md 1.3); unknown
    collectives use the declared counts (at least nchunksperloop)."""
    coll, n, N = a.collective, a.ngpus, a.nchunksperloop
    m = N // n if n else 0
    if coll in ("allreduce", "alltoall"):
        return {"i": N, "o": N, "s": g.s_chunks}
    if coll == "allgather":
        return {"i": m, "o": N, "s": g.s_chunks}
    if coll == "reducescatter":
        return {"i": N, "o": m, "s": g.s_chunks}
    return {"i": max(N, g.i_chunks), "o": max(N, g.o_chunks), "s": g.s_chunks}


def layout_for(program: Program, mode: str) -> tuple[list[dict[str, tuple[str, int]]], list[dict[str, int]]]:
    """Per gpu: logical buffer -> (physical buffer, offset), and physical buffer sizes."""
    a = program.algo
    coll, n, N = a.collective, a.ngpus, a.nchunksperloop
    m = N // n if n else 0
    lay, sizes = [], []
    for g in sorted(a.gpus, key=lambda x: x.id):
        sz0 = logical_sizes(a, g)
        ic, oc = sz0["i"], sz0["o"]
        d = {"i": ("i", 0), "o": ("o", 0), "s": ("s", 0)}
        sz = {"i": ic, "o": oc, "s": g.s_chunks}
        if mode == "inplace":
            if coll == "allgather":
                d["i"] = ("o", g.id * m)
                del sz["i"]
            elif coll == "reducescatter":
                d["o"] = ("i", g.id * m)
                del sz["o"]
            else:
                d["o"] = ("i", 0)
                sz["i"] = max(ic, oc)
                del sz["o"]
        lay.append(d)
        sizes.append(sz)
    return lay, sizes


def initial_memory(program: Program, mode: str, sizes: list[dict[str, int]]) -> list[dict[str, list[Value]]]:
    """Each rank's input chunks hold its own contribution, labelled with their global chunk index."""
    a = program.algo
    coll, n, N = a.collective, a.ngpus, a.nchunksperloop
    m = N // n if n else 0
    mem = []
    for g in range(n):
        bufs = {b: [_UNDEF] * k for b, k in sizes[g].items()}
        bit = _bit(g)
        if coll == "allgather":
            target = bufs["o"] if mode == "inplace" else bufs["i"]
            base = g * m if mode == "inplace" else 0
            for k in range(m):
                target[base + k] = (bit, g * m + k, None)
        else:
            for k in range(len(bufs["i"])):
                bufs["i"][k] = (bit, k, None)
        mem.append(bufs)
    return mem


class _Hb:
    """Happens-before graph recorded during execution, for exact race confirmation."""

    def __init__(self, ntb: int) -> None:
        self.preds: list[list[list[tuple[int, int]]]] = [[] for _ in range(ntb)]

    def add_tx(self, t: int) -> None:
        self.preds[t].append([])

    def edge(self, frm: tuple[int, int], to: tuple[int, int]) -> None:
        self.preds[to[0]][to[1]].append(frm)

    def ordered(self, frm: tuple[int, int], to: tuple[int, int]) -> bool:
        """Is tx ``frm`` an ancestor of tx ``to`` (program order, FIFO or dependency edges)?"""
        best: dict[int, int] = {}  # tb -> highest tx index known to be an ancestor of ``to``
        done: dict[int, int] = {}  # tb -> highest tx index whose predecessors were expanded
        work: deque[int] = deque()

        def push(t: int, i: int) -> None:
            if i > best.get(t, -1):
                best[t] = i
                work.append(t)

        push(to[0], to[1] - 1)
        for p in self.preds[to[0]][to[1]]:
            push(*p)
        while work:
            t = work.popleft()
            hi, lo = best[t], done.get(t, -1)
            if t == frm[0] and hi >= frm[1]:
                return True
            if hi <= lo:
                continue
            done[t] = hi
            pr = self.preds[t]
            for i in range(lo + 1, hi + 1):
                for p in pr[i]:
                    push(*p)
        return best.get(frm[0], -1) >= frm[1]


class Executor:
    """Runs one call mode of a program; raises ExecFailure on the first problem."""

    def __init__(self, program: Program, mode: str, races: bool = True) -> None:
        self.p = program
        self.mode = mode
        self.races = races
        self.layout, self.sizes = layout_for(program, mode)
        self.mem = initial_memory(program, mode, self.sizes)
        self.tbs: list[PTb] = program.all_tbs()
        self.gidx: dict[tuple[int, int], int] = {(tb.gpu, tb.id): i for i, tb in enumerate(self.tbs)}
        ntb_of = [len(g) for g in program.tbs]
        self.vc = [[0] * ntb_of[tb.gpu] for tb in self.tbs]
        self.pubs: list[list[tuple[int, int, list[int]]]] = [[] for _ in self.tbs]  # (counter, tx idx, vc)
        self.pub_counters: list[list[int]] = [[] for _ in self.tbs]
        self.published = [-1] * len(self.tbs)
        self.pc = [0] * len(self.tbs)
        self.fifos: dict[tuple[int, int, int], deque] = {}
        self.fifo_wait: dict[tuple[int, int, int], int] = {}
        self.flag_wait: dict[int, list[int]] = {}
        self.hb = _Hb(len(self.tbs))
        self.access: dict[tuple[int, str, int], list[Any]] = {}
        self.order: list[tuple[int, int]] = []
        self.recv_from: dict[tuple[int, int], tuple[int, int]] = {}
        self.dep_on: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self.labels_sent: dict[tuple[int, int], int | None] = {}
        self.scratch_writer: dict[tuple[int, int], tuple[int, int]] = {}
        self.reduced_into: set[tuple[int, int]] = set()
        self.max_fifo = 0

    # ------------------------------------------------------------------ data
    def _loc(self, g: int, buf: str, off: int) -> tuple[str, int]:
        pb, base = self.layout[g][buf]
        return pb, base + off

    def _fail(self, kind: str, tb: PTb, tx: Tx, what: str) -> ExecFailure:
        return ExecFailure(kind, f"{where(tb.gpu, tb.id, tx.s, tx.line)}: {what}", tb.gpu, tb.id, tx.s)

    def _touch(self, t: int, j: int, tb: PTb, tx: Tx, pb: str, off: int, cnt: int, write: bool) -> None:
        """Record an access to chunks [off, off+cnt) of physical buffer pb; check for races."""
        g, me = tb.gpu, tb.id
        vc = self.vc[t]
        acc = self.access
        for k in range(off, off + cnt):
            key = (g, pb, k)
            rec = acc.get(key)
            if rec is None:
                rec = [-1, -1, {}]
                acc[key] = rec
            wt, wi, readers = rec
            if wt >= 0 and wt != me and vc[wt] <= wi:
                self._confirm(t, j, tb, tx, wt, wi, pb, k, "written", write)
            if write:
                for rt, ri in readers.items():
                    if rt != me and vc[rt] <= ri:
                        self._confirm(t, j, tb, tx, rt, ri, pb, k, "read", write)
                rec[0], rec[1], rec[2] = me, j, {}
            else:
                if readers.get(me, -1) < j:
                    readers[me] = j

    def _confirm(self, t: int, j: int, tb: PTb, tx: Tx, other: int, oi: int, pb: str, k: int, how: str,
                 write: bool) -> None:
        ot = self.gidx[(tb.gpu, other)]
        if self.hb.ordered((ot, oi), (t, j)):
            return
        otx = self.tbs[ot].txs[oi]
        mine = "writes" if write else "reads"
        raise self._fail("race", tb, tx, f"{mine} chunk {k} of buffer '{pb}' while tb {other} step {otx.s} "
                                         f"({otx.type}) {how} it, with no dependency, FIFO or program order "
                                         f"between them (a race)")

    def _read(self, t: int, j: int, tb: PTb, tx: Tx, buf: str, off: int, cnt: int) -> list[Value]:
        pb, o = self._loc(tb.gpu, buf, off)
        if self.races:
            self._touch(t, j, tb, tx, pb, o, cnt, False)
        return self.mem[tb.gpu][pb][o:o + cnt]

    def _write(self, t: int, j: int, tb: PTb, tx: Tx, buf: str, off: int, vals: list[Value]) -> None:
        pb, o = self._loc(tb.gpu, buf, off)
        if self.mode == "outofplace" and pb == "i":
            raise self._fail("inplace", tb, tx, "writes the input buffer (i) in an out-of-place call: the "
                                                "caller's send buffer is read-only; write o or s")
        if self.races:
            self._touch(t, j, tb, tx, pb, o, len(vals), True)
        self.mem[tb.gpu][pb][o:o + len(vals)] = vals

    def _reduce(self, a: Value, b: Value, where_: str) -> Value:
        if a[2] is not None:
            return a
        if b[2] is not None:
            return (a[0], a[1], b[2])
        if a[0] is None or b[0] is None:
            if a[0] is None and b[0] is None:
                return _UNDEF
            return (0, a[1] if a[1] is not None else b[1], f"{where_} reduces undefined (never written) data")
        if a[1] != b[1]:
            return (a[0] | b[0], a[1], f"{where_} reduces chunk {b[1]} into chunk {a[1]} (different chunks)")
        if a[0] & b[0]:
            dup = a[0] & b[0]
            ranks = [r for r in range(dup.bit_length()) if dup >> r & 1]
            return (a[0] | b[0], a[1], f"{where_} adds the contribution of rank(s) "
                                       f"{', '.join(map(str, ranks[:6]))} a second time (double counting)")
        return (a[0] | b[0], a[1], None)

    # ------------------------------------------------------------------ scheduling
    def _deps_met(self, t: int, tb: PTb, tx: Tx) -> bool:
        for bid, val in tx.deps:
            u = self.gidx.get((tb.gpu, bid))
            if u is None or self.published[u] < val:
                if u is not None:
                    self.flag_wait.setdefault(u, []).append(t)
                return False
        return True

    def _step(self, t: int) -> bool:
        """Run tb t until it blocks or ends; True if it made progress."""
        tb = self.tbs[t]
        txs = tb.txs
        progressed = False
        while self.pc[t] < len(txs):
            j = self.pc[t]
            tx = txs[j]
            if tx.deps and not self._deps_met(t, tb, tx):
                return progressed
            kind = tx.kind
            fkey = (tb.recv, tb.gpu, tb.chan)
            if kind.recv:
                q = self.fifos.get(fkey)
                if not q:
                    self.fifo_wait[fkey] = t
                    return progressed
            self._run(t, j, tb, tx, fkey)
            progressed = True
        return progressed

    def _join_deps(self, t: int, j: int, tb: PTb, tx: Tx) -> None:
        vc = self.vc[t]
        pubs = []
        for bid, val in tx.deps:
            u = self.gidx[(tb.gpu, bid)]
            h = bisect.bisect_left(self.pub_counters[u], val)
            if h == len(self.pubs[u]):  # deps < 0 with nothing published yet: met at once, orders nothing
                continue
            _, pidx, pvc = self.pubs[u][h]
            pubs.append((u, pidx))
            if not self.races:
                continue
            self.hb.edge((u, pidx), (t, j))
            for i, v in enumerate(pvc):
                if v > vc[i]:
                    vc[i] = v
            if pidx + 1 > vc[bid]:
                vc[bid] = pidx + 1
        self.dep_on[(t, j)] = pubs

    def _run(self, t: int, j: int, tb: PTb, tx: Tx, fkey: tuple[int, int, int]) -> None:
        if self.races:
            self.hb.add_tx(t)
            if j > 0:
                self.hb.edge((t, j - 1), (t, j))
        if tx.deps:
            self._join_deps(t, j, tb, tx)
        kind = tx.kind
        here = f"{where(tb.gpu, tb.id, tx.s)} ({tx.type})"
        inc: list[Value] = []  # what this step receives (the types that receive all have kind.recv)
        if kind.recv:
            cnt, vals, sender = self.fifos[fkey].popleft()
            st = self.tbs[sender[0]]
            stx = st.txs[sender[1]]
            if cnt != tx.cnt:
                raise self._fail("fifo", tb, tx, f"receives cnt={tx.cnt} from gpu {tb.recv} on channel {tb.chan}, "
                                                 f"but the matching send is gpu {st.gpu} tb {st.id} step {stx.s} with "
                                                 f"cnt={cnt} (sends and receives of one connection must pair one "
                                                 f"for one, in order, with equal cnt)")
            if self.races:
                self.hb.edge(sender, (t, j))
            self.recv_from[(t, j)] = sender
            inc = vals
        typ = tx.type
        out: list[Value] | None = None
        if typ == "s":
            out = self._read(t, j, tb, tx, tx.srcbuf, tx.srcoff, tx.cnt)
        elif typ == "r":
            self._write(t, j, tb, tx, tx.dstbuf, tx.dstoff, inc)
            if self._loc(tb.gpu, tx.dstbuf, tx.dstoff)[0] == "s":
                self._mark_scratch(tb, tx, (t, j))
        elif typ == "rcs":
            self._write(t, j, tb, tx, tx.dstbuf, tx.dstoff, inc)
            out = inc
        elif typ in ("rrs", "rrc", "rrcs"):
            self.reduced_into.add((t, j))
            loc = self._read(t, j, tb, tx, tx.srcbuf, tx.srcoff, tx.cnt)
            res = [self._reduce(a, b, here) for a, b in zip(loc, inc)]
            if typ != "rrs":
                self._write(t, j, tb, tx, tx.dstbuf, tx.dstoff, res)
            if typ != "rrc":
                out = res
        elif typ == "cpy":
            vals = self._read(t, j, tb, tx, tx.srcbuf, tx.srcoff, tx.cnt)
            self._write(t, j, tb, tx, tx.dstbuf, tx.dstoff, list(vals))
        elif typ == "re":
            acc = list(self._read(t, j, tb, tx, tx.dstbuf, tx.dstoff, tx.cnt))
            for off in [tx.srcoff, *tx.extra_srcs]:
                src = self._read(t, j, tb, tx, tx.srcbuf, off, tx.cnt)
                self._note_scratch_reduce(tb, tx.srcbuf, off, tx.cnt)
                acc = [self._reduce(a, b, here) for a, b in zip(acc, src)]
            self._write(t, j, tb, tx, tx.dstbuf, tx.dstoff, acc)
        self.order.append((t, j))
        self.pc[t] = j + 1
        if out is not None:
            key = (tb.gpu, tb.send, tb.chan)
            q = self.fifos.get(key)
            if q is None:
                q = self.fifos[key] = deque()
            q.append((tx.cnt, out, (t, j)))
            if len(q) > self.max_fifo:
                self.max_fifo = len(q)
            self.labels_sent[(t, j)] = out[0][1] if out else None
            w = self.fifo_wait.pop(key, None)
            if w is not None:
                self.ready.append(w)
        if tx.hasdep:
            vc = list(self.vc[t]) if self.races else []
            if self.races:
                vc[tb.id] = j + 1
            self.pubs[t].append((tx.counter, j, vc))
            self.pub_counters[t].append(tx.counter)
            if tx.counter > self.published[t]:
                self.published[t] = tx.counter
            waiters = self.flag_wait.pop(t, None)
            if waiters:
                self.ready.extend(waiters)
        self.vc[t][tb.id] = j + 1

    def _mark_scratch(self, tb: PTb, tx: Tx, ref: tuple[int, int]) -> None:
        pb, o = self._loc(tb.gpu, tx.dstbuf, tx.dstoff)
        for k in range(o, o + tx.cnt):
            self.scratch_writer[(tb.gpu, k)] = ref

    def _note_scratch_reduce(self, tb: PTb, buf: str, off: int, cnt: int) -> None:
        pb, o = self._loc(tb.gpu, buf, off)
        if pb != "s":
            return
        for k in range(o, o + cnt):
            ref = self.scratch_writer.get((tb.gpu, k))
            if ref is not None:
                self.reduced_into.add(ref)

    # ------------------------------------------------------------------ driver
    def run(self) -> ExecResult:
        self.ready: deque[int] = deque(range(len(self.tbs)))
        while self.ready:
            t = self.ready.popleft()
            self._step(t)
        stuck = [t for t in range(len(self.tbs)) if self.pc[t] < len(self.tbs[t].txs)]
        if stuck:
            raise self._deadlock(stuck)
        for (_src, dst, chan), q in self.fifos.items():
            if q:
                _, _, sender = q[0]
                st = self.tbs[sender[0]]
                stx = st.txs[sender[1]]
                raise ExecFailure("fifo", f"{where(st.gpu, st.id, stx.s, stx.line)}: sends to gpu {dst} on channel "
                                          f"{chan}, but gpu {dst} never receives it ({len(q)} send(s) unmatched)",
                                  st.gpu, st.id, stx.s)
        return ExecResult(self.mode, self.mem, self.layout, self.order, self.recv_from, self.dep_on,
                          self.labels_sent, self.reduced_into, self.max_fifo)

    def _deadlock(self, stuck: list[int]) -> ExecFailure:
        parts = []
        first = None
        for t in stuck[:4]:
            tb = self.tbs[t]
            tx = tb.txs[self.pc[t]]
            why = ""
            for bid, val in tx.deps:
                u = self.gidx.get((tb.gpu, bid))
                if u is None:
                    why = f"depends on tb {bid}, which does not exist"
                    break
                if self.published[u] < val:
                    why = f"waits for tb {bid} to publish step {val} (published: {self.published[u]})"
                    break
            if not why and tx.kind.recv:
                sender = [s for s in self.tbs if s.gpu == tb.recv and s.send == tb.gpu and s.chan == tb.chan]
                if not sender:
                    why = f"receives from gpu {tb.recv} on channel {tb.chan}, which has no thread block sending to it"
                elif all(self.pc[self.gidx[(s.gpu, s.id)]] >= len(s.txs) for s in sender):
                    why = (f"receives from gpu {tb.recv} on channel {tb.chan} more often than gpu {tb.recv} sends "
                           f"(FIFO mismatch)")
                else:
                    why = f"waits to receive from gpu {tb.recv} on channel {tb.chan}"
            parts.append(f"{where(tb.gpu, tb.id, tx.s)} ({tx.type}) {why}")
            if first is None:
                first = (tb, tx)
        more = f" (+{len(stuck) - 4} more blocked thread blocks)" if len(stuck) > 4 else ""
        kind = "fifo" if "FIFO mismatch" in parts[0] or "has no thread block" in parts[0] else "deadlock"
        assert first is not None
        return ExecFailure(kind, f"deadlock: {len(stuck)} thread block(s) never finish: " + "; ".join(parts) + more,
                           first[0].gpu, first[0].id, first[1].s)


def execute(program: Program, mode: str, races: bool = True) -> ExecResult:
    """Run ``program`` symbolically in call mode 'inplace' or 'outofplace' (``races``: also check for
    races; in place is the stricter mode, since aliasing only adds conflicting accesses)."""
    return Executor(program, mode, races).run()
