"""Large-neighbourhood search over a verified schedule (issue 15 point 3): simulator-guided moves on the
critical path, then windows of steps re-solved with a MILP; a change is kept only if the schedule
verifies and simulates faster.

The solver's grid MILP (model.py) cannot hold the constructive cluster schedules (clusterstraggler:
hundreds of chunks, multi-chunk transfers, several link classes), so ``improve`` searches around the
warm start instead, in two parts.

1. Moves (synth/solver/critical.py), when ``simulate_fn`` returns the simulator's SimResult (per-transfer
   start and end) and ``size`` is given: the critical path of the simulated schedule, walked back exactly
   from the transfers that end last, and moves on it (re-source a copy of a final value, jump ahead of
   the transfer holding a port, own step, as early as the data allows, split, merge, and whole-step and
   chain variants for lockstep constructions), each simulated; kept when faster, or as fast with less
   chunk-weighted transfer end time (a plateau move), after verifying with the topology's per-class
   ports. They run until no move on the path improves, ``max_evals`` candidates (deterministic), or
   ``moves_share`` of the time limit.
2. Windows: a neighbourhood is a window of W consecutive steps of one phase; its transfers are
   re-assigned to steps of the window by a small MILP (pulp, CBC or HiGHS):

   - x[t, k] = 1 when transfer t runs in window step k; every transfer gets one step of the window;
   - data order, per location (rank, chunk) the transfers of the window touch, from the IR's step
     semantics (synth/ir.py: reads within a step see the values before the step's writes): an access
     that wrote before a later access (of an earlier step) stays in an earlier step; a read of an
     earlier step than a write stays at or before it; in one step, a read stays at or before a write
     and two writes (reduces into one location) stay together. Steps outside the window do not move,
     so the order with them holds;
   - ports: per new step, rank and link class at most class_ports sends (first hop) and receives (last
     hop), the verifier's rule (synth/verify.py);
   - objective: the fewest steps used (u[k] = 1 when step k holds a transfer; u non-increasing), then
     the earliest steps (a small weight on sum k x[t, k]);
   - re-sourcing: a copy of a final value (never written again) may come from a rank that received the
     same value by an earlier copy of the window, in a later step (a rank's serial broadcast to its
     node peers becomes a tree);
   - a second pass ("spread") may use one more step and minimises the transfers sharing a link in one
     step instead (the simulator splits a link's bandwidth among its step's transfers).

   Compacted windows are renumbered (later steps shift down); the new schedule is verified (per-class
   ports too) and simulated with the arrivals, and kept only when its completion time is lower. Windows
   are visited by how many steps of the simulated critical paths they hold (when the simulator's
   per-transfer times are at hand), then from the end of the schedule towards its start, until the time
   limit.

With the simulator's times the windows are ordered by the critical path: the first FIRST_WINDOWS run
before the moves, the others after them. Measured on the solver's cluster warm start
(bench/bench_solver_lns.py: 1 GiB, h100-cluster, rank 5 10 ms late, 30 s): at 16 GPUs clusterstraggler
goes from 4.4004 to 4.3661 ms after the arrival (a window); at 32, 64 and 128 GPUs neither part finds
a faster schedule (docs/cost-models.md says why); around a ring warm start the moves gain 9% at 32
GPUs (bench --warm ring).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collsynth import progress
from collsynth.synth.ir import Schedule
from collsynth.synth.solver.critical import MAX_UNITS, critical_path, endpoints, search
from collsynth.synth.solver.model import quiet_stdout
from collsynth.synth.verify import VerificationError, check

FIRST_WINDOWS = 3  # with moves: this many windows (the most critical steps) are solved before the moves,
FIRST_WINDOWS_SHARE = 0.2  # within this share of the time limit
MOVES_SHARE = 0.5  # the simulator-guided moves get at most this share of the time limit, the windows the rest
WINDOW_STEPS = 6
MAX_WINDOW_TRANSFERS = 160  # keeps one window's MILP to about a thousand binaries
MIN_WINDOW_SECONDS = 0.5  # no window starts with less than this left
PROGRESS_EVERY = 5  # a progress line every this many windows


@dataclass
class LnsResult:
    """The best schedule found (the warm start when nothing improved it) and what the search did."""

    schedule: Schedule
    time_s: float  # its simulated completion
    start_s: float  # the warm start's
    windows: int = 0  # windows solved
    improved: int = 0  # windows kept (verified and faster)
    steps_saved: int = 0
    moves: int = 0  # simulator-guided moves kept (synth/solver/critical.py)
    evals: int = 0  # their candidates simulated
    stats: dict[str, Any] = field(default_factory=dict)


def _verify_topology(topology: Any) -> Any:
    """The topology whose per-class ports a kept schedule must respect (one with several link classes), else
    None (the schedule's own ports)."""
    return topology if topology is not None and len(getattr(topology, "classes", ())) > 1 else None


def _ports(s: Schedule, topology: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(send class, receive class, capacity per class) of every transfer: class 0 is the schedule's own
    ports (every message counts), classes 1.. the topology's link classes when it has several."""
    classes = getattr(topology, "classes", ())
    zero = np.zeros(s.ntransfers, np.int64)
    if topology is not None and len(classes) > 1:
        first, last = topology.route_classes(s.src, s.dst)
        cap = np.array([int(s.ports)] + [topology.class_ports[c] for c in classes], np.int64)
        return np.asarray(first, np.int64) + 1, np.asarray(last, np.int64) + 1, cap
    return zero, zero, np.array([int(s.ports)], np.int64)


def window_order(s: Schedule, ts: list[int]) -> list[tuple[int, int, str]]:
    """Order constraints between the window's transfers: (t1, t2, kind) with kind "<" (step(t1) <
    step(t2)), "<=" or "=" (module docstring)."""
    acc: dict[tuple[int, int], list[tuple[int, int, bool]]] = {}  # location -> (step, transfer, writes)
    for t in ts:
        k, a, b, c, cnt, red = (int(s.step[t]), int(s.src[t]), int(s.dst[t]), int(s.chunk[t]), int(s.count[t]),
                                bool(s.reduce[t]))
        for x in range(c, c + cnt):
            acc.setdefault((a, x), []).append((k, t, False))
            if red:
                acc.setdefault((b, x), []).append((k, t, False))
            acc.setdefault((b, x), []).append((k, t, True))
    out: set[tuple[int, int, str]] = set()
    for evs in acc.values():
        for i, (k1, t1, w1) in enumerate(evs):
            for k2, t2, w2 in evs[i + 1:]:
                if t1 == t2 or not (w1 or w2):
                    continue
                if k1 > k2:
                    k1, t1, w1, k2, t2, w2 = k2, t2, w2, k1, t1, w1
                if k1 < k2:
                    out.add((t1, t2, "<" if w1 else "<="))
                elif w1 and w2:
                    out.add((min(t1, t2), max(t1, t2), "="))
                else:  # one step: the read sees the value before the write
                    rd, wr = (t1, t2) if w2 else (t2, t1)
                    out.add((rd, wr, "<="))
    return sorted(out)


MAX_SOURCES = 4  # alternative senders per copy (earlier receivers of the same value)


def last_writes(s: Schedule) -> dict[tuple[int, int], int]:
    """The last step that writes each location (rank, chunk) some transfer of ``s`` writes."""
    counts = s.count.astype(np.int64)
    rep = np.repeat(np.arange(s.ntransfers), counts)
    offs = np.arange(len(rep)) - np.repeat(np.cumsum(counts) - counts, counts)
    ranks, chunks, steps = s.dst[rep].astype(np.int64), s.chunk[rep].astype(np.int64) + offs, s.step[rep]
    order = np.lexsort((steps, chunks, ranks))  # per location, its last write last
    out: dict[tuple[int, int], int] = {}
    for r, c, k in zip(ranks[order].tolist(), chunks[order].tolist(), steps[order].tolist()):
        out[(r, c)] = k
    return out


def window_sources(s: Schedule, ts: list[int], topology: Any,
                   last_w: dict[tuple[int, int], int] | None = None) -> dict[int, list[tuple[int, int]]]:
    """Alternative senders of the window's copies: a copy t of chunks c..c+k from rank a may come from
    the receiver j of an earlier copy t' (in the window) of the same chunks from a, when neither a's nor
    j's chunks are written after t' anywhere in the schedule (the value is final: both hold the same)
    and the route from j has the same link classes. {t: [(j, t'), ...]}. ``last_w``: ``last_writes(s)``
    when the caller has it (the search keeps it per incumbent)."""
    if last_w is None:
        last_w = last_writes(s)
    copies = [t for t in ts if not s.reduce[t]]
    by_value: dict[tuple[int, int, int], list[int]] = {}
    for t in copies:
        by_value.setdefault((int(s.src[t]), int(s.chunk[t]), int(s.count[t])), []).append(t)
    out: dict[int, list[tuple[int, int]]] = {}
    for (a, c, k), group in by_value.items():
        if len(group) < 2:
            continue
        for t in group:
            opts = []
            for t2 in group:
                if t2 == t:
                    continue
                j, k2 = int(s.dst[t2]), int(s.step[t2])
                if j == int(s.dst[t]):
                    continue
                if any(last_w.get((a, x), -1) >= k2 for x in range(c, c + k)):
                    continue
                if any(last_w.get((j, x), -1) != k2 for x in range(c, c + k)):
                    continue
                if topology is not None and len(getattr(topology, "classes", ())) > 1:
                    cj = topology.route_classes(np.array([j]), np.array([int(s.dst[t])]))
                    ca = topology.route_classes(np.array([a]), np.array([int(s.dst[t])]))
                    if int(cj[0][0]) != int(ca[0][0]) or int(cj[1][0]) != int(ca[1][0]):
                        continue
                opts.append((j, t2))
            if opts:
                out[t] = opts[:MAX_SOURCES]
    return out


def _solve_window(s: Schedule, a: int, b: int, send_cls: np.ndarray, recv_cls: np.ndarray, cap: np.ndarray,
                  solver: str, limit: float, links: list[tuple[int, ...]] | None = None,
                  sources: dict[int, list[tuple[int, int]]] | None = None
                  ) -> tuple[dict[int, int], dict[int, int]] | None:
    """New window steps of the transfers of steps a..b-1, or None when the MILP found nothing (in time).
    Without ``links`` (compact): b-a steps, the fewest used; with ``links`` (the route of every transfer,
    spread): b-a+1 steps, the fewest transfers sharing a link in one step (the simulator splits a link's
    bandwidth among its step's transfers, synth/simulate.py), then the fewest steps. ``sources``
    (compact only, from ``window_sources``) lets a copy come from an earlier receiver of the same value
    instead (a broadcast chain becomes a tree). Returns (new window step, new sender) per transfer."""
    import pulp

    bounds = s.step_bounds
    ts = list(range(int(bounds[a]), int(bounds[b])))
    W = b - a + (1 if links is not None else 0)
    prob = pulp.LpProblem("collsynth_lns_window", pulp.LpMinimize)
    x = {(t, k): pulp.LpVariable(f"x_{t}_{k}", cat=pulp.LpBinary) for t in ts for k in range(W)}
    u = [pulp.LpVariable(f"u_{k}", cat=pulp.LpBinary) for k in range(W)]
    step = {t: pulp.lpSum(k * x[t, k] for k in range(W)) for t in ts}
    objective = pulp.lpSum(u) * (len(ts) * W) + pulp.lpSum(step.values())
    if links is not None:
        on_link: dict[int, list[int]] = {}
        for t in ts:
            for lk in links[t - ts[0]]:
                on_link.setdefault(lk, []).append(t)
        excess = []
        for lk, members in on_link.items():
            if len(members) < 2:
                continue
            for k in range(W):
                e = pulp.LpVariable(f"e_{lk}_{k}", 0)
                prob += e >= pulp.lpSum(x[t, k] for t in members) - 1
                excess.append(e)
        objective = pulp.lpSum(excess) * (len(ts) * W * (W + 1)) + objective
    prob += objective
    for t in ts:
        prob += pulp.lpSum(x[t, k] for k in range(W)) == 1
        for k in range(W):
            prob += x[t, k] <= u[k]
    for k in range(1, W):
        prob += u[k] <= u[k - 1]
    for t1, t2, kind in window_order(s, ts):
        if kind == "<":
            prob += step[t2] >= step[t1] + 1
        elif kind == "<=":
            prob += step[t2] >= step[t1]
        else:
            prob += step[t2] == step[t1]
    sources = sources or {}
    y: dict[tuple[int, int], Any] = {}  # (t, option) -> sender chosen; option 0 is the original sender
    zs: dict[tuple[int, int, int], Any] = {}  # (t, option, k): sent from that sender in step k
    for t, opts in sources.items():  # z[t, i, k] = x[t, k] and y[t, i], time-indexed (no big-M)
        m = len(opts) + 1
        for i in range(m):
            y[t, i] = pulp.LpVariable(f"y_{t}_{i}", cat=pulp.LpBinary)
            for k in range(W):
                zs[t, i, k] = pulp.LpVariable(f"z_{t}_{i}_{k}", cat=pulp.LpBinary)
            prob += pulp.lpSum(zs[t, i, k] for k in range(W)) == y[t, i]
            if i:  # from the earlier receiver: only once it has the value (a step after its copy)
                t2 = opts[i - 1][1]
                for k in range(W):
                    prob += zs[t, i, k] <= pulp.lpSum(x[t2, q] for q in range(k))
        prob += pulp.lpSum(y[t, i] for i in range(m)) == 1
        for k in range(W):
            prob += pulp.lpSum(zs[t, i, k] for i in range(m)) == x[t, k]
    for ranks, cls, is_send in ((s.src, send_cls, True), (s.dst, recv_cls, False)):
        groups: dict[tuple[int, int], list[tuple[int, int]]] = {}  # (rank, class) -> (t, option)
        for t in ts:
            opts = [(int(ranks[t]), 0)]
            if is_send and t in sources:
                opts += [(j, i) for i, (j, _) in enumerate(sources[t], 1)]
            for r, i in opts:
                groups.setdefault((r, 0), []).append((t, i))
                if cls[t]:
                    groups.setdefault((r, int(cls[t])), []).append((t, i))
        for (_, c), grp in groups.items():
            if len(grp) > cap[c]:
                for k in range(W):
                    load = pulp.lpSum(zs[tt, ii, k] if (tt, ii, k) in zs else x[tt, k] for tt, ii in grp)
                    prob += load <= int(cap[c])
    # the original assignment as the start (CBC and HiGHS take it as a MIP start)
    used = {int(s.step[t]) - a for t in ts}
    for (t, k), var in x.items():
        var.setInitialValue(1 if int(s.step[t]) - a == k else 0)
    for k in range(W):
        u[k].setInitialValue(1 if any(j >= k for j in used) else 0)
    for (_t, i), var in y.items():
        var.setInitialValue(1 if i == 0 else 0)
    for (t, i, k), var in zs.items():
        var.setInitialValue(1 if i == 0 and int(s.step[t]) - a == k else 0)
    if solver == "highs":
        cmd: Any = pulp.HiGHS(msg=False, timeLimit=max(0.2, limit), threads=1)
    else:
        cmd = pulp.PULP_CBC_CMD(msg=False, timeLimit=max(1, int(limit)), threads=1, warmStart=True)
    try:
        with quiet_stdout():
            prob.solve(cmd)
    except pulp.PulpSolverError:
        return None  # the solver failed on this window (e.g. killed at its limit): the incumbent stays
    if prob.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        return None
    new: dict[int, int] = {}
    senders: dict[int, int] = {}
    for t in ts:
        ks = [k for k in range(W) if (x[t, k].varValue or 0) > 0.5]
        if len(ks) != 1:
            return None
        new[t] = ks[0]
    for t, opts in sources.items():
        pick = [i for i in range(len(opts) + 1) if (y[t, i].varValue or 0) > 0.5]
        if len(pick) != 1:
            return None
        if pick[0]:
            senders[t] = opts[pick[0] - 1][0]
    return new, senders


def _apply(s: Schedule, a: int, b: int, new: dict[int, int], senders: dict[int, int] | None = None
           ) -> Schedule | None:
    """The schedule with the window's transfers on their new steps (and senders) and later steps shifted
    down; None when nothing changed."""
    src = s.src.copy()
    for t, j in (senders or {}).items():
        src[t] = j
    steps = s.step.copy()
    for t, k in new.items():
        steps[t] = a + k
    used = sorted({int(steps[t]) for t in new})
    ren = {k: a + i for i, k in enumerate(used)}
    saved = (b - a) - len(used)
    for t in new:
        steps[t] = ren[int(steps[t])]
    if np.array_equal(steps, s.step) and np.array_equal(src, s.src):
        return None
    bounds = s.step_bounds
    steps[int(bounds[b]):] -= saved  # saved < 0: a spread window took one more step
    phases = tuple(ph.__class__(ph.name, ph.start - (saved if ph.start >= b else 0),
                                ph.stop - (saved if ph.stop >= b else 0), ph.waits_for) for ph in s.phases)
    return Schedule.from_arrays(s.collective, s.nranks, s.nchunks, step=steps, src=src, dst=s.dst, chunk=s.chunk,
                                count=s.count, reduce=s.reduce, nsteps=s.nsteps - saved, phases=phases,
                                owner=s.owner, ports=s.ports, name=s.name, meta=s.meta)


def windows(s: Schedule, width: int = WINDOW_STEPS) -> list[tuple[int, int]]:
    """Windows [a, b) of at most ``width`` steps inside one phase, overlapping by half, from the last."""
    if s.nsteps < 2:
        return []
    ph = s.phase_of_step()
    bounds = s.step_bounds
    out = []
    stride = max(1, width // 2)
    a = 0
    while a < s.nsteps - 1:
        b = min(a + width, s.nsteps)
        while b > a + 1 and ph[b - 1] != ph[a]:
            b -= 1
        while b > a + 1 and int(bounds[b]) - int(bounds[a]) > MAX_WINDOW_TRANSFERS:
            b -= 1
        if b - a >= 2:
            out.append((a, b))
        a = a + stride if b - a > stride else b
    return out[::-1]


def _completion(r: Any) -> float:
    return float(r.completion_s) if hasattr(r, "completion_s") else float(r)


def _on_critical_path(s: Schedule, sim: Any, topology: Any, pending: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The windows holding the most steps of the simulated critical paths first (ties: the given order, from
    the end of the schedule): a window off every critical path cannot make the schedule faster."""
    if sim.start_s is None or not s.ntransfers or int(s.count.sum()) > MAX_UNITS:
        return pending
    start, end = np.asarray(sim.start_s), np.asarray(sim.end_s)
    steps: set[int] = set()
    for last in endpoints(end):
        steps.update(int(s.step[t]) for t, _, _ in critical_path(s, start, end, topology, last=last))
    return sorted(pending, key=lambda w: -sum(1 for k in range(w[0], w[1]) if k in steps))


def improve(s: Schedule, simulate_fn: Callable[[Schedule], Any], *, topology: Any = None,
            time_limit: float = 10.0, solver: str = "cbc", width: int = WINDOW_STEPS,
            max_windows: int | None = None, size: float | None = None, max_evals: int | None = None,
            moves_share: float = MOVES_SHARE) -> LnsResult:
    """Search around ``s`` (verified) for a faster verified schedule until ``time_limit`` seconds have
    passed (or ``max_windows`` windows were solved); ``simulate_fn`` gives a schedule's completion
    time, or its SimResult. With a SimResult (per-transfer times), a topology and ``size`` (bytes) the
    windows are ordered by the simulated critical path, the first FIRST_WINDOWS are solved, then the
    simulator-guided moves of synth/solver/critical.py run (until no move on the critical path improves,
    ``max_evals`` candidates, or ``moves_share`` of the time limit), then the other windows.
    Never returns a slower schedule."""
    t0 = time.monotonic()
    first = simulate_fn(s)
    post = time.monotonic() - t0  # seconds one verify + simulate takes (measured: the first, then the last)
    best, best_t = s, _completion(first)
    res = LnsResult(s, best_t, best_t)
    moves_ok = size is not None and topology is not None and getattr(first, "start_s", None) is not None
    last_w: tuple[Schedule, dict[tuple[int, int], int]] | None = None  # last_writes of the incumbent

    def run_windows(pending: list[tuple[int, int]], total: int, share: float = 1.0) -> None:
        """Solve ``pending`` windows while ``share`` of the time limit is not used up."""
        nonlocal best, best_t, post, last_w
        while pending:
            left = share * time_limit - (time.monotonic() - t0) - post
            if left < MIN_WINDOW_SECONDS:
                res.stats["stopped"] = "time limit"
                return
            a, b = pending.pop(0)
            if b > best.nsteps:
                continue
            send_cls, recv_cls, cap = _ports(best, topology)
            res.windows += 1
            if res.windows % PROGRESS_EVERY == 0:
                progress.note(f"solver: search window {res.windows} of {total} (steps {a}-{b - 1}), {res.improved} "
                              f"kept, {max(0.0, time_limit - (time.monotonic() - t0)):.0f} s left")
            for mode in ("compact", "spread"):
                left = share * time_limit - (time.monotonic() - t0) - post  # its result is checked after it
                if left < MIN_WINDOW_SECONDS:
                    break
                links = None
                bounds = best.step_bounds
                ts = list(range(int(bounds[a]), int(bounds[b])))
                if mode == "spread":
                    if topology is None or not hasattr(topology, "path_links"):
                        break
                    links = [topology.path_links(int(best.src[t]), int(best.dst[t])) for t in ts]
                if mode == "compact" and (last_w is None or last_w[0] is not best):
                    last_w = (best, last_writes(best))
                sources = (window_sources(best, ts, topology, last_w[1] if last_w else None) if mode == "compact"
                           else None)
                got = _solve_window(best, a, b, send_cls, recv_cls, cap, solver, min(left, 5.0), links, sources)
                cand = None if got is None else _apply(best, a, b, *got)
                if cand is None:
                    continue
                t_post = time.monotonic()
                try:
                    cand = check(cand, topology=_verify_topology(topology))
                except VerificationError:
                    continue  # never kept: only a verified schedule replaces the incumbent
                t = _completion(simulate_fn(cand))
                post = time.monotonic() - t_post
                if t < best_t * (1 - 1e-12):
                    res.steps_saved += best.nsteps - cand.nsteps
                    best, best_t = cand, t
                    res.improved += 1
                    res.stats[mode] = res.stats.get(mode, 0) + 1
                    break

    pending = windows(best, width)
    if moves_ok:
        pending = _on_critical_path(best, first, topology, pending)
    if max_windows is not None:
        pending = pending[:max_windows]
    total = len(pending)
    if moves_ok and size is not None:
        # the windows holding the most critical steps first (a few), then the moves, then the other windows
        head, pending = pending[:FIRST_WINDOWS], pending[FIRST_WINDOWS:]
        run_windows(head, total, FIRST_WINDOWS_SHARE)
        res.stats.pop("stopped", None)
        start = best
        found = search(best, simulate_fn, topology=topology, size=size, first=first if best is s else None,
                       max_evals=max_evals, deadline=t0 + moves_share * time_limit,
                       verify_topology=_verify_topology(topology))
        res.stats["moves"] = {"evaluated": found.evals, "kept": found.kept, "stopped": found.stopped,
                              **({"by_kind": dict(sorted(found.by_kind.items()))} if found.by_kind else {})}
        res.moves, res.evals = found.kept, found.evals
        if found.kept:
            best, best_t = found.schedule, found.time_s
        if best is not start and pending:  # the steps moved: the remaining windows of the new incumbent
            left = len(pending)
            pending = _on_critical_path(best, simulate_fn(best), topology, windows(best, width))[:left]
    run_windows(pending, total)
    res.schedule, res.time_s = best, best_t
    res.stats.setdefault("stopped", "all windows")
    return res


__all__ = ["LnsResult", "improve", "windows"]
