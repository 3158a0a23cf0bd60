"""Data op handlers of the MSCCL++ executor (execute.py): copy, put (memory and port channels, pws,
pwsf), get, the reductions (re, res, rre, rres) and the switch ops (glres, gstore, gstorepkt); the LL
packet ops are in exec_packets.py. Each reads and writes through exec_access and records launch 1's
movements across ranks (exec_trace)."""

from __future__ import annotations

from typing import Any

from collsynth.backends.mscclpp.exec_access import PACKET_UNIT, PLAIN_UNIT
from collsynth.backends.mscclpp.exec_core import ExecutorCore, Handler
from collsynth.backends.mscclpp.exec_packets import packets_in, release_clock
from collsynth.backends.mscclpp.exec_state import Actor
from collsynth.backends.mscclpp.exec_trace import record_landing, record_remote_read, record_send
from collsynth.backends.mscclpp.exec_values import sum_streams, untagged
from collsynth.backends.mscclpp.load import Inst, switch_of
from collsynth.backends.mscclpp.model import Gpu, Op, Ref, ThreadBlock


def _local(ex: ExecutorCore, a: Actor, g: Gpu, ref: Ref, op: Op, inst: Inst) -> tuple[str, int, int]:
    """(phys, byte address, payload size) of a local reference (getBuffer: scratch + offset)."""
    off, size = ex.ref_span(g, ref, op)
    phys, addr = ex.phys(g.id, ref.buf, off + inst.offset, True, a.launch)
    return phys, addr, size


def _h_copy(ex: ExecutorCore, a: Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    a.tick += 1
    src, dst = op.src[0], op.dst[0]
    sp, sa, ssize = _local(ex, a, g, src, op, inst)
    size = ex.iteration_size(ssize, inst)
    if size == 0:
        return True
    dp, da, _ = _local(ex, a, g, dst, op, inst)
    s = ex.read(a, op, g.id, sp, sa, size, a, a.vc, PLAIN_UNIT, a.tick, op.where)
    assert s is not None
    record_landing(ex, a, inst, [s], 1)
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
            record_landing(ex, a, inst, [s], 1)
            tag = record_send(ex, a, inst, rank, k, s, a.lv, a.mlv, buf != "s")
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
        pk = ex.proxy_clock(p)
        s = ex.read(a, op, g.id, sp, sa, size, p, pk, 0, p.tick, label)
        assert s is not None
        record_landing(ex, a, inst, [s], 1)
        tag = record_send(ex, a, inst, rank, k, s, p.lv, p.mlv, buf != "s")
        dp, da = ex.phys(rank, buf, doff + inst.offset, False, a.launch)
        ex.write(a, op, rank, dp, da, s, p, pk, 0, p.tick, label, tag=tag)
        if op.name in ("pws", "pwsf"):
            svc, slv, smlv = ex.proxy_request(a, k, chan, vc, lv, mlv, signal=True)
            key, _ = ex.chan_counter(g.id, "port", chan)
            ex.post(key, a, svc, slv, smlv)
        if op.name == "pwsf":
            ex.flush(a, k, chan)
    return True


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
        record_landing(ex, a, inst, [s], 1)
        record_remote_read(ex, a, inst, rank, k, s, None)  # lands as a copy or a reduction where it is used
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
            lv1, mlv1 = record_remote_read(ex, a, inst, rank, k, s, True)
            read_lv, read_mlv = max(read_lv, lv1), max(read_mlv, mlv1)
        assert s is not None
        streams.append(s)
    record_landing(ex, a, inst, streams, 1)
    total = untagged(sum_streams(streams, ex.where(a, op)) if len(streams) > 1 else streams[0])
    out0 = op.dst[0]
    doff, _ = ex.ref_span(g, out0, op)
    dp, da = ex.phys(g.id, out0.buf, doff + inst.offset, True, a.launch)
    ex.write(a, op, g.id, dp, da, total, a, a.vc, PLAIN_UNIT, a.tick, op.where)
    if name in ("res", "rres"):
        for k, ref in enumerate(op.dst[1:], start=1):
            rank, buf = ex.target(g, tb, op, ref)
            off, _ = ex.ref_span(g, ref, op)
            tag = record_send(ex, a, inst, rank, k, total, read_lv, read_mlv, buf != "s")
            p, addr = ex.phys(rank, buf, off + inst.offset, False, a.launch)
            ex.write(a, op, rank, p, addr, total, a, a.vc, PLAIN_UNIT, a.tick, op.where, tag=tag)
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
        lv1, mlv1 = record_remote_read(ex, a, inst, r, 100 + r, s, True)
        read_lv, read_mlv = max(read_lv, lv1), max(read_mlv, mlv1)
        streams.append(s)
    total = untagged(sum_streams(streams, ex.where(a, op)))
    dranks, dbuf = _members(ex, g, tb, dst)
    doff, _ = ex.ref_span(g, dst, op)
    for r in dranks:
        p, addr = ex.phys(r, dbuf, doff + inst.offset, False, a.launch)
        tag = record_send(ex, a, inst, r, r, total, read_lv, read_mlv, True)
        ex.write(a, op, r, p, addr, total, a, a.vc, PLAIN_UNIT, a.tick, op.where, tag=tag)
    return True


def _h_gstore(ex: ExecutorCore, a: Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    op = inst.op
    packet = op.name == "gstorepkt"
    src, dst = op.src[0], op.dst[0]
    soff, ssize = ex.ref_span(g, src, op)
    if packet:
        got = packets_in(ex, a, g, op, op.src[:1], local_buffer=True)
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
    record_landing(ex, a, inst, [s], 1)
    dranks, dbuf = _members(ex, g, tb, dst)
    doff, _ = ex.ref_span(g, dst, op)
    for r in dranks:
        if packet:
            p, addr = ex.phys(r, dbuf, ex.scratch_offset(a.launch) + 2 * doff, False, a.launch)
        else:
            p, addr = ex.phys(r, dbuf, doff + inst.offset, False, a.launch)
        tag = record_send(ex, a, inst, r, r, s, a.lv, a.mlv, not packet)
        ex.write(a, op, r, p, addr, s, a, a.vc, 2 * PACKET_UNIT if packet else PLAIN_UNIT, a.tick, op.where,
                  packet=packet, rel=release_clock(a) if packet else None, tag=tag)
    return True


HANDLERS: dict[str, Handler] = {
    "copy": _h_copy, "put": _h_put, "pws": _h_put, "pwsf": _h_put, "get": _h_get,
    "re": _h_reduce, "res": _h_reduce, "rre": _h_reduce, "rres": _h_reduce,
    "glres": _h_glres, "gstore": _h_gstore, "gstorepkt": _h_gstore,
}
