"""Event-driven alpha-beta simulation of a Schedule on a Topology, with per-rank arrival times.

Cost model (alpha-beta, reductions free: gamma = 0). A transfer of ``count`` chunks moves
``size_bytes * count / nchunks`` bytes (no rounding) as one message along the topology's route from
src to dst. Its duration is ``alpha_path + bytes / eff_bw``: alpha_path is the sum of the route's link
alphas, and eff_bw is the minimum over the route's links of ``link_bw / k``, where k is the number of
transfers of the SAME step crossing that link (in a step that queues, those in flight at a time: below).
In words: transfers of one step that cross the same link share it equally; a link is FIFO across steps
(a transfer may not start on a link before every transfer of an earlier step that crosses it has ended).

A transfer starts at the latest of
- the arrival of its src and dst rank, and the step's phase gate (the latest arrival among the ranks
  the step's phase waits for; steps outside every phase wait for all ranks);
- RAW: the end of the last write (earlier step) of every source location (src, chunk);
- WAW and WAR: the end of the last write and of the last read (a transfer sending from it) in an
  EARLIER step of every destination location (dst, chunk). A reduce whose destination is read in the
  same step (StragglAR's two-way exchange) lands via scratch, so that is no hazard;
- port slots: each rank has ``schedule.ports`` send slots and as many receive slots. Its j-th send
  of a step takes the j-th earliest-free send slot (receives likewise) and holds it until it ends; a
  rank with more than ``ports`` transfers in one step queues the extra ones round-robin behind its
  own earlier transfers of that step (the verifier rejects such schedules; this path is slower). A
  port with q transfers in a step runs them in ceil(q / ports) rounds, so such a step shares a link
  among the transfers crossing it divided by the rounds of the deepest port among theirs (rounded up):
  those in flight at a time (within the ports, one round, that is every transfer crossing it).
  On a topology with several link classes (clusters, docs/topologies.md) every rank has
  ``topology.class_ports[c]`` send and receive slots per class c instead: a transfer takes a send slot
  of the class of its route's first hop and a receive slot of the class of its last hop, so a GPU
  drives an NVLink and a NIC message at once;
- link FIFO: every link on its route is free of transfers of earlier steps.

Times are seconds from time 0; arrivals default to 0. All transfers of a step are handled together
with numpy, so millions of transfers simulate in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from collsynth import budget, units
from collsynth.apitypes import Arrivals, Bytes, Seconds
from collsynth.errors import CollsynthError
from collsynth.synth.arrivals import arrival_vector
from collsynth.synth.ir import Schedule, as_schedule
from collsynth.synth.topology import Topology, topology_for
from collsynth.synth.verify import schedule_topology


@dataclass(frozen=True)
class SimResult:
    """Outcome of a simulation (times in seconds)."""

    completion_s: float  # when the last rank finishes: max end, or an idle rank's arrival
    after_last_arrival_s: float  # completion_s - last_arrival_s
    last_arrival_s: float
    rank_finish_s: list[float]  # per rank: end of its last send/receive (its arrival if none)
    timeline: list[dict[str, int | float]] | None = None  # per transfer: its columns, start_s, end_s
    schedule: str = ""
    topology: str = ""
    size_bytes: float = 0.0
    start_s: np.ndarray | None = field(default=None, repr=False, compare=False)  # per transfer (simulate sets both)
    end_s: np.ndarray | None = field(default=None, repr=False, compare=False)

    def to_json_dict(self) -> dict[str, object]:
        """JSON-ready summary (the timeline only if it was asked for)."""
        d: dict[str, object] = {"schedule": self.schedule, "topology": self.topology,
                             "size_bytes": self.size_bytes, "completion_s": self.completion_s,
                             "after_last_arrival_s": self.after_last_arrival_s,
                             "last_arrival_s": self.last_arrival_s, "rank_finish_s": self.rank_finish_s}
        if self.timeline is not None:
            d["timeline"] = self.timeline
        return d


def _check_columns(s: Schedule) -> None:
    n, c = s.nranks, s.nchunks
    if not s.ntransfers:
        return
    if s.src.min() < 0 or s.src.max() >= n or s.dst.min() < 0 or s.dst.max() >= n:
        raise CollsynthError(f"schedule {s.name!r} names a rank outside 0..{n - 1}")
    if np.any(s.src == s.dst):
        i = int(np.argmax(s.src == s.dst))
        raise CollsynthError(f"schedule {s.name!r}: transfer {i} (step {int(s.step[i])}) sends rank "
                             f"{int(s.src[i])} to itself; run `collsynth verify`")
    if s.count.min() < 1 or s.chunk.min() < 0 or np.max(s.chunk + s.count) > c:
        raise CollsynthError(f"schedule {s.name!r} names chunks outside 0..{c - 1} or a count < 1")
    for ph in s.phases:
        if any(not 0 <= r < n for r in ph.waits_for):
            raise CollsynthError(f"phase {ph.name!r} waits for a rank outside 0..{n - 1}")


def _pair_routes(s: Schedule, topo: Topology) -> tuple[np.ndarray, np.ndarray]:
    """Route links (T x L, -1 padded) and alpha sums (T,) of every transfer, via unique pairs."""
    pairs, inv = topo.unique_pairs(s.src, s.dst)
    links, alpha = topo.pair_table(pairs)
    return links[inv], alpha[inv]


def _occurrence(ranks: np.ndarray) -> np.ndarray:
    """For each position, how many earlier positions hold the same rank."""
    order = np.argsort(ranks, kind="stable")
    r = ranks[order]
    first = np.ones(len(r), np.bool_)
    first[1:] = r[1:] != r[:-1]
    starts = np.flatnonzero(first)
    idx = np.arange(len(r)) - np.repeat(starts, np.diff(np.append(starts, len(r))))
    out = np.empty(len(r), np.int64)
    out[order] = idx
    return out


def simulate(schedule: Schedule, size_bytes: Bytes, topology: Topology | str | None = None, arrivals: Arrivals = None,
             timeline: bool = False) -> SimResult:
    """Simulate ``schedule`` moving a ``size_bytes`` buffer per rank over ``topology``.

    See the module docstring for the model. ``topology`` may be a Topology or a preset name / JSON
    path (built for ``schedule.nranks`` GPUs with default link parameters); None takes the topology the
    schedule records (a cluster's, from `synth -t`), else nvswitch, as `collsynth simulate` does.
    """
    s = as_schedule(schedule, "simulate")
    n = s.nranks
    recorded = schedule_topology(s) if topology is None else None
    topology = recorded if recorded is not None else topology_for(topology, n)
    size = float(units.size_bytes(size_bytes))
    arr = arrival_vector(arrivals, n)
    _check_columns(s)
    # times from the first arrival (timestamps such as 1.7e9 s would leave a microsecond's float64 steps no
    # digits: 1e-7 s apart); the results are given back in the caller's time base
    t0 = float(arr.min()) if n else 0.0
    rel = arr - t0 if t0 else arr
    T = s.ntransfers
    start = np.zeros(T, np.float64)
    end = np.zeros(T, np.float64)
    if T:
        _run(s, size, topology, rel, start, end)
    finish = rel.copy()
    if T:
        np.maximum.at(finish, s.src, end)
        np.maximum.at(finish, s.dst, end)
    after = float(finish.max()) - float(rel.max())
    if t0:
        for x in (finish, start, end):
            x += t0
    completion = float(finish.max())
    last = float(arr.max())
    tl = None
    if timeline:
        cols = [s.step.tolist(), s.src.tolist(), s.dst.tolist(), s.chunk.tolist(), s.count.tolist(),
                s.reduce.tolist(), start.tolist(), end.tolist()]
        names = ("step", "src", "dst", "chunk", "count", "reduce", "start_s", "end_s")
        tl = [dict(zip(names, row)) for row in zip(*cols)]
    start.flags.writeable = False
    end.flags.writeable = False
    return SimResult(completion, after, last, finish.tolist(), tl, s.name, topology.name, size, start, end)


def _run(s: Schedule, size: float, topo: Topology, arr: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
    """The step loop: fills start and end (transfer order)."""
    n, C = s.nranks, s.nchunks
    # port entities: rank r's port of link class c is r * K + c (one entity per rank with one class)
    K = len(topo.classes)
    if K > 1:
        first, last = topo.route_classes(s.src, s.dst)
        send_port, recv_port = s.src * K + first, s.dst * K + last
        cap = np.tile(np.array([topo.class_ports[c] for c in topo.classes], np.int64), n)
    else:
        send_port, recv_port = s.src, s.dst
        cap = np.full(n, s.ports, np.int64)
    P = int(cap.max())
    # the port slots (two n K x P tables), per-(rank, chunk) times and per-step phase and gate arrays:
    # estimate before allocating
    budget.check(16.0 * n * K * P + 16.0 * n * C + 24.0 * s.nsteps, f"simulating {s.name or s.collective} ({n} "
                 f"ranks, {P} ports per rank, {C} chunks, {s.nsteps} steps)",
                 hint="a schedule or plan with fewer ports, chunks or steps")
    uniform = bool(np.all(cap == P))
    links, alpha = _pair_routes(s, topo)
    L = links.shape[1]
    S = topo.nlinks  # sentinel link for padding: infinite bandwidth, always free
    links = np.where(links < 0, S, links)
    bw = np.append(topo.link_bw, np.inf)
    nbytes = size * s.count.astype(np.float64) / C
    unit = bool(np.all(s.count == 1))
    src_loc = s.src * C + s.chunk
    dst_loc = s.dst * C + s.chunk

    # phase gates
    idx = s.phase_of_step()
    ph_gate = np.array([arr[list(ph.waits_for)].max() if ph.waits_for else 0.0 for ph in s.phases] + [arr.max()])
    gate = ph_gate[idx]  # idx == -1 picks the last entry: all ranks

    ready = np.zeros(n * C, np.float64)  # end of the last write of (rank, chunk)
    lastread = np.zeros(n * C, np.float64)  # end of the last read of (rank, chunk)
    link_free = np.zeros(S + 1, np.float64)
    share = np.zeros(S + 1, np.int64)  # scratch: transfers of the current step per link
    send_slots = np.zeros((n * K, P), np.float64)  # each row sorted ascending
    send_slots[np.arange(P)[None, :] >= cap[:, None]] = np.inf  # slots a class does not have
    recv_slots = send_slots.copy()
    mark = np.zeros(n * K, np.int64)
    bounds = s.step_bounds.tolist()

    for k in range(s.nsteps):
        lo, hi = bounds[k], bounds[k + 1]
        if lo == hi:
            continue
        m = hi - lo
        src, dst = s.src[lo:hi], s.dst[lo:hi]
        sp, rp = send_port[lo:hi], recv_port[lo:hi]
        lk = links[lo:hi]
        # port slots: does every port have at most its P transfers in this step?
        if P == 1:
            pos = np.arange(m)
            mark[sp] = pos
            ok = bool(np.all(mark[sp] == pos))
            mark[rp] = pos
            ok = ok and bool(np.all(mark[rp] == pos))
            js, jr = (None, None) if ok else (_occurrence(sp), _occurrence(rp))  # the queue needs them
        else:
            js, jr = _occurrence(sp), _occurrence(rp)
            ok = (bool(js.max() < P and jr.max() < P) if uniform
                  else bool(np.all(js < cap[sp]) and np.all(jr < cap[rp])))
        # duration: equal sharing of each link among this step's transfers (those that can run at once
        # when a port queues: _queued_shares)
        if not L:
            eff = np.full(m, np.inf)
        elif ok:
            np.add.at(share, lk, 1)
            eff = (bw[lk] / share[lk]).min(axis=1)
            share[lk] = 0
        else:
            eff = _queued_shares(lk, sp, rp, cap, bw)
        dur = alpha[lo:hi] + nbytes[lo:hi] / eff
        # earliest start from arrivals, gate, data hazards and links
        t = np.maximum(np.maximum(arr[src], arr[dst]), gate[k])
        if unit:
            sl, dl = src_loc[lo:hi], dst_loc[lo:hi]
            t = np.maximum(t, ready[sl])
            t = np.maximum(t, np.maximum(ready[dl], lastread[dl]))
        else:
            cnt = s.count[lo:hi]
            offs = np.cumsum(cnt) - cnt
            within = np.arange(int(cnt.sum())) - np.repeat(offs, cnt)
            sl = np.repeat(src_loc[lo:hi], cnt) + within
            dl = np.repeat(dst_loc[lo:hi], cnt) + within
            t = np.maximum(t, np.maximum.reduceat(ready[sl], offs))
            t = np.maximum(t, np.maximum.reduceat(np.maximum(ready[dl], lastread[dl]), offs))
        if L:
            t = np.maximum(t, link_free[lk].max(axis=1))
        if ok:
            if P == 1:
                t = np.maximum(t, np.maximum(send_slots[sp, 0], recv_slots[rp, 0]))
                e = t + dur
                send_slots[sp, 0] = e
                recv_slots[rp, 0] = e
            else:
                t = np.maximum(t, np.maximum(send_slots[sp, js], recv_slots[rp, jr]))
                e = t + dur
                send_slots[sp, js] = e
                recv_slots[rp, jr] = e
                us, ud = sp[js == 0], rp[jr == 0]  # each port once
                send_slots[us] = np.sort(send_slots[us], axis=1)
                recv_slots[ud] = np.sort(recv_slots[ud], axis=1)
        else:
            assert js is not None and jr is not None
            t, e = _queued_ports(sp, rp, js, jr, t, dur, send_slots, recv_slots, cap)
        start[lo:hi] = t
        end[lo:hi] = e
        # state for later steps
        if unit:
            np.maximum.at(ready, dl, e)
            np.maximum.at(lastread, sl, e)
        else:
            ee = np.repeat(e, cnt)
            np.maximum.at(ready, dl, ee)
            np.maximum.at(lastread, sl, ee)
        if L:
            np.maximum.at(link_free, lk, e[:, None])
            link_free[S] = 0.0


def _queued_shares(lk: np.ndarray, sp: np.ndarray, rp: np.ndarray, cap: np.ndarray, bw: np.ndarray) -> np.ndarray:
    """Effective bandwidth of each transfer of a queued step (one row of route links ``lk`` per transfer,
    the padding mapped to the always-free sentinel; send and receive port entities ``sp``, ``rp`` with
    ``cap`` slots each). A port with q transfers runs them in ceil(q / cap) rounds, one after another, so
    the transfers crossing a link are in flight over as many rounds as the deepest port among theirs:
    the link is shared equally among that many at a time (the transfers crossing it over those rounds,
    rounded up). Within the ports (one round) that is every transfer crossing it, as in every other step;
    counting every queued transfer instead charged it both its wait and a share of bandwidth it does not
    use (a GPU sending its buffer to 7 NVSwitch peers through one port took 10x as long as 7 sends). The
    work is in the step's own transfers and links, not in arrays as long as the topology's."""
    rounds = np.ones(len(sp), np.int64)  # per transfer: the rounds of the deeper of its two ports
    for port in (sp, rp):
        ids, inv, depth = np.unique(port, return_inverse=True, return_counts=True)
        rounds = np.maximum(rounds, (-(-depth // cap[ids]))[inv.ravel()])
    links, inv, crossing = np.unique(lk.ravel(), return_inverse=True, return_counts=True)  # this step's links
    inv = inv.ravel()
    span = np.ones(len(links), np.int64)
    np.maximum.at(span, inv, np.repeat(rounds, lk.shape[1]))
    k = (-(-crossing // span))[inv].reshape(lk.shape)
    return (bw[lk] / k).min(axis=1)


def _queued_ports(src: np.ndarray, dst: np.ndarray, js: np.ndarray, jr: np.ndarray, base: np.ndarray,
                  dur: np.ndarray, send_slots: np.ndarray, recv_slots: np.ndarray,
                  cap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Slow path for a step where a port has more than its P = cap[port] sends or receives.

    ``src``/``dst`` are port entities (rank, or rank and link class). The j-th send of a port takes
    slot j of its sorted send slots if j < P, else queues behind its (j-P)-th send of this step
    (receives alike); transfers are placed in schedule order.
    """
    m = len(src)
    s_l, d_l, js_l, jr_l = src.tolist(), dst.tolist(), js.tolist(), jr.tolist()
    cs_l, cr_l = cap[src].tolist(), cap[dst].tolist()
    base_l, dur_l = base.tolist(), dur.tolist()
    ss, rs = send_slots.tolist(), recv_slots.tolist()
    slot_s = {r: list(ss[r]) for r in set(s_l)}
    slot_r = {r: list(rs[r]) for r in set(d_l)}
    t_out = [0.0] * m
    e_out = [0.0] * m
    for i in range(m):
        a, b, j1, j2 = s_l[i], d_l[i], js_l[i] % cs_l[i], jr_l[i] % cr_l[i]
        t = max(base_l[i], slot_s[a][j1], slot_r[b][j2])
        e = t + dur_l[i]
        slot_s[a][j1] = e
        slot_r[b][j2] = e
        t_out[i], e_out[i] = t, e
    for r, v in slot_s.items():
        send_slots[r] = sorted(v)
    for r, v in slot_r.items():
        recv_slots[r] = sorted(v)
    return np.array(t_out), np.array(e_out)


def simulate_model(schedule: Schedule, size: Bytes, alpha: Seconds | None = None,
                   bandwidth: float | str | None = None, topology: Topology | str = "nvswitch",
                   arrivals: Arrivals = None, timeline: bool = False) -> SimResult:
    """One call for the common case: a preset or JSON topology with alpha (s) and bandwidth (B/s)."""
    topo = topology_for(topology, schedule.nranks, alpha=alpha, bandwidth=bandwidth)
    return simulate(schedule, size, topo, arrivals=arrivals, timeline=timeline)
