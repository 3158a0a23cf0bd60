"""Multi-straggler AllReduce (issue 15, point 3): several late ranks with arbitrary arrival times.

Our construction (no published source; it extends StragglAR, Devraj et al., arXiv 2505.23523, restated
in docs/stragglar.md). Ranks that arrive at the earliest time are *punctual*; every other rank is *late*.
The last rank to arrive is StragglAR's straggler S; the other late ranks E_1, E_2, ... (in arrival order)
merge into a reduced state kept by the punctual set while S is still away:

1. ``reducescatter`` (waits for the punctual ranks): a ring ReduceScatter among the m punctual ranks
   (Patarasuk & Yuan, JPDC 2009) over the K(n-1) chunks of StragglAR's pipelined phase 2. Every non-S
   rank has a *block* of K chunks it will own in phase 2; a punctual rank ends owning its own block
   and, as a proxy, an equal share of the late ranks' blocks (each rank's chunks are stored
   contiguously, so every ring message is one run).
2. ``merge-<rank>`` (one phase per early late rank E_j, waiting for the punctual ranks and E_1..E_j):
   E_j streams its buffer chunk by chunk, in the order S will later reduce the chunks, into whoever
   holds each chunk's partial sum, and takes its own block's partial sums from their proxies (one
   message of s/(K(n-1)) bytes per step, so E_j sends about s bytes and is pipelined: its k-th chunk is
   merged while the (k+1)-th is on the wire).
3. ``completion`` (waits for everyone): StragglAR's phase 2 (stragglar/phase2.py) with S: every
   non-S rank owns its block summed over all non-S ranks, exactly StragglAR's state after its phase 1.

Cost after the last arrival when every E_j finished merging before S arrived: StragglAR's phase 2,
(K(n-1) - 1 + ceil(log2 n)) (alpha + s/(K(n-1)) beta), about s beta + alpha: the late-GPU bound
(synth/bounds.py) up to the ceil(log2 n) - 1 extra rounds. One late rank gives StragglAR itself; no late
rank gives StragglAR with straggler n-1.

Step order and pipelining across phases (``retime``): a schedule's steps are executed in order per
port (synth/simulate.py), so E_j's merge steps placed before phase 2 would hold every owner's phase-2
messages behind E_j's last chunk even when E_j arrives only just before S. The retime pass simulates
the schedule with the given arrivals on the given topology, orders its transfers by simulated start
(which keeps every data dependency: a dependent transfer starts after its source ends), and packs them
into new steps (one send and one receive per rank per step, no hazard inside a step, StragglAR's
two-way exchanges kept together), with each step's phase the ranks that have taken part so far; the
faster of the two orders (simulated) is returned. Both are exact schedules of the same collective and
``check`` verifies either.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from collsynth.apitypes import Arrivals
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.stragglar.phase2 import phase2_plan
from collsynth.synth.algorithms.stragglar.pipeline import PAPER_MODEL, resolve_pipeline, topology_model
from collsynth.synth.algorithms.stragglar.tables import stored_sizes
from collsynth.synth.arrivals import arrival_vector, latest_rank, sooner
from collsynth.synth.ir import Phase, Schedule, derived_phases
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import topology_for
from collsynth.units import parse_rate, parse_size, parse_time

Move = tuple[int, int, int, int, bool]  # (src rank, dst rank, first physical chunk, count, reduce)


def _layout(p: int, m: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chunk placement for p non-S locals (0..m-1 punctual, m..p-1 late) and depth k.

    Returns (phys, proxy, seg): ``phys[j]`` the physical chunk of logical chunk j (chunk j is reduced
    by S in phase-2 round j and owned by local j mod p); ``proxy[j]`` the punctual local holding chunk
    j after the ReduceScatter; ``seg[i]`` the first physical chunk of punctual local i's run (seg[m] =
    k p). Late blocks' chunks are dealt to the punctual locals in logical order, as evenly as possible."""
    C = k * p
    j = np.arange(C)
    owner = j % p
    proxy = owner.copy()
    late = np.flatnonzero(owner >= m)
    q = len(late)
    share = [q // m + (1 if i < q % m else 0) for i in range(m)]
    proxy[late] = np.repeat(np.arange(m), share)
    phys = np.empty(C, np.int64)
    seg = np.zeros(m + 1, np.int64)
    pos = 0
    for i in range(m):
        seg[i] = pos
        own = j[owner == i]
        extra = late[proxy[late] == i]
        for c in np.concatenate([own, extra]):
            phys[c] = pos
            pos += 1
    seg[m] = pos
    return phys, proxy, seg


def _arrival_order(times: np.ndarray, n: int, absorb: int) -> tuple[int, list[int], list[int]]:
    """(S, punctual ranks in rank order, the other late ranks in arrival order); the ``absorb`` earliest
    late ranks count as punctual."""
    s = latest_rank(times, n)
    t0 = float(times.min())
    others = [r for r in range(n) if r != s]
    late = sorted((r for r in others if times[r] > t0), key=lambda r: (float(times[r]), r))
    punctual = sorted([r for r in others if times[r] <= t0] + late[:absorb])
    return s, punctual, late[absorb:]


def build(n: int, collective: str = "allreduce", arrivals: Arrivals = None, pipeline: int | str = "auto",
          size: int | float | str | None = None, alpha: float | str | None = None,
          bandwidth: float | str | None = None, topology: Any = None) -> Schedule:
    """Multi-straggler AllReduce for n ranks and the given ``arrivals`` ({rank: time} or one time per
    rank; see the module docstring). ``pipeline`` is phase 2's depth K (or "auto": from the alpha-beta
    model for ``size``, ``alpha``, ``bandwidth``, or what S sees on ``topology``). ``topology`` (a
    Topology or preset name; default nvswitch) is where the retime pass simulates (with a ``size``)."""
    return construct(n, collective, arrivals, pipeline, size, alpha, bandwidth, topology)


def construct(n: int, collective: str = "allreduce", arrivals: Arrivals = None, pipeline: int | str = "auto",
              size: int | float | str | None = None, alpha: float | str | None = None,
              bandwidth: float | str | None = None, topology: Any = None, retime: bool = True) -> Schedule:
    """``build`` with the model-driven choices optional: without ``retime`` or a ``size`` only the plain
    form (no trailing rank, the natural order); with both, the fastest simulated of the forms with no
    trailing rank, the last late rank trailing, and the trailing set the model predicts, each also
    retimed."""
    if not retime or size is None:
        return _construct(n, collective, arrivals, pipeline, size, alpha, bandwidth, topology, 0)
    times = arrival_vector(arrivals, n)
    topo = _topology(topology, n, alpha, bandwidth)
    best: tuple[float, int, Schedule] | None = None
    seen: set[str] = set()
    nlate = len(_arrival_order(times, n, 0)[2])
    for absorb in range(nlate + 1):
        for trail in (0, 1, "model"):
            s = _construct(n, collective, arrivals, pipeline, size, alpha, bandwidth, topo, trail, absorb)
            key = f"{s.meta['punctual']} {s.meta['trailing']}"
            if key in seen:
                continue
            seen.add(key)
            for cand in _orders(s, float(_size(size)), topo, times):
                t = simulate(cand, size, topo, times.tolist()).completion_s
                if best is None or sooner(t, best[0], float(times.max())):
                    best = (t, len(seen), cand)
    assert best is not None
    return best[2]


def _construct(n: int, collective: str, arrivals: Arrivals, pipeline: int | str, size: Any, alpha: Any,
               bandwidth: Any, topology: Any, trail: int | str, absorb: int = 0) -> Schedule:
    """One form: the ``absorb`` earliest late ranks count as punctual (the ReduceScatter waits for them);
    ``trail`` late ranks (the last ones, or "model": those whose stream the model says cannot end before
    S arrives) take no block in phase 2."""
    if collective != "allreduce":
        raise CollsynthError(f"multistraggler builds allreduce only, not {collective!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise CollsynthError(f"--gpus must be an integer >= 2, got {n!r}")
    n = int(n)
    times = arrival_vector(arrivals, n)
    topo = _topology(topology, n, alpha, bandwidth)
    s_rank, punctual, late = _arrival_order(times, n, absorb)
    if alpha is None and bandwidth is None and topo is not None:
        alpha, bandwidth = topology_model(topo, s_rank)
    s_bytes = float(_size(size)) if size is not None else float(PAPER_MODEL["size"])
    a_s = float(parse_time(alpha)) if alpha is not None else float(PAPER_MODEL["alpha"])
    bw = float(parse_rate(bandwidth)) if bandwidth is not None else float(PAPER_MODEL["bandwidth"])
    t0 = float(times[punctual].max())
    m = len(punctual)
    # late ranks whose stream cannot end before S arrives (model estimate) take no block in phase 2:
    # they only stream in, and receive each reduced chunk as a copy (``trailing``)
    t_rs0 = t0 + s_bytes / bw if m > 1 else t0
    t_s0 = max(float(times[s_rank]), t_rs0)
    if trail == "model":
        trailing = [r for r in late if max(float(times[r]), t_rs0) + s_bytes / bw > t_s0]
    else:
        trailing = late[len(late) - int(trail):]
    if not _phase2_cheap(n - len(trailing)):
        trailing = []
    owners = [r for r in late if r not in trailing]
    n2 = n - len(trailing)
    choice = resolve_pipeline(n2, pipeline, size=size, alpha=alpha, bandwidth=bandwidth)
    k = choice.k
    p = n2 - 1
    rank_of = np.array(punctual + owners + [s_rank], np.int64)  # local -> rank
    phys, proxy, seg = _layout(p, m, k)
    C = k * p
    meta: dict[str, object] = {"algorithm": "multistraggler", "straggler": s_rank,
                               "late": [[r, float(times[r])] for r in range(n) if times[r] > times.min()],
                               "punctual": m, "trailing": trailing, "pipeline": k}
    if choice.model is not None:
        meta["pipeline_model"] = choice.model
    tau = a_s + s_bytes / (C * bw)  # one chunk message in the model
    atoms: list[list[Move]] = []
    # 1. ring ReduceScatter among the punctual locals over their runs
    seglen = np.diff(seg)
    t_rs = t0 + (m - 1) * (a_s + float(seglen.max()) * s_bytes / (C * bw)) if m > 1 else t0
    for step in range(m - 1):
        for i in range(m):
            c = (i - step - 1) % m
            atoms.append([(int(rank_of[i]), int(rank_of[(i + 1) % m]), int(seg[c]), int(seglen[c]), True)])
    # 2 and 3, merged by estimated time: each late rank streams its chunks (in S's order) into their
    # holders; StragglAR's phase 2 with S, whose round j needs every contribution to chunk j merged
    plan = phase2_plan(n2, k=k)
    meta["phase2_rounds"] = plan.rounds
    bounds = np.searchsorted(plan.round, np.arange(plan.rounds + 1))
    holder = proxy.copy()  # local holding logical chunk j's partial sum
    streams = owners + trailing
    local = {r: m + i for i, r in enumerate(owners)}
    nxt = [0] * len(streams)  # next logical chunk of each late rank's stream
    start = [max(float(times[r]), t_rs) for r in streams]
    t_s = max(float(times[s_rank]), t_rs)

    def stream(i: int) -> None:
        j, r = nxt[i], streams[i]
        nxt[i] += 1
        if j % p == local.get(r, -1):
            atoms.append([(int(rank_of[holder[j]]), r, int(phys[j]), 1, True)])
            holder[j] = local[r]
        else:
            atoms.append([(r, int(rank_of[holder[j]]), int(phys[j]), 1, True)])

    for rnd in range(plan.rounds):
        est_round = t_s + rnd * tau
        while True:  # stream chunks due before this round by the model, and every chunk this round reduces
            due = [(start[i] + nxt[i] * tau, i) for i in range(len(streams))
                   if nxt[i] < C and (nxt[i] <= rnd or start[i] + nxt[i] * tau <= est_round)]
            if not due:
                break
            stream(min(due)[1])
        lo, hi = int(bounds[rnd]), int(bounds[rnd + 1])
        atoms.extend(_round_atoms(rank_of, phys, plan, lo, hi))
        if rnd < C and trailing:  # chunk rnd is complete at its owner and S: a chain through the trailing ranks
            chain = [int(rank_of[rnd % p])] + trailing
            atoms.extend([(a, b, int(phys[rnd]), 1, False)] for a, b in zip(chain, chain[1:]))
    steps = pack(atoms, arrival=times)
    mv = np.array([x for a in atoms for x in a], np.int64).reshape(-1, 5)
    nsteps = int(steps.max()) + 1 if len(steps) else 0
    phases = derived_phases(n, steps, mv[:, 0], mv[:, 1], nsteps)
    name = f"multistraggler_n{n}_l{len(late) + 1}_s{s_rank}"
    sched = Schedule.from_arrays("allreduce", n, C, step=steps, src=mv[:, 0], dst=mv[:, 1], chunk=mv[:, 2],
                                 count=mv[:, 3], reduce=mv[:, 4].astype(bool), nsteps=nsteps, phases=phases,
                                 name=name, meta=meta)
    return sched


def _phase2_cheap(n: int) -> bool:
    """Whether StragglAR's phase 2 for n ranks is built without a search (power of two or a stored design)."""
    return n <= 4 or n & (n - 1) == 0 or n in stored_sizes()


def _size(size: Any) -> float:
    return float(parse_size(size)) if isinstance(size, str) else float(size)


def _topology(topology: Any, n: int, alpha: Any, bandwidth: Any) -> Any:
    """``topology_for``; a built Topology keeps its links (``alpha`` and ``bandwidth`` then feed only the
    pipeline model, ``_construct``)."""
    named = topology is None or isinstance(topology, str)
    return topology_for(topology, n, alpha if named else None, bandwidth if named else None)


def _orders(sched: Schedule, size: float, topo: Any, times: np.ndarray) -> list[Schedule]:
    """The schedule and its retimed form (transfers reordered by their simulated start)."""
    base = simulate(sched, size, topo, times.tolist())
    assert base.start_s is not None
    again = retime(sched, base.start_s)
    return [sched, again.replace(meta={**again.meta, "retimed": True})]


def _round_atoms(rank_of: np.ndarray, phys: np.ndarray, plan: Any, lo: int, hi: int) -> list[list[Move]]:
    """Phase-2 moves lo..hi (one round) as atoms, in ranks and physical chunks: a two-way exchange (two
    reduces of one chunk between one pair) is one atom."""
    out: list[list[Move]] = []
    pair: dict[tuple[int, int, int], int] = {}
    for i in range(lo, hi):
        a, b, c = int(rank_of[plan.src[i]]), int(rank_of[plan.dst[i]]), int(phys[plan.chunk[i]])
        red = bool(plan.reduce[i])
        key = (min(a, b), max(a, b), c)
        if red and key in pair:
            out[pair[key]].append((a, b, c, 1, True))
            continue
        if red:
            pair[key] = len(out)
        out.append([(a, b, c, 1, red)])
    return out


def pack(atoms: Sequence[Sequence[Move]], port: Callable[[int, int], tuple[int, int]] | None = None,
         arrival: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
    """Step of every move of ``atoms`` (flattened, in order) such that running the steps in order computes
    what running the atoms one after another does: a step closes when the next atom would give a rank a
    second send or receive, read or write a location the step writes, or copy into a location the step
    reads (synth/ir.py's step semantics), or (given each rank's ``arrival``) bring in a rank that arrives
    later than every rank so far (so that, with ir.derived_phases, no earlier move waits for it). The
    moves of one atom always share a step. ``port(src, dst)``
    names the (send, receive) port class of a move (e.g. NVLink 0, network 1): then a rank may send and
    receive once per class per step (``port`` is called once per distinct (src, dst) pair).

    One pass with step stamps: a port or location belongs to the current step when its stamp equals it
    (so closing a step costs nothing), locations are rank * C + chunk in flat lists."""
    nch = 1 + max((x[2] + x[3] for a in atoms for x in a), default=0)
    nr = 1 + max((max(x[0], x[1]) for a in atoms for x in a), default=0)
    out: list[int] = []
    cur = 0
    s_stamp = [-1] * (nr * 8)  # port key: rank * 8 + class
    r_stamp = [-1] * (nr * 8)
    w_stamp = [-1] * (nr * nch)  # location: rank * nch + chunk
    rd_stamp = [-1] * (nr * nch)
    latest = -math.inf
    arr = None if arrival is None else [float(x) for x in arrival]
    cls_cache: dict[tuple[int, int], tuple[int, int]] = {}

    def classes(a: int, b: int) -> tuple[int, int]:
        if port is None:
            return 0, 0
        key = (a, b)
        got = cls_cache.get(key)
        if got is None:
            got = cls_cache[key] = port(a, b)
        return got

    for atom in atoms:
        moves = [(x[0], x[1], x[2], x[3], x[4], *classes(x[0], x[1])) for x in atom]
        if arr is not None:
            t_a = max(max(arr[m[0]], arr[m[1]]) for m in moves)
            new_rank = t_a > latest
            latest = max(latest, t_a)
        else:
            new_rank = False
        if out:
            hit = new_rank
            if not hit:
                for src, dst, c, k, red, cs, cr in moves:
                    ls, ld = src * nch + c, dst * nch + c
                    if (s_stamp[src * 8 + cs] == cur or r_stamp[dst * 8 + cr] == cur
                            or (cur in w_stamp[ls:ls + k] if k > 1 else w_stamp[ls] == cur)
                            or (cur in w_stamp[ld:ld + k] if k > 1 else w_stamp[ld] == cur)
                            or (not red and (cur in rd_stamp[ld:ld + k] if k > 1 else rd_stamp[ld] == cur))):
                        hit = True
                        break
            if hit:
                cur += 1
        for src, dst, c, k, _red, cs, cr in moves:
            s_stamp[src * 8 + cs] = cur
            r_stamp[dst * 8 + cr] = cur
            ls, ld = src * nch + c, dst * nch + c
            if k == 1:
                rd_stamp[ls] = cur
                w_stamp[ld] = cur
            else:
                rd_stamp[ls:ls + k] = [cur] * k
                w_stamp[ld:ld + k] = [cur] * k
        out.extend([cur] * len(moves))
    return np.array(out, np.int64)


def timeline_schedule(tl: Any, n: int, nchunks: int, times: np.ndarray, meta: dict[str, object],
                      name: str) -> Schedule:
    """The AllReduce of a listsched.Timeline's moves (``tl.ordered()``: by modelled start) packed into steps
    (``pack``; ports 2); each step's phase is the set of ranks that have taken part so far."""
    atoms = tl.ordered()
    steps = pack(atoms, tl.classes, times)
    mv = np.array([a[0] for a in atoms], np.int64).reshape(-1, 5)
    nsteps = int(steps.max()) + 1 if len(steps) else 0
    phases = derived_phases(n, steps, mv[:, 0], mv[:, 1], nsteps)
    return Schedule.from_arrays("allreduce", n, nchunks, step=steps, src=mv[:, 0], dst=mv[:, 1], chunk=mv[:, 2],
                                count=mv[:, 3], reduce=mv[:, 4].astype(bool), nsteps=nsteps, phases=phases, ports=2,
                                name=name, meta=meta)


def retime(s: Schedule, start: Sequence[float] | np.ndarray) -> Schedule:
    """Reorder ``s``'s transfers by ``start`` (simulated start times; every data dependency keeps its
    order) and repack them into steps (``pack``); phases: the ranks that have taken part so far
    (ir.derived_phases). Transfers of one step that read what another writes (two-way exchanges) stay
    one atom."""
    st = np.asarray(start, np.float64)
    groups: dict[tuple[int, int, int, int], list[int]] = {}
    atoms_idx: list[list[int]] = []
    step, src, dst, chunk, red = (s.step.tolist(), s.src.tolist(), s.dst.tolist(), s.chunk.tolist(),
                                  s.reduce.tolist())
    for i in range(s.ntransfers):
        key = (step[i], min(src[i], dst[i]), max(src[i], dst[i]), chunk[i])
        if red[i] and key in groups:
            groups[key].append(i)
            continue
        atoms_idx.append([i])
        if red[i]:
            groups[key] = atoms_idx[-1]
    first = np.array([min(st[i] for i in a) for a in atoms_idx])
    order = np.lexsort((np.array([a[0] for a in atoms_idx]), first))
    cnt = s.count.tolist()
    seq = [atoms_idx[o] for o in order.tolist()]
    steps = pack([[(src[i], dst[i], chunk[i], cnt[i], red[i]) for i in a] for a in seq])
    idx = np.array([i for a in seq for i in a], np.int64)
    nsteps = int(steps.max()) + 1 if len(steps) else 0
    phases: tuple[Phase, ...] = derived_phases(s.nranks, steps, s.src[idx], s.dst[idx], nsteps)
    return Schedule.from_arrays("allreduce", s.nranks, s.nchunks, step=steps, src=s.src[idx], dst=s.dst[idx],
                                chunk=s.chunk[idx], count=s.count[idx], reduce=s.reduce[idx], nsteps=nsteps,
                                phases=phases, ports=s.ports, name=s.name, meta=s.meta)
