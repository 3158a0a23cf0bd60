"""Memory accesses of the MSCCL++ executor (execute.py): where a reference lies (the buffer layout with
in-place aliasing, thread-block-group slices, pipeline iterations, the launch's half of a double scratch
buffer), bounds, reads and writes of symbolic values (exec_values.py), and the race detector: every access
to a byte is compared by vector clock with the last write and the reads since."""

from __future__ import annotations

from typing import Any

import numpy as np

from collsynth.backends.mscclpp.exec_state import Actor, ExecBase, ExecFailure
from collsynth.backends.mscclpp.load import Inst, switch_of
from collsynth.backends.mscclpp.memory import Segments
from collsynth.backends.mscclpp.model import Gpu, Op, Ref, ThreadBlock

PLAIN_UNIT = 16  # bytes a thread moves at a time in copies and reductions (int4)
PACKET_UNIT = 8  # payload bytes per LL16 packet (the executor's default packet type)


class MemoryAccess(ExecBase):
    """Buffers of every rank (values and access history) and the races found in them."""

    in_bytes: int
    out_bytes: int
    scratch_bytes: list[int]
    mem: list[dict[str, Segments]]
    hist: list[dict[str, Segments]]
    phys_size: list[dict[str, int]]
    layout: list[dict[str, tuple[str, int]]]
    pkt_waiters: dict[tuple[int, str], list[Actor]]
    races: list[ExecFailure]
    race_keys: set[tuple[Any, ...]]

    # ------------------------------------------------------------------ layout
    def buffer_layout(self, g: Gpu) -> tuple[dict[str, tuple[str, int]], dict[str, int]]:
        """Where ``g``'s logical buffers (i, o, s) lie in its physical ones, and their sizes (in-place aliasing)."""
        coll, r = self.plan.collective, g.id
        lay = {"i": ("I", 0), "o": ("O", 0), "s": ("S", 0)}
        sizes = {"I": self.in_bytes, "O": self.out_bytes, "S": self.scratch_bytes[r]}
        if self.plan.inplace:
            if coll == "allgather":
                lay["i"] = ("O", r * self.in_bytes)
                del sizes["I"]
            elif coll == "reducescatter":
                lay["o"] = ("I", r * self.out_bytes)
                del sizes["O"]
            else:
                lay["o"] = ("I", 0)
                sizes["I"] = max(self.in_bytes, self.out_bytes)
                del sizes["O"]
        return lay, sizes

    def scratch_offset(self, launch: int) -> int:
        """The half of a double scratch buffer a launch uses (the flag counts launches from 1)."""
        if self.plan.double_scratch and launch % 2 == 0:
            return self.scratch_bytes[0] // 2
        return 0

    # ------------------------------------------------------------------ data
    def where(self, a: Actor, op: Op) -> str:
        """The op's place for messages: gpu, thread block, op, and the launch after the first."""
        launch = f" (launch {a.launch})" if a.launch > 1 else ""
        return f"gpu {a.rank} thread block {a.tb.id} {op.where}{launch}"  # type: ignore[union-attr]

    def ref_span(self, g: Gpu, ref: Ref, op: Op) -> tuple[int, int]:
        """(byte offset, byte size) of a reference before pipeline offsets (tbg slices applied)."""
        c = self.chunk
        off, size = ref.index * c, ref.size * c
        if op.tbg is not None:
            tid, ts = op.tbg
            A = self.plan.alignment
            nel = size // A
            lo = tid * (nel // ts) + min(tid, nel % ts)
            hi = (tid + 1) * (nel // ts) + min(tid + 1, nel % ts)
            off, size = off + lo * A, (hi - lo) * A
        return off, size

    def target(self, g: Gpu, tb: ThreadBlock, op: Op, ref: Ref) -> tuple[int, str]:
        """(rank, logical buffer) a reference names."""
        if ref.kind == "local":
            return g.id, ref.buf
        if ref.kind == "remote":
            rb = g.remote_buffers[tb.remote[op.channel_type][ref.id]]
            return rb.rank, rb.buf
        return g.id, switch_of(g, tb, ref.id).buf

    def phys(self, rank: int, buf: str, off: int, local_scratch: bool, launch: int) -> tuple[str, int]:
        """(physical buffer, byte address) of ``off`` in a logical buffer; local scratch adds the launch's half."""
        phys, base = self.layout[rank][buf]
        so = self.scratch_offset(launch) if buf == "s" and local_scratch else 0
        return phys, base + so + off

    def iteration_size(self, size: int, inst: Inst) -> int:
        """Bytes one pipeline iteration moves of a ``size``-byte reference (uint32 arithmetic, as on the device)."""
        if inst.unit is None:
            return size
        rest = (size - inst.offset) % (1 << 32)  # uint32 arithmetic: a negative rest wraps
        return min(rest, inst.unit)

    def _check_bounds(self, a: Actor, op: Op, rank: int, phys: str, lo: int, hi: int) -> None:
        if lo < 0 or hi > self.phys_size[rank][phys]:
            name = {"I": "input", "O": "output", "S": "scratch"}[phys]
            raise ExecFailure("bounds", f"{self.where(a, op)} accesses bytes {lo}..{hi - 1} of gpu {rank}'s {name} "
                                        f"buffer, which has {self.phys_size[rank][phys]} bytes (at {self.chunk}-byte "
                                        f"chunks)", a.rank, a.tb.id if a.tb else None, op.where)

    def touch(self, rank: int, phys: str, lo: int, hi: int, write: bool, actor: Any, kv: np.ndarray, unit: int,
               base: int, tick: int, label: str) -> None:
        """Record an access and report a race with an earlier unordered one."""
        if hi <= lo:
            return
        hist = self.hist[rank][phys]
        rec = (actor.id, tick, unit, base, label)
        out: list[tuple[int, int, Any]] = []
        for x0, x1, h in hist.get(lo, hi):
            w, reads = h if h is not None else (None, ())
            if w is not None and not self._ordered(w, actor, kv, unit, base):
                self._race(rank, phys, x0, x1, w, rec, write, "wrote")
            if write:
                for rd in reads:
                    if not self._ordered(rd, actor, kv, unit, base):
                        self._race(rank, phys, x0, x1, rd, rec, True, "read")
                out.append((x0, x1, (rec, ())))
            else:
                na = self.na
                keep = tuple(rd for rd in reads if (kv[rd[0]] < rd[1] if rd[0] < na else
                                                    rd[0] != actor.id and not self.knows(kv, rd[0], rd[1])))
                out.append((x0, x1, (w, keep + (rec,))))
        hist.set(lo, hi, out)

    def _ordered(self, rec: tuple, actor: Any, kv: np.ndarray, unit: int, base: int) -> bool:
        aid, tick = rec[0], rec[1]
        if aid < self.na:
            if kv[aid] >= tick:
                return True
        elif aid == actor.id or self.knows(kv, aid, tick):  # a proxy serves its requests in order
            return True
        # otherwise only the same thread touching these bytes in both ops orders them
        return bool(aid == actor.id and unit and rec[2] == unit and (rec[3] - base) % (unit * self.plan.threads) == 0)

    def _race(self, rank: int, phys: str, x0: int, x1: int, old: tuple, new: tuple, write: bool, did: str) -> None:
        name = {"I": "input", "O": "output", "S": "scratch"}[phys]
        verb = "writes" if write else "reads"
        c = self.chunk
        chunks = f"chunk {x0 // c}" if (x1 - 1) // c == x0 // c else f"chunks {x0 // c}..{(x1 - 1) // c}"
        whose = f"gpu {rank}'s {name}"
        na, oa = self.names[new[0]], self.names[old[0]]
        same = " (no nop between them)" if new[0] == old[0] else f", without synchronizing with {oa}"
        aid = new[0]
        actor = next((x for x in self.actors if x.id == aid), None)
        launch = actor.launch if actor is not None else 1
        when = f" in launch {launch}" if launch > 1 else ""
        key = (new[0], old[0], new[4], old[4], rank, phys)
        if key in self.race_keys or len(self.races) >= 64:
            return
        self.race_keys.add(key)
        self.races.append(ExecFailure(
            "race", f"race{when}: {na} {new[4]} {verb} bytes {x0}..{x1 - 1} ({chunks}) of {whose} that {oa} "
                    f"{old[4]} {did}{same}", actor.rank if actor else None,
            actor.tb.id if actor and actor.tb else None, new[4]))

    # values ------------------------------------------------------------
    def read(self, a: Actor, op: Op, rank: int, phys: str, lo: int, size: int, who: Any, kv: np.ndarray,
              unit: int, tick: int, label: str, packet: bool = False) -> list[tuple[int, int, Any]] | None:
        """Pieces (relative payload offsets) of ``size`` payload bytes at ``lo``; packets: None until every
        packet carries this launch's flag."""
        span = 2 * size if packet else size
        self._check_bounds(a, op, rank, phys, lo, lo + span)
        pieces = self.mem[rank][phys].get(lo, lo + span)
        if packet:
            for _, _, v in pieces:
                if v is None or v[4] != 2 or v[5] != a.launch:
                    return None
            for _, _, v in pieces:
                if v[6] is not None:  # a new clock: clocks are shared, never written in place
                    kv = np.maximum(kv, v[6])
                    if who is a:
                        a.vc = kv
        self.touch(rank, phys, lo, lo + span, False, who, kv, unit, lo, tick, label)
        out: list[tuple[int, int, Any]] = []
        for x0, x1, v in pieces:
            r0, r1 = (x0 - lo) // 2 if packet else x0 - lo, (x1 - lo) // 2 if packet else x1 - lo
            if v is None:
                out.append((r0, r1, None))
            elif v[4] == 2 and not packet:
                out.append((r0, r1, (v[0], v[1], v[2], f"{self.where(a, op)} reads LL packets (flags interleaved) "
                                                      f"as plain data", v[7])))
            elif v[4] == 1 and packet:  # pragma: no cover - excluded above
                out.append((r0, r1, None))
            else:
                out.append((r0, r1, (v[0], v[1], v[2], v[3], v[7])))
        return out

    def write(self, a: Actor, op: Op, rank: int, phys: str, lo: int, stream: list[tuple[int, int, Any]],
               who: Any, kv: np.ndarray, unit: int, tick: int, label: str, packet: bool = False,
               rel: np.ndarray | None = None, tag: int = -1) -> None:
        """Write a stream at ``lo`` after the race check (LL packets: twice the bytes, flagged with the launch)."""
        size = stream[-1][1] if stream else 0
        span = 2 * size if packet else size
        self._check_bounds(a, op, rank, phys, lo, lo + span)
        self.touch(rank, phys, lo, lo + span, True, who, kv, unit, lo, tick, label)
        f = 2 if packet else 1
        flag = a.launch if packet else 0
        pieces: list[tuple[int, int, Any]] = []
        for r0, r1, v in stream:
            if v is None:
                pieces.append((lo + f * r0, lo + f * r1, None))
            else:
                t = tag if tag >= 0 else -1
                pieces.append((lo + f * r0, lo + f * r1, (v[0], v[1], v[2], v[3], f, flag, rel, t)))
        self.mem[rank][phys].set(lo, lo + span, pieces)
        if packet and (rank, phys) in self.pkt_waiters:
            self.wake(self.pkt_waiters.pop((rank, phys)))

    def last_writer(self, rank: int, phys: str, lo: int, hi: int) -> tuple | None:
        """The access record of the op that last wrote bytes [lo, hi) (None if nothing did)."""
        for _, _, h in self.hist[rank][phys].get(lo, hi):
            if h is not None and h[0] is not None:
                return h[0]
        return None
