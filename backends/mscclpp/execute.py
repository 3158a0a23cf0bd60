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
caller of each rank. A proxy with one pusher and one waiter needs no component of its own: what is
known of it follows from the waiter's waits and the pusher's flushes (exec_proxies.py). Clocks are
shared between the snapshots that signals and proxy requests keep and never written in place (a change
makes a new clock); entries are 16 bits while the ticks fit (CLOCKS).
The rules (docs/mscclpp-plan.md, "How collsynth checks a plan"):

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

The executor lives in small modules: exec_state.py (failures, results, actors, counters, proxies),
exec_values.py (symbolic values and their sums), exec_access.py (buffers, addressing, bounds, the race
detector), exec_sync.py (semaphores, barriers, proxies), exec_proxies.py (which proxies need a clock
component), exec_core.py (launches, scheduling, result and deadlock reports), exec_trace.py (launch 1's
movements across ranks, for the read-back), exec_ops.py (handlers of the plain data and switch ops) and
exec_packets.py (of the LL packet ops); ``Executor`` puts them together.
"""

from __future__ import annotations

import numpy as np

from collsynth.backends.mscclpp.exec_core import ExecutorCore
from collsynth.backends.mscclpp.exec_ops import HANDLERS
from collsynth.backends.mscclpp.exec_packets import PACKET_HANDLERS
from collsynth.backends.mscclpp.exec_state import ExecFailure, ExecResult, Movement
from collsynth.backends.mscclpp.load import Chan, iterations
from collsynth.backends.mscclpp.model import Plan

__all__ = ["CLOCKS", "ExecFailure", "ExecResult", "Executor", "Movement", "execute", "least_ticks"]

# The clock entry types tried in turn: a tick too large for one makes numpy 2 raise OverflowError (numpy 1
# would wrap it with a warning, so it gets 32 bits at once). Every signal and proxy request keeps a clock
# over all actors, so 16 bits halve the checker's largest memory use.
CLOCKS: tuple[type, ...] = (np.int16, np.int32) if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else (np.int32,)


class Executor(ExecutorCore):
    """``Executor(plan, chunk, launches, meta_steps, pairs, light, clock).run()``: an ExecResult, or
    ExecFailure naming the first problem (races first)."""

    handlers = {**HANDLERS, **PACKET_HANDLERS}


def least_ticks(plan: Plan, chunk: int, launches: int) -> int:
    """The ticks the longest thread block takes at least: one per op it runs (pipeline bodies once per
    iteration) and launch."""
    return launches * max((sum(iterations(plan, op, chunk) * len(op.body) if op.name == "pipeline" else 1
                                for op in tb.ops) for g in plan.gpus for tb in g.tbs), default=0)


def execute(plan: Plan, chunk: int, launches: int, meta_steps: dict[tuple[int, int, int, int], int] | None = None,
            pairs: dict[tuple[int, str, int], Chan] | None = None, light: set[tuple[int, int]] | None = None
            ) -> ExecResult:
    """Run the plan with the smallest clock entries of CLOCKS that hold every tick (a run whose ticks
    outgrow them starts over with the next; one whose longest thread block alone would is not tried).
    ``light``: the proxies without a clock entry (exec_proxies.py), when already known."""
    need = least_ticks(plan, chunk, launches)
    for clock in CLOCKS[:-1]:
        if need > np.iinfo(clock).max:
            continue
        try:
            return Executor(plan, chunk, launches, meta_steps, pairs, light, clock).run()
        except OverflowError:
            continue
    return Executor(plan, chunk, launches, meta_steps, pairs, light, CLOCKS[-1]).run()
