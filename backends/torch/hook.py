"""DistributedDataParallel communication hook that averages gradient buckets with a collsynth schedule
(a fixed one, or StragglerAwareAllReduce, which picks StragglAR for whoever is late)."""

from __future__ import annotations

from typing import Any

from collsynth.backends.torch.executor import allreduce, check_schedule, ensure_verified, require_torch
from collsynth.synth.ir import Schedule
from collsynth.synth.registry import build_schedule


class CommHookState:
    """State for ``comm_hook``: which schedule (or run-time straggler detector) and group to use.

    ``algorithm`` is a registry name (default "ring"), a Schedule, or a ``StragglerAwareAllReduce``.
    """

    def __init__(self, algorithm: str | Schedule | Any = "ring", group: Any = None, *,
                 timeout: float | None = None, **params: Any) -> None:
        torch, dist = require_torch()
        self.group = group
        self.timeout = timeout
        world = dist.get_world_size(group)
        if isinstance(algorithm, str):
            algorithm = build_schedule(algorithm, world, **params)
        if isinstance(algorithm, Schedule):
            check_schedule(algorithm, world, "allreduce")
            ensure_verified(algorithm)
        self.runner = algorithm
        self.world = world


def comm_hook(state, bucket):  # unannotated: DDP rejects non-torch annotations
    """DDP communication hook: average the gradient bucket with a collsynth schedule.

    ``state``: a CommHookState; ``bucket``: torch.distributed.GradBucket; returns
    ``torch.futures.Future[torch.Tensor]``.

    Usage: ``ddp.register_comm_hook(CommHookState("ring"), comm_hook)``. Runs synchronously and
    returns a completed future holding the averaged bucket, as DDP expects.
    """
    torch, _ = require_torch()
    buf = bucket.buffer()
    buf.div_(state.world)
    if isinstance(state.runner, Schedule):
        allreduce(buf, state.runner, state.group, timeout=state.timeout)
    else:
        state.runner(buf)
    fut: Any = torch.futures.Future()
    fut.set_result(buf)
    return fut
