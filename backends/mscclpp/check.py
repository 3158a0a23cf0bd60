"""Check any MSCCL++ execution plan (ours or anyone's) the way the executor would run it.

Order of checks, the first problem wins:

1. unreadable, or refused or misread at load (model.py, load.py): ``PlanFormatError`` naming gpu,
   thread block and op (the CLI exits 2);
2. semaphores unbalanced per launch (a channel direction or device semaphore signalled more or less
   often than it is waited on: the counter carries over into the next launch);
3. symbolic execution of several launches (execute.py): races, deadlocks, out-of-bounds accesses;
4. the collective's result on every rank after every launch (allreduce, allgather, reducescatter).

Problems of kinds 2-4 give a report with ``ok=False`` (the CLI exits 1) naming rank, thread block and op.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from collsynth import budget
from collsynth.backends.mscclpp.exec_proxies import plan_light_proxies, proxies_with_entries
from collsynth.backends.mscclpp.execute import ExecFailure, ExecResult, execute
from collsynth.backends.mscclpp.load import channel_pairs, check_offsets, choose_chunk, validate
from collsynth.backends.mscclpp.model import FORMAT_VERSION, Plan, PlanFormatError, parse_plan
from collsynth.fileio import json_loads, read_text


@dataclass(frozen=True)
class PlanReport:
    """Outcome of checking one plan: ``message`` is one line ("OK ..." or the first problem)."""

    ok: bool
    message: str
    kind: str | None = None  # None when ok; semaphore | race | deadlock | bounds | result
    gpu: int | None = None
    tb: int | None = None
    op: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    details: tuple[str, ...] = ()  # every race found (the message names the first)


def is_plan_object(obj: object) -> bool:
    """Whether decoded JSON looks like an MSCCL++ execution plan (rather than a collsynth schedule)."""
    return isinstance(obj, dict) and "gpus" in obj and obj.get("format") != "collsynth-schedule"


TEXT_BYTES = 16  # about the bytes of decoded JSON (dicts, lists, strings) per byte of plan text
OP_BYTES = 1024  # about the bytes per op of the parsed plan and the symbolic executor's per-op state
TB_BYTES = 16 * 1024  # per thread block: its flattened program, tables and clock
OP_SECONDS = 2.5e-5  # about the seconds per op and launch of the symbolic execution
OP_ACTOR_SECONDS = 1e-9  # and per clock entry: joining clocks
CLOCK_BYTES = 5  # per actor and clock entry: about as many clocks alive as actors, of 2-byte entries


def plan_size(plan: Plan) -> tuple[int, int]:
    """(thread blocks, ops) of a parsed plan, a pipeline's body ops included."""
    tbs = [tb for g in plan.gpus for tb in g.tbs]
    return len(tbs), sum(len(tb.ops) + sum(len(op.body) for op in tb.ops) for tb in tbs)


def _check_bytes(nops: int, ntbs: int, actors: int, entries: int) -> int:
    """About the check's memory: its ops and thread blocks, and a clock of ``entries`` per actor."""
    return nops * 2 * OP_BYTES + ntbs * TB_BYTES + CLOCK_BYTES * actors * entries


def check_plan_work(plan: Plan, launches: int, chunk: int | None = None,
                    light: set[tuple[int, int]] | None = None) -> None:
    """Refuse (budget: --max-memory, --max-time) a plan whose symbolic execution is estimated beyond the
    budget: thread blocks x ops x launches, and clocks over the actors with a clock entry (``light``: the
    proxies without one, exec_proxies.py; found here when not given)."""
    ntbs, nops = plan_size(plan)
    what = (f"checking the MSCCL++ plan {plan.source} ({len(plan.gpus)} GPUs, {ntbs} thread blocks, {nops} ops, "
            f"{launches} launches)")
    budget.check(_check_bytes(nops, ntbs, 0, 0), what)  # before the proxies are looked at
    # clock entries: thread blocks, the port-channel proxies that need one (exec_proxies.py), the callers;
    # about as many clocks alive as actors, proxies included
    ports = sum(len(g.peers["port"]) for g in plan.gpus)
    if light is None:
        light = plan_light_proxies(plan, chunk or choose_chunk(plan), plan.pairs or channel_pairs(plan))
    entries = ntbs + proxies_with_entries(plan, light) + len(plan.gpus)
    actors = ntbs + ports + len(plan.gpus)
    budget.check(_check_bytes(nops, ntbs, actors, entries), what)
    budget.check_seconds((OP_SECONDS + OP_ACTOR_SECONDS * entries) * nops * launches, what)


def read_plan_text(text: str, source: str = "<plan>", *, checking: bool = False) -> Plan:
    """Parse and validate plan text; PlanFormatError (exit 2) when the executor would refuse or misread it.
    The text's size is checked against the memory budget before it is decoded (about TEXT_BYTES per byte);
    ``checking``: the least memory its check needs too, once it is decoded (``check_raw_work``)."""
    budget.check(TEXT_BYTES * len(text), f"reading the MSCCL++ plan {source} ({len(text)} bytes of JSON)")
    try:
        obj = json_loads(text)
    except json.JSONDecodeError as e:
        raise PlanFormatError(f"{source}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    if checking:
        check_raw_work(obj, source)
    plan = parse_plan(obj, source)
    validate(plan)
    return plan


def check_raw_work(obj: Any, source: str) -> None:
    """Refuse a decoded plan whose check needs more memory than the budget even at its least (check_plan_work's
    estimate with no proxy keeping a clock entry), before it is parsed: at 512 GPUs parsing and finding the
    proxies take most of the time a refusal takes. Shapes the format does not allow are left to the parser."""
    gpus = obj.get("gpus") if isinstance(obj, dict) else None
    if not isinstance(gpus, list):
        return
    gs = [g for g in gpus if isinstance(g, dict)]
    tbs = [tb for g in gs if isinstance(g.get("threadblocks"), list) for tb in g["threadblocks"]]
    ntbs = len(tbs)
    nops = sum(len(tb["ops"]) for tb in tbs if isinstance(tb, dict) and isinstance(tb.get("ops"), list))
    ports = sum(len(c["connected_to"]) for g in gs if isinstance(g.get("channels"), list) for c in g["channels"]
                if isinstance(c, dict) and c.get("channel_type") == "port" and isinstance(c.get("connected_to"), list))
    entries = ntbs + len(gpus)
    budget.check(_check_bytes(nops, ntbs, entries + ports, entries),
                 f"checking the MSCCL++ plan {source} ({len(gpus)} GPUs, {ntbs} thread blocks, {nops} ops, before its "
                 f"proxies are counted)")


def read_plan_file(path: str, *, checking: bool = False) -> Plan:
    return read_plan_text(read_text(path, error=PlanFormatError), path, checking=checking)


def launches_for(plan: Plan) -> int:
    """Launches to run: 2, so that what one launch leaves meets the next; 3 with a double scratch buffer
    (launch k and k+2 share a half)."""
    return 3 if plan.double_scratch else 2


def run_plan(plan: Plan, *, size: int | None = None, launches: int | None = None,
             meta_steps: dict[tuple[int, int, int, int], int] | None = None) -> ExecResult:
    """Execute symbolically; ExecFailure on the first problem, PlanFormatError if the size is invalid."""
    chunk = choose_chunk(plan, size)
    check_offsets(plan, chunk)
    pairs = plan.pairs or channel_pairs(plan)
    light = plan_light_proxies(plan, chunk, pairs)  # once, for the estimate and the run
    check_plan_work(plan, launches or launches_for(plan), chunk, light)
    return execute(plan, chunk, launches or launches_for(plan), meta_steps, pairs, light)


def check_plan(plan: Plan, *, size: int | None = None) -> PlanReport:
    """Check a parsed, validated plan; a report (PlanFormatError only for an invalid ``size``)."""
    try:
        res = run_plan(plan, size=size)
    except ExecFailure as f:
        return PlanReport(False, f"FAIL {f.message}", f.kind, f.gpu, f.tb, f.op, details=tuple(f.details))
    ntb = sum(len(g.tbs) for g in plan.gpus)
    nops = sum(tb.nops for g in plan.gpus for tb in g.tbs)
    mode = "in-place" if plan.inplace else "out-of-place"
    post = {"allreduce": "every output byte holds every rank's contribution exactly once",
            "allgather": "every rank's output holds every rank's input",
            "reducescatter": "each rank's output holds its block with every contribution exactly once"}.get(
        plan.collective, f"no result check is known for {plan.collective!r}")
    stats = {"collective": plan.collective, "ranks": plan.nranks, "protocol": "LL" if plan.packets else "Simple",
             "inplace": plan.inplace, "thread_blocks": ntb, "ops": nops, "chunk_bytes": res.chunk,
             "launches": res.launches, "ops_run": res.ops_run,
             "max_thread_blocks_per_gpu": max(len(g.tbs) for g in plan.gpus),
             "max_ops_per_thread_block": max((tb.nops for g in plan.gpus for tb in g.tbs), default=0)}
    msg = (f"OK {plan.collective} on {plan.nranks} GPUs (MSCCL++ {FORMAT_VERSION} plan, protocol "
           f"{stats['protocol']}, {mode}): {ntb} thread blocks, {nops} ops, run at {res.chunk}-byte chunks for "
           f"{res.launches} launches: no race, deadlock or unbalanced semaphore; {post}")
    return PlanReport(True, msg, None, stats=stats)


def check_plan_text(text: str, source: str = "<plan>", *, size: int | None = None) -> PlanReport:
    """Check plan text: PlanFormatError (exit 2) when unreadable, else a report (ok False: exit 1)."""
    return check_plan(read_plan_text(text, source, checking=True), size=size)


def check_plan_file(path: str, *, size: int | None = None) -> PlanReport:
    """Check a plan file: PlanFormatError (exit 2) when unreadable, else a report (ok False: exit 1)."""
    return check_plan(read_plan_file(path, checking=True), size=size)
