"""Op handlers of the MSCCL++ executor (execute.py): copy, put (memory and port channels, pws, pwsf),
get, the reductions (re, res, rre, rres), the LL packet ops (ppkt, rppkt, repkt, respkt, recpkt, recspkt,
cpkt, upkt) and the switch ops (glres, gstore, gstorepkt). Each reads and writes through exec_access and
records the data that cross ranks in launch 1 (movements, which schedule.py reads back)."""

from __future__ import annotations

from typing import Any

import numpy as np

from collsynth.backends.mscclpp.exec_core import ExecutorCore, Handler
from collsynth.backends.mscclpp.exec_state import Actor, Movement
from collsynth.backends.mscclpp.exec_values import sum_streams, untagged
from collsynth.backends.mscclpp.load import Inst, switch_of
from collsynth.backends.mscclpp.model import Gpu, Op, Ref, ThreadBlock

PLAIN_UNIT = 16  # bytes a thread moves at a time in copies and reductions (int4)
PACKET_UNIT = 8  # payload bytes per LL16 packet (the executor's default packet type)

# ---------------------------------------------------------------------- op handlers
def _local(ex: ExecutorCore, a: Actor, g: Gpu, ref: Ref, op: Op, inst: Inst, packet: bool = False,
           raw_scratch: bool = False, size_from: int | None = None) -> tuple[str, int, int, int]:
    """(phys, byte address, payload size, ref base) of a local reference (getBuffer: scratch + offset)."""
    off, size = ex.ref_span(g, ref, op)
    if size_from is not None:
        size = size_from
    poff = 0 if packet else inst.offset
    phys, addr = ex.phys(g.id, ref.buf, (2 * off if packet else off + poff), True, a.launch)
    return phys, addr, size, off


def _finish(ex: ExecutorCore, a: Actor, inst: Inst, reads: list[list[tuple[int, int, Any]]], reduce_from: int) -> None:
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


def _start(ex: ExecutorCore, a: Actor, inst: Inst, dst_rank: int, k: int, stream: list[tuple[int, int, Any]],
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


def _h_copy(ex: ExecutorCore, a: Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    a.tick += 1
    src, dst = op.src[0], op.dst[0]
    sp, sa, ssize, sbase = _local(ex, a, g, src, op, inst)
    size = ex.iteration_size(ssize, inst)
    if size == 0:
        return True
    dp, da, _, dbase = _local(ex, a, g, dst, op, inst)
    s = ex.read(a, op, g.id, sp, sa, size, a, a.vc, PLAIN_UNIT, a.tick, op.where)
    assert s is not None
    _finish(ex, a, inst, [s], 1)
    ex.write(a, op, g.id, dp, da, s, a, a.vc, PLAIN_UNIT, a.tick, op.where)
    return True


def _h_put(ex: ExecutorCore, a: Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    a.tick += 1
    ct = op.channel_type
    for k, (src, dst) in enumerate(zip(op.src, op.dst)):
        rank, buf = ex.target(g, tb, op, dst)
        doff, dsize = ex.ref_span(g, dst, op)
        size = ex.iteration_size(dsize, inst)
        if size == 0:
            continue
        soff, _ = ex.ref_span(g, src, op)
        if ct == "memory":
            # every source is addressed in src_buff[0]'s buffer (executor quirk)
            sp, sa = ex.phys(g.id, op.src[0].buf, soff + inst.offset, True, a.launch)
            s = ex.read(a, op, g.id, sp, sa, size, a, a.vc, PLAIN_UNIT, a.tick, op.where)
            assert s is not None
            _finish(ex, a, inst, [s], 1)
            tag = _start(ex, a, inst, rank, k, s, a.lv, a.mlv, buf != "s")
            dp, da = ex.phys(rank, buf, doff + inst.offset, False, a.launch)
            ex.write(a, op, rank, dp, da, s, a, a.vc, PLAIN_UNIT, a.tick, op.where, tag=tag)
            continue
        chan = tb.channels["port"][op.channel_ids[k]]
        vc, lv, mlv = ex.lane_knowledge(a, k)
        p = ex.proxies[(g.id, chan)]
        ex.proxy_request(a, k, chan, vc, lv, mlv)
        # the proxy reads the registered source: scratch without the launch's half, i/o from their base
        sp, sa = ex.phys(g.id, src.buf, soff + inst.offset, False, a.launch)
        label = f"(port put of {op.where} by {ex.names[a.id]})"
        s = ex.read(a, op, g.id, sp, sa, size, p, p.vc, 0, p.tick, label)
        assert s is not None
        _finish(ex, a, inst, [s], 1)
        tag = _start(ex, a, inst, rank, k, s, p.lv, p.mlv, buf != "s")
        dp, da = ex.phys(rank, buf, doff + inst.offset, False, a.launch)
        ex.write(a, op, rank, dp, da, s, p, p.vc, 0, p.tick, label, tag=tag)
        if op.name in ("pws", "pwsf"):
            svc, slv, smlv = ex.proxy_request(a, k, chan, vc, lv, mlv)
            key, _ = ex.chan_counter(g.id, "port", chan)
            ex.post(key, a, svc, slv, smlv)
        if op.name == "pwsf":
            ex.flush(a, k, chan)
    return True


def _remote_movement(ex: ExecutorCore, a: Actor, inst: Inst, src_rank: int, k: int,
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


def _h_get(ex: ExecutorCore, a: Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    a.tick += 1
    for k, (src, dst) in enumerate(zip(op.src, op.dst)):
        rank, buf = ex.target(g, tb, op, src)
        soff, ssize = ex.ref_span(g, src, op)
        doff, _ = ex.ref_span(g, dst, op)
        size = ex.iteration_size(ssize, inst)
        if size == 0:
            continue
        # quirk: the remote is read at dst's offset and the local buffer written at src's offset
        rp, ra = ex.phys(rank, buf, doff + inst.offset, False, a.launch)
        s = ex.read(a, op, rank, rp, ra, size, a, a.vc, PLAIN_UNIT, a.tick, op.where)
        assert s is not None
        _finish(ex, a, inst, [s], 1)
        _remote_movement(ex, a, inst, rank, k, s, None)  # lands as a copy or a reduction where it is used
        tag = len(ex.result.movements) - 1 if ex.trace and a.launch == 1 and rank != g.id else -1
        lp, la = ex.phys(g.id, dst.buf, soff + inst.offset, True, a.launch)
        ex.write(a, op, g.id, lp, la, s, a, a.vc, PLAIN_UNIT, a.tick, op.where, tag=tag)
    return True


def _h_reduce(ex: ExecutorCore, a: Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    """re, res, rre, rres: out[0] = in[0] + in[1..] (local or remote), then res/rres copy out[0] to the
    remote out[1..]."""
    op = inst.op
    a.tick += 1
    name = op.name
    in0 = op.src[0]
    off0, size0 = ex.ref_span(g, in0, op)
    size = ex.iteration_size(size0, inst)
    if size == 0:
        return True
    streams = []
    read_lv, read_mlv = a.lv, a.mlv
    for k, ref in enumerate(op.src):
        off, _ = ex.ref_span(g, ref, op)
        if ref.kind == "local":
            p, addr = ex.phys(g.id, ref.buf, off + inst.offset, True, a.launch)
            s = ex.read(a, op, g.id, p, addr, size, a, a.vc, PLAIN_UNIT, a.tick, op.where)
        else:
            rank, buf = ex.target(g, tb, op, ref)
            p, addr = ex.phys(rank, buf, off + inst.offset, False, a.launch)
            s = ex.read(a, op, rank, p, addr, size, a, a.vc, PLAIN_UNIT, a.tick, op.where)
            assert s is not None
            lv1, mlv1 = _remote_movement(ex, a, inst, rank, k, s, True)
            read_lv, read_mlv = max(read_lv, lv1), max(read_mlv, mlv1)
        assert s is not None
        streams.append(s)
    _finish(ex, a, inst, streams, 1)
    total = untagged(sum_streams(streams, ex.where(a, op)) if len(streams) > 1 else streams[0])
    out0 = op.dst[0]
    doff, _ = ex.ref_span(g, out0, op)
    dp, da = ex.phys(g.id, out0.buf, doff + inst.offset, True, a.launch)
    ex.write(a, op, g.id, dp, da, total, a, a.vc, PLAIN_UNIT, a.tick, op.where)
    if name in ("res", "rres"):
        for k, ref in enumerate(op.dst[1:], start=1):
            rank, buf = ex.target(g, tb, op, ref)
            off, _ = ex.ref_span(g, ref, op)
            tag = _start(ex, a, inst, rank, k, total, read_lv, read_mlv, buf != "s")
            p, addr = ex.phys(rank, buf, off + inst.offset, False, a.launch)
            ex.write(a, op, rank, p, addr, total, a, a.vc, PLAIN_UNIT, a.tick, op.where, tag=tag)
    return True


def _release(a: Actor) -> np.ndarray:
    rel = a.vc.copy()
    rel[a.id] = a.tick
    return rel


def _h_ppkt(ex: ExecutorCore, a: Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    a.tick += 1
    for k, (src, dst) in enumerate(zip(op.src, op.dst)):
        soff, ssize = ex.ref_span(g, src, op)
        sp, sa = ex.phys(g.id, op.src[0].buf, soff, True, a.launch)  # addressed in src_buff[0]'s buffer
        s = ex.read(a, op, g.id, sp, sa, ssize, a, a.vc, PACKET_UNIT, a.tick, op.where)
        assert s is not None
        _finish(ex, a, inst, [s], 1)
        rank, buf = ex.target(g, tb, op, dst)
        doff, _ = ex.ref_span(g, dst, op)
        tag = _start(ex, a, inst, rank, k, s, a.lv, a.mlv, False)
        dp, da = ex.phys(rank, buf, ex.scratch_offset(a.launch) + 2 * doff, False, a.launch)
        ex.write(a, op, rank, dp, da, s, a, a.vc, 2 * PACKET_UNIT, a.tick, op.where, packet=True,
                  rel=_release(a), tag=tag)
    return True


def _read_packets(ex: ExecutorCore, a: Actor, g: Gpu, op: Op, ref: Ref, size: int | None = None,
                  local_buffer: bool = False) -> list[tuple[int, int, Any]] | None:
    """Packets of a local reference: in scratch (raw + the launch's half), or through getBuffer."""
    off, rsize = ex.ref_span(g, ref, op)
    buf = ref.buf if local_buffer else "s"
    p, addr = ex.phys(g.id, buf, 2 * off, True, a.launch)
    s = ex.read(a, op, g.id, p, addr, rsize if size is None else size, a, a.vc, 2 * PACKET_UNIT, a.tick,
                 op.where, packet=True)
    if s is None:
        ex.pkt_waiters.setdefault((g.id, p), []).append(a)
    return s


def _packets_in(ex: ExecutorCore, a: Actor, g: Gpu, op: Op, refs: tuple[Ref, ...], size: int | None = None,
                local_buffer: bool = False) -> list[list[tuple[int, int, Any]]] | None:
    """Packets an op spins on (its tick counted once however often it is woken); None, with the thread
    block blocked, until all of them carry this launch's flag."""
    if a.blocked is None:
        a.tick += 1
    out = []
    for ref in refs:
        s = _read_packets(ex, a, g, op, ref, size, local_buffer)
        if s is None:
            ex.block(a, ("packets", f"spins on packets at chunk {ref.index} of its scratch that never carry "
                                     f"launch {a.launch}'s flag"))
            return None
        out.append(s)
    a.blocked = None
    return out


def _landed_packets(ex: ExecutorCore, a: Actor, g: Gpu, inst: Inst) -> list[tuple[int, int, Any]] | None:
    """The packets of src_buff[0] once they carry this launch's flag (data from a peer land here)."""
    got = _packets_in(ex, a, g, inst.op, inst.op.src[:1])
    if got is not None:
        _finish(ex, a, inst, got, 1)
    return None if got is None else got[0]


def _h_rppkt(ex: ExecutorCore, a: Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    s = _landed_packets(ex, a, g, inst)
    if s is None:
        return False
    if op.channel_type == "port":
        a.tick += 1
        ex.sync_threads(a)  # the handler syncs the block between reading and putting
    for k, dst in enumerate(op.dst):
        rank, buf = ex.target(g, tb, op, dst)
        doff, _ = ex.ref_span(g, dst, op)
        dp, da = ex.phys(rank, buf, ex.scratch_offset(a.launch) + 2 * doff, False, a.launch)
        if op.channel_type == "memory":
            tag = _start(ex, a, inst, rank, k, s, a.lv, a.mlv, False)
            ex.write(a, op, rank, dp, da, s, a, a.vc, 2 * PACKET_UNIT, a.tick, op.where, packet=True,
                      rel=_release(a), tag=tag)
        else:
            chan = tb.channels["port"][op.channel_ids[k]]
            vc, lv, mlv = ex.lane_knowledge(a, k)
            ex.proxy_request(a, k, chan, vc, lv, mlv)
            p = ex.proxies[(g.id, chan)]
            tag = _start(ex, a, inst, rank, k, s, p.lv, p.mlv, False)
            label = f"(port rppkt of {op.where} by {ex.names[a.id]})"
            ex.write(a, op, rank, dp, da, s, p, p.vc, 0, p.tick, label, packet=True, rel=p.vc.copy(), tag=tag)
    return True


def _h_reduce_packets(ex: ExecutorCore, a: Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    """repkt/respkt/recpkt/recspkt: out[0] = in[0] (plain) + packets in[1..] (local scratch)."""
    op = inst.op
    in0 = op.src[0]
    off0, size = ex.ref_span(g, in0, op)
    pk = _packets_in(ex, a, g, op, op.src[1:], size)
    if pk is None:
        return False
    sp, sa = ex.phys(g.id, in0.buf, off0, True, a.launch)
    s0 = ex.read(a, op, g.id, sp, sa, size, a, a.vc, PACKET_UNIT, a.tick, op.where)
    assert s0 is not None
    streams = [s0, *pk]
    _finish(ex, a, inst, streams, 1)
    total = untagged(sum_streams(streams, ex.where(a, op)))
    out0 = op.dst[0]
    doff, _ = ex.ref_span(g, out0, op)
    dp, da = ex.phys(g.id, out0.buf, doff, True, a.launch)
    ex.write(a, op, g.id, dp, da, total, a, a.vc, PACKET_UNIT, a.tick, op.where)
    first_remote = 1
    if op.name in ("recpkt", "recspkt"):
        o1 = op.dst[1]
        off1, _ = ex.ref_span(g, o1, op)
        p1, a1 = ex.phys(g.id, o1.buf, 2 * off1, True, a.launch)
        ex.write(a, op, g.id, p1, a1, total, a, a.vc, 2 * PACKET_UNIT, a.tick, op.where, packet=True,
                  rel=_release(a))
        first_remote = 2
    if op.name in ("respkt", "recspkt"):
        for k, ref in enumerate(op.dst[first_remote:], start=first_remote):
            rank, buf = ex.target(g, tb, op, ref)
            off, _ = ex.ref_span(g, ref, op)
            tag = _start(ex, a, inst, rank, k, total, a.lv, a.mlv, False)
            p, addr = ex.phys(rank, buf, ex.scratch_offset(a.launch) + 2 * off, False, a.launch)
            ex.write(a, op, rank, p, addr, total, a, a.vc, 2 * PACKET_UNIT, a.tick, op.where, packet=True,
                      rel=_release(a), tag=tag)
    return True


def _h_cpkt(ex: ExecutorCore, a: Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    a.tick += 1
    src, dst = op.src[0], op.dst[0]
    soff, size = ex.ref_span(g, src, op)
    sp, sa = ex.phys(g.id, src.buf, soff, True, a.launch)
    s = ex.read(a, op, g.id, sp, sa, size, a, a.vc, PACKET_UNIT, a.tick, op.where)
    assert s is not None
    doff, _ = ex.ref_span(g, dst, op)
    dp, da = ex.phys(g.id, dst.buf, 2 * doff, True, a.launch)
    ex.write(a, op, g.id, dp, da, s, a, a.vc, 2 * PACKET_UNIT, a.tick, op.where, packet=True, rel=_release(a))
    return True


def _h_upkt(ex: ExecutorCore, a: Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    s = _landed_packets(ex, a, g, inst)
    if s is None:
        return False
    dst = op.dst[0]
    doff, _ = ex.ref_span(g, dst, op)
    dp, da = ex.phys(g.id, dst.buf, doff, True, a.launch)
    ex.write(a, op, g.id, dp, da, s, a, a.vc, PACKET_UNIT, a.tick, op.where)
    return True


def _members(ex: ExecutorCore, g: Gpu, tb: ThreadBlock, ref: Ref) -> tuple[tuple[int, ...], str]:
    sw = switch_of(g, tb, ref.id)
    return tuple(sorted(sw.ranks)), sw.buf


def _h_glres(ex: ExecutorCore, a: Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    a.tick += 1
    src, dst = op.src[0], op.dst[0]
    soff, ssize = ex.ref_span(g, src, op)
    size = ex.iteration_size(ssize, inst)
    if size == 0:
        return True
    ranks, sbuf = _members(ex, g, tb, src)
    streams = []
    read_lv, read_mlv = a.lv, a.mlv
    for r in ranks:
        p, addr = ex.phys(r, sbuf, soff + inst.offset, False, a.launch)
        s = ex.read(a, op, r, p, addr, size, a, a.vc, PLAIN_UNIT, a.tick, op.where)
        assert s is not None
        lv1, mlv1 = _remote_movement(ex, a, inst, r, 100 + r, s, True)
        read_lv, read_mlv = max(read_lv, lv1), max(read_mlv, mlv1)
        streams.append(s)
    total = untagged(sum_streams(streams, ex.where(a, op)))
    dranks, dbuf = _members(ex, g, tb, dst)
    doff, _ = ex.ref_span(g, dst, op)
    for r in dranks:
        p, addr = ex.phys(r, dbuf, doff + inst.offset, False, a.launch)
        tag = _start(ex, a, inst, r, r, total, read_lv, read_mlv, True)
        ex.write(a, op, r, p, addr, total, a, a.vc, PLAIN_UNIT, a.tick, op.where, tag=tag)
    return True


def _h_gstore(ex: ExecutorCore, a: Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    packet = op.name == "gstorepkt"
    src, dst = op.src[0], op.dst[0]
    soff, ssize = ex.ref_span(g, src, op)
    if packet:
        got = _packets_in(ex, a, g, op, op.src[:1], local_buffer=True)
        if got is None:
            return False
        s: list[tuple[int, int, Any]] | None = got[0]
        size = ssize
    else:
        a.tick += 1
        size = ex.iteration_size(ssize, inst)
        if size == 0:
            return True
        sp, sa = ex.phys(g.id, src.buf, soff + inst.offset, True, a.launch)
        s = ex.read(a, op, g.id, sp, sa, size, a, a.vc, PLAIN_UNIT, a.tick, op.where)
    assert s is not None
    _finish(ex, a, inst, [s], 1)
    dranks, dbuf = _members(ex, g, tb, dst)
    doff, _ = ex.ref_span(g, dst, op)
    for r in dranks:
        if packet:
            p, addr = ex.phys(r, dbuf, ex.scratch_offset(a.launch) + 2 * doff, False, a.launch)
        else:
            p, addr = ex.phys(r, dbuf, doff + inst.offset, False, a.launch)
        tag = _start(ex, a, inst, r, r, s, a.lv, a.mlv, not packet)
        ex.write(a, op, r, p, addr, s, a, a.vc, 2 * PACKET_UNIT if packet else PLAIN_UNIT, a.tick, op.where,
                  packet=packet, rel=_release(a) if packet else None, tag=tag)
    return True


HANDLERS: dict[str, Handler] = {
    "copy": _h_copy, "put": _h_put, "pws": _h_put, "pwsf": _h_put, "get": _h_get,
    "re": _h_reduce, "res": _h_reduce, "rre": _h_reduce, "rres": _h_reduce,
    "ppkt": _h_ppkt, "rppkt": _h_rppkt, "repkt": _h_reduce_packets, "respkt": _h_reduce_packets,
    "recpkt": _h_reduce_packets, "recspkt": _h_reduce_packets, "cpkt": _h_cpkt, "upkt": _h_upkt,
    "glres": _h_glres, "gstore": _h_gstore, "gstorepkt": _h_gstore,
}
