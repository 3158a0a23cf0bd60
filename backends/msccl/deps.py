"""Dependencies between the thread blocks of a lowered program (``lower.py``).

1. Hazards. For each rank, steps are visited in the Schedule's order (step, then sends before receives
   before local reductions). A step that reads a chunk last written by another thread block, or writes
   a chunk that another thread block read or wrote since, waits for that step; locations are taken in
   place, where the input and output buffers alias, so the program is safe in both call modes. A
   dependency is dropped when the waiting thread block already knows the step finished (through its
   own earlier dependencies, transitively) or when another dependency of the same step implies it.
   The pieces of one multi-chunk transfer (split where its chunks are not contiguous in a buffer) are
   one transfer of the Schedule: in the step model they share a step (their sends, and their
   receives, follow each other at weight 0). Counting them as a send per step made a verified ring
   ReduceScatter whose last transfer moves two chunks (rank 2 sends its partial sum of chunk 0 from
   scratch and its own chunk 1 from the input) a positive cycle through the ring's forwarding: a
   model artefact, not a deadlock (sends do not wait for their receiver; check.py runs it).
2. Ordering. The runtime is data-driven: a transfer whose data and peers are ready runs at once,
   maybe before its step in the Schedule (a rank sending two chunks in one step instead of one per
   step). Levels are computed with the timing model of ``levels.py``; a transfer that would run
   early waits for a step of its sender (or receiver) in the previous Schedule step. Then the program
   and the Schedule put every transfer in the same step, and both simulate alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collsynth.backends.layout import Loc
from collsynth.backends.msccl.levels import LEVEL_WEIGHT, LOCAL, RECV, SEND, longest_levels
from collsynth.backends.msccl.lower import Lowered, Op
from collsynth.errors import CollsynthError


def hazard_deps(low: Lowered) -> None:
    """Fill ``op.deps`` with the cross-thread-block hazards of every rank."""
    for r, rops in enumerate(low.ops):
        known: dict[int, dict[int, int]] = {tb.idx: {} for tb in low.tbs[r]}
        last_w: dict[Loc, Op] = {}
        readers: dict[Loc, dict[int, Op]] = {}
        for op in rops:
            assert op.tb is not None
            me = op.tb.idx
            need: dict[int, Op] = {}

            def want(y: Op) -> None:
                assert y.tb is not None
                if y.tb.idx == me:
                    return
                cur = need.get(y.tb.idx)
                if cur is None or y.pos > cur.pos:
                    need[y.tb.idx] = y

            for loc in op.reads:
                w = last_w.get(loc)
                if w is not None:
                    want(w)
            for loc in op.writes:
                w = last_w.get(loc)
                if w is not None:
                    want(w)
                for y in readers.get(loc, {}).values():
                    want(y)
            kn = known[me]
            cand = [y for y in need.values() if kn.get(y.tb.idx, -1) < y.pos]  # type: ignore[union-attr]
            deps = [y for y in cand
                    if not any(z is not y and z.known.get(y.tb.idx, -1) >= y.pos for z in cand)]  # type: ignore
            deps.sort(key=lambda y: (y.tb.idx, y.pos))  # type: ignore[union-attr]
            op.deps = deps
            for y in deps:
                _learn(kn, y)
            kn[me] = op.pos
            op.known = dict(kn)
            for loc in op.reads:
                readers.setdefault(loc, {})[me] = op
            for loc in op.writes:
                last_w[loc] = op
                readers[loc] = {}


def _learn(kn: dict[int, int], y: Op) -> None:
    y.hasdep = True
    for ti, pi in y.known.items():
        if kn.get(ti, -1) < pi:
            kn[ti] = pi


def _parts(op: Op, local_id: dict[int, int]) -> list[tuple[int, int]]:
    out = []
    if op.xin >= 0:
        out.append((RECV, op.xin))
    if op.xout >= 0:
        out.append((SEND, op.xout))
    if not out:
        out.append((LOCAL, local_id[id(op)]))
    return out


def levels(low: Lowered) -> np.ndarray:
    """Level of every piece (the step the program runs it in), by the timing model of levels.py."""
    P = len(low.pieces)
    local_id: dict[int, int] = {}
    for rops in low.ops:
        for op in rops:
            if op.xin < 0 and op.xout < 0:
                local_id[id(op)] = P + len(local_id)
    edges: list[tuple[int, int, int]] = []
    for tbs in low.tbs:
        for tb in tbs:
            prev: Op | None = None
            for op in tb.ops:
                mine = _parts(op, local_id)
                fused = op.xin >= 0 and op.xout >= 0
                if fused:
                    edges.append((op.xin, op.xout, 1))
                preds = list(op.deps) + ([prev] if prev is not None else [])
                for y in preds:
                    for pk, pn in _parts(y, local_id):
                        for xk, xn in mine:
                            if fused and xk == SEND:
                                continue
                            w = LEVEL_WEIGHT[(pk, xk)]
                            if pk == xk and pk != LOCAL and low.pieces[pn].t == low.pieces[xn].t:
                                w = 0  # two pieces of one Schedule transfer: one step, one port
                            edges.append((pn, xn, w))
                prev = op
    lv = longest_levels(P + len(local_id), edges)
    if lv is None:  # no step numbering keeps the thread blocks' order (a positive cycle of the step model):
        # the ordering dependencies could not be placed; refuse rather than emit an untimed program
        raise CollsynthError("cannot emit this schedule as MSCCL XML: its lowered thread blocks admit no step "
                             "numbering that keeps each one's order (a cycle in the step model of levels.py); "
                             "split multi-chunk transfers into one-chunk ones or use --format mscclpp-plan")
    return lv[:P]


def _latest(by_step: dict[tuple[int, int], list[Op]], rank: int, k: int, ok: Any) -> Op | None:
    """The rank's last op before step k that satisfies ``ok``."""
    for j in range(k - 1, -1, -1):
        cand = [o for o in by_step.get((rank, j), ()) if ok(o)]
        if cand:
            return cand[-1]
    return None


def order_deps(low: Lowered, recheck: bool = False) -> dict[str, Any]:
    """Add ordering dependencies so that every piece runs in its Schedule step (see module docstring);
    ``recheck`` recomputes the levels afterwards to count transfers still early or late."""
    lv = levels(low)
    steps = np.array([p.step for p in low.pieces], np.int64)
    early = np.flatnonzero(lv < steps)
    added = 0
    if len(early):
        sender, receiver = low.endpoints()
        by_step: dict[tuple[int, int], list[Op]] = {}
        for rops in low.ops:
            for op in rops:
                by_step.setdefault((op.rank, op.step), []).append(op)
        for pid in early.tolist():
            p = low.pieces[pid]
            k = p.step
            x, r = sender[pid], receiver[pid]
            anchors: list[tuple[Op, Op]] = []
            # the sender's last transfer before step k (in step k-1 when it has one: then the transfer
            # cannot run early), so that the rank's sends keep the Schedule's order ...
            if x.xin < 0:  # (a fused send follows its own receive)
                y = _latest(by_step, p.a, k, lambda o: o.xout >= 0 or o.xin >= 0 or o.type == "re")
                if y is not None and y.tb is not x.tb:
                    anchors.append((x, y))
            # ... and the receiver's last receive before step k, so that its receives do too
            y = _latest(by_step, p.b, k, lambda o: o.xin >= 0 or o.type == "re")
            if y is not None and y.tb is not r.tb:
                anchors.append((r, y))
            for op, y in anchors:
                if y not in op.deps:
                    op.deps.append(y)
                    y.hasdep = True
                    added += 1
        if not recheck:
            return {"order_deps": added}
        lv = levels(low)
    return {"order_deps": added, "early_transfers": int(np.count_nonzero(lv < steps)),
            "late_transfers": int(np.count_nonzero(lv > steps))}
