"""Emit an MSCCL++ execution plan (JSON, format 0.9.0) from a verified Schedule.

``emit_plan(schedule, ...)`` lowers the Schedule (lower.py), allocates channels, remote buffers and
device semaphores, writes the JSON with a fixed key order (the DSL's; one op per line), and checks
the text with the independent plan checker (check.py) before returning it: a plan is never handed
out unverified. The plan's ``collsynth`` object (ignored by the executor) records the format version,
the Schedule's name, algorithm, late rank, phases and the step of every op that sends data, so that
``plan_to_schedule`` gives back a Schedule that simulates identically.

Limits that stop a schedule (one line naming the limit and the largest size that fits, exit 2):
thread blocks per GPU (they wait on each other, so all must be resident: one 1024-thread block per
SM), and byte offsets past 4 GiB (uint32 on the device) for the message sizes asked for.
"""

from __future__ import annotations

import json
from typing import Any

from collsynth.backends.layout import Layout, check_block_owners, nodes_of
from collsynth.backends.mscclpp.check import check_plan_text
from collsynth.backends.mscclpp.lower import (
    Channels,
    Item,
    Piece,
    Program,
    allocate_channels,
    build_programs,
    pieces,
    plan_chunks,
)
from collsynth.backends.mscclpp.model import (
    FORMAT_VERSION,
    MAX_CHANNELS_PER_TB,
    MAX_ITERATIONS,
    MAX_OPS_PER_TB,
    PROTOCOLS,
)
from collsynth.errors import CollsynthError
from collsynth.synth.topology.gpus import A100, check_sms, gpu_of_spec

# the kernel runs one 1024-thread block per SM, and all of a rank's blocks must be resident: as many as the
# GPU has SMs (--sms, else the GPU the schedule's topology names, else this one's)
DEFAULT_GPU = A100
ALIGNMENT = 16
UINT32 = 1 << 32


class TooManyThreadBlocks(CollsynthError):
    """The schedule needs more thread blocks per GPU than can be resident (fit.py adds the largest size
    that fits)."""

    def __init__(self, message: str, need: int) -> None:
        super().__init__(message)
        self.need = need


class _Built:
    """A lowered plan: programs, channels, and the per-rank tables the JSON needs."""

    def __init__(self, s: Any, progs: list[Program], chans: Channels, scratch: list[int], node_of: list[int],
                 packets: bool, pipeline: int, lay: Layout, M: int, pcs: list[Piece]) -> None:
        self.s, self.progs, self.chans, self.scratch, self.M, self.pcs = s, progs, chans, scratch, M, pcs
        self.rendered: dict[tuple[int, int], Any] = {}  # (rank, segment) -> _tb_ops(...)
        self.node_of, self.packets, self.pipeline, self.lay = node_of, packets, pipeline, lay
        self.pipeline_chunks = 1  # every reference in a pipeline body holds this many chunks
        self.sender_seg = {(p.rank, pid): it.seg for p in progs for it in p.items
                           if it.name in ("signal", "pws") for _, pid in it.sync}
        self.items: dict[tuple[int, int], list[Item]] = {}
        self.rtable: list[list[tuple[int, str]]] = []
        for p in progs:
            used = set()
            for it in p.items:
                self.items.setdefault((p.rank, it.seg), []).append(it)
                for ref in it.dst:
                    if ref[0] == "r":
                        used.add((ref[1], it.ctype))
            self.rtable.append(sorted(used))

    def segments(self, r: int) -> int:
        return self.progs[r].seg + 1


# The last lowering thread_blocks() made, for emit_plan to take when it is asked for the same schedule object
# with the same options (fit_cluster_pipeline counts the blocks of the schedule synth then emits: one lowering,
# 30 s at 512 GPUs, instead of two). One slot, emptied by every lowering and by emit_plan; what it holds
# (the lowering and its schedule) stays alive until then.
_last_lowering: list[tuple[tuple[Any, ...], _Built]] = []


def _lowered(s: Any, *, packets: bool, pipeline: int, node_of: list[int], M: int, keep: bool) -> _Built:
    """``_build``'s lowering, taken from the one-slot memo when it holds the same schedule and options; kept
    there (``keep``) for the next call."""
    key = (id(s), packets, pipeline, tuple(node_of), M)
    if _last_lowering:
        k, b = _last_lowering.pop()
        if k == key and b.s is s:
            if keep:
                _last_lowering.append((k, b))
            return b
        del k, b
    b = _build(s, packets=packets, pipeline=pipeline, node_of=node_of, M=M)
    if keep:
        _last_lowering.append((key, b))
    return b


def _build(s: Any, *, packets: bool, pipeline: int, node_of: list[int], M: int) -> _Built:
    """Lower ``s`` with 8 peers per thread block. A rank with a thread block whose channel tables overflow is
    lowered again with half its peers per block, one whose rendered ops overflow (its channels to a peer
    outnumber the estimate its segments were cut by) with that many ops kept free per block; its segments
    change its peers' channel tables, so the check repeats until no rank overflows. Only those ranks get
    smaller blocks (a global halving used to cost every rank, 23 -> 139 blocks on a 4-node H200 fabric)."""
    lay = Layout(s.collective, s.nranks, s.nchunks)
    pcs, scratch = pieces(s, lay, node_of, M)
    budgets, slack = [8] * s.nranks, [0] * s.nranks
    progs = build_programs(s, pcs, packets=packets, pipeline=bool(pipeline), budget_peers=budgets,
                           allgather_copy=s.collective == "allgather", M=M)
    for _ in range(100):  # each pass shrinks some rank's blocks; 2 or 3 settle every schedule we build
        chans = allocate_channels(progs, packets)
        built = _Built(s, progs, chans, scratch, node_of, packets, pipeline, lay, M, pcs)
        over = _overflowing(built)
        if not over:
            return built
        for r, excess in over.items():
            if excess:
                slack[r] += excess
            elif budgets[r] > 1:
                budgets[r] //= 2
            else:  # pragma: no cover - no schedule we build reaches it
                raise CollsynthError(f"rank {r}: the plan's thread blocks need more channels than their tables "
                                     f"hold ({MAX_CHANNELS_PER_TB} per type) even with one peer per thread block")
        progs = build_programs(s, pcs, packets=packets, pipeline=bool(pipeline), budget_peers=budgets,
                               allgather_copy=s.collective == "allgather", M=M, previous=progs, only=set(over),
                               slack=slack)
    raise RuntimeError("the MSCCL++ lowering did not settle its thread blocks in 100 passes")  # pragma: no cover


def _overflowing(b: _Built) -> dict[int, int]:
    """The ranks with a thread block over the limits: 0 where a channel or remote-buffer table overflows,
    else the most ops a thread block has over MAX_OPS_PER_TB."""
    over: dict[int, int] = {}
    for r, prog in enumerate(b.progs):
        for seg in range(prog.seg + 1):
            if any(len(b.chans.tables.get((r, seg, t), ())) > MAX_CHANNELS_PER_TB for t in ("memory", "port")):
                over[r] = 0
                break
            excess = len(_tb_ops(b, r, seg)[0]) - MAX_OPS_PER_TB
            if excess > 0:
                over[r] = max(over.get(r, 0), excess)
    return over


def _remote_table(b: _Built, r: int) -> list[tuple[int, str]]:
    """Rank r's remote buffers: the scratch of every peer it writes into, with the access channel type."""
    return b.rtable[r]


def _tb_ops(b: _Built, r: int, seg: int) -> tuple[list[dict[str, Any]], dict[str, list[int]], dict[str, list[int]],
                                                  list[tuple[int, int, int]]]:
    """The ops of rank r's thread block ``seg`` as JSON objects, its channel and remote-buffer tables, and
    (op position, dst index, piece) for every op that sends data (computed once per thread block)."""
    if (r, seg) not in b.rendered:
        b.rendered[(r, seg)] = _render_tb(b, r, seg)
    return b.rendered[(r, seg)]


def _render_tb(b: _Built, r: int, seg: int) -> tuple[list[dict[str, Any]], dict[str, list[int]],
                                                     dict[str, list[int]], list[tuple[int, int, int]]]:
    chans = {t: b.chans.tables.get((r, seg, t), []) for t in ("memory", "port")}
    local = {t: {gi: i for i, gi in enumerate(ids)} for t, ids in chans.items()}
    rtable_all = _remote_table(b, r)
    rid = {key: i for i, key in enumerate(rtable_all)}
    items = b.items.get((r, seg), [])
    rbufs: dict[str, list[int]] = {"memory": [], "port": []}
    for it in items:
        for ref in it.dst:
            if ref[0] == "r":
                k = rid[(ref[1], it.ctype)]
                if k not in rbufs[it.ctype]:
                    rbufs[it.ctype].append(k)
    for t in rbufs:
        rbufs[t].sort()
    rlocal = {t: {k: i for i, k in enumerate(v)} for t, v in rbufs.items()}
    ops: list[dict[str, Any]] = []
    if not b.packets:  # handshake: a peer writes into this rank's scratch only once it has started the launch
        hs = []
        for name in ("signal", "wait"):
            for t in ("memory", "port"):
                ids = list(range(len(chans[t])))
                for i in range(0, len(ids), 8):
                    hs.append({"name": name, "channel_ids": ids[i:i + 8], "channel_type": t})
        if hs:
            ops += hs + [{"name": "nop"}]
    prologue = [it for it in items if it.prologue]
    body = [it for it in items if not it.prologue]
    sends: list[tuple[int, int, int]] = []
    rendered_pro = [_op(b, r, seg, it, local, rlocal, rid) for it in prologue]
    ops += rendered_pro
    base = len(ops) + (1 if b.pipeline else 0)
    rendered = []
    for i, it in enumerate(body):
        rendered.append(_op(b, r, seg, it, local, rlocal, rid))
        for k, pid in enumerate(it.movements):
            sends.append((base + i, k, pid))
    if b.pipeline and rendered:
        ops.append({"name": "pipeline", "iter_context": {"unit_size": b.pipeline, "num_chunks": b.pipeline_chunks},
                    "ops": rendered})
    else:
        ops += rendered
    return ops, {t: v for t, v in chans.items()}, rbufs, sends


def _ref(ref: tuple[Any, ...], it: Item, rlocal: dict[str, dict[int, int]], rid: dict[tuple[int, str], int]
         ) -> dict[str, Any]:
    if ref[0] == "l":
        return {"type": ref[1], "index": ref[2], "size": ref[3]}
    return {"buffer_id": rlocal[it.ctype][rid[(ref[1], it.ctype)]], "index": ref[2], "size": ref[3]}


def _op(b: _Built, r: int, seg: int, it: Item, local: dict[str, dict[int, int]], rlocal: dict[str, dict[int, int]],
        rid: dict[tuple[int, str], int]) -> dict[str, Any]:
    d: dict[str, Any] = {"name": it.name}
    if it.sems:
        d["semaphore_ids"] = list(it.sems)
        return d
    if it.sync:
        ids = []
        for peer, pid in it.sync:
            if it.name == "wait":
                sender_seg = _sender_seg(b, peer, pid)
                gi = b.chans.index[(r, it.ctype, peer, seg, sender_seg)]
            elif it.name == "rppkt":
                gi = b.chans.index[(r, it.ctype, peer, seg, -1)]
            else:
                gi = b.chans.index[(r, it.ctype, peer, seg, b.chans.wait_seg[(peer, pid)])]
            ids.append(local[it.ctype][gi])
        d["channel_ids"] = ids
    if it.src:
        d["src_buff"] = [_ref(x, it, rlocal, rid) for x in it.src]
    if it.dst:
        d["dst_buff"] = [_ref(x, it, rlocal, rid) for x in it.dst]
    if it.ctype != "none":
        d["channel_type"] = it.ctype
    if it.name in ("re", "repkt"):
        d["reduce_op"] = "sum"
    return d


def _sender_seg(b: _Built, sender: int, pid: int) -> int:
    return b.sender_seg[(sender, pid)]


def _scratch_chunks(b: _Built) -> int:
    return max(max(b.scratch), 0)


def io_chunks(b: _Built) -> tuple[int, int]:
    """(input_chunks, output_chunks) of every rank, in plan chunks."""
    n, M = b.s.nranks, b.M
    if b.s.collective == "allgather":
        return M // n, M
    if b.s.collective == "reducescatter":
        return M, M // n
    return M, M


def max_chunk_bytes(b: _Built) -> int:
    """The largest chunk (bytes) whose offsets stay below 4 GiB, and whose pipeline iterations fit 16 bits."""
    ic, oc = io_chunks(b)
    extent = max(ic, oc, _scratch_chunks(b) * (2 if b.packets else 1) * (2 if b.packets else 1), 1)
    c = (UINT32 - 1) // extent // ALIGNMENT * ALIGNMENT
    if b.pipeline:
        c = min(c, (MAX_ITERATIONS - 1) * b.pipeline // ALIGNMENT * ALIGNMENT)
    return c


def render(b: _Built, *, name: str, proto: str, inplace: bool, min_bytes: int, max_bytes: int) -> tuple[str, dict]:
    """The plan's JSON text (fixed key order, one op per line) and its object."""
    s = b.s
    n = s.nranks
    ic, oc = io_chunks(b)
    gpus = []
    steps: list[int] = []
    transfers: list[int] = []
    pcs_of = _piece_table(b)
    for r in range(n):
        tbs = []
        for seg in range(b.segments(r)):
            ops, chans, rbufs, sends = _tb_ops(b, r, seg)
            for _pos, _k, pid in sends:
                steps.append(pcs_of[pid][0])
                transfers.append(pcs_of[pid][1])
            tb: dict[str, Any] = {"id": seg, "ops": ops,
                                  "channels": [{"channel_type": t, "channel_ids": v} for t, v in chans.items() if v],
                                  "remote_buffer_refs": [{"access_channel_type": t, "remote_buffer_ids": v}
                                                         for t, v in rbufs.items() if v]}
            tbs.append(tb)
        channels = [{"channel_type": t, "connected_to": b.chans.peers[(r, t)]} for t in ("memory", "port")
                    if b.chans.peers.get((r, t))]
        remote = [{"rank": p, "type": "s", "access_channel_types": [t]} for p, t in _remote_table(b, r)]
        gpus.append({"id": r, "input_chunks": ic, "output_chunks": oc, "scratch_chunks": _scratch_chunks(b),
                     "threadblocks": tbs, "channels": channels, "remote_buffers": remote,
                     "semaphores": [{"init_value": 0} for _ in range(b.segments(r) - 1)]})
    meta = {"format_version": FORMAT_VERSION, "generator": "collsynth", "schedule": s.name,
            "algorithm": s.meta.get("algorithm"), "straggler": _late_rank(s), **_late_many(s),
            "collective": s.collective,
            "nranks": n, "nchunks": s.nchunks, "plan_chunks": b.M, "nsteps": s.nsteps, "ports": s.ports,
            "gpus_per_node": n // (max(b.node_of) + 1), "pipeline_unit": b.pipeline or None,
            "phases": [ph.to_json() for ph in s.phases], "send_steps": steps, "send_transfers": transfers}
    plan = {"name": name, "collective": s.collective, "protocol": proto, "inplace": inplace, "reuse_resources": False,
            "gpus": gpus, "num_threads_per_block": 1024, "use_double_scratch_buffer": b.packets,
            "buffer_alignment": ALIGNMENT, "min_message_size": min_bytes, "max_message_size": max_bytes,
            "collsynth": meta}
    return dump(plan), plan


def _piece_table(b: _Built) -> dict[int, tuple[int, int]]:
    return {p.id: (p.step, p.t) for p in b.pcs}


def _late_set(s: Any) -> list[int]:
    """The ranks a straggler-aware schedule is built for, sorted: its ``straggler`` meta, clusterstraggler's
    late-GPU or late-node ``late`` ranks, else the ranks some phase does not wait for (the late set the MSCCL
    scheduler plugin reads from the same phases)."""
    if isinstance(s.meta.get("straggler"), int):
        return [int(s.meta["straggler"])]
    late = s.meta.get("late")
    if s.meta.get("form") in ("gpu", "node") and isinstance(late, list) and late and \
            all(isinstance(r, int) and 0 <= r < s.nranks for r in late):
        return sorted(set(late))
    missing: set[int] = set()
    for ph in s.phases:
        missing |= set(range(s.nranks)) - set(ph.waits_for)
    return sorted(missing)


def _late_rank(s: Any) -> int | None:
    """The one rank a straggler-aware schedule is built for, else None."""
    late = _late_set(s)
    return late[0] if len(late) == 1 else None


def _late_many(s: Any) -> dict[str, list[int]]:
    """{"late": ranks} for a schedule built for several late ranks (a cluster's late node), else {} (plans
    for one late rank or none keep their record)."""
    late = _late_set(s)
    return {"late": late} if len(late) > 1 else {}


_COMPACT = frozenset(("channels", "remote_buffer_refs", "remote_buffers", "semaphores", "phases", "send_steps",
                      "send_transfers"))


def dump(plan: dict[str, Any]) -> str:
    """Deterministic JSON in the given key order: objects indented, and every op, reference list and
    table on one line."""
    def one(x: Any) -> str:
        return json.dumps(x, separators=(", ", ": "))

    def enc(x: Any, ind: int, key: str = "") -> str:
        if key in _COMPACT or not isinstance(x, (dict, list)) or (isinstance(x, dict) and "name" in x and
                                                                   "gpus" not in x):
            return one(x)
        if isinstance(x, list):
            items, brackets = [enc(v, ind + 1) for v in x], "[]"
        else:
            items, brackets = [f"{one(k)}: {enc(v, ind + 1, k)}" for k, v in x.items()], "{}"
        if not items:
            return brackets
        pad = " " * (ind + 1)
        return brackets[0] + "\n" + ",\n".join(pad + it for it in items) + "\n" + " " * ind + brackets[1]

    return enc(plan, 0) + "\n"


def _check_options(proto: str, min_bytes: int, max_bytes: int, name: str, pipeline: int | None) -> None:
    if proto not in PROTOCOLS:
        raise CollsynthError(f"unknown --proto {proto!r} for mscclpp-plan: use Simple or LL")
    for flag, v in (("--min-bytes", min_bytes), ("--max-bytes", max_bytes)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise CollsynthError(f"{flag} must be a byte count >= 0, got {v!r}")
    if max_bytes and max_bytes < min_bytes:
        raise CollsynthError(f"--max-bytes {max_bytes} is below --min-bytes {min_bytes} (0 means the largest that "
                             f"fits)")
    if not name or any(ch in name for ch in '"\\\n\r\t'):
        raise CollsynthError(f"--name {name!r}: use a non-empty name without quotes, backslashes or tabs")
    if pipeline is not None:
        if isinstance(pipeline, bool) or not isinstance(pipeline, int) or pipeline < ALIGNMENT or pipeline % ALIGNMENT:
            raise CollsynthError(f"--pipeline-unit must be a multiple of {ALIGNMENT} bytes, got {pipeline!r}")
        if proto == "LL":
            raise CollsynthError("--pipeline-unit applies to --proto Simple: LL packet ops ignore pipeline offsets "
                                 "(the executor redoes their whole range every iteration)")


def thread_blocks(schedule: Any, *, proto: str = "Simple", pipeline: int | None = None,
                  gpus_per_node: int | None = None, chunks: int | str | None = None) -> tuple[int, int]:
    """(the rank needing the most thread blocks, how many) when the schedule is lowered as ``emit_plan`` lowers
    it (the ranks whose thread blocks overflow cut again: ``_build``), without the plan text; CollsynthError
    when it cannot be lowered. The lowering stays in a one-slot memo for ``emit_plan`` of the same schedule."""
    check_block_owners(schedule, "an MSCCL++ plan")
    b = _lowered(schedule, packets=proto == "LL", pipeline=pipeline or 0, node_of=nodes_of(schedule, gpus_per_node),
                 M=plan_chunks(schedule, chunks), keep=True)
    worst = max(range(schedule.nranks), key=lambda r: (b.segments(r), -r))
    return worst, b.segments(worst)


def fits(schedule: Any, *, proto: str = "Simple", pipeline: int | None = None, gpus_per_node: int | None = None,
         chunks: int | str | None = None, sms: int | None = None) -> tuple[bool, str]:
    """Whether the schedule lowers within the executor's limits (without rendering or checking)."""
    try:
        worst, need = thread_blocks(schedule, proto=proto, pipeline=pipeline, gpus_per_node=gpus_per_node,
                                    chunks=chunks)
    except CollsynthError as e:
        return False, str(e)
    limit = resident_limit(schedule, sms)
    if need > limit[0]:
        return False, too_many_blocks(worst, need, limit)
    return True, ""


def too_many_blocks(worst: int, need: int, limit: tuple[int, str]) -> str:
    """The line saying that rank ``worst`` needs ``need`` thread blocks, more than ``limit`` (resident_limit)."""
    more = f"; --sms {need} or more would fit it" if limit[1].startswith("--sms") else ""
    return (f"rank {worst} needs {need} thread blocks of at most {MAX_OPS_PER_TB} ops; at most {limit[0]} can be "
            f"resident at once (they wait on each other, one 1024-thread block per SM: {limit[1]}{more})")


def resident_limit(schedule: Any, sms: int | None = None) -> tuple[int, str]:
    """(thread blocks that can be resident at once, where that count comes from): ``sms`` (--sms) when given,
    else the SMs of the GPU the topology recorded in the schedule's meta names (synth.topology.gpus), else an
    A100's 108."""
    if sms is not None:
        return check_sms(sms, "--sms"), f"--sms {sms}"
    gpu = gpu_of_spec(schedule.meta.get("topology"))
    if gpu is not None:
        return gpu.sms, f"{gpu.sms} SMs of the {gpu.name or 'GPU'} its topology names"
    return DEFAULT_GPU.sms, (f"{DEFAULT_GPU.sms} SMs of an {DEFAULT_GPU.name}, assumed where neither --sms nor the "
                             f"schedule's topology names the GPU")


def emit_plan(schedule: Any, *, proto: str = "Simple", inplace: bool = True, min_bytes: int = 0, max_bytes: int = 0,
              name: str | None = None, pipeline: int | None = None, gpus_per_node: int | None = None,
              chunks: int | str | None = None, sms: int | None = None, check: bool = True) -> str:
    """MSCCL++ execution plan text for a verified Schedule; CollsynthError naming the limit it cannot fit.

    ``pipeline``: the unit size (bytes) of the pipeline form for large messages; ``chunks``: the plan's
    chunks per buffer (lower.plan_chunks: None, a number, or "pow2"); ``max_bytes`` 0 means the largest
    message whose offsets fit; ``sms``: the GPU's SM count, which bounds the thread blocks per rank
    (``resident_limit``). The text is checked (check.py) before it is returned."""
    name = name if name is not None else (schedule.name or f"collsynth_{schedule.collective}_n{schedule.nranks}")
    _check_options(proto, min_bytes, max_bytes, name, pipeline)
    if sms is not None:
        check_sms(sms, "--sms")
    check_block_owners(schedule, "an MSCCL++ plan")
    node_of = nodes_of(schedule, gpus_per_node)
    b = _lowered(schedule, packets=proto == "LL", pipeline=pipeline or 0, node_of=node_of,
                 M=plan_chunks(schedule, chunks), keep=False)
    if pipeline:
        widths = sorted({w for prog in b.progs for it in prog.items if not it.prologue
                         for ref in it.src + it.dst for w in [ref[3]] if ref[0] in ("l", "r")})
        if len(widths) > 1:
            raise CollsynthError(f"--pipeline-unit needs every transfer to move the same number of plan chunks (the "
                                 f"pipeline steps every reference by the same offset, for as many bytes as one "
                                 f"reference holds); here they move {widths[0]} to {widths[-1]}: drop --plan-chunks "
                                 f"or --pipeline-unit, or build the schedule with transfers of one chunk")
        b.pipeline_chunks = widths[0] if widths else 1
    worst = max(range(schedule.nranks), key=lambda r: (b.segments(r), -r))
    limit = resident_limit(schedule, sms)
    if b.segments(worst) > limit[0]:
        raise TooManyThreadBlocks(too_many_blocks(worst, b.segments(worst), limit), b.segments(worst))
    per = io_chunks(b)[1] if schedule.collective == "allgather" else io_chunks(b)[0]
    largest = max_chunk_bytes(b) * per
    if max_bytes > largest:
        raise CollsynthError(f"--max-bytes {max_bytes}: byte offsets are uint32 on the device (and pipeline "
                             f"iterations 16-bit); the largest size that fits is {largest} bytes")
    if min_bytes > largest:
        raise CollsynthError(f"--min-bytes {min_bytes}: the largest size that fits is {largest} bytes")
    text, _ = render(b, name=name, proto=proto, inplace=inplace, min_bytes=min_bytes, max_bytes=max_bytes or largest)
    if check:
        report = check_plan_text(text, f"<emitted {name}>")
        if not report.ok:  # pragma: no cover - an emitter bug; never hand out an unverified plan
            raise CollsynthError(f"internal error: the emitted MSCCL++ plan does not verify: {report.message}")
    return text
