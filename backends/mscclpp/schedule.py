"""An MSCCL++ execution plan back to a collsynth Schedule (for ``info``, ``simulate`` and ``compare``).

The plan is checked first (a plan that races, hangs or computes the wrong result is refused). Its
transfers come from the symbolic execution of launch 1: every time data cross from one rank to
another (a put, a packet put, a remote read or write) is a transfer of the elements it carried, and
it is a reduction when the data are added to the receiver's data where they land. The step of each
transfer is, in this order of preference:

1. the step collsynth's emitter recorded for the op that sent it (the plan's ``collsynth`` object),
   when that record matches the plan (one entry per sending op) and respects the plan's own order (a
   transfer's step is later than the step of every transfer that landed before it was sent);
2. otherwise its level: one more than the latest transfer known to have landed when it was sent
   (through the plan's synchronization), and after the previous send of the same thread block.

Phases come from the record when they agree with the transfers, else each step waits for the ranks
that took part so far (a data-driven runtime's behaviour).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from collsynth.backends.mscclpp.check import read_plan_file, read_plan_text, run_plan
from collsynth.backends.mscclpp.execute import ExecFailure, Movement
from collsynth.backends.mscclpp.model import Plan
from collsynth.errors import CollsynthError
from collsynth.synth.ir import COLLECTIVES, Phase, Schedule, derived_phases

SENDING = ("put", "pws", "pwsf", "ppkt", "rppkt")


def sending_ops(plan: Plan) -> list[tuple[int, int, int, int]]:
    """(gpu, thread block, op position, dst index) of every op that sends data, in plan order: the
    entries the emitter's ``send_steps`` record follows."""
    out = []
    for g in plan.gpus:
        for tb in g.tbs:
            for op in tb.ops:
                for o in (op, *op.body):
                    if o.name in SENDING:
                        out += [(g.id, tb.id, o.pos, k) for k in range(len(o.dst))]
    return out


RECORD_MAX = 2**62  # a recorded step or transfer index at or above this is no record collsynth wrote (int64 columns)


def _record(plan: Plan) -> tuple[dict[tuple[int, int, int, int], int], dict[tuple[int, int, int, int], int]] | None:
    meta = plan.meta
    steps, transfers = meta.get("send_steps"), meta.get("send_transfers")
    keys = sending_ops(plan)
    if not (isinstance(steps, list) and isinstance(transfers, list) and len(steps) == len(keys) == len(transfers)):
        return None
    if not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < RECORD_MAX for x in steps + transfers):
        return None
    return dict(zip(keys, steps)), dict(zip(keys, transfers))


def plan_to_schedule(plan: Plan, *, size: int | None = None) -> Schedule:
    """The Schedule a plan runs (see the module docstring); CollsynthError when it does not verify."""
    if plan.collective not in COLLECTIVES:
        raise CollsynthError(f"{plan.source}: a {plan.collective} plan cannot become a collsynth schedule (the "
                             f"schedule IR covers {', '.join(COLLECTIVES)})")
    rec = _record(plan)
    try:
        res = run_plan(plan, size=size, meta_steps=rec[0] if rec else None)
    except ExecFailure as f:
        raise CollsynthError(f"{plan.source} does not verify (FAIL {f.message}); fix the plan before timing "
                             f"it") from None
    c = res.chunk
    g0 = plan.gpus[0]
    total = max(g0.input_chunks, g0.output_chunks) * c
    mvs = res.movements
    rows: list[tuple[int, int, int, int, int, bool]] = []
    used_record = rec is not None and res.meta_ok
    if used_record and rec is not None:
        rows = _rows_from_record(mvs, rec[1], rec[0])
        used_record = bool(rows) or not mvs
    if not used_record:
        rows = _rows_from_levels(mvs)
    meta = plan.meta
    cols = _columns(rows, c, total, meta if used_record else {})
    nchunks = int(cols[0, 6]) if len(cols) else max(g0.input_chunks, g0.output_chunks)
    cols = cols[:, :6]
    last = int(cols[:, 0].max()) + 1 if len(cols) else 0
    if used_record:  # the recorded steps, empty steps included (never more of them than moves: a record
        # that says so is not one collsynth wrote)
        recorded = meta.get("nsteps")
        if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded > last + len(rows):
            said = str(recorded) if recorded < 2**53 else f"about 2^{recorded.bit_length() - 1}"
            raise CollsynthError(f"{plan.source}: its \"collsynth\" record says {said} steps, but its "
                                 f"operations span {last} with {len(rows)} moves: fix the record or delete it")
        nsteps = max(last, int(recorded) if isinstance(recorded, int) else 0)
    else:  # levels, numbered without gaps
        used = sorted(set(cols[:, 0].tolist()))
        renum = {v: i for i, v in enumerate(used)}
        if len(cols):
            cols[:, 0] = [renum[v] for v in cols[:, 0].tolist()]
        nsteps = len(used)
    phases = _phases_from_record(meta, cols, nsteps, plan.nranks) if used_record else None
    if phases is None:
        phases = derived_phases(plan.nranks, cols[:, 0], cols[:, 1], cols[:, 2], nsteps)
    ports = 1
    if len(cols):
        for col in (1, 2):
            ports = max(ports, int(np.unique(cols[:, 0] * plan.nranks + cols[:, col], return_counts=True)[1].max()))
    if used_record and isinstance(meta.get("ports"), int) and meta["ports"] >= ports:
        ports = int(meta["ports"])
    out_meta = {"source": plan.source, "format": "mscclpp-plan", "protocol": "LL" if plan.packets else "Simple",
                "inplace": plan.inplace, "timing": "recorded steps" if used_record else "levels"}
    for key in ("algorithm", "straggler", "gpus_per_node"):
        if meta.get(key) is not None:
            out_meta[key] = meta[key]
    name = meta.get("schedule") if used_record and isinstance(meta.get("schedule"), str) else plan.name
    return Schedule.from_arrays(plan.collective, plan.nranks, nchunks, step=cols[:, 0], src=cols[:, 1],
                                dst=cols[:, 2], chunk=cols[:, 3], count=cols[:, 4], reduce=cols[:, 5].astype(bool),
                                nsteps=nsteps, phases=tuple(phases), ports=ports, name=name or "", meta=out_meta)


def _columns(rows: list[tuple[int, int, int, int, int, bool]], c: int, total: int, meta: dict[str, Any]) -> np.ndarray:
    """(step, src, dst, chunk, count, reduce, nchunks) per row: in the schedule's chunks when the record maps
    them (schedule chunk k starts at plan chunk k*M//N), else on the coarsest grid every row fits."""
    N, M = meta.get("nchunks"), meta.get("plan_chunks")
    if isinstance(N, int) and isinstance(M, int) and 0 < N <= M and total > 0 and total % M == 0:
        unit = total // M  # bytes per plan chunk

        def chunk_at(x: int) -> int:
            """The schedule chunk starting at byte x (-1: none does): k with k M // N plan chunks before it."""
            p, rest = divmod(x, unit)
            k = -(-p * N // M)
            return k if rest == 0 and k <= N and k * M // N == p else -1

        at = {x: chunk_at(x) for r in rows for x in (r[3], r[4])}
        if -1 not in at.values():
            return np.array([(st, a, b, at[lo], at[hi] - at[lo], int(red), N)
                             for st, a, b, lo, hi, red in sorted(rows)], np.int64).reshape(-1, 7)
    grid = c if all(lo % c == 0 and hi % c == 0 for _, _, _, lo, hi, _ in rows) else math.gcd(
        total, *(x for r in rows for x in (r[3], r[4])))
    return np.array([(st, a, b, lo // grid, (hi - lo) // grid, int(red), total // grid)
                     for st, a, b, lo, hi, red in sorted(rows)], np.int64).reshape(-1, 7)


def _rows_from_record(mvs: list[Movement], transfer_of: dict[tuple[int, int, int, int], int],
                      step_of: dict[tuple[int, int, int, int], int]) -> list[tuple[int, int, int, int, int, bool]]:
    """One row per recorded schedule transfer: the union of the elements its pieces (and pipeline
    iterations) carried."""
    groups: dict[int, list[Movement]] = {}
    for mv in mvs:
        t = transfer_of.get(mv.start)
        if t is None:
            return []
        groups.setdefault(t, []).append(mv)
    rows = []
    for _, ms in sorted(groups.items()):
        keys = {(m.src, m.dst, bool(m.reduce), step_of[m.start]) for m in ms}
        if len(keys) != 1:
            return []
        (a, b, red, st), = keys
        spans = sorted((m.lo, m.hi) for m in ms)
        lo, hi = spans[0][0], spans[0][1]
        for x0, x1 in spans[1:]:
            if x0 > hi:
                return []
            hi = max(hi, x1)
        rows.append((st, a, b, lo, hi, red))
    return rows


def _rows_from_levels(mvs: list[Movement]) -> list[tuple[int, int, int, int, int, bool]]:
    """Movements of the same op slot (gpu, position, dst index) and level merged when adjacent (pipeline
    iterations, and the thread-block groups of tbg plans)."""
    groups: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
    for mv in mvs:
        key = (mv.start[0], mv.start[2], mv.start[3], mv.src, mv.dst, bool(mv.reduce),
               mv.level if mv.iteration < 0 else -1)
        groups.setdefault(key, []).append((mv.lo, mv.hi))
    level_of: dict[tuple[Any, ...], int] = {}
    for mv in mvs:
        key = (mv.start[0], mv.start[2], mv.start[3], mv.src, mv.dst, bool(mv.reduce),
               mv.level if mv.iteration < 0 else -1)
        level_of[key] = min(level_of.get(key, mv.level), mv.level)
    rows = []
    for key, spans in groups.items():
        spans.sort()
        cur = list(spans[0])
        for x0, x1 in spans[1:]:
            if x0 <= cur[1]:
                cur[1] = max(cur[1], x1)
            else:
                rows.append((level_of[key], key[3], key[4], cur[0], cur[1], key[5]))
                cur = [x0, x1]
        rows.append((level_of[key], key[3], key[4], cur[0], cur[1], key[5]))
    return rows


def _phases_from_record(meta: dict[str, Any], cols: np.ndarray, nsteps: int, n: int) -> tuple[Phase, ...] | None:
    """The recorded phases, if every phase waits for each rank that takes part in it."""
    raw = meta.get("phases")
    if not isinstance(raw, list):
        return None
    out = []
    try:
        for p in raw:
            ph = Phase(str(p["name"]), int(p["start"]), int(p["stop"]), tuple(int(r) for r in p["waits_for"]))
            if not 0 <= ph.start <= ph.stop <= nsteps or any(not 0 <= r < n for r in ph.waits_for):
                return None
            sel = cols[(cols[:, 0] >= ph.start) & (cols[:, 0] < ph.stop)]
            if not set(sel[:, 1].tolist()) | set(sel[:, 2].tolist()) <= set(ph.waits_for):
                return None
            out.append(ph)
    except (KeyError, TypeError, ValueError):
        return None
    return tuple(out)


def plan_file_to_schedule(path: str, *, size: int | None = None) -> Schedule:
    """Read, check and convert a plan file (PlanFormatError when unreadable, CollsynthError when wrong)."""
    return plan_to_schedule(read_plan_file(path), size=size)


def plan_text_to_schedule(text: str, source: str = "<plan>", *, size: int | None = None) -> Schedule:
    return plan_to_schedule(read_plan_text(text, source), size=size)
