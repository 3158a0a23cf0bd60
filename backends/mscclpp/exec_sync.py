"""Synchronization in the MSCCL++ executor (execute.py; docs/mscclpp-plan.md, "How collsynth checks a
plan"): counting semaphores per channel direction and device semaphore (balanced per launch before
running; what a wait is guaranteed to see), nops and barriers that join a thread block's lanes, and the
port-channel proxies (requests served in FIFO order, flush)."""

from __future__ import annotations

from typing import Any

import numpy as np

from collsynth.backends.mscclpp.exec_state import Actor, Counter, ExecBase, ExecFailure, Proxy
from collsynth.backends.mscclpp.load import Chan
from collsynth.backends.mscclpp.model import SIGNAL_OPS, WAIT_OPS, Gpu, Op, ThreadBlock


class Synchronization(ExecBase):
    """Counters, barriers and proxies, and the vector clocks they pass between actors."""

    counters: dict[Any, Counter]
    barriers: dict[tuple[int, int], list[tuple[Actor, int]]]
    proxies: dict[tuple[int, int], Proxy]
    light_counter: dict[Any, Proxy]  # the counter a light proxy's signals increment -> the proxy

    # ------------------------------------------------------------------ static counts
    def _counter(self, key: Any, init: int = 0, desc: str = "") -> Counter:
        c = self.counters.get(key)
        if c is None:
            c = self.counters[key] = Counter(init, desc)
        return c

    def chan_counter(self, rank: int, ctype: str, c: int) -> tuple[Any, Chan]:
        """The inbound counter that a signal on rank's channel c increments (the peer's paired channel)."""
        ch = self.pairs[(rank, ctype, c)]
        if ch.peer_index < 0:
            return ("unpaired", rank, ctype, c), ch
        return ("chan", ch.peer, ctype, ch.peer_index), ch

    def static_counts(self) -> None:
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
            c.waiters = len(waiters)
            nw = sum(len(v) for v in waiters.values())
            if ns != nw:
                self._unbalanced(key, ns, nw, sig.get(key, {}), waiters)

    def _sync_keys(self, g: Gpu, tb: ThreadBlock, op: Op) -> list[tuple[Any, str]]:
        name, ct = op.name, op.channel_type
        out: list[tuple[Any, str]] = []
        if name in SIGNAL_OPS or (name in ("pws", "pwsf") and ct == "port"):
            ids = op.channel_ids if name in SIGNAL_OPS else op.channel_ids[:len(op.dst)]
            for c in ids:
                out.append((self.chan_counter(g.id, ct, tb.channels[ct][c])[0], "signal"))
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

    # ------------------------------------------------------------------ threads and barriers
    def sync_threads(self, a: Actor) -> None:
        """A nop: what any lane of the thread block learned is known to all of its threads."""
        vc = a.vc.copy()  # a new clock: the snapshots published so far share the old one
        for v in a.lanes.values():
            np.maximum(vc, v, out=vc)
        vc[a.id] = a.tick
        a.vc = vc
        if a.lane_lv:
            a.lv = max(a.lv, *a.lane_lv.values())
        if a.lane_mlv:
            a.mlv = max(a.mlv, *a.lane_mlv.values())
        a.lanes.clear()
        a.lane_lv.clear()
        a.lane_mlv.clear()

    def lane_knowledge(self, a: Actor, lane: int) -> tuple[np.ndarray, int, int]:
        """(vector clock, level, recorded level) that ``lane`` of the thread block knows; the clock may be
        the block's own (clocks are never written in place), so callers only read it."""
        v = a.lanes.get(lane)
        vc = a.vc if v is None else np.maximum(a.vc, v)
        return vc, max(a.lv, a.lane_lv.get(lane, -1)), max(a.mlv, a.lane_mlv.get(lane, -1))

    def _acquire(self, a: Actor, lane: int, vc: np.ndarray, lv: int, mlv: int) -> None:
        cur = a.lanes.get(lane)
        a.lanes[lane] = vc if cur is None else np.maximum(cur, vc)
        a.lane_lv[lane] = max(a.lane_lv.get(lane, -1), lv)
        a.lane_mlv[lane] = max(a.lane_mlv.get(lane, -1), mlv)

    def barrier(self, a: Actor, op: Op) -> bool:
        """A barrier: blocks until its thread blocks arrive, then joins their clocks; False while blocked."""
        key = (a.rank, op.barrier_id or 0)
        if a.passed:  # woken: the barrier opened
            a.passed = False
            return True
        a.tick += 1
        self.sync_threads(a)
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
            return self.block(a, ("barrier", f"waits at barrier {key[1]} for {n} thread blocks "
                                              f"({len(arrivals)} arrived)"))
        joined = arrivals[0][0].vc.copy()
        lv = max(x.lv for x, _ in arrivals)
        mlv = max(x.mlv for x, _ in arrivals)
        for x, _ in arrivals:
            np.maximum(joined, x.vc, out=joined)
        for x, _ in arrivals:
            x.vc = joined  # at least each one's own clock
            x.lv, x.mlv = lv, mlv
            if x is not a:
                x.passed, x.blocked = True, None
                self.ready.append(x)
        self.barriers[key] = []
        return True

    # ------------------------------------------------------------------ semaphores
    def signal(self, a: Actor, g: Gpu, tb: ThreadBlock, op: Op, lane: int, c: int) -> None:
        """Signal channel ``c`` (lane ``lane``): the peer's inbound counter gets what the lane knows."""
        ct = op.channel_type
        gc = tb.channels[ct][c]
        vc, lv, mlv = self.lane_knowledge(a, lane)
        if ct == "port":
            vc, lv, mlv = self.proxy_request(a, lane, gc, vc, lv, mlv, signal=True)
        key, _ = self.chan_counter(g.id, ct, gc)
        self.post(key, a, vc, lv, mlv)

    def post(self, key: Any, a: Actor, vc: np.ndarray, lv: int, mlv: int) -> None:
        """Count one signal (or release) on a counter, with what it publishes; wakes its waiters."""
        c = self.counters[key]
        c.per_actor.setdefault(a.id, []).append(len(c.signals))
        c.signals.append((a.id, vc, lv, mlv))
        if c.waiting:
            self.wake(c.waiting)

    def wait(self, a: Actor, g: Gpu, tb: ThreadBlock, op: Op) -> bool:
        """A wait or sem_acquire: a ticket per lane, passed once the counter reaches it; False while blocked."""
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
                a.ticket[lk] = c.issued
        for lk in lanes:
            key = lk[0]
            c = self.counters[key]
            tk = a.ticket[lk]
            if len(c.signals) + c.init < tk:
                c.waiting.append(a)
                what = (f"waits on {c.desc} for signal {tk - c.init}, which never comes ({len(c.signals)} arrived)"
                        if key[0] != "sem" else f"acquires {c.desc}, which is never released enough")
                return self.block(a, ("wait", what))
        for lane, lk in enumerate(lanes):
            c = self.counters[lk[0]]
            tk = a.ticket.pop(lk)
            vc, lv, mlv = self._guaranteed(c, a, tk)
            p = self.light_counter.get(lk[0])
            if p is not None:  # its one waiter: the k-th wait sees the k-th signal
                p.waiter = a.id
                cover = p.sig_cover[len(p.waits)]
                p.wait_cover.append(max(cover, p.wait_cover[-1]) if p.wait_cover else cover)
                p.waits.append(a.tick)
            c.waits.append((a.id, a.tick))
            if vc is not None:
                self._acquire(a, lane, vc, lv, mlv)
        a.blocked = None
        return True

    def _guaranteed(self, c: Counter, a: Actor, ticket: int) -> tuple[np.ndarray | None, int, int]:
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
        if len(c.total) == 1:  # one thread block signals it (in the whole plan): the wait sees its first ``need``
            idxs = c.per_actor.get(next(iter(c.total)), [])
            j = min(need, len(idxs))
            if j < 1:
                return None, -1, -1
            sig = c.signals[idxs[j - 1]]
            if c.waiters == 1:  # one thread block waits: its later waits need later signals only
                c.signals[idxs[j - 1]] = (sig[0], None, sig[2], sig[3])
            return sig[1], sig[2], sig[3]
        for actor, idxs in c.per_actor.items():
            others = sum(k for x, k in c.total.items() if x != actor)
            j = min(need - others, len(idxs))
            if j >= 1:
                _, v, l1, m1 = c.signals[idxs[j - 1]]
                assert v is not None  # only a counter with one signalling block drops its signals' clocks
                vc = v if vc is None else np.maximum(vc, v)
                lv, mlv = max(lv, l1), max(mlv, m1)
        return vc, lv, mlv

    # ------------------------------------------------------------------ proxies
    def proxy_request(self, a: Actor, lane: int, chan: int, vc: np.ndarray, lv: int, mlv: int,
                      signal: bool = False) -> tuple[np.ndarray, int, int]:
        """Push a request: the proxy serves it after the ones before it; returns what a signal pushed now
        publishes (the pusher's knowledge and the requests ordered before it: a light proxy records the
        last of those for the wait that will count the signal)."""
        p = self.proxies[(a.rank, chan)]
        if vc is not p.vc and bool((vc > p.vc).any()):
            # the pusher's clock itself where it knows all the proxy knew (one pusher: always), else a new one;
            # the requests before keep theirs (clocks are never written in place)
            p.vc = vc if bool((vc >= p.vc).all()) else np.maximum(p.vc, vc)
        p.lv, p.mlv = max(p.lv, lv), max(p.mlv, mlv)
        p.tick += 1
        snap = self._ordered_prefix(a, lane, p)
        p.reqs.append((a.id, lane, a.tick, p.vc, p.tick, p.lv, p.mlv))
        self._settle(p)
        if signal and p.light:
            p.sig_cover.append(0 if snap is None else snap[4])
        if snap is None:
            return vc, lv, mlv  # unchanged: callers never write into what this returns
        out = np.maximum(vc, snap[3])
        if not p.light:
            out[p.id] = max(out[p.id], snap[4])
        return out, max(lv, snap[5]), max(mlv, snap[6])

    def _ordered_prefix(self, a: Actor, lane: int, p: Proxy) -> Any:
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

    def _settle(self, p: Proxy) -> None:
        """Forget the requests that no later push or flush can end its ordered prefix at: those before the
        last of the leading requests that every thread block with the channel already knows of (each one's
        clock only grows, so they stay in every prefix; the one kept gives the same answer)."""
        reqs = p.reqs
        k = -1
        while k + 1 < len(reqs):
            aid, tick = reqs[k + 1][0], reqs[k + 1][2]
            if any(x.vc[aid] < tick for x in p.pushers):
                break
            k += 1
        if k > 0:
            del reqs[:k]

    def flush(self, a: Actor, lane: int, chan: int) -> None:
        """A flush of a port channel: the lane learns what the proxy has served of its requests."""
        p = self.proxies[(a.rank, chan)]
        snap = self._ordered_prefix(a, lane, p)
        if snap is None:
            return
        if p.light:  # known to whoever knows the pusher's tick now
            self._acquire(a, lane, snap[3], snap[5], snap[6])
            p.flush_cover.append(max(snap[4], p.flush_cover[-1]) if p.flush_cover else snap[4])
            p.flushes.append(a.tick)
        else:
            self._acquire(a, lane, with_tick(snap[3], p.id, snap[4]), snap[5], snap[6])

    def proxy_clock(self, p: Proxy) -> np.ndarray:
        """The clock of the proxy's access now (its own entry is its tick; a light proxy has none)."""
        return p.vc if p.light else with_tick(p.vc, p.id, p.tick)


def with_tick(vc: np.ndarray, aid: int, tick: int) -> np.ndarray:
    """``vc`` with actor ``aid``'s entry at least ``tick``: ``vc`` itself when it is, else a new clock."""
    if vc[aid] >= tick:
        return vc
    out = vc.copy()
    out[aid] = tick
    return out
