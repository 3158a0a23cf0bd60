"""The MSCCL++ executor's driver (execute.py): actors and their launches (each rank's caller writes fresh
input before a launch and checks the collective's result after it), the ready queue that runs one op
at a time, and the deadlock report. The op handlers come from the subclass (execute.Executor)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from collsynth.backends.mscclpp.exec_access import MemoryAccess
from collsynth.backends.mscclpp.exec_proxies import counter_of, light_proxies
from collsynth.backends.mscclpp.exec_state import Actor, ExecFailure, ExecResult, Proxy
from collsynth.backends.mscclpp.exec_sync import Synchronization
from collsynth.backends.mscclpp.exec_values import continues, equal_records, shift_value
from collsynth.backends.mscclpp.load import Chan, Inst, channel_pairs, flatten
from collsynth.backends.mscclpp.memory import Segments
from collsynth.backends.mscclpp.model import SIGNAL_OPS, WAIT_OPS, Gpu, Plan, ThreadBlock

# an op handler: (executor, thread block actor, its gpu, its thread block, the instruction) -> done (False: blocked)
Handler = Callable[["ExecutorCore", Actor, Gpu, ThreadBlock, Inst], bool]


def proxy_users(tb: ThreadBlock) -> set[int]:
    """The port channels whose proxy the thread block pushes requests to or flushes (any port op but a wait)."""
    out: set[int] = set()
    for op in tb.ops:
        for o in op.body if op.name == "pipeline" else (op,):
            if o.channel_type == "port" and o.name not in WAIT_OPS:
                out.update(tb.channels["port"][c] for c in o.channel_ids)
    return out


class ExecutorCore(Synchronization, MemoryAccess):
    """Runs every launch of every rank; ``handlers`` (op name -> Handler) run the data ops."""

    handlers: ClassVar[dict[str, Handler]] = {}

    def __init__(self, plan: Plan, chunk: int, launches: int, meta_steps: dict[tuple[int, int, int, int], int]
                 | None = None, pairs: dict[tuple[int, str, int], Chan] | None = None,
                 light: set[tuple[int, int]] | None = None, clock: type = np.int32) -> None:
        self.plan, self.chunk, self.launches = plan, chunk, launches
        self.n = plan.nranks
        self.pairs = pairs if pairs is not None else channel_pairs(plan)
        self.meta_steps = meta_steps or {}
        tbs = [(g.id, tb) for g in plan.gpus for tb in g.tbs]
        insts = [flatten(plan, tb, chunk) for _, tb in tbs]
        ports = [(g.id, c) for g in plan.gpus for c in range(len(g.peers["port"]))]
        if light is None:
            light = light_proxies(plan, tbs, insts, self.pairs)
        heavy = [key for key in ports if key not in light]
        # clock entries: thread blocks, the proxies that need one, the callers; light proxies' ids follow
        na = len(tbs) + len(heavy) + self.n
        self.na = na
        self.actors = [Actor(i, r, tb, na, clock) for i, (r, tb) in enumerate(tbs)]
        self.by_rank: list[list[Actor]] = [[] for _ in range(self.n)]
        for a, prog in zip(self.actors, insts):
            self.by_rank[a.rank].append(a)
            a.insts = prog
        ids = {key: len(tbs) + i for i, key in enumerate(heavy)}
        ids.update((key, na + i) for i, key in enumerate(key for key in ports if key in light))
        self.proxies = {key: Proxy(ids[key], key[0], key[1], na, clock, key in light) for key in ports}
        self.light = [p for p in self.proxies.values() if p.light]  # index: id - na
        assert all(p.id == na + i for i, p in enumerate(self.light))
        self.light_counter = {}
        for p in self.light:
            counter = counter_of(self.pairs, p.rank, p.chan)
            if counter is not None:
                self.light_counter[counter] = p
        for a in self.actors:
            for c in sorted(proxy_users(a.tb)):  # type: ignore[arg-type]
                self.proxies[(a.rank, c)].pushers.append(a)
        self.users = [Actor(len(tbs) + len(heavy) + r, r, None, na, clock) for r in range(self.n)]
        self.user_tick = [0] * self.n
        self.names = {a.id: f"gpu {a.rank} thread block {a.tb.id}" for a in self.actors}  # type: ignore[union-attr]
        for (r, c), p in self.proxies.items():
            self.names[p.id] = f"gpu {r}'s proxy for port channel {c}"
        for u in self.users:
            self.names[u.id] = f"the caller on gpu {u.rank}"
        g0 = plan.gpus[0]
        self.in_bytes = g0.input_chunks * chunk
        self.out_bytes = g0.output_chunks * chunk
        self.scratch_bytes = [g.scratch_chunks * chunk * (2 if plan.packets else 1) * (2 if plan.double_scratch else 1)
                              for g in plan.gpus]
        self.mem = []
        self.hist = []
        self.phys_size = []
        self.layout = []
        for g in plan.gpus:
            lay, sizes = self.buffer_layout(g)
            self.layout.append(lay)
            self.phys_size.append(sizes)
            self.mem.append({k: Segments(shift_value, continues) for k in sizes})
            self.hist.append({k: Segments(same=equal_records) for k in sizes})
        self.counters = {}
        self.barriers = {}
        self.pkt_waiters = {}
        self.ready = deque()
        self.launch_of = [0] * self.n
        self.running = [0] * self.n
        self.result = ExecResult(chunk, launches)
        self.trace = True
        self.everyone = (1 << self.n) - 1
        self.races = []
        self.race_keys = set()
        self.static_counts()

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
            a.vc = np.maximum(a.vc, user.vc)  # a new clock (clocks are shared, never written in place)
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
        self.touch(r, phys, base, base + self.in_bytes, True, user, user.vc, 0, base, user.tick, "writes its input")
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
        self.touch(r, phys, base, base + size, False, user, user.vc, 0, base, user.tick, "reads its output")
        coll = self.plan.collective
        if coll not in ("allreduce", "allgather", "reducescatter"):
            return
        c = self.chunk
        for x0, x1, v in self.mem[r][phys].get(base, base + size):
            lo, hi = x0 - base, x1 - base
            wrong = self._wrong_result(v, L, lo, hi, r * size + lo if coll == "reducescatter" else lo)
            if wrong is None:
                continue
            at = (f"wrong result on gpu {r}{f' in launch {L}' if L > 1 else ''}: output bytes {lo}..{hi - 1} "
                  f"(chunk {lo // c}{'' if (hi - 1) // c == lo // c else f'..{(hi - 1) // c}'})")
            writer = self.last_writer(r, phys, x0, x1)  # only for the message: a lookup per piece otherwise
            if writer is not None and v is not None and v[3] is None:
                at += f" (last written by {self.names[writer[0]]} {writer[4]})"
            raise ExecFailure("result", at + wrong, r)

    def _wrong_result(self, v: Any, L: int, lo: int, hi: int, elem: int) -> str | None:
        """What is wrong with output bytes [lo, hi) holding ``v`` at the end of launch L (the end of the
        message after its place), or None when they hold the collective's result (element ``elem`` on)."""
        if v is None:
            return " are never written"
        if v[4] != 1:
            return " hold LL packets, not data"
        if v[3] is not None:
            return f": {v[3]}"
        if v[2] != L:
            return f" hold data of launch {v[2]}"
        if v[1] != elem:
            return f" hold element {v[1]}.. instead of element {elem}.."
        if self.plan.collective == "allgather":
            lo_rank, hi_rank = lo // self.in_bytes, (hi - 1) // self.in_bytes
            if lo_rank != hi_rank:
                return f" span the data of ranks {lo_rank} and {hi_rank}"
            want = 1 << lo_rank
        else:
            want = self.everyone
        if v[0] == want:
            return None
        missing = [x for x in range(self.n) if (want & ~v[0]) >> x & 1]
        if missing:
            return f" miss the contribution of rank(s) {', '.join(map(str, missing[:8]))}"
        extra = [x for x in range(self.n) if (v[0] & ~want) >> x & 1]
        return f" hold the contribution of rank(s) {', '.join(map(str, extra[:8]))}, which they should not"

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

    def _run_actor(self, a: Actor) -> None:
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

    # ------------------------------------------------------------------ one op
    def _step(self, a: Actor, inst: Inst) -> bool:
        op = inst.op
        name = op.name
        g = self.plan.gpus[a.rank]
        tb = a.tb
        assert tb is not None
        if name == "nop":
            a.tick += 1
            self.sync_threads(a)
            return True
        if name == "barrier":
            return self.barrier(a, op)
        if name in SIGNAL_OPS:
            a.tick += 1
            for lane, c in enumerate(op.channel_ids):
                self.signal(a, g, tb, op, lane, c)
            return True
        if name in WAIT_OPS or name == "sem_acquire":
            return self.wait(a, g, tb, op)
        if name == "sem_release":
            a.tick += 1
            for lane, s in enumerate(op.semaphore_ids):
                vc, lv, mlv = self.lane_knowledge(a, lane)
                self.post(("sem", g.id, s), a, vc, lv, mlv)
            return True
        if name == "flush":
            a.tick += 1
            for lane in range(min(len(op.dst), len(op.channel_ids))):  # the executor's loop bound is nOutputs
                self.flush(a, lane, tb.channels["port"][op.channel_ids[lane]])
            return True
        return self._data(a, g, tb, inst)

    def _data(self, a: Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
        op = inst.op
        h = self.handlers[op.name]
        return h(self, a, g, tb, inst)
