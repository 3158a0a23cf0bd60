"""Re-plan the final broadcast of an AllReduce schedule by list scheduling in simulated time (issue 15
point 3, a large-neighbourhood move of synth/solver/lns.py).

An AllReduce ends by spreading final values: a copy whose source location is never written again holds
the full sum, and so does every location it writes. After the last transfer that is not such a final
copy has started (time T0 of the simulation), everything left is final copies: that suffix is a set of
demands (receiver, chunk run: the runs the copies wrote last) that any rank already holding the final
run may serve. The constructions fix who sends what to whom in which order (e.g. a recursive-doubling
all-gather inside a node that waits for the last chunk of the last rail to land); this re-plan chooses
sender and order again with the simulator's cost model (synth/simulate.py): for the demand that can
start soonest, the holder that delivers it soonest given its value's ready time, its send port (per link
class), the receiver's port and the route's links (free after their last use), alpha plus bytes over
the route's bottleneck bandwidth. Demands are either the copies' chunk runs or single chunks (finer
pipelining, more messages); both plans are returned and the caller simulates them.

The new copies come after every kept transfer, one step each in planned start order (ports and links
are then FIFO in the plan's order); the kept transfers keep their steps. Verified by the caller
(synth/verify.py) like every candidate of the search.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from collsynth.synth.ir import Schedule

MAX_DEMANDS = 20000  # a larger suffix is not re-planned (the Python loop would take seconds)


def final_suffix(s: Schedule, start: np.ndarray, after: float = 0.0) -> tuple[np.ndarray, float] | None:
    """(mask of the transfers of the final broadcast suffix, T0), or None when there is none: copies whose
    source is final at their step and that start at or after T0, the latest start of any other transfer,
    all in the phase region of the schedule's last step."""
    if s.collective != "allreduce" or not s.ntransfers:
        return None
    n, C = s.nranks, s.nchunks
    counts = s.count.astype(np.int64)
    rep = np.repeat(np.arange(s.ntransfers), counts)
    offs = np.arange(len(rep)) - np.repeat(np.cumsum(counts) - counts, counts)
    ch = s.chunk[rep] + offs
    lw = np.full(n * C, -1, np.int64)
    np.maximum.at(lw, s.dst[rep] * C + ch, s.step[rep])
    src_lw = lw[s.src[rep] * C + ch]
    ok_unit = (src_lw >= 0) & (src_lw < s.step[rep])
    final = np.ones(s.ntransfers, np.bool_)
    np.logical_and.at(final, rep, ok_unit)
    final &= ~s.reduce
    phase = s.phase_of_step()
    final &= phase[s.step] == phase[s.nsteps - 1]
    if final.all():
        return None
    t0 = max(float(start[~final].max()), after)
    suffix = final & (start >= t0)
    if not suffix.any():
        return None
    return suffix, t0


def replan(s: Schedule, start: np.ndarray, end: np.ndarray, topology: Any, size: float,
           units: bool, after: float = 0.0, order: str = "soonest") -> Schedule | None:
    """The schedule with its final broadcast suffix re-planned (module docstring); ``units``: one chunk per
    demand instead of the copies' runs. None when there is no suffix or it is too large."""
    got = final_suffix(s, start, after)
    if got is None:
        return None
    suffix, _ = got
    n, C = s.nranks, s.nchunks
    keep = ~suffix
    K = max(1, len(getattr(topology, "classes", ())))
    # demands: the runs (or chunks) the suffix copies write last
    last_write: dict[tuple[int, int], int] = {}
    for t in np.flatnonzero(suffix).tolist():
        for x in range(int(s.chunk[t]), int(s.chunk[t] + s.count[t])):
            last_write[(int(s.dst[t]), x)] = t
    demands: list[tuple[int, int, int]] = []  # (receiver, first chunk, count)
    if units:
        demands = sorted((j, x, 1) for (j, x) in last_write)
    else:
        covered: set[tuple[int, int]] = set()
        for t in sorted(set(last_write.values())):
            j, c, k = int(s.dst[t]), int(s.chunk[t]), int(s.count[t])
            if all(last_write[(j, x)] == t for x in range(c, c + k)):
                demands.append((j, c, k))
                covered.update((j, x) for x in range(c, c + k))
        demands += sorted((j, x, 1) for (j, x) in last_write if (j, x) not in covered)
    if not demands or len(demands) > MAX_DEMANDS:
        return None
    # state from the kept transfers: when each location is final (holders), ports and links free
    kt = np.flatnonzero(keep)
    counts = s.count[kt].astype(np.int64)
    rep = np.repeat(kt, counts)
    offs = np.arange(len(rep)) - np.repeat(np.cumsum(counts) - counts, counts)
    ch = s.chunk[rep] + offs
    ready = np.full(n * C, np.inf)  # when (rank, chunk) holds its final value (inf: not yet)
    lw_keep = np.full(n * C, -1, np.int64)
    np.maximum.at(lw_keep, s.dst[rep] * C + ch, s.step[rep])
    free_loc = np.zeros(n * C)  # a demand may not write before the kept accesses of its location end
    np.maximum.at(free_loc, s.dst[rep] * C + ch, end[rep])
    np.maximum.at(free_loc, s.src[rep] * C + ch, end[rep])
    # a location is final when its last kept write is a final value and no suffix copy writes it
    wrote_end = np.zeros(n * C)
    np.maximum.at(wrote_end, s.dst[rep] * C + ch, end[rep])
    demanded = np.zeros(n * C, np.bool_)
    for (j, x) in last_write:
        demanded[j * C + x] = True
    has_final = _final_locations(s, keep)
    ready[has_final & ~demanded] = wrote_end[has_final & ~demanded]
    if K > 1:
        first, last = topology.route_classes(s.src, s.dst)
    else:
        first = last = np.zeros(s.ntransfers, np.int64)
    send_free = np.zeros(n * K)
    recv_free = np.zeros(n * K)
    np.maximum.at(send_free, s.src[kt] * K + first[kt], end[kt])
    np.maximum.at(recv_free, s.dst[kt] * K + last[kt], end[kt])
    links_t, _ = topology.pair_table(np.stack([s.src[kt], s.dst[kt]], axis=1)) if len(kt) else (None, None)
    link_free = np.zeros(topology.nlinks + 1)
    if links_t is not None:
        lk = np.where(links_t >= 0, links_t, topology.nlinks)
        np.maximum.at(link_free, lk, np.repeat(end[kt], lk.shape[1]).reshape(lk.shape))
    link_free[topology.nlinks] = 0.0
    # every pair's route: links (n x n x L), alpha, bottleneck bandwidth, port classes
    pairs = np.stack(np.divmod(np.arange(n * n), n), axis=1)
    plinks, palpha = topology.pair_table(pairs)
    plinks = np.where(plinks >= 0, plinks, topology.nlinks)
    bw = np.append(topology.link_bw, np.inf)
    pbw = bw[plinks].min(axis=1) if plinks.shape[1] else np.full(n * n, np.inf)
    if K > 1:
        pf, pl = topology.route_classes(pairs[:, 0], pairs[:, 1])
    else:
        pf = pl = np.zeros(n * n, np.int64)
    planned: list[tuple[float, int, int, int, int]] = []  # (start, src, dst, chunk, count)

    def best_source(j: int, c: int, k: int) -> tuple[float, float, int]:
        rdy = ready.reshape(n, C)[:, c:c + k].max(axis=1)
        rdy[j] = np.inf
        hs = np.flatnonzero(np.isfinite(rdy))
        if not len(hs):
            return np.inf, np.inf, -1
        p = hs * n + j
        st = np.maximum(rdy[hs], free_loc[j * C + c:j * C + c + k].max())
        st = np.maximum(st, send_free[hs * K + pf[p]])
        st = np.maximum(st, recv_free[j * K + pl[p]])
        st = np.maximum(st, link_free[plinks[p]].max(axis=1))
        en = st + palpha[p] + size * k / C / pbw[p]
        i = int(np.lexsort((hs, st, en))[0])
        return float(st[i]), float(en[i]), int(hs[i])

    def commit(st: float, en: float, h: int, j: int, c: int, k: int) -> None:
        p = h * n + j
        planned.append((st, h, j, c, k))
        ready[j * C + c:j * C + c + k] = np.minimum(ready[j * C + c:j * C + c + k], en)
        send_free[h * K + pf[p]] = en
        recv_free[j * K + pl[p]] = en
        link_free[plinks[p]] = np.maximum(link_free[plinks[p]], en)
        link_free[topology.nlinks] = 0.0

    if order == "soonest":
        heap: list[tuple[float, int, int, int]] = []
        for j, c, k in demands:
            st, _, h = best_source(j, c, k)
            heap.append((st, j, c, k))
        heapq.heapify(heap)
        while heap:
            key, j, c, k = heapq.heappop(heap)
            st, en, h = best_source(j, c, k)
            if h < 0:
                if not np.isfinite(key):
                    return None  # no holder ever: the suffix is not a broadcast of final values
                heapq.heappush(heap, (np.inf, j, c, k))
                continue
            if heap and st > heap[0][0] + 1e-15 and st > key + 1e-15:
                heapq.heappush(heap, (st, j, c, k))  # not the soonest any more: look at the next one first
                continue
            commit(st, en, h, j, c, k)
    else:  # "chunks": one run at a time, in order of its first holder's ready time, as a tree (soonest end first)
        groups: dict[tuple[int, int], list[int]] = {}
        for j, c, k in demands:
            groups.setdefault((c, k), []).append(j)
        pending = sorted(groups)
        while pending:
            firsts = [float(ready.reshape(n, C)[:, c:c + k].max(axis=1).min()) for c, k in pending]
            i = int(np.argmin(firsts))
            if not np.isfinite(firsts[i]):
                return None
            c, k = pending.pop(i)
            left = list(groups[(c, k)])
            while left:
                opts = [best_source(j, c, k) + (j,) for j in left]
                st, en, h, j = min(opts, key=lambda o: (o[1], o[0], o[3]))
                if h < 0:
                    return None
                commit(st, en, h, j, c, k)
                left.remove(j)
    planned.sort()
    import os
    if os.environ.get("RP_DEBUG"): print("planned end max", max(st + 0 for st, *_ in planned), "n", len(planned))
    base = int(s.nsteps)
    steps = np.concatenate([s.step[kt], base + np.arange(len(planned))])
    cols = np.array([(h, j, c, k) for _, h, j, c, k in planned], np.int64).reshape(-1, 4)
    src = np.concatenate([s.src[kt], cols[:, 0]])
    dst = np.concatenate([s.dst[kt], cols[:, 1]])
    chunk = np.concatenate([s.chunk[kt], cols[:, 2]])
    count = np.concatenate([s.count[kt], cols[:, 3]])
    red = np.concatenate([s.reduce[kt], np.zeros(len(planned), np.bool_)])
    uniq = np.unique(steps)
    new = np.searchsorted(uniq, steps)
    phases = tuple(ph.__class__(ph.name, int(np.searchsorted(uniq, ph.start)), int(np.searchsorted(uniq, ph.stop))
                                if ph.stop < s.nsteps else len(uniq), ph.waits_for) for ph in s.phases)
    return Schedule.from_arrays(s.collective, n, C, step=new, src=src, dst=dst, chunk=chunk, count=count, reduce=red,
                                nsteps=len(uniq), phases=phases, owner=s.owner, ports=s.ports, name=s.name,
                                meta=s.meta)


def _final_locations(s: Schedule, keep: np.ndarray) -> np.ndarray:
    """Locations (rank * C + chunk) whose last write among the kept transfers leaves the final value: the
    schedule's last write of that location (so nothing changes it after) is kept."""
    n, C = s.nranks, s.nchunks
    counts = s.count.astype(np.int64)
    rep = np.repeat(np.arange(s.ntransfers), counts)
    offs = np.arange(len(rep)) - np.repeat(np.cumsum(counts) - counts, counts)
    loc = s.dst[rep] * C + s.chunk[rep] + offs
    last_t = np.full(n * C, -1, np.int64)
    order = np.lexsort((rep, s.step[rep]))  # by step, then transfer order: the last write last
    last_t[loc[order]] = rep[order]
    out = np.zeros(n * C, np.bool_)
    w = last_t >= 0
    out[w] = keep[last_t[w]]
    return out


__all__ = ["final_suffix", "replan"]
