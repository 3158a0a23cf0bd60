"""Emit MSCCL algorithm XML from a verified Schedule (executor/RCCL dialect by default, or legacy).

``emit_xml`` lowers the Schedule (``lower.py``), adds dependencies (``deps.py``), numbers the
steps (k-1 ``nop`` steps in front of a step with k dependencies, each carrying one; ``re`` steps that
complete the same reduction take their dependencies up front so that the runtime fuses them),
replicates the program over ``instances`` (each on its own channels and chunks), renders it with
``templates/msccl.xml.j2`` (no declaration, spaces only, one element per line, double quotes), and
checks the text with the independent XML checker before returning it. When the program needs more
steps per thread block than the runtime allows, the Schedule's steps are spread over more channels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collsynth.backends.msccl.check import check_xml_text
from collsynth.backends.msccl.deps import hazard_deps, order_deps
from collsynth.backends.msccl.lower import Lowered, Op, TbPlan, lower
from collsynth.backends.msccl.model import (
    DIALECTS,
    MAX_CHANNELS,
    MAX_COUNT,
    MAX_DEPID,
    MAX_INT16,
    MAX_NODES_PER_RANK,
    MAX_STEPS,
    MAX_TBS,
    MAX_TOKEN,
    PROTOCOLS,
)
from collsynth.backends.render import render
from collsynth.errors import CollsynthError
from collsynth.units import rank_ranges


def _hoist_re_chains(tb: TbPlan) -> None:
    """Consecutive ``re`` steps into one destination wait up front, so the runtime fuses them (<= 16)."""
    ops = tb.ops
    i = 0
    while i < len(ops):
        if ops[i].type != "re":
            i += 1
            continue
        j = i + 1
        while (j < len(ops) and j - i < 16 and ops[j].type == "re" and ops[j].dst == ops[i].dst
               and ops[j].src[0] == ops[i].src[0] and not ops[j - 1].hasdep):
            j += 1
        if j - i > 1:
            extra = [d for op in ops[i + 1:j] for d in op.deps if d not in ops[i].deps]
            ops[i].deps = ops[i].deps + extra
            for op in ops[i + 1:j]:
                op.deps = []
        i = j


def _number(low: Lowered) -> dict[int, int]:
    """XML step index of every op (nops included); returns {id(op): s}."""
    xs: dict[int, int] = {}
    for tbs in low.tbs:
        for tb in tbs:
            _hoist_re_chains(tb)
            s = 0
            for op in tb.ops:
                s += max(len(op.deps) - 1, 0)
                xs[id(op)] = s
                s += 1
    return xs


def _steps_per_tb(low: Lowered) -> tuple[int, int, int]:
    """(max XML steps in one thread block, its rank, its thread block)."""
    best = (0, 0, 0)
    for r, tbs in enumerate(low.tbs):
        for tb in tbs:
            _hoist_re_chains(tb)
            k = sum(max(len(op.deps), 1) for op in tb.ops)
            if k > best[0]:
                best = (k, r, tb.idx)
    return best


class _Mapper:
    """MSCCL offsets and counts. Schedule chunk c starts at MSCCL chunk X(c) = c*M // N of an instance's
    M chunks (M = N unless a finer grid is asked for; then chunks get floor or ceiling shares), and
    instance i owns a disjoint share of every buffer (blocked per rank where ranks own blocks)."""

    def __init__(self, low: Lowered, instances: int, M: int) -> None:
        self.coll, self.n, self.N, self.K, self.M = low.collective, low.nranks, low.nchunks, instances, M
        self.m = self.N // self.n
        self.mp = M // self.n
        self.unit = -(-M // self.N)
        rs = self.coll == "reducescatter"
        self.base_ir = self.N - self.m if rs else 0
        self.base_x = M - self.mp if rs else 0
        self.scratch = [self.base_x + max(k - self.base_ir, 0) * self.unit if k else 0 for k in low.scratch]

    def x(self, c: int) -> int:
        return c * self.M // self.N

    def width(self, c0: int, cnt: int) -> int:
        w = self.x(c0 + cnt) - self.x(c0)
        if w >= MAX_COUNT:
            raise CollsynthError(f"a step would move {w} MSCCL chunks; the cnt limit is {MAX_COUNT - 1}: use a smaller "
                                 f"--nchunksperloop")
        return w

    def loc(self, r: int, loc: tuple[str, int], i: int, c0: int, w: int) -> tuple[str, int]:
        buf, k = loc
        if k < 0:
            return loc
        K, mp = self.K, self.mp
        if buf == "s":
            if k >= self.base_ir:  # a scratch slot for a reduce in flight (several reduces on one location)
                x = self.base_x + (k - self.base_ir) * self.unit
            else:  # a reducescatter partial sum: its chunk, the rank's own block left out
                x = self.x(c0) if c0 < r * self.m else self.x(c0) - mp
            return ("s", i * self.scratch[r] + x)
        x = self.x(c0)
        if (self.coll == "allgather" and buf == "o") or (self.coll == "reducescatter" and buf == "i"):
            if K > 1 and x // mp != (x + w - 1) // mp:
                raise CollsynthError(f"--instances {K}: a step moves chunks across rank blocks; use --instances 1 "
                                     f"for this schedule")
            return (buf, (x // mp) * mp * K + i * mp + x % mp)
        if self.coll in ("allgather", "reducescatter"):  # the per-rank buffer (AG input, RS output)
            return (buf, i * mp + x - r * mp)
        return (buf, i * self.M + x)


def loop_chunks(s: Any, value: int | str | None) -> int:
    """MSCCL chunks per instance: the Schedule's (None), a number, or 'pow2' (a power of two when the
    Schedule's count is not one, so that power-of-two buffers are eligible: the runtime needs the element
    count to be a multiple of nchunksperloop)."""
    N, n = s.nchunks, s.nranks
    cmax = max(int(s.count.max()) if s.ntransfers else 1, N // n if s.collective == "allgather" else 1)
    if value is None:
        return N
    if value == "pow2":
        if N & (N - 1) == 0:
            return N
        M = 1 << (N.bit_length() - 1)
        while -(-2 * M * cmax // N) < MAX_COUNT:
            M *= 2
        if M < N or (s.collective != "allreduce" and M % n):
            return N
        return M
    if isinstance(value, bool) or not isinstance(value, int) or value < N:
        raise CollsynthError(f"--nchunksperloop must be at least the schedule's {N} chunks (or pow2), got {value!r}")
    if s.collective != "allreduce" and value % n:
        raise CollsynthError(f"--nchunksperloop {value}: {s.collective} needs a multiple of the {n} ranks")
    if -(-value * cmax // N) >= MAX_COUNT:
        raise CollsynthError(f"--nchunksperloop {value}: a transfer of {cmax} schedule chunks would need more than "
                             f"{MAX_COUNT - 1} MSCCL chunks in one step (the cnt limit)")
    return value


def _tb_index(op: Op) -> int:
    """The index of the thread block lowering placed ``op`` in."""
    assert op.tb is not None  # lower() places every op
    return op.tb.idx


def _render(low: Lowered, xs: dict[int, int], *, algo_attrs: list[tuple[str, Any]], instances: int,
            M: int, comment: str = "") -> str:
    mp = _Mapper(low, instances, M)
    sender, receiver = low.endpoints()
    K = instances
    icount = mp.mp * K if low.collective == "allgather" else M * K
    ocount = mp.mp * K if low.collective == "reducescatter" else M * K
    gpus = []
    for r, tbs in enumerate(low.tbs):
        ntb = len(tbs)
        gtbs = []
        for i in range(K):
            for tb in tbs:
                steps: list[tuple[int, str, str, int, str, int, int, int, int, int]] = []
                for op in tb.ops:
                    for d in op.deps[:-1]:
                        steps.append((len(steps), "nop", "i", -1, "i", -1, 0, i * ntb + _tb_index(d), xs[id(d)], 0))
                    dep = op.deps[-1] if op.deps else None
                    depid = i * ntb + _tb_index(dep) if dep is not None else -1
                    deps = xs[id(dep)] if dep is not None else -1
                    src, dst = op.src, op.dst
                    if op.type in ("r", "rcs"):
                        s_op = sender[op.xin]
                        src = s_op.src if s_op.type in ("s", "rrs") else s_op.dst
                        srank = s_op.rank
                    else:
                        srank = r
                    if op.type == "s":
                        d_op = receiver[op.xout]
                        dst, drank = d_op.dst, d_op.rank
                    elif op.type == "rrs":
                        dst, drank = op.src, r
                    else:
                        drank = r
                    w = mp.width(op.c0, op.cnt)
                    sb, so = mp.loc(srank, src, i, op.c0, w)
                    db, do = mp.loc(drank, dst, i, op.c0, w)
                    steps.append((len(steps), op.type, sb, so, db, do, w, depid, deps, int(op.hasdep)))
                gtbs.append({"id": i * ntb + tb.idx, "send": tb.send, "recv": tb.recv,
                             "chan": i * low.nsegments + tb.seg, "steps": steps})
        gpus.append({"id": r, "i": icount, "o": ocount, "s": mp.scratch[r] * K, "tbs": gtbs})
    return render("msccl/msccl.xml.j2", algo=algo_attrs, gpus=gpus, comment=comment)


def phases_comment(s: Any) -> str:
    """The Schedule's phases (which ranks each step waits for), kept in a comment before <algo> so that
    ``xml_to_schedule`` can restore them; the runtimes skip comments."""
    parts = []
    for ph in s.phases:
        who = "all" if len(ph.waits_for) == s.nranks else rank_ranges(ph.waits_for)
        if any(c in ph.name for c in " ;<>&") or "--" in ph.name or ph.name.startswith("-") or not ph.name:
            return ""
        parts.append(f"{ph.name} {ph.start} {ph.stop} {who}")
    return "collsynth phases: " + ("; ".join(parts) if parts else "none")


def _attrs(s: Any, *, dialect: str, proto: str, nchannels: int, nchunks: int, name: str, inplace: bool,
           outofplace: bool, min_bytes: int, max_bytes: int) -> list[tuple[str, Any]]:
    coll = s.collective
    if dialect == "legacy":
        out: list[tuple[str, Any]] = [("name", name), ("proto", proto), ("nchannels", nchannels),
                                      ("nchunksperloop", nchunks), ("ngpus", s.nranks),
                                      ("coll", "reduce_scatter" if coll == "reducescatter" else coll),
                                      ("inplace", int(inplace))]
        if min_bytes:
            out.append(("minBytes", min_bytes))
        if max_bytes:
            out.append(("maxBytes", max_bytes))
        return out
    return [("name", name), ("proto", proto), ("nchannels", nchannels), ("nchunksperloop", nchunks),
            ("ngpus", s.nranks), ("coll", coll), ("inplace", int(inplace)), ("outofplace", int(outofplace)),
            ("minBytes", min_bytes), ("maxBytes", max_bytes)]


def _check_options(dialect: str, proto: str, min_bytes: int, max_bytes: int, inplace: bool, outofplace: bool,
                   instances: int, name: str) -> None:
    if dialect not in DIALECTS:
        raise CollsynthError(f"unknown --dialect {dialect!r}: use executor or legacy")
    if proto not in PROTOCOLS:
        raise CollsynthError(f"unknown --proto {proto!r}: use Simple, LL or LL128")
    for flag, v in (("--min-bytes", min_bytes), ("--max-bytes", max_bytes)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise CollsynthError(f"{flag} must be a byte count >= 0, got {v!r}")
    if max_bytes and max_bytes < min_bytes:
        raise CollsynthError(f"--max-bytes {max_bytes} is below --min-bytes {min_bytes} (0 means no upper limit)")
    if not inplace and not outofplace:
        raise CollsynthError("--no-inplace together with --no-outofplace: the runtime would never use the file")
    if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
        raise CollsynthError(f"--instances must be an integer >= 1, got {instances!r}")
    if instances > MAX_CHANNELS:
        raise CollsynthError(f"--instances {instances}: MSCCL has {MAX_CHANNELS} channels (chan 0..{MAX_CHANNELS - 1}) "
                             f"and each instance needs at least one")
    if not name or len(name) > MAX_TOKEN or any(ch in name for ch in '"<>&\n\r\t'):
        raise CollsynthError(f"--name {name!r}: use 1..{MAX_TOKEN} characters without quotes, <, >, & or tabs")


def _first_guess(s: Any, max_steps: int) -> int:
    """Segments needed at least: a connection's transfers all pass through one thread block."""
    if not s.ntransfers:
        return 1
    per_conn = np.bincount(s.src * s.nranks + s.dst, minlength=s.nranks * s.nranks)
    return max(1, min(-(-int(per_conn.max()) // max_steps), max(s.nsteps, 1)))


def check_peer_limits(s: Any, *, dialect: str = "executor", instances: int = 1) -> None:
    """Refuse, before lowering, a schedule that no lowering fits: a thread block has one send peer and one
    receive peer (per channel), so a rank needs at least as many thread blocks as it has send (or receive)
    peers; and it runs at least max(sends, receives) steps (a fused receive-send is one), each thread block
    at most MAX_STEPS, each step one XML element of the rank (MAX_NODES_PER_RANK, with one per GPU)."""
    n = s.nranks
    if not s.ntransfers:
        return
    max_steps, max_tbs = MAX_STEPS[dialect], MAX_TBS[dialect]
    pair = np.unique(s.src.astype(np.int64) * n + s.dst)
    peers = np.maximum(np.bincount(pair // n, minlength=n), np.bincount(pair % n, minlength=n))
    r = int(np.argmax(peers))
    if int(peers[r]) * instances > max_tbs:
        raise CollsynthError(f"rank {r} exchanges with {int(peers[r])} peers in one direction: MSCCL needs a thread "
                             f"block per peer{' and instance' if instances > 1 else ''} and allows at most {max_tbs} "
                             f"per GPU (checked before lowering): use fewer ranks (at most {max_tbs // instances + 1} "
                             f"for an all-to-all schedule such as direct), fewer --instances, or an algorithm with "
                             f"fewer peers per rank (ring, rhd, stragglar)")
    ops = np.maximum(np.bincount(s.src, minlength=n), np.bincount(s.dst, minlength=n)) * instances
    r = int(np.argmax(ops))
    most = min(max_tbs * max_steps, MAX_NODES_PER_RANK - 1 - n)
    if int(ops[r]) > most:
        raise CollsynthError(f"rank {r} runs at least {int(ops[r])} steps (one per transfer it sends or receives"
                             f"{', per instance' if instances > 1 else ''}); MSCCL fits at most {most} per GPU "
                             f"({max_tbs} thread blocks of {max_steps} steps, {MAX_NODES_PER_RANK} XML elements per "
                             f"rank; checked before lowering): use fewer ranks or steps, or --format mscclpp-plan")


def plan(s: Any, *, dialect: str = "executor", inplace: bool = True, instances: int = 1) -> tuple[Lowered, dict, dict]:
    """Lower, add dependencies and pick the number of channel segments that fits the runtime's limits."""
    max_steps, max_tbs = MAX_STEPS[dialect], MAX_TBS[dialect]
    check_peer_limits(s, dialect=dialect, instances=instances)
    nseg = _first_guess(s, max_steps)
    while True:
        low = lower(s, inplace=inplace, nseg=nseg)
        if low.nsegments * instances > MAX_CHANNELS:
            raise CollsynthError(f"the program needs {low.nsegments * instances} channels ({low.nsegments} per "
                                 f"instance x {instances} instance(s)); MSCCL allows at most {MAX_CHANNELS} (chan 0.."
                                 f"{MAX_CHANNELS - 1}): use fewer --instances")
        ntb = max(len(t) for t in low.tbs) * instances
        if ntb > max_tbs:
            worst = max(range(len(low.tbs)), key=lambda q: len(low.tbs[q]))
            extra = f" (on {low.nsegments} channels, to keep steps per thread block <= {max_steps})" \
                if low.nsegments > 1 else ""
            m = s.meta.get("pipeline") if s.meta.get("algorithm") == "clusterstraggler" else None
            fewer = f", fewer blocks per part (--pipeline below {m})" if isinstance(m, int) and m > 1 else ""
            raise CollsynthError(f"rank {worst} needs {ntb} thread blocks{extra}; MSCCL allows at most {max_tbs} per "
                                 f"GPU (one per peer pair and channel; RCCL's limit, and all must be co-resident): "
                                 f"use fewer ranks, fewer --instances{fewer}, an algorithm with fewer peers per rank, "
                                 f"or --format mscclpp-plan")
        hazard_deps(low)  # after the thread-block count: it costs more than the lowering
        steps, r, tbi = _steps_per_tb(low)
        if steps <= max_steps:
            stats = order_deps(low)
            steps, r, tbi = _steps_per_tb(low)
            if steps <= max_steps:
                break
        nxt = max(nseg + 1, -(-nseg * steps // max_steps))
        if nxt > max(s.nsteps, 1):
            raise CollsynthError(f"rank {r} thread block {tbi} needs {steps} steps; MSCCL allows {max_steps} per "
                                 f"thread block, and the schedule's {s.nsteps} step(s) cannot be spread over more "
                                 f"channels (one Schedule step stays in one thread block per peer pair)")
        nseg = nxt
    xs = _number(low)
    for r, tbs in enumerate(low.tbs):
        nodes = 1 + s.nranks + instances * (len(tbs) + sum(max(len(op.deps), 1) for tb in tbs for op in tb.ops))
        if nodes > MAX_NODES_PER_RANK:
            raise CollsynthError(f"rank {r} needs {nodes} XML elements (its thread blocks and steps, plus one per "
                                 f"GPU); the runtime's parser holds at most {MAX_NODES_PER_RANK} per rank: use fewer "
                                 f"--instances or fewer ranks")
    for tbs in low.tbs:
        for tb in tbs:
            for op in tb.ops:
                for d in op.deps:
                    if d.tb.idx + (instances - 1) * len(tbs) > MAX_DEPID:  # type: ignore[union-attr]
                        raise CollsynthError(f"thread block ids above {MAX_DEPID} cannot be named in a dependency")
    if max(low.scratch) * instances > MAX_INT16 or s.nchunks * instances > MAX_INT16:
        raise CollsynthError(f"buffer offsets above {MAX_INT16} cannot be written in MSCCL XML: use fewer chunks")
    stats.update(low.stats, max_steps_per_tb=steps, thread_blocks_per_gpu=ntb, channels=low.nsegments * instances)
    return low, xs, stats


def emit_xml(schedule: Any, *, dialect: str = "executor", proto: str = "Simple", min_bytes: int = 0,
             max_bytes: int = 0, inplace: bool = True, outofplace: bool = True, instances: int = 1,
             name: str | None = None, nchunksperloop: int | str | None = None, check: bool = True) -> str:
    """MSCCL XML text for a verified Schedule; raises CollsynthError naming the limit it cannot fit.

    The text is checked by the independent checker (``check.py``) before it is returned."""
    name = name if name is not None else (schedule.name or f"collsynth_{schedule.collective}_n{schedule.nranks}")
    _check_options(dialect, proto, min_bytes, max_bytes, inplace, outofplace, instances, name)
    if dialect == "legacy":
        outofplace = outofplace and not inplace  # the old runtime serves one mode (inplace must match)
    M = loop_chunks(schedule, nchunksperloop)
    if M * instances > MAX_INT16:
        raise CollsynthError(f"nchunksperloop {M * instances} is too large: MSCCL offsets stop at {MAX_INT16}")
    low, xs, stats = plan(schedule, dialect=dialect, inplace=inplace, instances=instances)
    attrs = _attrs(schedule, dialect=dialect, proto=proto, nchannels=low.nsegments * instances,
                   nchunks=M * instances, name=name, inplace=inplace, outofplace=outofplace,
                   min_bytes=min_bytes, max_bytes=max_bytes)
    text = _render(low, xs, algo_attrs=attrs, instances=instances, M=M, comment=phases_comment(schedule))
    if check:
        report = check_xml_text(text, f"<emitted {name}>")
        if not report.ok:  # pragma: no cover - an emitter bug; never hand out an unverified file
            raise CollsynthError(f"internal error: the emitted MSCCL XML does not verify: {report.message}")
    return text
