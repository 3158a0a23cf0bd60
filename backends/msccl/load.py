"""What the runtime's parser does after tokenizing: load-time checks, then the per-thread-block program.

Load-time rejections (docs/msccl-xml.md 2.4, executor/RCCL ``msccl_parser.cc``) raise XmlFormatError:
gpu ids not 0..ngpus-1 once each, thread-block ids with a gap or a duplicate, a peer equal to the GPU
or out of range, a channel outside 0..31, ``s`` outside 0..limit-1, ``cnt`` outside 0..71, a checked
start offset outside its declared buffer, ``hasdep`` not 0/1, a send or receive in a thread block
without that peer, more than 32 sending (or receiving) thread blocks on one channel, and the
nop-chain rule. The old runtime also checks i_chunks/o_chunks against nchunksperloop.

What the runtime loads but misreads raises XmlFormatError too: a ``chan`` >= ``nchannels`` (setup
connects channels 0..nchannels-1 only), and step numbers ``s`` that are not 0,1,2,... in document
order, or that differ from the counter the kernel publishes (a ``nop`` without a dependency): the
kernel counts steps and never reads ``s``, so dependencies would wait for the wrong step (2.3).

``resolve`` then builds what the interpreter runs: ``nop`` dependencies are attached to the next real
step, consecutive ``re`` steps with the same destination and source buffer (the later ones without a
dependency, at most 16) are fused, and each transmission gets the step counter the kernel publishes
after it (``step += deps-1`` before, ``+= reductions-1`` inside, ``+1`` after).
"""

from __future__ import annotations

from collsynth import budget
from collsynth.backends.msccl.model import (
    MAX_CHANNELS,
    MAX_COUNT,
    MAX_FUSED_RE,
    MAX_NODES_PER_RANK,
    MAX_STEPS,
    MAX_TB_PER_CHANNEL,
    STEP_TYPES,
    Program,
    PTb,
    Tx,
    XAlgo,
    XmlFormatError,
    where,
)


def _declared(gpu: object) -> dict[str, int]:
    return {"i": gpu.i_chunks, "o": gpu.o_chunks, "s": gpu.s_chunks}  # type: ignore[attr-defined]


def validate_load(algo: XAlgo, source: str = "") -> None:
    """Raise XmlFormatError for anything the runtime refuses when loading the file."""
    pre = f"{source}: " if source else ""
    n = algo.ngpus
    ids = [g.id for g in algo.gpus]
    for g in algo.gpus:
        if not 0 <= g.id < n:
            raise XmlFormatError(f"{pre}{where(g.id, line=g.line)}: gpu id outside 0..{n - 1} (ngpus={n})")
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise XmlFormatError(f"{pre}gpu {dup} appears twice")
    if len(ids) != n:  # ids are distinct and in 0..n-1: the first gap, without building range(ngpus)
        have = sorted(ids)
        first = next((i for i, g in enumerate(have) if g != i), len(have))
        raise XmlFormatError(f"{pre}no <gpu> element for rank {first} (ngpus={n}): every rank needs one")
    chunks = sum(max(g.i_chunks, 0) + max(g.o_chunks, 0) + max(g.s_chunks, 0) for g in algo.gpus)
    budget.check(160 * (chunks + max(algo.nchunksperloop, 0)),
                 f"{pre}checking {n} GPUs with {chunks} buffer chunks (nchunksperloop={algo.nchunksperloop})")
    max_steps = MAX_STEPS[algo.dialect]
    for g in algo.gpus:
        if g.s_chunks < 0:
            raise XmlFormatError(f"{pre}{where(g.id, line=g.line)}: s_chunks must be >= 0")
        if algo.dialect == "legacy":
            mi = n if algo.coll == "allgather" else 1
            mo = n if algo.coll == "reduce_scatter" else 1
            if g.i_chunks > 0 and g.i_chunks * mi != algo.nchunksperloop:
                raise XmlFormatError(f"{pre}{where(g.id, line=g.line)}: i_chunks={g.i_chunks} does not match "
                                     f"nchunksperloop={algo.nchunksperloop} (the old runtime checks it)")
            if g.o_chunks > 0 and g.o_chunks * mo != algo.nchunksperloop:
                raise XmlFormatError(f"{pre}{where(g.id, line=g.line)}: o_chunks={g.o_chunks} does not match "
                                     f"nchunksperloop={algo.nchunksperloop} (the old runtime checks it)")
        tids = sorted(tb.id for tb in g.tbs)
        if len(set(tids)) != len(tids):
            dup = next(t for t in tids if tids.count(t) > 1)
            raise XmlFormatError(f"{pre}{where(g.id, dup)}: thread block id used twice")
        if tids and tids != list(range(len(tids))):
            gap = next(i for i in range(len(tids) + 1) if i not in set(tids))
            raise XmlFormatError(f"{pre}{where(g.id)}: thread block {gap} is missing (ids must run 0..n-1)")
        nodes = 1 + len(algo.gpus) + len(g.tbs) + sum(len(tb.steps) for tb in g.tbs)
        if nodes > MAX_NODES_PER_RANK:
            raise XmlFormatError(f"{pre}{where(g.id, line=g.line)}: {nodes} XML nodes for this rank (algo, every "
                                 f"gpu, its thread blocks and steps); the runtime's parser holds at most "
                                 f"{MAX_NODES_PER_RANK}")
        decl = _declared(g)
        senders: dict[int, int] = {}
        receivers: dict[int, int] = {}
        for tb in g.tbs:
            tw = where(g.id, tb.id, line=tb.line)
            for peer, what in ((tb.send, "send"), (tb.recv, "recv")):
                if peer == g.id:
                    raise XmlFormatError(f"{pre}{tw}: {what} peer is the gpu itself")
                if not -1 <= peer < n:
                    raise XmlFormatError(f"{pre}{tw}: {what} peer {peer} outside -1..{n - 1}")
            if not 0 <= tb.chan < MAX_CHANNELS:
                raise XmlFormatError(f"{pre}{tw}: chan {tb.chan} outside 0..{MAX_CHANNELS - 1}")
            if tb.chan >= algo.nchannels:  # setup connects channels 0..nchannels-1 only (msccl_setup.cc)
                raise XmlFormatError(f"{pre}{tw}: chan {tb.chan} but nchannels={algo.nchannels}: the runtime connects "
                                     f"channels 0..nchannels-1 only; set nchannels to the largest chan + 1")
            if tb.send >= 0:
                senders[tb.chan] = senders.get(tb.chan, 0) + 1
            if tb.recv >= 0:
                receivers[tb.chan] = receivers.get(tb.chan, 0) + 1
            lines: dict[int, int] = {}  # s -> line of the step that has it
            for i, st in enumerate(tb.steps):
                sw = where(g.id, tb.id, st.s, st.line)
                if not 0 <= st.s < max_steps:
                    raise XmlFormatError(f"{pre}{sw}: s={st.s} outside 0..{max_steps - 1} (at most {max_steps} "
                                         f"steps per thread block in the {algo.dialect} runtime)")
                if st.s != i:
                    raise XmlFormatError(f"{pre}{sw}: {_misnumbered(st.s, i, lines)}")
                lines[st.s] = st.line
                if not 0 <= st.cnt < MAX_COUNT:
                    raise XmlFormatError(f"{pre}{sw}: cnt={st.cnt} outside 0..{MAX_COUNT - 1}: the runtime refuses "
                                         f"the file; give a real step cnt 1..{MAX_COUNT - 1} (and a nop cnt 0)")
                if st.hasdep not in (0, 1):
                    raise XmlFormatError(f"{pre}{sw}: hasdep={st.hasdep} must be 0 or 1")
                kind = STEP_TYPES[st.type]
                if st.type == "nop":
                    continue
                if kind.send and tb.send < 0:
                    raise XmlFormatError(f"{pre}{sw}: a {st.type!r} step sends, but the thread block has no send "
                                         f"peer (send=-1)")
                if kind.recv and tb.recv < 0:
                    raise XmlFormatError(f"{pre}{sw}: a {st.type!r} step receives, but the thread block has no "
                                         f"recv peer (recv=-1)")
                for chk, buf, off, fld in ((kind.check_src, st.srcbuf, st.srcoff, "srcoff"),
                                           (kind.check_dst, st.dstbuf, st.dstoff, "dstoff")):
                    if chk and not -1 <= off < decl[buf]:
                        raise XmlFormatError(f"{pre}{sw}: {fld}={off} outside buffer '{buf}' of {decl[buf]} chunks "
                                             f"declared on the gpu (the runtime rejects it)")
        for what, per in (("send", senders), ("receive", receivers)):
            for chan, k in per.items():
                if k > MAX_TB_PER_CHANNEL:
                    raise XmlFormatError(f"{pre}{where(g.id)}: {k} thread blocks {what} on channel {chan} "
                                         f"(the runtime allows {MAX_TB_PER_CHANNEL})")


def _misnumbered(s: int, index: int, lines: dict[int, int]) -> str:
    """Why step ``index`` of a thread block may not say ``s`` (the kernel counts steps, docs/msccl-xml.md 2.3)."""
    what = (f"s={s} is used twice in this thread block (first on line {lines[s]})" if s in lines
            else f"s={s} but this is step {index} of the thread block in document order")
    return (f"{what}; s must run 0,1,2,... in document order: the runtime counts steps and ignores s, so "
            f"dependencies on this thread block would wait for the wrong step")


def _check_counters(gpu: int, tb: PTb, pre: str) -> None:
    """Each transmission's published counter must equal its ``s`` (else the runtime misreads dependencies)."""
    for tx in tb.txs:
        if tx.counter != tx.s:
            raise XmlFormatError(f"{pre}{where(gpu, tb.id, tx.s, tx.line)}: the runtime counts this step as "
                                 f"{tx.counter}; every nop must carry a dependency (depid >= 0), or the steps after "
                                 f"it are counted differently from their s and dependencies on this thread block "
                                 f"wait for the wrong step")


def resolve(algo: XAlgo, source: str = "") -> Program:
    """Validate, then build the interpreter's view of every thread block."""
    validate_load(algo, source)
    pre = f"{source}: " if source else ""
    tbs: list[list[PTb]] = [[] for _ in range(algo.ngpus)]
    for g in algo.gpus:
        out = []
        for tb in sorted(g.tbs, key=lambda t: t.id):
            txs: list[Tx] = []
            pending: list[tuple[int, int]] = []
            pending_lines: list[int] = []
            pending_first: int | None = None
            counter = 0
            chain: Tx | None = None  # the open re chain (same dst, same src buffer, no deps after the first)
            chain_len = 0
            for st in tb.steps:
                if st.depid >= 0:
                    pending.append((st.depid, st.deps))
                    pending_lines.append(st.line)
                if pending_first is None:
                    pending_first = st.s
                if st.type == "nop":
                    continue
                cont = (st.type == "re" and chain is not None and chain.dstbuf == st.dstbuf
                        and chain.dstoff == st.dstoff and chain.srcbuf == st.srcbuf and st.depid < 0)
                if cont:
                    assert chain is not None
                    chain.extra_srcs.append(st.srcoff)
                    chain.cnt = st.cnt  # the runtime keeps the last count
                    chain.hasdep = bool(st.hasdep)
                    chain.s = st.s
                    chain_len += 1
                    counter += 1
                    chain.counter = counter - 1
                    if st.hasdep or chain_len == MAX_FUSED_RE:
                        chain = None
                    pending_first = None
                    continue
                if pending and st.depid < 0:
                    raise XmlFormatError(f"{pre}{where(g.id, tb.id, st.s, st.line)}: the nop steps before it carry "
                                         f"dependencies but this step has none (the runtime requires the last "
                                         f"dependency of a chain on the first real step)")
                if pending:
                    counter += len(pending) - 1
                tx = Tx(st.type, st.srcbuf, st.srcoff, st.dstbuf, st.dstoff, st.cnt, pending, bool(st.hasdep),
                        counter, pending_first if pending_first is not None else st.s, st.s, st.line,
                        dep_lines=pending_lines)
                counter += 1
                txs.append(tx)
                pending, pending_lines, pending_first = [], [], None
                if st.type == "re" and not st.hasdep:
                    chain, chain_len = tx, 1
                else:
                    chain, chain_len = None, 0
            out.append(PTb(g.id, tb.id, tb.send, tb.recv, tb.chan, txs, len(tb.steps), tb.line))
            _check_counters(g.id, out[-1], pre)
        tbs[g.id] = out
    return Program(algo, tbs)

