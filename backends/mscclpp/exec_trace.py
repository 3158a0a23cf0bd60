"""Launch 1's data movements across ranks in the MSCCL++ executor (execute.py), which the read-back
(schedule.py) turns into a Schedule: data leave a rank (record_send), land as a copy or a reduction
(record_landing), or are read from another rank's memory (record_remote_read); each movement has a
level (the transfers it depends on) and the plan's own step annotation (meta level)."""

from __future__ import annotations

from typing import Any

from collsynth.backends.mscclpp.exec_core import ExecutorCore
from collsynth.backends.mscclpp.exec_state import Actor, Movement
from collsynth.backends.mscclpp.load import Inst


def record_landing(ex: ExecutorCore, a: Actor, inst: Inst, reads: list[list[tuple[int, int, Any]]],
                   reduce_from: int) -> None:
    """Data that arrived from another rank (a movement tag) land: a copy, or a reduction when they are
    an added operand (``reduce_from``: operands from that index on are added to operand 0)."""
    if not ex.trace or a.launch != 1:
        return
    for k, s in enumerate(reads):
        for _, _, v in s:
            if v is not None and v[4] >= 0:
                mv = ex.result.movements[v[4]]
                if mv.reduce is None:
                    mv.reduce = len(reads) > 1 and k >= reduce_from
                    if mv.iteration <= 0:  # steps repeat per pipeline iteration: follow the first one
                        a.lv = max(a.lv, mv.level)
                        a.mlv = max(a.mlv, mv.meta_level)


def record_send(ex: ExecutorCore, a: Actor, inst: Inst, dst_rank: int, k: int, stream: list[tuple[int, int, Any]],
                who_lv: int, who_mlv: int, final: bool) -> int:
    """A movement leaves ``a``'s rank for ``dst_rank``; returns its tag (launch 1 only)."""
    if not ex.trace or a.launch != 1 or dst_rank == a.rank or not stream:
        return -1
    elems = [(v[1], v[1] + (p1 - p0)) for p0, p1, v in stream if v is not None]
    if not elems:
        return -1
    lo, hi = min(e[0] for e in elems), max(e[1] for e in elems)
    key = (a.rank, a.tb.id, inst.op.pos, k)  # type: ignore[union-attr]
    lvl = who_lv + 1
    prev_pc, prev_lvl = a.last_send
    if prev_pc >= 0 and prev_pc != a.pc:
        lvl = max(lvl, prev_lvl + 1)
    elif prev_pc == a.pc:
        lvl = max(lvl, prev_lvl)
    a.last_send = (a.pc, lvl)
    meta = ex.meta_steps.get(key)
    if meta is None or (meta <= who_mlv and inst.iteration <= 0):
        if ex.meta_steps:
            ex.result.meta_ok = False
        meta = who_mlv + 1
    mv = Movement(a.rank, dst_rank, lo, hi, key, inst.iteration, lvl, meta, False if final else None)
    ex.result.movements.append(mv)
    return len(ex.result.movements) - 1


def record_remote_read(ex: ExecutorCore, a: Actor, inst: Inst, src_rank: int, k: int,
                       stream: list[tuple[int, int, Any]], reduce: bool | None) -> tuple[int, int]:
    """Data read from another rank's memory landed here in the same op (get, rre, glres); returns the
    (level, recorded level) data sent on by the same op start after."""
    if not ex.trace or a.launch != 1 or src_rank == a.rank:
        return -1, -1
    elems = [(v[1], v[1] + (p1 - p0)) for p0, p1, v in stream if v is not None]
    if elems:
        key = (a.rank, a.tb.id, inst.op.pos, k)  # type: ignore[union-attr]
        meta = ex.meta_steps.get(key, a.mlv + 1)
        if ex.meta_steps and (key not in ex.meta_steps or meta <= a.mlv):
            ex.result.meta_ok = False
        ex.result.movements.append(Movement(src_rank, a.rank, min(e[0] for e in elems), max(e[1] for e in elems),
                                            key, inst.iteration, a.lv + 1, meta, reduce))
        return a.lv + 1, meta
    return -1, -1
