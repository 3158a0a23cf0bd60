"""Symbolic execution of an MSCCL++ execution plan the way the executor runs it.

Every rank launches the plan ``launches`` times (2, or 3 with a double scratch buffer, so that the
state one launch leaves behind meets the next ones). Each launch of a rank starts when its previous
launch has finished: the caller then writes fresh input, and reads the output when the launch ends.

Data are symbolic and exact to the byte: a byte holds (ranks whose contribution it sums, the element
it is, the launch it belongs to), so a lost or double-counted contribution, a misplaced element, or a
value left over from another launch is found wherever it happens (buffers are interval maps,
memory.py). Packets (LL) carry the launch's flag; a reader spins until every packet it reads carries
the current flag.

Synchronization is tracked with vector clocks, one component per actor: thread blocks, one proxy per
port channel (it copies data asynchronously, in FIFO order with that channel's signals), and the
caller of each rank. The rules (docs/mscclpp-plan.md, "How collsynth checks a plan"):

- inside a thread block nothing orders two ops but a ``nop`` (or a barrier), except that a thread
  touches the same bytes in two ops that address them from the same offset with the same unit;
- ``signal``/``wait`` (and their relaxed forms, as the DSL's own plans use them) are counting
  semaphores per channel direction: the k-th wait synchronizes with the signals it is guaranteed to
  count. A signal runs on one thread: it publishes what that thread has done and what a ``nop`` before
  it made everybody's; a wait informs only its thread until the next ``nop``;
- a port put is a request to the channel's proxy: the proxy reads the source when it serves the
  request, and a later signal on the same channel, served in order, publishes the data; the source
  is free again only after a flush (``pwsf``) or a reply;
- device semaphores (``sem_acquire``/``sem_release``) count like channels; a barrier joins its
  thread blocks; a packet read synchronizes with the packet's writer;
- every access to a byte is compared with the last write and the reads since: two accesses by
  different actors (or two unordered accesses by one thread block) without happens-before are a race.

Problems raise ``ExecFailure`` naming rank, thread block and op (the checker turns it into exit 1).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collsynth.backends.mscclpp.load import Chan, Inst, channel_pairs, flatten, io_chunks, switch_of
from collsynth.backends.mscclpp.memory import Segments
from collsynth.backends.mscclpp.model import SIGNAL_OPS, WAIT_OPS, Gpu, Op, Plan, Ref, ThreadBlock

PLAIN_UNIT = 16  # bytes a thread moves at a time in copies and reductions (int4)
PACKET_UNIT = 8  # payload bytes per LL16 packet (the executor's default packet type)

# a data value: (ranks mask, element of the first byte, launch, taint, scale, packet flag, release VC, movement)
Val = tuple[int, int, int, Any, int, int, Any, int]


class ExecFailure(Exception):
    """A problem found while executing: kind (race, deadlock, semaphore, result, bounds), message, where."""

    def __init__(self, kind: str, message: str, gpu: int | None = None, tb: int | None = None,
                 op: str | None = None, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.gpu, self.tb, self.op = kind, message, gpu, tb, op
        self.details = details or [message]


def _shift(v: Val, d: int) -> Val:
    return (v[0], v[1] + d // v[4], v[2], v[3], v[4], v[5], v[6], v[7])


@dataclass
class Movement:
    """Data that crossed ranks in launch 1 (the read-back turns these into Schedule transfers)."""

    src: int
    dst: int
    lo: int  # elements [lo, hi)
    hi: int
    start: tuple[int, int, int, int]  # (gpu, thread block, op position, dst index): the op that sent it
    iteration: int
    level: int
    meta_level: int
    reduce: bool | None = None  # None until the data land (copy or reduction)


@dataclass
class ExecResult:
    """What an execution leaves: the data movements of launch 1 and counts for the report."""

    chunk: int
    launches: int
    movements: list[Movement] = field(default_factory=list)
    ops_run: int = 0
    meta_ok: bool = True


class _Actor:
    __slots__ = ("id", "rank", "tb", "insts", "pc", "tick", "vc", "lanes", "lv", "lane_lv", "launch", "done",
                 "blocked", "ticket", "last_send", "mlv", "lane_mlv", "passed")

    def __init__(self, aid: int, rank: int, tb: ThreadBlock | None, na: int) -> None:
        self.id, self.rank, self.tb = aid, rank, tb
        self.insts: list[Inst] = []
        self.pc = 0
        self.tick = 0
        self.vc = np.full(na, -1, np.int32)
        self.lanes: dict[int, np.ndarray] = {}
        self.lv = -1  # the latest level of data it knows have landed (read-back)
        self.lane_lv: dict[int, int] = {}
        self.mlv = -1  # the same with the plan's own step annotations
        self.lane_mlv: dict[int, int] = {}
        self.launch = 0
        self.done = True
        self.blocked: Any = None
        self.ticket: dict[tuple[Any, int, int], int] = {}  # (counter key, pc, lane's repeat) -> ticket
        self.last_send = (-1, -1)  # (instruction index, level)
        self.passed = False  # released by a barrier it waits at


class _Counter:
    """A counting semaphore: a channel direction's inbound counter, or a device semaphore."""

    __slots__ = ("init", "signals", "per_actor", "waits", "issued", "issued_by", "total", "waiting", "desc")

    def __init__(self, init: int, desc: str) -> None:
        self.init = init
        self.signals: list[tuple[int, np.ndarray | None, int, int]] = []  # (actor, release vc, lv, mlv)
        self.per_actor: dict[int, list[int]] = {}  # actor -> indexes into signals, in order
        self.waits: list[tuple[int, int]] = []  # (actor, tick) of waits that passed
        self.issued = 0  # tickets handed out (waits take them in arrival order)
        self.issued_by: set[int] = set()  # thread blocks that took them
        self.total: dict[int, int] = {}  # actor -> signals over all launches (static count)
        self.waiting: list[_Actor] = []
        self.desc = desc


class _Proxy:
    __slots__ = ("id", "rank", "chan", "vc", "tick", "reqs", "lv", "mlv")

    def __init__(self, aid: int, rank: int, chan: int, na: int) -> None:
        self.id, self.rank, self.chan = aid, rank, chan
        self.vc = np.full(na, -1, np.int32)
        self.tick = 0
        self.reqs: list[tuple[int, int, int, np.ndarray, int, int]] = []  # (tb actor, lane, op tick, snapshot, lv, mlv)
        self.lv = -1
        self.mlv = -1


class Executor:
    def __init__(self, plan: Plan, chunk: int, launches: int, meta_steps: dict[tuple[int, int, int, int], int]
                 | None = None, pairs: dict[tuple[int, str, int], Chan] | None = None) -> None:
        self.plan, self.chunk, self.launches = plan, chunk, launches
        self.n = plan.nranks
        self.pairs: dict[tuple[int, str, int], Chan] = pairs if pairs is not None else channel_pairs(plan)
        self.meta_steps = meta_steps or {}
        tbs = [(g.id, tb) for g in plan.gpus for tb in g.tbs]
        ports = [(g.id, c) for g in plan.gpus for c in range(len(g.peers["port"]))]
        na = len(tbs) + len(ports) + self.n
        self.na = na
        self.actors = [_Actor(i, r, tb, na) for i, (r, tb) in enumerate(tbs)]
        self.by_rank: list[list[_Actor]] = [[] for _ in range(self.n)]
        for a in self.actors:
            self.by_rank[a.rank].append(a)
            a.insts = flatten(plan, a.tb, chunk)  # type: ignore[arg-type]
        self.proxies = {key: _Proxy(len(tbs) + i, key[0], key[1], na) for i, key in enumerate(ports)}
        self.users = [_Actor(len(tbs) + len(ports) + r, r, None, na) for r in range(self.n)]
        self.user_tick = [0] * self.n
        self.names: dict[int, str] = {a.id: f"gpu {a.rank} thread block {a.tb.id}" for a in self.actors}  # type: ignore[union-attr]
        for (r, c), p in self.proxies.items():
            self.names[p.id] = f"gpu {r}'s proxy for port channel {c}"
        for u in self.users:
            self.names[u.id] = f"the caller on gpu {u.rank}"
        fi, fo = io_chunks(plan.collective, self.n)
        g0 = plan.gpus[0]
        self.in_bytes = g0.input_chunks * chunk
        self.out_bytes = g0.output_chunks * chunk
        self.scratch_bytes = [g.scratch_chunks * chunk * (2 if plan.packets else 1) * (2 if plan.double_scratch else 1)
                              for g in plan.gpus]
        self.mem: list[dict[str, Segments]] = []
        self.hist: list[dict[str, Segments]] = []
        self.phys_size: list[dict[str, int]] = []
        self.layout: list[dict[str, tuple[str, int]]] = []
        for g in plan.gpus:
            lay, sizes = self._layout(g)
            self.layout.append(lay)
            self.phys_size.append(sizes)
            self.mem.append({k: Segments(_shift) for k in sizes})
            self.hist.append({k: Segments() for k in sizes})
        self.counters: dict[Any, _Counter] = {}
        self.barriers: dict[tuple[int, int], list[tuple[_Actor, int]]] = {}
        self.pkt_waiters: dict[tuple[int, str], list[_Actor]] = {}
        self.ready: deque[_Actor] = deque()
        self.launch_of = [0] * self.n
        self.running = [0] * self.n
        self.result = ExecResult(chunk, launches)
        self.trace = True
        self.everyone = (1 << self.n) - 1
        self.races: list[ExecFailure] = []
        self._race_keys: set[tuple[Any, ...]] = set()
        self._static_counts()

    # ------------------------------------------------------------------ layout
    def _layout(self, g: Gpu) -> tuple[dict[str, tuple[str, int]], dict[str, int]]:
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

    # ------------------------------------------------------------------ static counts
    def _counter(self, key: Any, init: int = 0, desc: str = "") -> _Counter:
        c = self.counters.get(key)
        if c is None:
            c = self.counters[key] = _Counter(init, desc)
        return c

    def _chan_counter(self, rank: int, ctype: str, c: int) -> tuple[Any, Chan]:
        """The inbound counter that a signal on rank's channel c increments (the peer's paired channel)."""
        ch = self.pairs[(rank, ctype, c)]
        if ch.peer_index < 0:
            return ("unpaired", rank, ctype, c), ch
        return ("chan", ch.peer, ctype, ch.peer_index), ch

    def _static_counts(self) -> None:
        """Signals and waits per counter and launch; unbalanced counters are reported before running."""
        sig: dict[Any, dict[int, int]] = {}
        wt: dict[Any, dict[int, list[Op]]] = {}
        for a in self.actors:
            g = self.plan.gpus[a.rank]
            tb = a.tb
            assert tb is not None
            for inst in a.insts:
                op = inst.op
                for key, kind in self._sync_keys(g, tb, op):
                    if kind == "signal":
                        d = sig.setdefault(key, {})
                        d[a.id] = d.get(a.id, 0) + 1
                    else:
                        wt.setdefault(key, {}).setdefault(a.id, []).append(op)
        for key in sorted(set(sig) | set(wt), key=repr):
            init = self.plan.gpus[key[1]].semaphores[key[2]] if key[0] == "sem" else 0
            c = self._counter(key, init, self._describe(key))
            c.total = {aid: k * self.launches for aid, k in sig.get(key, {}).items()}
            ns = sum(sig.get(key, {}).values())
            waiters = wt.get(key, {})
            nw = sum(len(v) for v in waiters.values())
            if ns != nw:
                self._unbalanced(key, ns, nw, sig.get(key, {}), waiters)

    def _sync_keys(self, g: Gpu, tb: ThreadBlock, op: Op) -> list[tuple[Any, str]]:
        name, ct = op.name, op.channel_type
        out: list[tuple[Any, str]] = []
        if name in SIGNAL_OPS or (name in ("pws", "pwsf") and ct == "port"):
            ids = op.channel_ids if name in SIGNAL_OPS else op.channel_ids[:len(op.dst)]
            for c in ids:
                out.append((self._chan_counter(g.id, ct, tb.channels[ct][c])[0], "signal"))
        elif name in WAIT_OPS:
            for c in op.channel_ids:
                out.append((("chan", g.id, ct, tb.channels[ct][c]), "wait"))
        elif name == "sem_release":
            out += [(("sem", g.id, s), "signal") for s in op.semaphore_ids]
        elif name == "sem_acquire":
            out += [(("sem", g.id, s), "wait") for s in op.semaphore_ids]
        return out

    def _describe(self, key: Any) -> str:
        if key[0] == "sem":
            return f"gpu {key[1]} device semaphore {key[2]}"
        if key[0] == "unpaired":
            _, r, t, c = key
            p = self.pairs[(r, t, c)].peer
            return (f"gpu {r}'s {t} channel {c} to gpu {p} (gpu {p} declares fewer {t} channels to gpu {r}, so "
                    f"nobody can wait on it)")
        _, r, t, c = key
        ch = self.pairs.get((r, t, c))
        peer = f" from gpu {ch.peer}" if ch else ""
        return f"gpu {key[1]}'s {t} channel {c}{peer}"

    def _unbalanced(self, key: Any, ns: int, nw: int, sig: dict[int, int], waiters: dict[int, list[Op]]) -> None:
        c = self.counters[key]
        a = self.actors[next(iter(waiters))] if waiters else self.actors[next(iter(sig))]
        who = ", ".join(f"{k} from {self.names[x]}" for x, k in sorted(sig.items())) or "none sent"
        if key[0] == "sem":
            what = f"{ns} sem_release and {nw} sem_acquire per launch"
        else:
            what = f"{ns} signal(s) ({who}) but {nw} wait(s) per launch"
        op = waiters[next(iter(waiters))][0].where if waiters else None
        waits = "; ".join(f"{self.names[x]} waits in {', '.join(o.where for o in ops[:3])}"
                          f"{' ...' if len(ops) > 3 else ''}" for x, ops in sorted(waiters.items()))
        raise ExecFailure("semaphore", f"unbalanced semaphores: {c.desc} gets {what}{f' ({waits})' if waits else ''}; "
                                       f"the counter carries over, so the next launch starts out of step", a.rank,
                          a.tb.id if a.tb else None, op)

    # ------------------------------------------------------------------ driver
    def run(self) -> ExecResult:
        """Run every launch; ExecFailure on the first problem (races first: they explain the rest)."""
        try:
            for r in range(self.n):
                self._start_launch(r)
            while self.ready:
                a = self.ready.popleft()
                if a.done or a.blocked is not None:
                    continue
                self._run_actor(a)
            for r in range(self.n):
                if self.launch_of[r] <= self.launches and self.running[r]:
                    self._deadlock()
        except ExecFailure:
            if not self.races:
                raise
        if self.races:
            first = self.races[0]
            more = len(self.races) - 1
            tail = f" ({more} more race(s))" if more else ""
            raise ExecFailure("race", first.message + tail, first.gpu, first.tb, first.op,
                              [r.message for r in self.races])
        return self.result

    def _start_launch(self, r: int) -> None:
        self.launch_of[r] += 1
        L = self.launch_of[r]
        if self.launches < L:
            return
        user = self.users[r]
        for a in self.by_rank[r]:
            np.maximum(user.vc, a.vc, out=user.vc)
        self.user_tick[r] += 1
        user.vc[user.id] = self.user_tick[r]
        self._user_input(r, L)
        self.running[r] = len(self.by_rank[r])
        if not self.running[r]:
            self._end_launch(r)
            return
        for a in self.by_rank[r]:
            np.maximum(a.vc, user.vc, out=a.vc)
            a.tick += 1
            a.vc[a.id] = a.tick
            a.lanes.clear()
            a.lane_lv.clear()
            a.lane_mlv.clear()
            a.lv, a.mlv = max(a.lv, user.lv), max(a.mlv, user.mlv)
            a.launch, a.pc, a.done, a.blocked = L, 0, False, None
            self.ready.append(a)

    def _user_input(self, r: int, L: int) -> None:
        """The caller writes fresh input: byte x of rank r's input is element x (allgather: r*B + x)."""
        phys, base = self.layout[r]["i"]
        elem0 = r * self.in_bytes if self.plan.collective == "allgather" else 0
        user = self.users[r]
        self._touch(r, phys, base, base + self.in_bytes, True, user, user.vc, 0, base, user.tick, "writes its input")
        self.mem[r][phys].set(base, base + self.in_bytes,
                              [(base, base + self.in_bytes, (1 << r, elem0, L, None, 1, 0, None, -1))])

    def _end_launch(self, r: int) -> None:
        L = self.launch_of[r]
        user = self.users[r]
        for a in self.by_rank[r]:
            np.maximum(user.vc, a.vc, out=user.vc)
            for v in a.lanes.values():
                np.maximum(user.vc, v, out=user.vc)
            user.vc[a.id] = a.tick  # the kernel has ended: every thread of every block is done
            user.lv, user.mlv = max(user.lv, a.lv, *a.lane_lv.values()), max(user.mlv, a.mlv, *a.lane_mlv.values())
        self.user_tick[r] += 1
        user.vc[user.id] = self.user_tick[r]
        self._check_output(r, L)
        self._start_launch(r)

    def _check_output(self, r: int, L: int) -> None:
        """The caller reads the output when the launch ends: it must hold the collective's result."""
        phys, base = self.layout[r]["o"]
        user = self.users[r]
        size = self.out_bytes
        self._touch(r, phys, base, base + size, False, user, user.vc, 0, base, user.tick, "reads its output")
        coll = self.plan.collective
        if coll not in ("allreduce", "allgather", "reducescatter"):
            return
        c = self.chunk
        for x0, x1, v in self.mem[r][phys].get(base, base + size):
            lo, hi = x0 - base, x1 - base
            at = (f"wrong result on gpu {r}{f' in launch {L}' if L > 1 else ''}: output bytes {lo}..{hi - 1} "
                  f"(chunk {lo // c}{'' if (hi - 1) // c == lo // c else f'..{(hi - 1) // c}'})")
            writer = self._last_writer(r, phys, x0, x1)
            if writer is not None and v is not None and v[3] is None:
                at += f" (last written by {self.names[writer[0]]} {writer[4]})"
            if v is None:
                raise ExecFailure("result", f"{at} are never written", r)
            if v[4] != 1:
                raise ExecFailure("result", f"{at} hold LL packets, not data", r)
            if v[3] is not None:
                raise ExecFailure("result", f"{at}: {v[3]}", r)
            if v[2] != L:
                raise ExecFailure("result", f"{at} hold data of launch {v[2]}", r)
            elem = r * size + lo if coll == "reducescatter" else lo
            if v[1] != elem:
                raise ExecFailure("result", f"{at} hold element {v[1]}.. instead of element {elem}..", r)
            if coll == "allgather":
                lo_rank, hi_rank = lo // self.in_bytes, (hi - 1) // self.in_bytes
                if lo_rank != hi_rank:
                    raise ExecFailure("result", f"{at} span the data of ranks {lo_rank} and {hi_rank}", r)
                want = 1 << lo_rank
            else:
                want = self.everyone
            if v[0] != want:
                missing = [x for x in range(self.n) if (want & ~v[0]) >> x & 1]
                extra = [x for x in range(self.n) if (v[0] & ~want) >> x & 1]
                what = (f"miss the contribution of rank(s) {', '.join(map(str, missing[:8]))}" if missing
                        else f"hold the contribution of rank(s) {', '.join(map(str, extra[:8]))}, which they "
                             f"should not")
                raise ExecFailure("result", f"{at} {what}", r)

    def _last_writer(self, rank: int, phys: str, lo: int, hi: int) -> tuple | None:
        """The access record of the op that last wrote bytes [lo, hi) (None if nothing did)."""
        for _, _, h in self.hist[rank][phys].get(lo, hi):
            if h is not None and h[0] is not None:
                return h[0]
        return None

    def _deadlock(self) -> None:
        stuck = [a for a in self.actors if not a.done]
        if not stuck:  # pragma: no cover - run() only calls this with a rank still running
            return
        a = min(stuck, key=lambda x: (x.launch, x.rank, x.tb.id if x.tb else 0))
        inst = a.insts[a.pc] if a.pc < len(a.insts) else None
        what = a.blocked[1] if a.blocked else "cannot proceed"
        launch = f" in launch {a.launch}" if a.launch > 1 else ""
        others = len({(x.rank, x.tb.id if x.tb else -1) for x in stuck}) - 1
        tail = f" ({others} other thread block(s) stuck as well)" if others else ""
        raise ExecFailure("deadlock", f"deadlock{launch}: gpu {a.rank} thread block {a.tb.id if a.tb else -1} "
                                      f"{inst.op.where if inst else ''} {what}{tail}", a.rank,
                          a.tb.id if a.tb else None, inst.op.where if inst else None)

    def _run_actor(self, a: _Actor) -> None:
        insts = a.insts
        while a.pc < len(insts):
            inst = insts[a.pc]
            if not self._step(a, inst):
                return
            a.pc += 1
            self.result.ops_run += 1
        a.done = True
        r = a.rank
        self.running[r] -= 1
        if self.running[r] == 0:
            self._end_launch(r)

    def _block(self, a: _Actor, why: Any) -> bool:
        a.blocked = why
        return False

    def _wake(self, waiters: list[_Actor]) -> None:
        for w in waiters:
            w.blocked = None
            self.ready.append(w)
        waiters.clear()

    # ------------------------------------------------------------------ one op
    def _step(self, a: _Actor, inst: Inst) -> bool:
        op = inst.op
        name = op.name
        g = self.plan.gpus[a.rank]
        tb = a.tb
        assert tb is not None
        if name == "nop":
            a.tick += 1
            self._sync_threads(a)
            return True
        if name == "barrier":
            return self._barrier(a, op)
        if name in SIGNAL_OPS:
            a.tick += 1
            for lane, c in enumerate(op.channel_ids):
                self._signal(a, g, tb, op, lane, c)
            return True
        if name in WAIT_OPS or name == "sem_acquire":
            return self._wait(a, g, tb, op)
        if name == "sem_release":
            a.tick += 1
            for lane, s in enumerate(op.semaphore_ids):
                vc, lv, mlv = self._lane_knowledge(a, lane)
                self._post(("sem", g.id, s), a, vc, lv, mlv)
            return True
        if name == "flush":
            a.tick += 1
            for lane in range(min(len(op.dst), len(op.channel_ids))):  # the executor's loop bound is nOutputs
                self._flush(a, lane, tb.channels["port"][op.channel_ids[lane]])
            return True
        return self._data(a, g, tb, inst)

    def _sync_threads(self, a: _Actor) -> None:
        for v in a.lanes.values():
            np.maximum(a.vc, v, out=a.vc)
        a.vc[a.id] = a.tick
        if a.lane_lv:
            a.lv = max(a.lv, *a.lane_lv.values())
        if a.lane_mlv:
            a.mlv = max(a.mlv, *a.lane_mlv.values())
        a.lanes.clear()
        a.lane_lv.clear()
        a.lane_mlv.clear()

    def _lane_knowledge(self, a: _Actor, lane: int) -> tuple[np.ndarray, int, int]:
        v = a.lanes.get(lane)
        vc = a.vc.copy() if v is None else np.maximum(a.vc, v)
        return vc, max(a.lv, a.lane_lv.get(lane, -1)), max(a.mlv, a.lane_mlv.get(lane, -1))

    def _acquire(self, a: _Actor, lane: int, vc: np.ndarray, lv: int, mlv: int) -> None:
        cur = a.lanes.get(lane)
        if cur is None:
            a.lanes[lane] = vc.copy()
        else:
            np.maximum(cur, vc, out=cur)
        a.lane_lv[lane] = max(a.lane_lv.get(lane, -1), lv)
        a.lane_mlv[lane] = max(a.lane_mlv.get(lane, -1), mlv)

    def _barrier(self, a: _Actor, op: Op) -> bool:
        key = (a.rank, op.barrier_id or 0)
        if a.passed:  # woken: the barrier opened
            a.passed = False
            return True
        a.tick += 1
        self._sync_threads(a)
        n = op.num_threadblocks or 1
        if n == 1:
            return True
        arrivals = self.barriers.setdefault(key, [])
        if arrivals and arrivals[0][1] != n:
            other = arrivals[0][0]
            raise ExecFailure("deadlock", f"barrier {key[1]} on gpu {a.rank}: thread block {a.tb.id} "  # type: ignore[union-attr]
                                          f"{op.where} expects {n} thread blocks but thread block "
                                          f"{other.tb.id} expects {arrivals[0][1]}: it hangs",  # type: ignore[union-attr]
                              a.rank, a.tb.id if a.tb else None, op.where)
        arrivals.append((a, n))
        if len(arrivals) < n:
            return self._block(a, ("barrier", f"waits at barrier {key[1]} for {n} thread blocks "
                                              f"({len(arrivals)} arrived)"))
        joined = arrivals[0][0].vc.copy()
        lv = max(x.lv for x, _ in arrivals)
        mlv = max(x.mlv for x, _ in arrivals)
        for x, _ in arrivals:
            np.maximum(joined, x.vc, out=joined)
        for x, _ in arrivals:
            x.vc[:] = np.maximum(x.vc, joined)
            x.lv, x.mlv = lv, mlv
            if x is not a:
                x.passed, x.blocked = True, None
                self.ready.append(x)
        self.barriers[key] = []
        return True

    # ------------------------------------------------------------------ semaphores
    def _signal(self, a: _Actor, g: Gpu, tb: ThreadBlock, op: Op, lane: int, c: int) -> None:
        ct = op.channel_type
        gc = tb.channels[ct][c]
        vc, lv, mlv = self._lane_knowledge(a, lane)
        if ct == "port":
            vc, lv, mlv = self._proxy_request(a, lane, gc, vc, lv, mlv)
        key, _ = self._chan_counter(g.id, ct, gc)
        self._post(key, a, vc, lv, mlv)

    def _post(self, key: Any, a: _Actor, vc: np.ndarray, lv: int, mlv: int) -> None:
        c = self.counters[key]
        c.per_actor.setdefault(a.id, []).append(len(c.signals))
        c.signals.append((a.id, vc, lv, mlv))
        if c.waiting:
            self._wake(c.waiting)

    def _wait(self, a: _Actor, g: Gpu, tb: ThreadBlock, op: Op) -> bool:
        keys: list[tuple[Any, ...]]
        if op.name == "sem_acquire":
            keys = [("sem", g.id, s) for s in op.semaphore_ids]
        else:
            keys = [("chan", g.id, op.channel_type, tb.channels[op.channel_type][c]) for c in op.channel_ids]
        if a.blocked is None:
            a.tick += 1
        # each lane takes its ticket once (an atomic increment, so two lanes on one channel or semaphore take
        # two tickets, as two waits would); a lane that cannot pass blocks the thread block
        lanes = [(key, a.pc, keys[:i].count(key)) for i, key in enumerate(keys)]
        for lk in lanes:
            c = self.counters[lk[0]]
            if lk not in a.ticket:
                c.issued += 1
                c.issued_by.add(a.id)
                a.ticket[lk] = c.issued
        for lk in lanes:
            key = lk[0]
            c = self.counters[key]
            tk = a.ticket[lk]
            if len(c.signals) + c.init < tk:
                c.waiting.append(a)
                what = (f"waits on {c.desc} for signal {tk - c.init}, which never comes ({len(c.signals)} arrived)"
                        if key[0] != "sem" else f"acquires {c.desc}, which is never released enough")
                return self._block(a, ("wait", what))
        for lane, lk in enumerate(lanes):
            c = self.counters[lk[0]]
            tk = a.ticket.pop(lk)
            vc, lv, mlv = self._guaranteed(c, a, tk)
            c.waits.append((a.id, a.tick))
            if vc is not None:
                self._acquire(a, lane, vc, lv, mlv)
        a.blocked = None
        return True

    def _guaranteed(self, c: _Counter, a: _Actor, ticket: int) -> tuple[np.ndarray | None, int, int]:
        """What a wait with this ticket is sure to see: with one signalling actor, its first (ticket - init)
        signals; with several, a signal counts only if it must be among the first ones whatever the
        interleaving (the others' whole output could come first)."""
        if all(x == a.id for x, _ in c.waits):  # one waiting thread block: its tickets are its own count
            before = len(c.waits)
        else:
            before = sum(1 for (x, t) in c.waits if x == a.id or a.vc[x] >= t)
        tmin = min(ticket, before + 1)
        need = tmin - c.init
        if need <= 0:
            return None, -1, -1
        vc: np.ndarray | None = None
        lv = mlv = -1
        if len(c.per_actor) == 1:  # one signalling thread block: the wait sees its first ``need`` signals
            idxs = next(iter(c.per_actor.values()))
            j = min(need, len(idxs))
            if j < 1:
                return None, -1, -1
            sig = c.signals[idxs[j - 1]]
            if len(c.issued_by) == 1 and j >= 2:  # one waiter: later waits need later signals only
                old = c.signals[idxs[j - 2]]
                c.signals[idxs[j - 2]] = (old[0], None, old[2], old[3])
            return sig[1], sig[2], sig[3]
        for actor, idxs in c.per_actor.items():
            others = sum(k for x, k in c.total.items() if x != actor)
            j = min(need - others, len(idxs))
            if j >= 1:
                _, v, l1, m1 = c.signals[idxs[j - 1]]
                if v is None:  # released by the one-waiter path: counting less is safe (it can only add races)
                    continue
                vc = v.copy() if vc is None else np.maximum(vc, v)
                lv, mlv = max(lv, l1), max(mlv, m1)
        return vc, lv, mlv

    # ------------------------------------------------------------------ proxies
    def _proxy_request(self, a: _Actor, lane: int, chan: int, vc: np.ndarray, lv: int, mlv: int
                       ) -> tuple[np.ndarray, int, int]:
        """Push a request: the proxy serves it after the ones before it; returns what a signal pushed now
        publishes (the pusher's knowledge and the requests ordered before it)."""
        p = self.proxies[(a.rank, chan)]
        np.maximum(p.vc, vc, out=p.vc)
        p.lv, p.mlv = max(p.lv, lv), max(p.mlv, mlv)
        p.tick += 1
        p.vc[p.id] = p.tick
        snap = self._ordered_prefix(a, lane, p)
        p.reqs.append((a.id, lane, a.tick, p.vc.copy(), p.lv, p.mlv))
        if snap is None:
            return vc, lv, mlv  # unchanged: callers never write into what this returns
        return np.maximum(vc, snap[3]), max(lv, snap[4]), max(mlv, snap[5])

    def _ordered_prefix(self, a: _Actor, lane: int, p: _Proxy) -> Any:
        """The last request of ``p`` that was pushed before (in happens-before) a push by ``a`` on ``lane``
        now: requests from other lanes count only with a nop since."""
        last = None
        for req in p.reqs:
            aid, ln, tick = req[0], req[1], req[2]
            if aid == a.id and (ln == lane or a.vc[a.id] >= tick) or aid != a.id and a.vc[aid] >= tick:
                last = req
            else:
                break
        return last

    def _flush(self, a: _Actor, lane: int, chan: int) -> None:
        p = self.proxies[(a.rank, chan)]
        snap = self._ordered_prefix(a, lane, p)
        if snap is not None:
            self._acquire(a, lane, snap[3], snap[4], snap[5])

    # ------------------------------------------------------------------ data
    def _where(self, a: _Actor, op: Op) -> str:
        launch = f" (launch {a.launch})" if a.launch > 1 else ""
        return f"gpu {a.rank} thread block {a.tb.id} {op.where}{launch}"  # type: ignore[union-attr]

    def _ref_span(self, g: Gpu, ref: Ref, op: Op) -> tuple[int, int]:
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

    def _target(self, g: Gpu, tb: ThreadBlock, op: Op, ref: Ref) -> tuple[int, str]:
        """(rank, logical buffer) a reference names."""
        if ref.kind == "local":
            return g.id, ref.buf
        if ref.kind == "remote":
            rb = g.remote_buffers[tb.remote[op.channel_type][ref.id]]
            return rb.rank, rb.buf
        return g.id, switch_of(g, tb, ref.id).buf

    def _phys(self, rank: int, buf: str, off: int, local_scratch: bool, launch: int) -> tuple[str, int]:
        phys, base = self.layout[rank][buf]
        so = self.scratch_offset(launch) if buf == "s" and local_scratch else 0
        return phys, base + so + off

    def _data(self, a: _Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
        op = inst.op
        h = _HANDLERS[op.name]
        return h(self, a, g, tb, inst)

    def _size(self, size: int, inst: Inst) -> int:
        if inst.unit is None:
            return size
        rest = (size - inst.offset) % (1 << 32)  # uint32 arithmetic: a negative rest wraps
        return min(rest, inst.unit)

    def _check_bounds(self, a: _Actor, op: Op, rank: int, phys: str, lo: int, hi: int) -> None:
        if lo < 0 or hi > self.phys_size[rank][phys]:
            name = {"I": "input", "O": "output", "S": "scratch"}[phys]
            raise ExecFailure("bounds", f"{self._where(a, op)} accesses bytes {lo}..{hi - 1} of gpu {rank}'s {name} "
                                        f"buffer, which has {self.phys_size[rank][phys]} bytes (at {self.chunk}-byte "
                                        f"chunks)", a.rank, a.tb.id if a.tb else None, op.where)

    def _touch(self, rank: int, phys: str, lo: int, hi: int, write: bool, actor: Any, kv: np.ndarray, unit: int,
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
                keep = tuple(rd for rd in reads if kv[rd[0]] < rd[1])
                out.append((x0, x1, (w, keep + (rec,))))
        hist.set(lo, hi, out)

    def _ordered(self, rec: tuple, actor: Any, kv: np.ndarray, unit: int, base: int) -> bool:
        aid, tick = rec[0], rec[1]
        if kv[aid] >= tick:
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
        if key in self._race_keys or len(self.races) >= 64:
            return
        self._race_keys.add(key)
        self.races.append(ExecFailure(
            "race", f"race{when}: {na} {new[4]} {verb} bytes {x0}..{x1 - 1} ({chunks}) of {whose} that {oa} "
                    f"{old[4]} {did}{same}", actor.rank if actor else None,
            actor.tb.id if actor and actor.tb else None, new[4]))

    # values ------------------------------------------------------------
    def _read(self, a: _Actor, op: Op, rank: int, phys: str, lo: int, size: int, who: Any, kv: np.ndarray,
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
                if v[6] is not None:
                    if who is a:
                        np.maximum(a.vc, v[6], out=a.vc)
                    else:
                        np.maximum(kv, v[6], out=kv)
        self._touch(rank, phys, lo, lo + span, False, who, kv, unit, lo, tick, label)
        out: list[tuple[int, int, Any]] = []
        for x0, x1, v in pieces:
            r0, r1 = (x0 - lo) // 2 if packet else x0 - lo, (x1 - lo) // 2 if packet else x1 - lo
            if v is None:
                out.append((r0, r1, None))
            elif v[4] == 2 and not packet:
                out.append((r0, r1, (v[0], v[1], v[2], f"{self._where(a, op)} reads LL packets (flags interleaved) "
                                                      f"as plain data", v[7])))
            elif v[4] == 1 and packet:  # pragma: no cover - excluded above
                out.append((r0, r1, None))
            else:
                out.append((r0, r1, (v[0], v[1], v[2], v[3], v[7])))
        return out

    def _write(self, a: _Actor, op: Op, rank: int, phys: str, lo: int, stream: list[tuple[int, int, Any]],
               who: Any, kv: np.ndarray, unit: int, tick: int, label: str, packet: bool = False,
               rel: np.ndarray | None = None, tag: int = -1) -> None:
        size = stream[-1][1] if stream else 0
        span = 2 * size if packet else size
        self._check_bounds(a, op, rank, phys, lo, lo + span)
        self._touch(rank, phys, lo, lo + span, True, who, kv, unit, lo, tick, label)
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
            self._wake(self.pkt_waiters.pop((rank, phys)))


def _untagged(stream: list[tuple[int, int, Any]]) -> list[tuple[int, int, Any]]:
    """A computed result: it carries no movement tag (the data it came from have landed)."""
    return [(x0, x1, None if v is None else (v[0], v[1], v[2], v[3], -1)) for x0, x1, v in stream]


def _sum(streams: list[list[tuple[int, int, Any]]], where: str) -> list[tuple[int, int, Any]]:
    """(``where`` names the op in the message of a value it spoils.)"""
    """Element-wise sum of equally long streams (pieces relative to 0)."""
    bounds = sorted({b for s in streams for p in s for b in (p[0], p[1])})
    out = []
    idx = [0] * len(streams)
    for x0, x1 in zip(bounds, bounds[1:]):
        vals = []
        for k, s in enumerate(streams):
            while idx[k] < len(s) and s[idx[k]][1] <= x0:
                idx[k] += 1
            p = s[idx[k]]
            v = p[2]
            vals.append(None if v is None else (v[0], v[1] + (x0 - p[0]), v[2], v[3], v[4]))
        out.append((x0, x1, _add(vals, where)))
    return out


def _add(vals: list[Any], where: str) -> Any:
    first = vals[0]
    if any(v is None for v in vals):
        base = next((v for v in vals if v is not None), None)
        if base is None:
            return None
        return (base[0], base[1], base[2], f"{where} adds undefined data", -1)
    mask, elem, launch, taint = first[0], first[1], first[2], first[3]
    for v in vals[1:]:
        if taint is None and v[3] is not None:
            taint = v[3]
        if taint is None and v[1] != elem:
            taint = f"{where} adds element {v[1]} to element {elem} (different data)"
        if taint is None and v[2] != launch:
            taint = f"{where} adds data of launch {v[2]} to data of launch {launch}"
        if taint is None and mask & v[0]:
            dup = [r for r in range(mask.bit_length()) if (mask & v[0]) >> r & 1]
            taint = f"{where} counts the contribution of rank(s) {', '.join(map(str, dup[:8]))} twice"
        mask |= v[0]
    return (mask, elem, launch, taint, -1)


# ---------------------------------------------------------------------- op handlers
def _local(ex: Executor, a: _Actor, g: Gpu, ref: Ref, op: Op, inst: Inst, packet: bool = False,
           raw_scratch: bool = False, size_from: int | None = None) -> tuple[str, int, int, int]:
    """(phys, byte address, payload size, ref base) of a local reference (getBuffer: scratch + offset)."""
    off, size = ex._ref_span(g, ref, op)
    if size_from is not None:
        size = size_from
    poff = 0 if packet else inst.offset
    phys, addr = ex._phys(g.id, ref.buf, (2 * off if packet else off + poff), True, a.launch)
    return phys, addr, size, off


def _finish(ex: Executor, a: _Actor, inst: Inst, reads: list[list[tuple[int, int, Any]]], reduce_from: int) -> None:
    """Data that arrived from another rank (a movement tag) land: a copy, or a reduction when they are
    an added operand (``reduce_from``: operands from that index on are added to operand 0)."""
    if not ex.trace or a.launch != 1:
        return
    for k, s in enumerate(reads):
        for _, _, v in s:
            if v is not None and v[4] >= 0:
                mv = ex.result.movements[v[4]]
                if mv.reduce is None:
                    mv.reduce = len(reads) > 1 and k >= reduce_from
                    if mv.iteration <= 0:  # steps repeat per pipeline iteration: follow the first one
                        a.lv = max(a.lv, mv.level)
                        a.mlv = max(a.mlv, mv.meta_level)


def _start(ex: Executor, a: _Actor, inst: Inst, dst_rank: int, k: int, stream: list[tuple[int, int, Any]],
           who_lv: int, who_mlv: int, final: bool) -> int:
    """A movement leaves ``a``'s rank for ``dst_rank``; returns its tag (launch 1 only)."""
    if not ex.trace or a.launch != 1 or dst_rank == a.rank or not stream:
        return -1
    elems = [(v[1], v[1] + (p1 - p0)) for p0, p1, v in stream if v is not None]
    if not elems:
        return -1
    lo, hi = min(e[0] for e in elems), max(e[1] for e in elems)
    key = (a.rank, a.tb.id, inst.op.pos, k)  # type: ignore[union-attr]
    lvl = who_lv + 1
    prev_pc, prev_lvl = a.last_send
    if prev_pc >= 0 and prev_pc != a.pc:
        lvl = max(lvl, prev_lvl + 1)
    elif prev_pc == a.pc:
        lvl = max(lvl, prev_lvl)
    a.last_send = (a.pc, lvl)
    meta = ex.meta_steps.get(key)
    if meta is None or (meta <= who_mlv and inst.iteration <= 0):
        if ex.meta_steps:
            ex.result.meta_ok = False
        meta = who_mlv + 1
    mv = Movement(a.rank, dst_rank, lo, hi, key, inst.iteration, lvl, meta, False if final else None)
    ex.result.movements.append(mv)
    return len(ex.result.movements) - 1


def _h_copy(ex: Executor, a: _Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    a.tick += 1
    src, dst = op.src[0], op.dst[0]
    sp, sa, ssize, sbase = _local(ex, a, g, src, op, inst)
    size = ex._size(ssize, inst)
    if size == 0:
        return True
    dp, da, _, dbase = _local(ex, a, g, dst, op, inst)
    s = ex._read(a, op, g.id, sp, sa, size, a, a.vc, PLAIN_UNIT, a.tick, op.where)
    assert s is not None
    _finish(ex, a, inst, [s], 1)
    ex._write(a, op, g.id, dp, da, s, a, a.vc, PLAIN_UNIT, a.tick, op.where)
    return True


def _h_put(ex: Executor, a: _Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    a.tick += 1
    ct = op.channel_type
    for k, (src, dst) in enumerate(zip(op.src, op.dst)):
        rank, buf = ex._target(g, tb, op, dst)
        doff, dsize = ex._ref_span(g, dst, op)
        size = ex._size(dsize, inst)
        if size == 0:
            continue
        soff, _ = ex._ref_span(g, src, op)
        if ct == "memory":
            # every source is addressed in src_buff[0]'s buffer (executor quirk)
            sp, sa = ex._phys(g.id, op.src[0].buf, soff + inst.offset, True, a.launch)
            s = ex._read(a, op, g.id, sp, sa, size, a, a.vc, PLAIN_UNIT, a.tick, op.where)
            assert s is not None
            _finish(ex, a, inst, [s], 1)
            tag = _start(ex, a, inst, rank, k, s, a.lv, a.mlv, buf != "s")
            dp, da = ex._phys(rank, buf, doff + inst.offset, False, a.launch)
            ex._write(a, op, rank, dp, da, s, a, a.vc, PLAIN_UNIT, a.tick, op.where, tag=tag)
            continue
        chan = tb.channels["port"][op.channel_ids[k]]
        vc, lv, mlv = ex._lane_knowledge(a, k)
        p = ex.proxies[(g.id, chan)]
        ex._proxy_request(a, k, chan, vc, lv, mlv)
        # the proxy reads the registered source: scratch without the launch's half, i/o from their base
        sp, sa = ex._phys(g.id, src.buf, soff + inst.offset, False, a.launch)
        label = f"(port put of {op.where} by {ex.names[a.id]})"
        s = ex._read(a, op, g.id, sp, sa, size, p, p.vc, 0, p.tick, label)
        assert s is not None
        _finish(ex, a, inst, [s], 1)
        tag = _start(ex, a, inst, rank, k, s, p.lv, p.mlv, buf != "s")
        dp, da = ex._phys(rank, buf, doff + inst.offset, False, a.launch)
        ex._write(a, op, rank, dp, da, s, p, p.vc, 0, p.tick, label, tag=tag)
        if op.name in ("pws", "pwsf"):
            svc, slv, smlv = ex._proxy_request(a, k, chan, vc, lv, mlv)
            key, _ = ex._chan_counter(g.id, "port", chan)
            ex._post(key, a, svc, slv, smlv)
        if op.name == "pwsf":
            ex._flush(a, k, chan)
    return True


def _remote_movement(ex: Executor, a: _Actor, inst: Inst, src_rank: int, k: int,
                     stream: list[tuple[int, int, Any]], reduce: bool | None) -> tuple[int, int]:
    """Data read from another rank's memory landed here in the same op (get, rre, glres); returns the
    (level, recorded level) data sent on by the same op start after."""
    if not ex.trace or a.launch != 1 or src_rank == a.rank:
        return -1, -1
    elems = [(v[1], v[1] + (p1 - p0)) for p0, p1, v in stream if v is not None]
    if elems:
        key = (a.rank, a.tb.id, inst.op.pos, k)  # type: ignore[union-attr]
        meta = ex.meta_steps.get(key, a.mlv + 1)
        if ex.meta_steps and (key not in ex.meta_steps or meta <= a.mlv):
            ex.result.meta_ok = False
        ex.result.movements.append(Movement(src_rank, a.rank, min(e[0] for e in elems), max(e[1] for e in elems),
                                            key, inst.iteration, a.lv + 1, meta, reduce))
        return a.lv + 1, meta
    return -1, -1


def _h_get(ex: Executor, a: _Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    a.tick += 1
    for k, (src, dst) in enumerate(zip(op.src, op.dst)):
        rank, buf = ex._target(g, tb, op, src)
        soff, ssize = ex._ref_span(g, src, op)
        doff, _ = ex._ref_span(g, dst, op)
        size = ex._size(ssize, inst)
        if size == 0:
            continue
        # quirk: the remote is read at dst's offset and the local buffer written at src's offset
        rp, ra = ex._phys(rank, buf, doff + inst.offset, False, a.launch)
        s = ex._read(a, op, rank, rp, ra, size, a, a.vc, PLAIN_UNIT, a.tick, op.where)
        assert s is not None
        _finish(ex, a, inst, [s], 1)
        _remote_movement(ex, a, inst, rank, k, s, None)  # lands as a copy or a reduction where it is used
        tag = len(ex.result.movements) - 1 if ex.trace and a.launch == 1 and rank != g.id else -1
        lp, la = ex._phys(g.id, dst.buf, soff + inst.offset, True, a.launch)
        ex._write(a, op, g.id, lp, la, s, a, a.vc, PLAIN_UNIT, a.tick, op.where, tag=tag)
    return True


def _h_reduce(ex: Executor, a: _Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    """re, res, rre, rres: out[0] = in[0] + in[1..] (local or remote), then res/rres copy out[0] to the
    remote out[1..]."""
    op = inst.op
    a.tick += 1
    name = op.name
    in0 = op.src[0]
    off0, size0 = ex._ref_span(g, in0, op)
    size = ex._size(size0, inst)
    if size == 0:
        return True
    streams = []
    read_lv, read_mlv = a.lv, a.mlv
    for k, ref in enumerate(op.src):
        off, _ = ex._ref_span(g, ref, op)
        if ref.kind == "local":
            p, addr = ex._phys(g.id, ref.buf, off + inst.offset, True, a.launch)
            s = ex._read(a, op, g.id, p, addr, size, a, a.vc, PLAIN_UNIT, a.tick, op.where)
        else:
            rank, buf = ex._target(g, tb, op, ref)
            p, addr = ex._phys(rank, buf, off + inst.offset, False, a.launch)
            s = ex._read(a, op, rank, p, addr, size, a, a.vc, PLAIN_UNIT, a.tick, op.where)
            assert s is not None
            lv1, mlv1 = _remote_movement(ex, a, inst, rank, k, s, True)
            read_lv, read_mlv = max(read_lv, lv1), max(read_mlv, mlv1)
        assert s is not None
        streams.append(s)
    _finish(ex, a, inst, streams, 1)
    total = _untagged(_sum(streams, ex._where(a, op)) if len(streams) > 1 else streams[0])
    out0 = op.dst[0]
    doff, _ = ex._ref_span(g, out0, op)
    dp, da = ex._phys(g.id, out0.buf, doff + inst.offset, True, a.launch)
    ex._write(a, op, g.id, dp, da, total, a, a.vc, PLAIN_UNIT, a.tick, op.where)
    if name in ("res", "rres"):
        for k, ref in enumerate(op.dst[1:], start=1):
            rank, buf = ex._target(g, tb, op, ref)
            off, _ = ex._ref_span(g, ref, op)
            tag = _start(ex, a, inst, rank, k, total, read_lv, read_mlv, buf != "s")
            p, addr = ex._phys(rank, buf, off + inst.offset, False, a.launch)
            ex._write(a, op, rank, p, addr, total, a, a.vc, PLAIN_UNIT, a.tick, op.where, tag=tag)
    return True


def _release(a: _Actor) -> np.ndarray:
    rel = a.vc.copy()
    rel[a.id] = a.tick
    return rel


def _h_ppkt(ex: Executor, a: _Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    a.tick += 1
    for k, (src, dst) in enumerate(zip(op.src, op.dst)):
        soff, ssize = ex._ref_span(g, src, op)
        sp, sa = ex._phys(g.id, op.src[0].buf, soff, True, a.launch)  # addressed in src_buff[0]'s buffer
        s = ex._read(a, op, g.id, sp, sa, ssize, a, a.vc, PACKET_UNIT, a.tick, op.where)
        assert s is not None
        _finish(ex, a, inst, [s], 1)
        rank, buf = ex._target(g, tb, op, dst)
        doff, _ = ex._ref_span(g, dst, op)
        tag = _start(ex, a, inst, rank, k, s, a.lv, a.mlv, False)
        dp, da = ex._phys(rank, buf, ex.scratch_offset(a.launch) + 2 * doff, False, a.launch)
        ex._write(a, op, rank, dp, da, s, a, a.vc, 2 * PACKET_UNIT, a.tick, op.where, packet=True,
                  rel=_release(a), tag=tag)
    return True


def _read_packets(ex: Executor, a: _Actor, g: Gpu, op: Op, ref: Ref, size: int | None = None,
                  local_buffer: bool = False) -> list[tuple[int, int, Any]] | None:
    """Packets of a local reference: in scratch (raw + the launch's half), or through getBuffer."""
    off, rsize = ex._ref_span(g, ref, op)
    buf = ref.buf if local_buffer else "s"
    p, addr = ex._phys(g.id, buf, 2 * off, True, a.launch)
    s = ex._read(a, op, g.id, p, addr, rsize if size is None else size, a, a.vc, 2 * PACKET_UNIT, a.tick,
                 op.where, packet=True)
    if s is None:
        ex.pkt_waiters.setdefault((g.id, p), []).append(a)
    return s


def _packets_in(ex: Executor, a: _Actor, g: Gpu, op: Op, refs: tuple[Ref, ...], size: int | None = None,
                local_buffer: bool = False) -> list[list[tuple[int, int, Any]]] | None:
    """Packets an op spins on (its tick counted once however often it is woken); None, with the thread
    block blocked, until all of them carry this launch's flag."""
    if a.blocked is None:
        a.tick += 1
    out = []
    for ref in refs:
        s = _read_packets(ex, a, g, op, ref, size, local_buffer)
        if s is None:
            ex._block(a, ("packets", f"spins on packets at chunk {ref.index} of its scratch that never carry "
                                     f"launch {a.launch}'s flag"))
            return None
        out.append(s)
    a.blocked = None
    return out


def _landed_packets(ex: Executor, a: _Actor, g: Gpu, inst: Inst) -> list[tuple[int, int, Any]] | None:
    """The packets of src_buff[0] once they carry this launch's flag (data from a peer land here)."""
    got = _packets_in(ex, a, g, inst.op, inst.op.src[:1])
    if got is not None:
        _finish(ex, a, inst, got, 1)
    return None if got is None else got[0]


def _h_rppkt(ex: Executor, a: _Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    s = _landed_packets(ex, a, g, inst)
    if s is None:
        return False
    if op.channel_type == "port":
        a.tick += 1
        ex._sync_threads(a)  # the handler syncs the block between reading and putting
    for k, dst in enumerate(op.dst):
        rank, buf = ex._target(g, tb, op, dst)
        doff, _ = ex._ref_span(g, dst, op)
        dp, da = ex._phys(rank, buf, ex.scratch_offset(a.launch) + 2 * doff, False, a.launch)
        if op.channel_type == "memory":
            tag = _start(ex, a, inst, rank, k, s, a.lv, a.mlv, False)
            ex._write(a, op, rank, dp, da, s, a, a.vc, 2 * PACKET_UNIT, a.tick, op.where, packet=True,
                      rel=_release(a), tag=tag)
        else:
            chan = tb.channels["port"][op.channel_ids[k]]
            vc, lv, mlv = ex._lane_knowledge(a, k)
            ex._proxy_request(a, k, chan, vc, lv, mlv)
            p = ex.proxies[(g.id, chan)]
            tag = _start(ex, a, inst, rank, k, s, p.lv, p.mlv, False)
            label = f"(port rppkt of {op.where} by {ex.names[a.id]})"
            ex._write(a, op, rank, dp, da, s, p, p.vc, 0, p.tick, label, packet=True, rel=p.vc.copy(), tag=tag)
    return True


def _h_reduce_packets(ex: Executor, a: _Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    """repkt/respkt/recpkt/recspkt: out[0] = in[0] (plain) + packets in[1..] (local scratch)."""
    op = inst.op
    in0 = op.src[0]
    off0, size = ex._ref_span(g, in0, op)
    pk = _packets_in(ex, a, g, op, op.src[1:], size)
    if pk is None:
        return False
    sp, sa = ex._phys(g.id, in0.buf, off0, True, a.launch)
    s0 = ex._read(a, op, g.id, sp, sa, size, a, a.vc, PACKET_UNIT, a.tick, op.where)
    assert s0 is not None
    streams = [s0, *pk]
    _finish(ex, a, inst, streams, 1)
    total = _untagged(_sum(streams, ex._where(a, op)))
    out0 = op.dst[0]
    doff, _ = ex._ref_span(g, out0, op)
    dp, da = ex._phys(g.id, out0.buf, doff, True, a.launch)
    ex._write(a, op, g.id, dp, da, total, a, a.vc, PACKET_UNIT, a.tick, op.where)
    first_remote = 1
    if op.name in ("recpkt", "recspkt"):
        o1 = op.dst[1]
        off1, _ = ex._ref_span(g, o1, op)
        p1, a1 = ex._phys(g.id, o1.buf, 2 * off1, True, a.launch)
        ex._write(a, op, g.id, p1, a1, total, a, a.vc, 2 * PACKET_UNIT, a.tick, op.where, packet=True,
                  rel=_release(a))
        first_remote = 2
    if op.name in ("respkt", "recspkt"):
        for k, ref in enumerate(op.dst[first_remote:], start=first_remote):
            rank, buf = ex._target(g, tb, op, ref)
            off, _ = ex._ref_span(g, ref, op)
            tag = _start(ex, a, inst, rank, k, total, a.lv, a.mlv, False)
            p, addr = ex._phys(rank, buf, ex.scratch_offset(a.launch) + 2 * off, False, a.launch)
            ex._write(a, op, rank, p, addr, total, a, a.vc, 2 * PACKET_UNIT, a.tick, op.where, packet=True,
                      rel=_release(a), tag=tag)
    return True


def _h_cpkt(ex: Executor, a: _Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    a.tick += 1
    src, dst = op.src[0], op.dst[0]
    soff, size = ex._ref_span(g, src, op)
    sp, sa = ex._phys(g.id, src.buf, soff, True, a.launch)
    s = ex._read(a, op, g.id, sp, sa, size, a, a.vc, PACKET_UNIT, a.tick, op.where)
    assert s is not None
    doff, _ = ex._ref_span(g, dst, op)
    dp, da = ex._phys(g.id, dst.buf, 2 * doff, True, a.launch)
    ex._write(a, op, g.id, dp, da, s, a, a.vc, 2 * PACKET_UNIT, a.tick, op.where, packet=True, rel=_release(a))
    return True


def _h_upkt(ex: Executor, a: _Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    s = _landed_packets(ex, a, g, inst)
    if s is None:
        return False
    dst = op.dst[0]
    doff, _ = ex._ref_span(g, dst, op)
    dp, da = ex._phys(g.id, dst.buf, doff, True, a.launch)
    ex._write(a, op, g.id, dp, da, s, a, a.vc, PACKET_UNIT, a.tick, op.where)
    return True


def _members(ex: Executor, g: Gpu, tb: ThreadBlock, ref: Ref) -> tuple[tuple[int, ...], str]:
    sw = switch_of(g, tb, ref.id)
    return tuple(sorted(sw.ranks)), sw.buf


def _h_glres(ex: Executor, a: _Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    a.tick += 1
    src, dst = op.src[0], op.dst[0]
    soff, ssize = ex._ref_span(g, src, op)
    size = ex._size(ssize, inst)
    if size == 0:
        return True
    ranks, sbuf = _members(ex, g, tb, src)
    streams = []
    read_lv, read_mlv = a.lv, a.mlv
    for r in ranks:
        p, addr = ex._phys(r, sbuf, soff + inst.offset, False, a.launch)
        s = ex._read(a, op, r, p, addr, size, a, a.vc, PLAIN_UNIT, a.tick, op.where)
        assert s is not None
        lv1, mlv1 = _remote_movement(ex, a, inst, r, 100 + r, s, True)
        read_lv, read_mlv = max(read_lv, lv1), max(read_mlv, mlv1)
        streams.append(s)
    total = _untagged(_sum(streams, ex._where(a, op)))
    dranks, dbuf = _members(ex, g, tb, dst)
    doff, _ = ex._ref_span(g, dst, op)
    for r in dranks:
        p, addr = ex._phys(r, dbuf, doff + inst.offset, False, a.launch)
        tag = _start(ex, a, inst, r, r, total, read_lv, read_mlv, True)
        ex._write(a, op, r, p, addr, total, a, a.vc, PLAIN_UNIT, a.tick, op.where, tag=tag)
    return True


def _h_gstore(ex: Executor, a: _Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    packet = op.name == "gstorepkt"
    src, dst = op.src[0], op.dst[0]
    soff, ssize = ex._ref_span(g, src, op)
    if packet:
        got = _packets_in(ex, a, g, op, op.src[:1], local_buffer=True)
        if got is None:
            return False
        s: list[tuple[int, int, Any]] | None = got[0]
        size = ssize
    else:
        a.tick += 1
        size = ex._size(ssize, inst)
        if size == 0:
            return True
        sp, sa = ex._phys(g.id, src.buf, soff + inst.offset, True, a.launch)
        s = ex._read(a, op, g.id, sp, sa, size, a, a.vc, PLAIN_UNIT, a.tick, op.where)
    assert s is not None
    _finish(ex, a, inst, [s], 1)
    dranks, dbuf = _members(ex, g, tb, dst)
    doff, _ = ex._ref_span(g, dst, op)
    for r in dranks:
        if packet:
            p, addr = ex._phys(r, dbuf, ex.scratch_offset(a.launch) + 2 * doff, False, a.launch)
        else:
            p, addr = ex._phys(r, dbuf, doff + inst.offset, False, a.launch)
        tag = _start(ex, a, inst, r, r, s, a.lv, a.mlv, not packet)
        ex._write(a, op, r, p, addr, s, a, a.vc, 2 * PACKET_UNIT if packet else PLAIN_UNIT, a.tick, op.where,
                  packet=packet, rel=_release(a) if packet else None, tag=tag)
    return True


_HANDLERS: dict[str, Any] = {
    "copy": _h_copy, "put": _h_put, "pws": _h_put, "pwsf": _h_put, "get": _h_get,
    "re": _h_reduce, "res": _h_reduce, "rre": _h_reduce, "rres": _h_reduce,
    "ppkt": _h_ppkt, "rppkt": _h_rppkt, "repkt": _h_reduce_packets, "respkt": _h_reduce_packets,
    "recpkt": _h_reduce_packets, "recspkt": _h_reduce_packets, "cpkt": _h_cpkt, "upkt": _h_upkt,
    "glres": _h_glres, "gstore": _h_gstore, "gstorepkt": _h_gstore,
}
