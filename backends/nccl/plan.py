"""Per-rank execution plan of a Schedule for the generated CUDA/NCCL code (and its reference interpreter).

The plan is what the generated C tables hold; ``run_plan`` executes it in numpy with exactly the
arithmetic of the generated code, so the chunk and buffer logic is tested without a GPU.

Buffers. A call gets ``sendbuf`` (input), ``recvbuf`` (output) and a scratch allocation holding an
optional work area and per-step reduce slots. Every (rank, chunk) value lives in one *location*:

- ``IN``   the user's send buffer (initial data; never written),
- ``OUT``  the user's receive buffer,
- ``WORK`` a full-size work area (ReduceScatter only: partial sums of chunks the rank does not own),
- ``SCR``  a reduce slot in scratch (a received chunk waiting to be added).

The first write of a chunk moves it to ``OUT`` (or ``WORK`` where the rank has no output slot for
it); reads come from wherever the value currently is, so out-of-place calls never copy the input
first and in-place calls (where IN and OUT alias chunk by chunk) need no special case. Chunks that a
rank must output but never wrote are copied IN -> OUT at the end (skipped at run time when the
pointers coincide).

Step semantics (synth/ir.py): each step is one NCCL group of the rank's sends and receives, sends in
schedule order (so sends and receives between a pair match one for one). A copy is received straight
into its destination; a reduce is received into its own scratch slot and added after the group by a
batch of add operations. Reduces of one step into the same chunk range are fused into one operation
that sums all its sources in ascending rank order of the contributing rank (bitwise-identical results
on every rank for one-shot schedules); one add-kernel launch takes up to ``MAX_ADD_OPS`` operations
on disjoint chunk ranges. A transfer is split into several messages only where its chunks sit in
different locations on the sender or (for copies) the receiver.

Element layout (shared with the C code): the buffer is ``nblocks`` blocks of ``count`` elements
(1 block for AllReduce, n blocks for ReduceScatter/AllGather, block r owned by rank r), each cut into
``chunks_per_block`` chunks of ``S = round_up(ceil(count / chunks_per_block), align)`` elements, the
last ones shorter or empty: chunk c starts at ``pos(c) = (c // m) * count + min((c % m) * S, count)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from collsynth.errors import CollsynthError
from collsynth.synth.ir import Schedule

IN, OUT, WORK, SCR = 0, 1, 2, 3
LOC_NAMES = ("IN", "OUT", "WORK", "SCR")
MAX_ADD_OPS = 8
MAX_ADD_SRCS = 31
ALIGN_BYTES = 256  # chunk sizes are multiples of this (keeps 16-byte vector loads aligned)


@dataclass(frozen=True)
class P2P:
    """One ncclSend (send=True) or ncclRecv of chunks [chunk, chunk+nchunk) to/from ``peer``."""

    send: bool
    peer: int
    chunk: int
    nchunk: int
    loc: int
    slot: int = -1  # scratch slot (in units of S elements) when loc == SCR


@dataclass(frozen=True)
class Add:
    """dst_loc[chunks] = sum of terms in order; term ``apos`` is a_loc[chunks], the others scratch
    sources (slot, base chunk): element of chunk c at scratch + slot*S + pos(c) - pos(base)."""

    chunk: int
    nchunk: int
    dst_loc: int
    a_loc: int
    apos: int
    srcs: tuple[tuple[int, int], ...]
    new_batch: bool


@dataclass(frozen=True)
class RankStep:
    step: int
    p2p: tuple[P2P, ...]
    adds: tuple[Add, ...]


@dataclass(frozen=True)
class Tail:
    """After the last step: OUT[chunks] = src_loc[chunks] (skipped when the addresses coincide)."""

    chunk: int
    nchunk: int
    src_loc: int


@dataclass(frozen=True)
class Plan:
    collective: str
    nranks: int
    nchunks: int
    nsteps: int
    chunks_per_block: int
    nblocks: int
    uses_work: bool
    scratch_slots: int
    steps: tuple[tuple[RankStep, ...], ...]  # per rank, only steps where the rank has transfers
    tails: tuple[tuple[Tail, ...], ...]  # per rank

    @property
    def nops(self) -> int:
        return sum(len(st.p2p) for steps in self.steps for st in steps)


def expressible(schedule: Schedule) -> None:
    """Raise CollsynthError when the NCCL calling convention cannot express this schedule."""
    n, C = schedule.nranks, schedule.nchunks
    if schedule.collective == "allreduce":
        return
    what = schedule.collective
    if C % n:
        raise CollsynthError(f"the nccl-cuda backend needs a {what} schedule whose chunk count ({C}) is a "
                             f"multiple of its rank count ({n}) so that rank r's block is whole chunks: "
                             "rebuild it with such a chunking")
    m = C // n
    owner = schedule.owner or ()
    bad = [c for c in range(C) if owner[c] != c // m]
    if bad:
        c = bad[0]
        raise CollsynthError(f"the nccl-cuda backend needs {what} chunk ownership in rank order (chunk c "
                             f"owned by rank c*n//nchunks, as NCCL lays out blocks), but chunk {c} is owned "
                             f"by rank {owner[c]}: relabel the schedule so that rank {c // m} owns it")


def _segments(c0: int, k: int, key: Callable[[int], object]) -> list[tuple[int, int]]:
    """Maximal runs [a, b) of [c0, c0+k) on which key(c) is constant."""
    if k == 1:
        return [(c0, c0 + 1)]
    out = []
    a = c0
    ka = key(c0)
    for c in range(c0 + 1, c0 + k):
        kc = key(c)
        if kc != ka:
            out.append((a, c))
            a, ka = c, kc
    out.append((a, c0 + k))
    return out


def build_plan(schedule: Schedule) -> Plan:
    """Lower a (verified) schedule to per-rank NCCL steps; see the module docstring."""
    expressible(schedule)
    s = schedule
    n, C, coll = s.nranks, s.nchunks, s.collective
    m, nb = (C, 1) if coll == "allreduce" else (C // n, n)

    def has_out(r: int, c: int) -> bool:
        return coll != "reducescatter" or c // m == r

    wloc = [[OUT if has_out(r, c) else WORK for c in range(C)] for r in range(n)]
    if coll == "allgather":
        loc = [[IN if c // m == r else OUT for c in range(C)] for r in range(n)]
    else:
        loc = [[IN] * C for _ in range(n)]

    steps: list[list[RankStep]] = [[] for _ in range(n)]
    uses_work = False
    max_slots = 0
    bounds = s.step_bounds.tolist()
    src_a, dst_a, chunk_a = s.src.tolist(), s.dst.tolist(), s.chunk.tolist()
    count_a, red_a = s.count.tolist(), s.reduce.tolist()
    for k in range(s.nsteps):
        lo, hi = bounds[k], bounds[k + 1]
        if lo == hi:
            continue
        p2p: dict[int, list[P2P]] = {}
        reduces: dict[int, list[tuple[int, int, int, int]]] = {}  # dst -> (chunk, n, slot, peer)
        slots: dict[int, int] = {}
        copies: list[tuple[int, int, int, int]] = []
        for i in range(lo, hi):
            src, dst, c0, cnt, red = src_a[i], dst_a[i], chunk_a[i], count_a[i], red_a[i]
            ls, wd = loc[src], wloc[dst]
            key = (lambda c: ls[c]) if red else (lambda c: (ls[c], wd[c]))
            for a, b in _segments(c0, cnt, key):
                p2p.setdefault(src, []).append(P2P(True, dst, a, b - a, ls[a]))
                if red:
                    slot = slots.get(dst, 0)
                    slots[dst] = slot + (b - a)
                    p2p.setdefault(dst, []).append(P2P(False, src, a, b - a, SCR, slot))
                    reduces.setdefault(dst, []).append((a, b - a, slot, src))
                else:
                    p2p.setdefault(dst, []).append(P2P(False, src, a, b - a, wd[a]))
                    copies.append((dst, a, b, wd[a]))
        for dst, a, b, w in copies:
            loc[dst][a:b] = [w] * (b - a)
            uses_work |= w == WORK
        adds = {r: _adds(r, reds, loc[r], wloc[r]) for r, reds in reduces.items()}
        for r in adds:
            uses_work |= any(ad.dst_loc == WORK for ad in adds[r])
        if slots:
            max_slots = max(max_slots, max(slots.values()))
        for r in sorted(p2p):
            steps[r].append(RankStep(k, tuple(p2p[r]), tuple(adds.get(r, ()))))

    tails = []
    for r in range(n):
        need = range(C) if coll != "reducescatter" else range(r * m, (r + 1) * m)
        t: list[Tail] = []
        for c in need:
            if loc[r][c] == OUT:
                continue
            if t and t[-1].chunk + t[-1].nchunk == c and t[-1].src_loc == loc[r][c]:
                t[-1] = Tail(t[-1].chunk, t[-1].nchunk + 1, loc[r][c])
            else:
                t.append(Tail(c, 1, loc[r][c]))
        tails.append(tuple(t))
    return Plan(coll, n, C, s.nsteps, m, nb, uses_work, max_slots,
                tuple(tuple(x) for x in steps), tuple(tails))


def _adds(r: int, reds: list[tuple[int, int, int, int]], loc: list[int], wloc: list[int]) -> list[Add]:
    """Fused, batched add operations of one rank in one step; updates ``loc``."""
    groups: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for c0, cnt, slot, peer in reds:
        groups.setdefault((c0, cnt), []).append((peer, slot))
    ops: list[tuple[int, int, int, int, int, tuple[tuple[int, int], ...]]] = []
    for (c0, cnt), members in groups.items():
        members.sort()
        apos = sum(1 for peer, _ in members if peer < r)
        srcs = tuple((slot, c0) for _, slot in members)
        for a, b in _segments(c0, cnt, lambda c: (loc[c], wloc[c])):
            first_a, dst = loc[a], wloc[a]
            if len(srcs) <= MAX_ADD_SRCS:
                ops.append((a, b - a, dst, first_a, apos, srcs))
            else:  # sequential partial sums; the running sum stays first after the first part
                for j in range(0, len(srcs), MAX_ADD_SRCS):
                    part = srcs[j:j + MAX_ADD_SRCS]
                    if j == 0:
                        ops.append((a, b - a, dst, first_a, min(apos, len(part)), part))
                    else:
                        ops.append((a, b - a, dst, dst, 0, part))
            loc[a:b] = [dst] * (b - a)
    out: list[Add] = []
    batch: list[tuple[int, int]] = []
    for a, cnt, dst, aloc, apos, srcs in ops:
        clash = len(batch) >= MAX_ADD_OPS or any(a < y and x < a + cnt for x, y in batch)
        new = not batch or clash
        if new:
            batch = []
        batch.append((a, a + cnt))
        out.append(Add(a, cnt, dst, aloc, apos, srcs, new))
    return out


# ---------------------------------------------------------------------------------------------- layout
def chunk_elems(count: int, chunks_per_block: int, elsize: int) -> int:
    """S: elements per chunk slot (the C code's csChunkElems)."""
    align = max(1, ALIGN_BYTES // elsize)
    per = -(-count // chunks_per_block)
    return -(-per // align) * align


def pos(c: int, count: int, m: int, S: int) -> int:
    """First element of chunk c in the global layout (the C code's csPos)."""
    b, j = divmod(c, m)
    return b * count + min(j * S, count)


def scratch_elems(plan: Plan, count: int, elsize: int) -> tuple[int, int]:
    """(work elements, total scratch elements) of one call; the work area comes first."""
    S = chunk_elems(count, plan.chunks_per_block, elsize)
    align = max(1, ALIGN_BYTES // elsize)
    work = -(-(plan.nblocks * count) // align) * align if plan.uses_work else 0
    return work, work + plan.scratch_slots * S


# ---------------------------------------------------------------------------------------------- interpreter
def run_plan(plan: Plan, inputs: Sequence[np.ndarray], *, inplace: bool = False) -> list[np.ndarray]:
    """Execute the plan on host arrays with the generated code's arithmetic; returns each rank's output.

    ``inputs[r]`` is rank r's send buffer (count elements for AllReduce/AllGather, n*count for
    ReduceScatter). In-place calls alias the buffers as NCCL defines it. Sums are accumulated in
    float32 in the plan's term order and cast back to the input dtype, as the add kernel does.
    """
    n = plan.nranks
    if len(inputs) != n:
        raise CollsynthError(f"run_plan needs {n} input arrays, got {len(inputs)}")
    dtype = inputs[0].dtype
    es = dtype.itemsize
    full = len(inputs[0])
    for r, x in enumerate(inputs):  # every rank passes the same count and dtype (as NCCL requires)
        if len(x) != full or x.dtype != dtype:
            raise CollsynthError(f"run_plan needs input arrays of one length and dtype: rank {r}'s has {len(x)} "
                                 f"{x.dtype} elements, rank 0's {full} {dtype}")
    count = full // n if plan.collective == "reducescatter" else full
    m = plan.chunks_per_block
    S = chunk_elems(count, m, es)
    work_n, scr_n = scratch_elems(plan, count, es)
    total = plan.nblocks * count
    mems = []
    for r in range(n):
        send = np.array(inputs[r], copy=True)
        if plan.collective == "allreduce":
            recv = send if inplace else np.zeros(count, dtype)
        elif plan.collective == "reducescatter":
            recv = send[r * count:(r + 1) * count] if inplace else np.zeros(count, dtype)
        else:
            big = np.zeros(total, dtype)
            if inplace:
                big[r * count:(r + 1) * count] = send
                send = big[r * count:(r + 1) * count]
            recv = big
        scratch = np.full(scr_n, np.nan if dtype.kind == "f" else 0, dtype)
        mems.append((send, recv, scratch))

    def p(c: int) -> int:
        return pos(c, count, m, S)

    def view(r: int, loc: int, c0: int, k: int, slot: int = -1, base: int = -1) -> np.ndarray:
        send, recv, scratch = mems[r]
        lo, hi = p(c0), p(c0 + k)
        if loc == IN:
            off = r * count if plan.collective == "allgather" else 0
            return send[lo - off:hi - off]
        if loc == OUT:
            off = r * count if plan.collective == "reducescatter" else 0
            return recv[lo - off:hi - off]
        if loc == WORK:
            return scratch[lo:hi]
        b = c0 if base < 0 else base
        start = work_n + slot * S + lo - p(b)
        return scratch[start:start + hi - lo]

    cursor = [0] * n
    for k in range(plan.nsteps):
        cur = {}
        for r in range(n):
            if cursor[r] < len(plan.steps[r]) and plan.steps[r][cursor[r]].step == k:
                cur[r] = plan.steps[r][cursor[r]]
                cursor[r] += 1
        # match sends and receives per ordered pair, in posting order (as NCCL does)
        sends: dict[tuple[int, int], list[P2P]] = {}
        for r, st in cur.items():
            for op in st.p2p:
                if op.send:
                    sends.setdefault((r, op.peer), []).append(op)
        data = []
        for r, st in cur.items():
            for op in st.p2p:
                if op.send:
                    continue
                q = sends.get((op.peer, r))
                if not q:
                    raise AssertionError(f"step {k}: rank {r} receives from {op.peer} with no matching send")
                snd = q.pop(0)
                if (snd.chunk, snd.nchunk) != (op.chunk, op.nchunk):
                    raise AssertionError(f"step {k}: send/recv mismatch {snd} vs {op}")
                data.append((r, op, view(op.peer, snd.loc, snd.chunk, snd.nchunk).copy()))
        if any(q for q in sends.values()):
            raise AssertionError(f"step {k}: unmatched sends")
        for r, op, d in data:
            view(r, op.loc, op.chunk, op.nchunk, op.slot)[...] = d
        for r, st in cur.items():
            for ad in st.adds:
                terms = [view(r, SCR, ad.chunk, ad.nchunk, sl, b).astype(np.float32) for sl, b in ad.srcs]
                terms.insert(ad.apos, view(r, ad.a_loc, ad.chunk, ad.nchunk).astype(np.float32))
                acc = terms[0].copy()
                for t in terms[1:]:
                    acc += t
                view(r, ad.dst_loc, ad.chunk, ad.nchunk)[...] = acc.astype(dtype)
    for r in range(n):
        for tail in plan.tails[r]:
            src, dst = view(r, tail.src_loc, tail.chunk, tail.nchunk), view(r, OUT, tail.chunk, tail.nchunk)
            if not np.shares_memory(src, dst):
                dst[...] = src
    return [mems[r][1] for r in range(n)]
