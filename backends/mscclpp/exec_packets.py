"""LL packet ops of the MSCCL++ executor (execute.py): ppkt, rppkt, repkt, respkt, recpkt, recspkt, cpkt
and upkt. A packet carries the launch's flag next to each 8-byte payload; a reader spins (its thread block
blocked) until every packet it reads carries the current flag, and then synchronizes with the writer."""

from __future__ import annotations

from typing import Any

import numpy as np

from collsynth.backends.mscclpp.exec_access import PACKET_UNIT
from collsynth.backends.mscclpp.exec_core import ExecutorCore, Handler
from collsynth.backends.mscclpp.exec_state import Actor
from collsynth.backends.mscclpp.exec_trace import record_landing, record_send
from collsynth.backends.mscclpp.exec_values import sum_streams, untagged
from collsynth.backends.mscclpp.load import Inst
from collsynth.backends.mscclpp.model import Gpu, Op, Ref, ThreadBlock


def release_clock(a: Actor) -> np.ndarray:
    """What a packet write publishes: the writer's clock with its current tick."""
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
        record_landing(ex, a, inst, [s], 1)
        rank, buf = ex.target(g, tb, op, dst)
        doff, _ = ex.ref_span(g, dst, op)
        tag = record_send(ex, a, inst, rank, k, s, a.lv, a.mlv, False)
        dp, da = ex.phys(rank, buf, ex.scratch_offset(a.launch) + 2 * doff, False, a.launch)
        ex.write(a, op, rank, dp, da, s, a, a.vc, 2 * PACKET_UNIT, a.tick, op.where, packet=True,
                  rel=release_clock(a), tag=tag)
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


def packets_in(ex: ExecutorCore, a: Actor, g: Gpu, op: Op, refs: tuple[Ref, ...], size: int | None = None,
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
    got = packets_in(ex, a, g, inst.op, inst.op.src[:1])
    if got is not None:
        record_landing(ex, a, inst, got, 1)
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
            tag = record_send(ex, a, inst, rank, k, s, a.lv, a.mlv, False)
            ex.write(a, op, rank, dp, da, s, a, a.vc, 2 * PACKET_UNIT, a.tick, op.where, packet=True,
                      rel=release_clock(a), tag=tag)
        else:
            chan = tb.channels["port"][op.channel_ids[k]]
            vc, lv, mlv = ex.lane_knowledge(a, k)
            ex.proxy_request(a, k, chan, vc, lv, mlv)
            p = ex.proxies[(g.id, chan)]
            tag = record_send(ex, a, inst, rank, k, s, p.lv, p.mlv, False)
            label = f"(port rppkt of {op.where} by {ex.names[a.id]})"
            pk = ex.proxy_clock(p)
            ex.write(a, op, rank, dp, da, s, p, pk, 0, p.tick, label, packet=True, rel=pk, tag=tag)
    return True


def _h_reduce_packets(ex: ExecutorCore, a: Actor, g: Gpu, tb: ThreadBlock, inst: Inst) -> bool:
    """repkt/respkt/recpkt/recspkt: out[0] = in[0] (plain) + packets in[1..] (local scratch)."""
    op = inst.op
    in0 = op.src[0]
    off0, size = ex.ref_span(g, in0, op)
    pk = packets_in(ex, a, g, op, op.src[1:], size)
    if pk is None:
        return False
    sp, sa = ex.phys(g.id, in0.buf, off0, True, a.launch)
    s0 = ex.read(a, op, g.id, sp, sa, size, a, a.vc, PACKET_UNIT, a.tick, op.where)
    assert s0 is not None
    streams = [s0, *pk]
    record_landing(ex, a, inst, streams, 1)
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
                  rel=release_clock(a))
        first_remote = 2
    if op.name in ("respkt", "recspkt"):
        for k, ref in enumerate(op.dst[first_remote:], start=first_remote):
            rank, buf = ex.target(g, tb, op, ref)
            off, _ = ex.ref_span(g, ref, op)
            tag = record_send(ex, a, inst, rank, k, total, a.lv, a.mlv, False)
            p, addr = ex.phys(rank, buf, ex.scratch_offset(a.launch) + 2 * off, False, a.launch)
            ex.write(a, op, rank, p, addr, total, a, a.vc, 2 * PACKET_UNIT, a.tick, op.where, packet=True,
                      rel=release_clock(a), tag=tag)
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
    ex.write(a, op, g.id, dp, da, s, a, a.vc, 2 * PACKET_UNIT, a.tick, op.where, packet=True, rel=release_clock(a))
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


PACKET_HANDLERS: dict[str, Handler] = {
    "ppkt": _h_ppkt, "rppkt": _h_rppkt, "repkt": _h_reduce_packets, "respkt": _h_reduce_packets,
    "recpkt": _h_reduce_packets, "recspkt": _h_reduce_packets, "cpkt": _h_cpkt, "upkt": _h_upkt,
}
