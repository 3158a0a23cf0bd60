"""Run a verified Schedule on a ``torch.distributed`` process group (gloo on CPU, NCCL on GPU).

Chunk mapping: the flattened tensor of ``L`` elements is cut into ``schedule.nchunks`` chunks of
``ceil(L / nchunks)`` elements; the last chunks are shorter (possibly empty), so any length works
without user-visible padding, and a run of chunks is one contiguous slice.

Step semantics (synth/ir.py): every step is one ``batch_isend_irecv`` of this rank's transfers. Sends
read the buffer as it was before the step. A copy is received straight into its destination slice
(through scratch only if the same step also sends or writes that slice, which the verifier already
forbids); a reduce is received into scratch and added in place once the step's transfers are done,
so StragglAR's two-way exchange (both ranks send chunk c and both reduce it) is one step. A rank
skips steps in which it has no transfer and there is no barrier anywhere: a phase that waits only for
the punctual ranks starts as soon as they call in, and the late rank joins at its first transfer.

Faults: every wait has a timeout (default 60 s); a peer that died or never arrived raises
``CollectiveError`` on every rank that needs it, naming the step and the peer.
"""

from __future__ import annotations

import datetime
import math
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from collsynth.errors import CollsynthError
from collsynth.synth.ir import Schedule, as_schedule
from collsynth.synth.verify import check

DEFAULT_TIMEOUT_S = 60.0

__all__ = [
    "CollectiveError", "DEFAULT_TIMEOUT_S", "allreduce", "reduce_scatter", "all_gather", "run_schedule",
    "chunk_bounds", "check_schedule", "ensure_verified", "require_torch",
]


class CollectiveError(RuntimeError):
    """A collective that could not finish: a peer died, or did not arrive within the timeout.

    The process group is unusable afterwards (pending messages may still arrive): destroy it and
    restart the job, or raise ``timeout`` if the peer is only slow.
    """


def require_torch() -> Any:
    """(torch, torch.distributed); CollsynthError naming the extra to install when torch is missing."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is an optional dependency
        raise CollsynthError("the torch backend needs PyTorch: pip install 'collsynth[torch]'") from None
    return torch, dist

# ---------------------------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class _Op:
    kind: str  # "send" | "copy" | "reduce"
    peer: int
    chunk: int
    count: int


@dataclass(frozen=True)
class _StepPlan:
    step: int
    ops: tuple[_Op, ...]

_VERIFIED: weakref.WeakKeyDictionary[Schedule, bool] = weakref.WeakKeyDictionary()
_PLANS: weakref.WeakKeyDictionary[Schedule, dict[int, tuple[_StepPlan, ...]]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def ensure_verified(schedule: Schedule) -> None:
    """synth.verify.check once per schedule object: a schedule is never run unverified."""
    with _LOCK:
        if _VERIFIED.get(schedule):
            return

    check(schedule)
    with _LOCK:
        _VERIFIED[schedule] = True


def _plan(schedule: Schedule, rank: int) -> tuple[_StepPlan, ...]:
    """This rank's steps (only those where it sends or receives), ops in schedule order."""
    with _LOCK:
        per_rank = _PLANS.setdefault(schedule, {})
        if rank in per_rank:
            return per_rank[rank]
    steps: dict[int, list[_Op]] = {}
    for t in schedule.transfers():
        if t.src == rank:
            steps.setdefault(t.step, []).append(_Op("send", t.dst, t.chunk, t.count))
        elif t.dst == rank:
            steps.setdefault(t.step, []).append(_Op("reduce" if t.reduce else "copy", t.src, t.chunk, t.count))
    plan = tuple(_StepPlan(k, tuple(ops)) for k, ops in sorted(steps.items()))
    with _LOCK:
        per_rank[rank] = plan
    return plan


def chunk_bounds(length: int, nchunks: int, chunk: int, count: int = 1) -> tuple[int, int]:
    """Element range [lo, hi) of chunks [chunk, chunk+count) in a buffer of ``length`` elements."""
    size = max(1, math.ceil(length / nchunks))
    return min(chunk * size, length), min((chunk + count) * size, length)

# ---------------------------------------------------------------------------------------------- run
def _group_info(dist: Any, group: Any) -> tuple[int, int]:
    if not dist.is_initialized():
        raise CollsynthError("torch.distributed is not initialized: call "
                             "torch.distributed.init_process_group first")
    return dist.get_rank(group), dist.get_world_size(group)


def check_schedule(schedule: Schedule, world: int, collective: str | None) -> None:
    as_schedule(schedule, "the executor")
    if collective is not None and schedule.collective != collective:
        raise CollsynthError(f"schedule {schedule.name or '(unnamed)'} is a {schedule.collective} schedule, "
                             f"not {collective}: build one with collective={collective!r}")
    if schedule.nranks != world:
        raise CollsynthError(f"schedule {schedule.name or '(unnamed)'} is for {schedule.nranks} ranks but the "
                             f"process group has {world}: build the schedule for {world} ranks")


def _check_tensor(torch: Any, tensor: Any) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise CollsynthError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype == torch.bool or tensor.is_complex() or tensor.is_sparse:
        raise CollsynthError(f"cannot sum a {tensor.dtype} tensor: use a dense real floating-point or "
                             "integer tensor")


def run_schedule(tensor: Any, schedule: Schedule, group: Any = None, *, collective: str | None = None,
                 timeout: float | None = None,
                 _before_step: Callable[[int], None] | None = None) -> Any:
    """Run ``schedule`` in place on ``tensor`` over ``group``; returns ``tensor``.

    Every rank of the group calls this with a tensor of the same length and dtype. The result of an
    AllReduce is bitwise identical on every rank when each chunk is either reduced in one place and
    copied out (ring, rhd, twoshot, StragglAR) or summed whole in one step (direct: several reduces
    into one slice are added in rank order). ``timeout`` (seconds, default 60) bounds
    each wait; ``CollectiveError`` is raised when a peer dies or does not arrive in time.
    """
    torch, dist = require_torch()
    _check_tensor(torch, tensor)
    rank, world = _group_info(dist, group)
    check_schedule(schedule, world, collective)
    timeout_s = DEFAULT_TIMEOUT_S if timeout is None else float(timeout)
    if not timeout_s > 0:
        raise CollsynthError(f"timeout must be positive seconds, got {timeout!r}")
    ensure_verified(schedule)
    if tensor.numel() == 0:
        return tensor
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
    _execute(torch, dist, flat, schedule, rank, group, datetime.timedelta(seconds=timeout_s), _before_step)
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view_as(tensor))
    return tensor


def _execute(torch: Any, dist: Any, flat: Any, schedule: Schedule, rank: int, group: Any,
             timeout: datetime.timedelta, before_step: Callable[[int], None] | None) -> None:
    length, nchunks = flat.numel(), schedule.nchunks
    plan = _plan(schedule, rank)
    scratch_need = 0
    for sp in plan:
        need = 0
        for op in sp.ops:
            if op.kind != "send":
                lo, hi = chunk_bounds(length, nchunks, op.chunk, op.count)
                need += hi - lo
        scratch_need = max(scratch_need, need)
    scratch = torch.empty(scratch_need, dtype=flat.dtype, device=flat.device) if scratch_need else None
    if group is None or group is dist.GroupMember.WORLD:
        glob = list(range(schedule.nranks))
    else:  # P2POp takes global ranks (group_peer= only exists in recent torch)
        glob = [dist.get_global_rank(group, r) for r in range(schedule.nranks)]
    for sp in plan:
        if before_step is not None:
            before_step(sp.step)
        p2p, pending, peers = [], [], []
        sent = [chunk_bounds(length, nchunks, op.chunk, op.count) for op in sp.ops if op.kind == "send"]
        written: list[tuple[int, int]] = []
        off = 0
        for op in sp.ops:
            lo, hi = chunk_bounds(length, nchunks, op.chunk, op.count)
            if hi <= lo:
                continue  # an empty chunk (short tensor): neither side sends it
            if op.kind == "send":
                buf, fn = flat[lo:hi], dist.isend
            else:
                clash = any(a < hi and lo < b for a, b in sent + written)
                if op.kind == "copy" and not clash:
                    buf = flat[lo:hi]
                else:
                    assert scratch is not None  # scratch_need counted this receive
                    buf = scratch[off:off + hi - lo]
                    off += hi - lo
                    pending.append((op.kind, lo, hi, buf, op.peer))
                if op.kind == "copy":
                    written.append((lo, hi))
                fn = dist.irecv
            p2p.append(dist.P2POp(fn, buf, glob[op.peer], group))
            peers.append((op.kind, op.peer))
        if not p2p:
            continue
        works = dist.batch_isend_irecv(p2p)
        for work, (kind, peer) in zip(works, peers):
            try:
                work.wait(timeout)
            except Exception as e:  # gloo raises RuntimeError subclasses; keep the cause's first line
                cause = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                verb = "sending to" if kind == "send" else "receiving from"
                raise CollectiveError(
                    f"collsynth {schedule.name or schedule.collective}: rank {rank} failed {verb} rank {peer} "
                    f"at step {sp.step} of {schedule.nsteps}: rank {peer} died or did not arrive within "
                    f"{timeout.total_seconds():g} s (raise timeout= if it is only slow); the process group is "
                    f"now unusable. Cause: {cause}"
                ) from e
        _apply(flat, rank, pending)


def _apply(flat: Any, rank: int, pending: list[tuple[str, int, int, Any, int]]) -> None:
    """Land a step's scratch receives. Several reduces into the same slice are summed in rank order
    (this rank's own value at its place), so every rank that computes the same sum in one step (direct
    AllReduce) gets the same bits."""
    groups: dict[tuple[int, int], list[tuple[int, Any]]] = {}
    for kind, lo, hi, buf, peer in pending:
        if kind == "copy":
            flat[lo:hi].copy_(buf)
        else:
            groups.setdefault((lo, hi), []).append((peer, buf))
    for (lo, hi), terms in groups.items():
        dst = flat[lo:hi]
        if len(terms) == 1:
            dst.add_(terms[0][1])
            continue
        terms = sorted(terms + [(rank, dst)], key=lambda t: t[0])
        acc = terms[0][1].clone()
        for _, t in terms[1:]:
            acc.add_(t)
        dst.copy_(acc)


def allreduce(tensor: Any, schedule: Schedule, group: Any = None, *, timeout: float | None = None) -> Any:
    """Sum ``tensor`` over ``group`` in place with an AllReduce ``schedule``; returns ``tensor``."""
    return run_schedule(tensor, schedule, group, collective="allreduce", timeout=timeout)


def reduce_scatter(tensor: Any, schedule: Schedule, group: Any = None, *, timeout: float | None = None) -> Any:
    """In place: afterwards each chunk c is the group's sum on rank ``schedule.owner[c]`` (other chunks
    hold partial sums). Chunks as in ``chunk_bounds``."""
    return run_schedule(tensor, schedule, group, collective="reducescatter", timeout=timeout)


def all_gather(tensor: Any, schedule: Schedule, group: Any = None, *, timeout: float | None = None) -> Any:
    """In place: chunk c of rank ``schedule.owner[c]`` is copied to every rank."""
    return run_schedule(tensor, schedule, group, collective="allgather", timeout=timeout)
