"""Which port-channel proxies of a plan need a vector-clock entry of their own (MSCCL++ executor,
execute.py; docs/mscclpp-plan.md, "How collsynth checks a plan").

A proxy's entry only says how many of its requests an actor knows to be served. Where one thread block
pushes to the proxy (and flushes it) and one thread block waits on the counter its signals increment,
that knowledge has exactly two sources: the waiter's k-th wait (the k-th signal, served after the
requests before it) and the pusher's flushes. So an actor knows request t served when its clock shows
a wait or flush, known to it, that covered t: the entry is implied by the waiter's and the pusher's own.
That holds as long as those two blocks publish a wait's or flush's knowledge only together with their
own tick, i.e. after a ``nop`` or barrier: a signal, port request or release from the lane that
acquired it before one (a lane's knowledge travels without the block's tick), or a packet write (it
publishes the current tick before the lanes are joined), makes the proxy keep its entry, as does a
packet-writing port op (its packets carry the proxy's own clock). The others get none, which shrinks
every clock by their number: on cluster plans proxies outnumber thread blocks two to one.
"""

from __future__ import annotations

from typing import Any

from collsynth.backends.mscclpp.load import Chan, Inst, flatten
from collsynth.backends.mscclpp.model import PACKET_OPS, SIGNAL_OPS, WAIT_OPS, Plan, ThreadBlock

# ops whose packets publish the writer's clock with its current tick (exec_packets.release_clock)
PACKET_WRITES = ("ppkt", "rppkt", "respkt", "cpkt", "recpkt", "recspkt", "gstorepkt")
_LANE_PUBLISHERS = ("put", "pws", "pwsf", "rppkt")  # port ops that pass a lane's knowledge to a proxy


def counter_of(pairs: dict[tuple[int, str, int], Chan], rank: int, chan: int) -> tuple[Any, ...] | None:
    """The inbound counter that the proxy of rank's port channel ``chan`` signals (None when unpaired)."""
    ch = pairs[(rank, "port", chan)]
    return ("chan", ch.peer, "port", ch.peer_index) if ch.peer_index >= 0 else None


def _published_lanes(op: Any) -> range | None:
    """Lanes whose knowledge the op publishes without the block's tick (None: every lane's, with it)."""
    if op.name in PACKET_WRITES and not (op.name == "rppkt" and op.channel_type == "port"):
        return None
    if op.name in SIGNAL_OPS:
        return range(len(op.channel_ids))
    if op.name == "sem_release":
        return range(len(op.semaphore_ids))
    if op.channel_type == "port" and op.name in _LANE_PUBLISHERS:
        return range(len(op.dst))
    return range(0)


def light_proxies(plan: Plan, tbs: list[tuple[int, ThreadBlock]], insts: list[list[Inst]],
                  pairs: dict[tuple[int, str, int], Chan]) -> set[tuple[int, int]]:
    """The (rank, port channel) proxies that need no clock entry of their own (module docstring)."""
    pushers: dict[tuple[int, int], set[int]] = {}
    waiters: dict[tuple[Any, ...], set[int]] = {}
    heavy: set[tuple[int, int]] = set()
    relayed: set[tuple[Any, ...]] = set()  # ("w", counter) or ("f", proxy) published without the tick
    for i, ((r, tb), prog) in enumerate(zip(tbs, insts)):
        pending: dict[int, set[tuple[Any, ...]]] = {}
        for inst in prog:
            op = inst.op
            if op.name in ("nop", "barrier") or (op.name == "rppkt" and op.channel_type == "port"):
                pending = {}  # joined into the block's clock with its tick (rppkt syncs before it puts)
            lanes = _published_lanes(op)
            for lane in (pending if lanes is None else lanes):
                relayed |= pending.get(lane, set())
            if op.channel_type != "port":
                continue
            chans = [tb.channels["port"][c] for c in op.channel_ids]
            if op.name in WAIT_OPS:
                for lane, c in enumerate(chans):
                    counter = ("chan", r, "port", c)
                    waiters.setdefault(counter, set()).add(i)
                    pending.setdefault(lane, set()).add(("w", counter))
                continue
            for c in chans:
                pushers.setdefault((r, c), set()).add(i)
                if op.name in PACKET_OPS:
                    heavy.add((r, c))
            if op.name in ("flush", "pwsf"):
                for lane, c in enumerate(chans[:len(op.dst)]):
                    pending.setdefault(lane, set()).add(("f", (r, c)))
    out: set[tuple[int, int]] = set()
    for g in plan.gpus:
        for c in range(len(g.peers["port"])):
            key = (g.id, c)
            theirs = counter_of(pairs, g.id, c)
            if (key in heavy or len(pushers.get(key, ())) > 1 or ("f", key) in relayed
                    or theirs is not None and (len(waiters.get(theirs, ())) > 1 or ("w", theirs) in relayed)):
                continue
            out.add(key)
    return out


def plan_light_proxies(plan: Plan, chunk: int, pairs: dict[tuple[int, str, int], Chan]) -> set[tuple[int, int]]:
    """``light_proxies`` of a whole plan at ``chunk``-byte chunks (its thread blocks flattened here)."""
    tbs = [(g.id, tb) for g in plan.gpus for tb in g.tbs]
    return light_proxies(plan, tbs, [flatten(plan, tb, chunk) for _, tb in tbs], pairs)


def proxies_with_entries(plan: Plan, light: set[tuple[int, int]]) -> int:
    """How many port-channel proxies keep a clock entry of their own, ``light`` the others."""
    return sum(len(g.peers["port"]) for g in plan.gpus) - len(light)
