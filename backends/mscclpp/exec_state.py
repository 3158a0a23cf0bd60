"""Records of the MSCCL++ symbolic executor (execute.py): the failure it raises, the movements and
result it leaves, its actors (thread blocks and each rank's caller), counting semaphores and port-channel
proxies, each with a vector clock over every actor (shared, never written in place: a change makes a new
one), and ExecBase, the state all its parts share."""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collsynth.backends.mscclpp.load import Chan, Inst
from collsynth.backends.mscclpp.model import Plan, ThreadBlock


class ExecFailure(Exception):
    """A problem found while executing: kind (race, deadlock, semaphore, result, bounds), message, where."""

    def __init__(self, kind: str, message: str, gpu: int | None = None, tb: int | None = None,
                 op: str | None = None, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.gpu, self.tb, self.op = kind, message, gpu, tb, op
        self.details = details or [message]


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


class Actor:
    """A thread block, or the caller of a rank: its program, position, launch and vector clock."""
    __slots__ = ("id", "rank", "tb", "insts", "pc", "tick", "vc", "lanes", "lv", "lane_lv", "launch", "done",
                 "blocked", "ticket", "last_send", "mlv", "lane_mlv", "passed")

    def __init__(self, aid: int, rank: int, tb: ThreadBlock | None, na: int, clock: type = np.int32) -> None:
        self.id, self.rank, self.tb = aid, rank, tb
        self.insts: list[Inst] = []
        self.pc = 0
        self.tick = 0
        self.vc: np.ndarray = np.full(na, -1, clock)
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


class Counter:
    """A counting semaphore: a channel direction's inbound counter, or a device semaphore."""

    __slots__ = ("init", "signals", "per_actor", "waits", "issued", "total", "waiters", "waiting", "desc")

    def __init__(self, init: int, desc: str) -> None:
        self.init = init
        self.signals: list[tuple[int, np.ndarray | None, int, int]] = []  # (actor, release vc, lv, mlv)
        self.per_actor: dict[int, list[int]] = {}  # actor -> indexes into signals, in order
        self.waits: list[tuple[int, int]] = []  # (actor, tick) of waits that passed
        self.issued = 0  # tickets handed out (waits take them in arrival order)
        self.total: dict[int, int] = {}  # actor -> signals over all launches (static count)
        self.waiters = 0  # thread blocks that wait on it (static count)
        self.waiting: list[Actor] = []
        self.desc = desc


class Proxy:
    """The proxy of one port channel: it serves put requests in FIFO order, with its own clock (what it
    knows of the others; its own entry is ``tick``, kept apart so that requests bringing nothing new share
    one clock: ``Synchronization.proxy_clock`` joins them). A *light* proxy (exec_proxies.py) has no entry
    in anyone's clock: what is known of it is read from its waiter's waits and its pusher's flushes."""
    __slots__ = ("id", "rank", "chan", "vc", "tick", "reqs", "lv", "mlv", "pushers", "light", "waiter",
                 "sig_cover", "waits", "wait_cover", "flushes", "flush_cover")

    def __init__(self, aid: int, rank: int, chan: int, na: int, clock: type = np.int32, light: bool = False) -> None:
        self.id, self.rank, self.chan = aid, rank, chan
        self.vc: np.ndarray = np.full(na, -1, clock)
        self.tick = 0
        # (tb actor, lane, op tick, the proxy's clock then (shared while requests bring nothing new), its tick
        # then (its own entry, kept apart), lv, mlv)
        self.reqs: list[tuple[int, int, int, np.ndarray, int, int, int]] = []
        self.lv = -1
        self.mlv = -1
        self.pushers: list[Actor] = []  # the thread blocks that push requests to it or flush it
        self.light = light
        self.waiter = -1  # light: the one thread block that waits on its signals (set by the first wait)
        self.sig_cover: list[int] = []  # light: per signal, the last request served before it (its tick)
        self.waits: list[int] = []  # light: the waiter's tick at each wait, and the requests each wait and
        self.wait_cover: list[int] = []  # the ones before it cover (a running maximum)
        self.flushes: list[int] = []  # light: the pusher's tick at each flush, and what it and the ones
        self.flush_cover: list[int] = []  # before it cover


class ExecBase:
    """What every part of the executor shares (exec_core.ExecutorCore sets it up), and its scheduling: an
    actor that cannot proceed is blocked until something wakes it back onto the ready queue."""

    plan: Plan
    chunk: int
    launches: int
    n: int
    na: int  # clock entries (actors with ids below it)
    light: list[Proxy]  # proxies without an entry (exec_proxies.py), by id - na
    pairs: dict[tuple[int, str, int], Chan]
    meta_steps: dict[tuple[int, int, int, int], int]
    actors: list[Actor]
    names: dict[int, str]
    ready: deque[Actor]
    result: ExecResult
    trace: bool

    def knows(self, kv: np.ndarray, aid: int, tick: int) -> bool:
        """Whether clock ``kv`` knows actor ``aid``'s op at ``tick`` (a light proxy's request: a wait or a
        flush it knows of covered it)."""
        if aid < self.na:
            return bool(kv[aid] >= tick)
        p = self.light[aid - self.na]
        if p.waits:
            k = bisect_right(p.waits, kv[p.waiter])
            if k and p.wait_cover[k - 1] >= tick:
                return True
        if p.flushes:
            k = bisect_right(p.flushes, kv[p.pushers[0].id])
            if k and p.flush_cover[k - 1] >= tick:
                return True
        return False

    def block(self, a: Actor, why: Any) -> bool:
        """Block ``a`` (``why``: (kind, what it waits for) for the deadlock report); False."""
        a.blocked = why
        return False

    def wake(self, waiters: list[Actor]) -> None:
        """Put the blocked ``waiters`` back on the ready queue (they retry their op)."""
        for w in waiters:
            w.blocked = None
            self.ready.append(w)
        waiters.clear()
