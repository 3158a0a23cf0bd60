"""Load-time rules of the MSCCL++ executor: cross-references, tables, limits, and the plan at one size.

``validate(plan)`` checks what the loader reads through ids and indexes (docs/mscclpp-plan.md,
"Checking a plan"): channel peers, the pairing of channels between ranks, thread-block channel and
remote-buffer tables (ids in range, at most 16 entries per type, the remote buffer declaring the
access type the op uses), every op's channel and buffer ids, chunk ranges within their buffers
(packets take twice the bytes), the 64-op limit, barrier and semaphore ids, switch groups that every
member declares alike, and the shape each op needs (what its handler reads). Problems raise
``PlanFormatError`` naming gpu, thread block and op; the executor would refuse them or run something
other than what the plan says.

A ``protocol`` other than "LL" or "Simple" loads and runs as Simple (the executor's rule: any string
but "LL"); ``validate`` logs a one-line warning for it on the ``collsynth.mscclpp`` logger, which Python
prints on stderr when the application configures no logging (the CLI).

``Layout.at_size(plan, chunk_bytes)`` resolves byte offsets for one message size, and
``flatten`` expands each thread block into the ops the kernel runs (pipeline bodies once per
iteration, with their offsets).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass

from collsynth.backends.mscclpp.model import (
    MAX_BARRIERS,
    MAX_BUFFERS_PER_OP,
    MAX_CHANNELS_PER_OP,
    MAX_CHANNELS_PER_TB,
    MAX_ITERATIONS,
    MAX_OFFSET,
    MAX_OPS_PER_TB,
    MAX_SEMAPHORES_PER_OP,
    PACKET_OPS,
    PROTOCOLS,
    Gpu,
    Op,
    Plan,
    PlanFormatError,
    Ref,
    Switch,
    ThreadBlock,
    where,
)

MEMORY_ONLY = ("get", "rre", "rres", "res", "respkt", "recspkt")  # remote access through mapped pointers
_log = logging.getLogger("collsynth.mscclpp")


@dataclass(frozen=True, slots=True)
class Chan:
    """A thread block's channel table entry: the global channel, its peer, and the peer's paired channel
    (-1 when the peer declares fewer channels to this rank: an unpaired half nobody can signal)."""

    type: str
    index: int
    peer: int
    peer_index: int


def io_chunks(collective: str, n: int) -> tuple[int, int]:
    """(input bytes, output bytes) per unit of message size for the NCCL shim's calls: allgather (B, B*n),
    reducescatter (B*n, B), everything else (B, B)."""
    if collective == "allgather":
        return 1, n
    if collective == "reducescatter":
        return n, 1
    return 1, 1


def channel_pairs(plan: Plan) -> dict[tuple[int, str, int], Chan]:
    """(rank, type, global index) -> Chan: the k-th channel of rank r to peer p is joined to the k-th
    channel of p to r (the executor creates connections with a per-peer tag counter)."""
    by_peer: dict[tuple[int, str, int], list[int]] = {}
    for g in plan.gpus:
        for t in ("memory", "port"):
            for c, p in enumerate(g.peers[t]):
                by_peer.setdefault((g.id, t, p), []).append(c)
    out: dict[tuple[int, str, int], Chan] = {}
    for (r, t, p), mine in by_peer.items():
        theirs = by_peer.get((p, t, r), [])
        for k, c in enumerate(mine):
            out[(r, t, c)] = Chan(t, c, p, theirs[k] if k < len(theirs) else -1)
    return out


def protocol_warning(plan: Plan) -> str | None:
    """One line when the plan's protocol is neither "LL" nor "Simple" (it runs as Simple), else None."""
    if plan.protocol in PROTOCOLS:
        return None
    said = json.dumps(plan.protocol[:40]) + ("..." if len(plan.protocol) > 40 else "")
    return (f"collsynth: warning: {plan.source}: protocol {said} is neither \"LL\" nor \"Simple\": the MSCCL++ "
            f"executor runs it as Simple (write \"Simple\", or \"LL\" for packets)")


def validate(plan: Plan) -> dict[tuple[int, str, int], Chan]:
    """Every cross-reference and limit the loader relies on; returns the channel pairing. A protocol
    that runs as Simple without saying so is logged (``protocol_warning``)."""
    note = protocol_warning(plan)
    if note:
        _log.warning(note)
    n = plan.nranks
    src = plan.source
    for g in plan.gpus:
        for t in ("memory", "port"):
            for c, p in enumerate(g.peers[t]):
                if not 0 <= p < n or p == g.id:
                    raise PlanFormatError(f"{where(src, g.id)}: {t} channel {c} connects to rank {p}; peers are the "
                                          f"other ranks 0..{n - 1}")
        for b, rb in enumerate(g.remote_buffers):
            if not 0 <= rb.rank < n:
                raise PlanFormatError(f"{where(src, g.id)}: remote buffer {b} names rank {rb.rank}, outside 0..{n - 1}")
        for s, sw in enumerate(g.switches):
            if g.id not in sw.ranks or any(not 0 <= r < n for r in sw.ranks) or len(set(sw.ranks)) != len(sw.ranks):
                raise PlanFormatError(f"{where(src, g.id)}: switch channel {s} groups ranks {list(sw.ranks)}; a group "
                                      f"lists distinct ranks 0..{n - 1} and includes this rank")
    _check_switch_groups(plan)
    pairs = channel_pairs(plan)
    for g in plan.gpus:
        if plan.collective in ("allreduce", "allgather", "reducescatter"):
            fi, fo = io_chunks(plan.collective, n)
            if g.input_chunks * fo != g.output_chunks * fi:
                want = {"allreduce": "input_chunks == output_chunks",
                        "allgather": f"output_chunks == {n} x input_chunks",
                        "reducescatter": f"input_chunks == {n} x output_chunks"}[plan.collective]
                raise PlanFormatError(f"{where(src, g.id)}: input_chunks {g.input_chunks} and output_chunks "
                                      f"{g.output_chunks}: {plan.collective} buffers need {want}, or the executor "
                                      f"refuses every size (size per chunk inconsistent)")
        for tb in g.tbs:
            _check_tb(plan, g, tb)
    return pairs


def _check_switch_groups(plan: Plan) -> None:
    decl: dict[int, list[tuple[str, tuple[int, ...]]]] = {}
    for g in plan.gpus:
        decl[g.id] = [(sw.buf, tuple(sorted(sw.ranks))) for sw in g.switches]
    for g in plan.gpus:
        for s, (buf, ranks) in enumerate(decl[g.id]):
            for r in ranks:
                if decl[r].count((buf, ranks)) != decl[g.id].count((buf, ranks)):
                    raise PlanFormatError(f"{where(plan.source, g.id)}: switch channel {s} (buffer {buf}, ranks "
                                          f"{list(ranks)}) is not declared alike by rank {r}: every member must "
                                          f"declare the group, or the multicast binding hangs")


def _table_len(tb: ThreadBlock, t: str) -> int:
    return len(tb.channels.get(t, ()))


def _check_tb(plan: Plan, g: Gpu, tb: ThreadBlock) -> None:
    src = plan.source
    at = where(src, g.id, tb.id)
    for t, ids in tb.channels.items():
        if len(ids) > MAX_CHANNELS_PER_TB:
            raise PlanFormatError(f"{at}: {len(ids)} {t} channels in its table; the device table holds "
                                  f"{MAX_CHANNELS_PER_TB} (nothing checks it: the plan is corrupted)")
        total = len(g.switches) if t == "switch" else len(g.peers[t])
        for c in ids:
            if c >= total:
                raise PlanFormatError(f"{at}: {t} channel id {c} is out of range: gpu {g.id} declares {total} {t} "
                                      f"channel(s)")
    for t, ids in tb.remote.items():
        if len(ids) > MAX_CHANNELS_PER_TB:
            raise PlanFormatError(f"{at}: {len(ids)} remote buffers for {t} access; the device table holds "
                                  f"{MAX_CHANNELS_PER_TB} (nothing checks it: the plan is corrupted)")
        for b in ids:
            if b >= len(g.remote_buffers):
                raise PlanFormatError(f"{at}: remote buffer id {b} is out of range: gpu {g.id} declares "
                                      f"{len(g.remote_buffers)} remote buffer(s)")
            if t not in g.remote_buffers[b].access:
                raise PlanFormatError(f"{at}: remote buffer {b} is listed for {t} access but declares "
                                      f"access_channel_types {list(g.remote_buffers[b].access)}: the executor would "
                                      f"hand out another buffer's handle")
    if tb.nops > MAX_OPS_PER_TB:
        raise PlanFormatError(f"{at}: {tb.nops} ops (pipeline bodies included); the executor allows "
                              f"{MAX_OPS_PER_TB} per thread block (it throws)")
    for op in tb.ops:
        _check_op(plan, g, tb, op)
        for inner in op.body:
            _check_op(plan, g, tb, inner)


def _fail(plan: Plan, g: Gpu, tb: ThreadBlock, op: Op, what: str) -> PlanFormatError:
    return PlanFormatError(f"{where(plan.source, g.id, tb.id, op)}: {what}")


def ref_buffer(plan: Plan, g: Gpu, tb: ThreadBlock, op: Op, ref: Ref) -> tuple[int, str]:
    """(rank, buffer type) a reference points at (switch refs: this rank's bound buffer)."""
    if ref.kind == "local":
        return g.id, ref.buf
    if ref.kind == "remote":
        b = tb.remote[op.channel_type][ref.id]
        rb = g.remote_buffers[b]
        return rb.rank, rb.buf
    return g.id, switch_of(g, tb, ref.id).buf


def switch_of(g: Gpu, tb: ThreadBlock, k: int) -> Switch:
    return g.switches[tb.channels["switch"][k]]


def chunks_of(g: Gpu, buf: str) -> int:
    return {"i": g.input_chunks, "o": g.output_chunks, "s": g.scratch_chunks}[buf]


def _check_op(plan: Plan, g: Gpu, tb: ThreadBlock, op: Op) -> None:
    ct = op.channel_type
    fail = lambda what: _fail(plan, g, tb, op, what)  # noqa: E731
    if len(op.channel_ids) > MAX_CHANNELS_PER_OP:
        raise fail(f"{len(op.channel_ids)} channel ids; an op holds {MAX_CHANNELS_PER_OP}")
    if op.channel_ids:
        if ct not in ("memory", "port"):
            raise fail(f"has channel_ids but channel_type {ct!r}: name memory or port")
        for c in op.channel_ids:
            if c >= _table_len(tb, ct):
                raise fail(f"channel id {c} is out of range: the thread block's {ct} table has "
                           f"{_table_len(tb, ct)} entr{'y' if _table_len(tb, ct) == 1 else 'ies'}")
        if len(op.channel_ids) > plan.threads:
            raise fail(f"{len(op.channel_ids)} channels but {plan.threads} threads per block: thread i serves "
                       f"channel i, so some would never run")
    for side, refs in (("src_buff", op.src), ("dst_buff", op.dst)):
        if len(refs) > MAX_BUFFERS_PER_OP:
            raise fail(f"{len(refs)} {side} entries; an op holds {MAX_BUFFERS_PER_OP}")
        for i, ref in enumerate(refs):
            rat = f"{side}[{i}]"
            if ref.kind == "remote":
                if ct not in ("memory", "port"):
                    raise fail(f"{rat} names buffer_id {ref.id} but the op's channel_type is {ct!r}; the executor "
                               f"throws (Invalid channel type): set channel_type memory or port")
                table = tb.remote.get(ct, [])
                if ref.id >= len(table):
                    raise fail(f"{rat} buffer_id {ref.id} is out of range: the thread block's {ct} remote-buffer "
                               f"table has {len(table)} entr{'y' if len(table) == 1 else 'ies'}")
            elif ref.kind == "switch" and ref.id >= _table_len(tb, "switch"):
                raise fail(f"{rat} switch_channel_id {ref.id} is out of range: the thread block's switch table has "
                           f"{_table_len(tb, 'switch')} entries")
            rank, buf = ref_buffer(plan, g, tb, op, ref)
            gp = plan.gpus[rank]
            packet = _is_packet_ref(op, side, i)
            limit = chunks_of(gp, buf) * (2 if buf == "s" and plan.packets else 1)
            need = (ref.index + ref.size) * (2 if packet else 1)
            if need > limit or (ref.kind == "switch" and any(
                    (ref.index + ref.size) > chunks_of(plan.gpus[m], buf) for m in switch_of(g, tb, ref.id).ranks)):
                who = f"gpu {rank}'s" if rank != g.id else "its"
                fmt = " in packet format (twice the bytes)" if packet else ""
                raise fail(f"{rat} chunks {ref.index}..{ref.index + ref.size - 1}{fmt} run past {who} buffer {buf!r} "
                           f"({chunks_of(gp, buf)} chunk(s){' doubled for LL' if buf == 's' and plan.packets else ''})")
    if op.barrier_id is not None:
        if op.barrier_id >= MAX_BARRIERS:
            raise fail(f"barrier_id {op.barrier_id}: the device has {MAX_BARRIERS} barriers (0..{MAX_BARRIERS - 1})")
        if (op.num_threadblocks or 0) > len(g.tbs):
            raise fail(f"num_threadblocks {op.num_threadblocks} but gpu {g.id} has {len(g.tbs)} thread block(s): "
                       f"the barrier would never open")
    if len(op.semaphore_ids) > MAX_SEMAPHORES_PER_OP:
        raise fail(f"{len(op.semaphore_ids)} semaphore ids; an op holds {MAX_SEMAPHORES_PER_OP}")
    for s in op.semaphore_ids:
        if s >= len(g.semaphores):
            raise fail(f"semaphore id {s} is out of range: gpu {g.id} declares {len(g.semaphores)} semaphore(s)")
    _check_shape(op, fail, plan)


def _is_packet_ref(op: Op, side: str, i: int) -> bool:
    """Whether the executor addresses this reference in packet format (2x offsets)."""
    n = op.name
    if n == "ppkt":
        return side == "dst_buff"
    if n == "rppkt":
        return True
    if n in ("respkt", "repkt"):
        return (side == "src_buff" and i >= 1) or (side == "dst_buff" and i >= 1)
    if n in ("recspkt", "recpkt"):
        return (side == "src_buff" and i >= 1) or (side == "dst_buff" and i >= 1)
    if n == "cpkt":
        return side == "dst_buff"
    if n == "upkt":
        return side == "src_buff"
    return n == "gstorepkt"


def _kinds(refs: tuple[Ref, ...]) -> list[str]:
    return [r.kind for r in refs]


def _check_shape(op: Op, fail: object, plan: Plan) -> None:
    """The references and channels each handler reads (docs/mscclpp-plan.md, operation table)."""
    f = fail  # callable: message -> PlanFormatError
    name, ct = op.name, op.channel_type
    src, dst = _kinds(op.src), _kinds(op.dst)

    def need(cond: bool, what: str) -> None:
        if not cond:
            raise f(what)  # type: ignore[operator]

    if name in ("signal", "wait", "rlxsignal", "rlxwait", "flush"):
        need(ct in ("memory", "port"), f"{name} needs channel_type memory or port, not {ct!r}")
        need(bool(op.channel_ids), f"{name} names no channel_ids")
        need(name != "flush" or ct == "port", "flush works on port channels only")
    elif name == "copy":
        need(src == ["local"] and dst == ["local"], "copy reads one local src_buff and writes one local dst_buff")
    elif name in ("put", "pws", "pwsf"):
        need(ct in ("memory", "port"), f"{name} needs channel_type memory or port, not {ct!r}")
        need(bool(dst) and all(k == "remote" for k in dst), f"{name} writes remote dst_buff entries (buffer_id)")
        need(len(src) == len(dst) and all(k == "local" for k in src),
             f"{name} needs one local src_buff entry per dst_buff entry")
        if ct == "port":
            need(len(op.channel_ids) >= len(dst), f"port {name}: thread k puts dst_buff[k] on channel_ids[k]; give "
                                                  f"{len(dst)} channel ids")
    elif name == "get":
        need(ct == "memory", "get works on memory channels only")
        need(bool(src) and all(k == "remote" for k in src) and len(dst) == len(src)
             and all(k == "local" for k in dst), "get reads remote src_buff entries into as many local dst_buff")
    elif name in ("re", "res"):
        need(bool(src) and all(k == "local" for k in src), f"{name} reads local src_buff entries")
        need(bool(dst) and dst[0] == "local", f"{name} writes its result to a local dst_buff[0]")
        if name == "res":
            need(ct == "memory" and all(k == "remote" for k in dst[1:]), "res sends to remote dst_buff[1..] through "
                                                                         "memory channels")
        else:
            need(len(dst) == 1, "re writes exactly one local dst_buff")
    elif name in ("rre", "rres"):
        need(ct == "memory", f"{name} reads remote data through memory channels only")
        need(bool(src) and src[0] == "local" and all(k == "remote" for k in src[1:]),
             f"{name} reads local src_buff[0] and remote src_buff[1..]")
        need(bool(dst) and dst[0] == "local" and all(k == "remote" for k in dst[1:]),
             f"{name} writes local dst_buff[0]" + (" and remote dst_buff[1..]" if name == "rres" else ""))
        need(name == "rres" or len(dst) == 1, "rre writes exactly one local dst_buff")
    elif name == "ppkt":
        need(ct == "memory", "ppkt over a port channel sends from the wrong memory (the executor leaves out the "
                             "local memory id base); put packets over port channels with cpkt then rppkt")
        need(bool(dst) and all(k == "remote" for k in dst) and len(src) == len(dst)
             and all(k == "local" for k in src), "ppkt needs one local src_buff per remote dst_buff")
    elif name == "rppkt":
        need(ct in ("memory", "port"), "rppkt needs channel_type memory or port")
        need(len(src) >= 1 and op.src[0].kind == "local" and op.src[0].buf == "s",
             "rppkt reads packets from local scratch: src_buff[0] must be {\"type\": \"s\"}")
        need(bool(dst) and all(k == "remote" for k in dst), "rppkt writes remote dst_buff entries")
        if ct == "port":
            need(len(op.channel_ids) >= len(dst), f"port rppkt: give {len(dst)} channel ids (one per dst_buff)")
    elif name in ("repkt", "respkt", "recpkt", "recspkt"):
        need(len(src) >= 2 and all(k == "local" for k in src), f"{name} reads local src_buff[0] and packets in "
                                                               f"src_buff[1..]")
        need(all(r.buf == "s" for r in op.src[1:]), f"{name} reads src_buff[1..] from local scratch whatever their "
                                                     f"type: give type \"s\"")
        nloc = 2 if name in ("recpkt", "recspkt") else 1
        need(len(dst) >= nloc and all(k == "local" for k in dst[:nloc]),
             f"{name} writes local dst_buff[0..{nloc - 1}]")
        if name.endswith("spkt"):
            need(ct == "memory" and all(k == "remote" for k in dst[nloc:]),
                 f"{name} sends packets to remote dst_buff[{nloc}..] through memory channels")
        else:
            need(len(dst) == nloc, f"{name} writes exactly {nloc} local dst_buff")
    elif name == "cpkt":
        need(src == ["local"] and dst == ["local"], "cpkt reads one local src_buff and writes one local dst_buff")
    elif name == "upkt":
        need(src == ["local"] and op.src[0].buf == "s" and dst == ["local"],
             "upkt reads packets from local scratch (src_buff type \"s\") into one local dst_buff")
    elif name == "glres":
        need(ct == "switch" and src[:1] == ["switch"] and dst[:1] == ["switch"],
             "glres reads and writes switch buffers (switch_channel_id) with channel_type switch")
    elif name in ("gstore", "gstorepkt"):
        need(ct == "switch" and src[:1] == ["local"] and dst[:1] == ["switch"],
             f"{name} stores a local src_buff[0] to a switch dst_buff[0] (channel_type switch)")
    elif name in ("sem_acquire", "sem_release"):
        need(bool(op.semaphore_ids), f"{name} names no semaphore_ids")
    elif name == "barrier":
        need(op.barrier_id is not None, "barrier needs barrier_id and num_threadblocks")
    if name in ("put", "pws", "pwsf") and ct == "port" and plan.threads < len(op.dst):
        need(False, f"{len(op.dst)} port puts but {plan.threads} threads per block")
    if name in PACKET_OPS and plan.protocol != "LL" and any(r.buf == "s" for r in op.src + op.dst
                                                           if r.kind == "local"):
        pass  # packets in a Simple plan's scratch fit when the chunk ranges say so (checked above)


@dataclass(slots=True)
class Inst:
    """One op as the kernel runs it: ``offset``/``unit`` are the pipeline iteration's byte offset and
    unit size (0 and None outside pipelines)."""

    op: Op
    offset: int
    unit: int | None
    iteration: int


def iterations(plan: Plan, op: Op, chunk: int) -> int:
    """ceil(num_chunks * upper chunk size / unit_size), truncated to 16 bits as the kernel does."""
    upper = chunk  # divisibility makes the upper bound the chunk size
    return math.ceil(op.num_chunks * upper / op.unit_size) % MAX_ITERATIONS


def flatten(plan: Plan, tb: ThreadBlock, chunk: int) -> list[Inst]:
    out: list[Inst] = []
    for op in tb.ops:
        if op.name != "pipeline":
            out.append(Inst(op, 0, None, -1))
            continue
        for i in range(iterations(plan, op, chunk)):
            for b in op.body:
                out.append(Inst(b, i * op.unit_size, op.unit_size, i))
    return out


def message_sizes(plan: Plan, chunk: int) -> tuple[int, int, int]:
    """(input bytes, output bytes, the size the min/max range applies to) for a chunk size (rank 0's
    chunk counts)."""
    g = plan.gpus[0]
    ib, ob = g.input_chunks * chunk, g.output_chunks * chunk
    return ib, ob, ob if plan.collective == "allgather" else ib


def choose_chunk(plan: Plan, size: int | None = None) -> int:
    """The chunk size (bytes) the plan is checked at: for ``size`` (the message size the range applies to)
    when given, else the smallest one that splits every tbg slice evenly and runs every pipeline at least
    twice with a partial last iteration, within [min_message_size, max_message_size]."""
    a = plan.alignment
    g0 = plan.gpus[0]
    per = g0.output_chunks if plan.collective == "allgather" else g0.input_chunks
    if size is not None:
        if size <= 0 or size % (per * a):
            raise PlanFormatError(f"{plan.source}: a message of {size} bytes cannot be cut into {per} chunks of a "
                                  f"multiple of buffer_alignment {a} bytes")
        if not plan.min_size <= size <= plan.max_size:
            raise PlanFormatError(f"{plan.source}: {size} bytes is outside the plan's message range "
                                  f"[{plan.min_size}, {plan.max_size}]")
        return size // per
    lcm = 1
    target = 0
    for g in plan.gpus:
        for tb in g.tbs:
            for op in tb.ops:
                for o in (op, *op.body):
                    if o.tbg is not None:
                        lcm = math.lcm(lcm, o.tbg[1])
                if op.name == "pipeline":
                    target = max(target, -(-(5 * op.unit_size) // (2 * op.num_chunks)))
    step = a * lcm
    chunk = max(step, -(-target // step) * step)
    lo = -(-plan.min_size // per)
    if chunk < lo:
        chunk = -(-lo // step) * step
    if chunk * per > plan.max_size:
        chunk = -(-max(lo, 1) // a) * a
        if chunk * per > plan.max_size:
            raise PlanFormatError(f"{plan.source}: no message size in [{plan.min_size}, {plan.max_size}] is a multiple "
                                  f"of {per} chunks x {a} bytes: the plan can never run")
    return chunk


def check_offsets(plan: Plan, chunk: int) -> None:
    """Byte offsets and sizes are uint32 on the device: every buffer must stay below 4 GiB. The scratch
    buffer holds scratch_chunks chunks, twice in packet (LL) form, twice again with a double scratch buffer
    (as the executor lays it out, execute.py; the emitter's largest message, emit.max_chunk_bytes)."""
    scratch = (2 if plan.packets else 1) * (2 if plan.double_scratch else 1)
    for g in plan.gpus:
        for name in ("input_chunks", "output_chunks", "scratch_chunks"):
            k = getattr(g, name) * (scratch if name == "scratch_chunks" else 1)
            if k * chunk >= MAX_OFFSET:
                raise PlanFormatError(f"{where(plan.source, g.id)}: at {chunk}-byte chunks, {name} {getattr(g, name)} "
                                      f"reach byte offsets past 4 GiB (uint32 on the device): use a smaller message")
