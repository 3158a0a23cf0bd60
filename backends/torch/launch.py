"""Start N local processes with a torch.distributed process group each; collect what they return.

Used by ``collsynth bench``/``calibrate`` and the tests. The parent owns a TCPStore bound to a free
port on 127.0.0.1 (no port guessing, loopback only); children are spawned, join it and run
``worker(rank, nranks, *args)``. A child that dies or hangs is reported, never waited on forever.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from collsynth import budget
from collsynth.errors import CollsynthError

BACKENDS = ("gloo", "nccl")


class LaunchError(RuntimeError):
    """A worker process failed: ``failures`` maps rank -> one-line reason."""

    def __init__(self, message: str, failures: dict[int, str], results: dict[int, Any]) -> None:
        super().__init__(message)
        self.failures = failures
        self.results = results


def check_backend(backend: str, nranks: int) -> None:
    """Raise CollsynthError unless ``backend`` can run ``nranks`` ranks here."""
    if backend not in BACKENDS:
        raise CollsynthError(f"unknown backend {backend!r}: use gloo (CPU) or nccl (GPU)")
    if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < 2:
        raise CollsynthError(f"--ranks must be an integer >= 2, got {nranks!r}")
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        raise CollsynthError("this PyTorch build has no torch.distributed")
    if backend == "gloo" and not dist.is_gloo_available():
        raise CollsynthError("this PyTorch build has no gloo backend: use --backend nccl")
    if backend == "nccl":
        if not (torch.cuda.is_available() and dist.is_nccl_available()):
            raise CollsynthError("--backend nccl needs CUDA GPUs and a PyTorch build with NCCL: use --backend gloo")
        if torch.cuda.device_count() < nranks:
            raise CollsynthError(f"--backend nccl runs one rank per GPU: {nranks} ranks need {nranks} GPUs, "
                                 f"this machine has {torch.cuda.device_count()}; lower --ranks")


PROCESS_BYTES = 400 * 2**20  # one worker process with torch imported (measured about 350 MB resident)


def check_memory(nranks: int, bytes_per_rank: float, what: str, hint: str) -> None:
    """Refuse (exit 2) a launch of ``nranks`` worker processes that would each hold ``bytes_per_rank`` of
    tensors when all of them together exceed the memory budget, before any process starts (a worker killed
    for memory used to read as a failed run, exit 1)."""
    budget.check(nranks * (PROCESS_BYTES + float(bytes_per_rank)), f"{what} on {nranks} processes", hint=hint)


def _entry(worker: Callable[..., Any], rank: int, nranks: int, port: int, backend: str, args: Sequence[Any],
           q: Any, pg_timeout_s: float) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    status, payload = "ok", None
    try:
        import datetime

        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        store = dist.TCPStore("127.0.0.1", port, is_master=False,
                              timeout=datetime.timedelta(seconds=pg_timeout_s))
        kw: dict[str, Any] = {}
        if backend == "nccl":
            torch.cuda.set_device(rank)
            kw["device_id"] = torch.device("cuda", rank)
        dist.init_process_group(backend, store=dist.PrefixStore("pg/", store), rank=rank, world_size=nranks,
                                timeout=datetime.timedelta(seconds=pg_timeout_s), **kw)
        payload = worker(rank, nranks, *args)
    except BaseException as e:  # report everything: the parent turns it into one line
        status = "error"
        payload = (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "",
                   traceback.format_exc())
    try:
        q.put((rank, status, payload))
    finally:
        # never wait on a group that may be broken: the parent only needs the queue
        os._exit(0)


def launch(worker: Callable[..., Any], nranks: int, args: Sequence[Any] = (), *, backend: str = "gloo",
           timeout: float = 300.0, pg_timeout: float = 300.0, allow_failures: bool = False,
           on_result: Callable[[int, Any], None] | None = None) -> dict[int, Any]:
    """Run ``worker(rank, nranks, *args)`` in ``nranks`` spawned processes; returns {rank: result}.

    ``worker`` must be importable (module level). If a worker raises or dies, LaunchError (or, with
    ``allow_failures``, the results so far plus ``{"error": ...}`` entries for the failed ranks).
    Processes still running after ``timeout`` seconds are killed.
    """
    import torch.distributed as dist
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    server = dist.TCPStore("127.0.0.1", 0, world_size=None, is_master=True, wait_for_workers=False)
    q = ctx.SimpleQueue()
    procs = [ctx.Process(target=_entry, args=(worker, r, nranks, server.port, backend, tuple(args), q, pg_timeout),
                         daemon=True) for r in range(nranks)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    failures: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    pending = set(range(nranks))
    try:
        while pending and time.monotonic() < deadline:
            got = False
            while not q.empty():
                rank, status, payload = q.get()
                pending.discard(rank)
                got = True
                if status == "ok":
                    results[rank] = payload
                    if on_result is not None:
                        on_result(rank, payload)
                else:
                    failures[rank] = f"{payload[0]}: {payload[1]}"
                    results[rank] = {"error": payload[0], "message": payload[1], "traceback": payload[2]}
            for r in list(pending):
                if not procs[r].is_alive() and q.empty():
                    pending.discard(r)
                    failures[r] = f"process exited with code {procs[r].exitcode} without a result"
                    results[r] = {"error": "died", "message": failures[r]}
            if not got:
                time.sleep(0.02)
        for r in pending:
            failures[r] = f"no result within {timeout:g} s (killed)"
            results[r] = {"error": "timeout", "message": failures[r]}
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(5)
    if failures and not allow_failures:
        first = min(failures)
        detail = results[first].get("traceback", "") if isinstance(results[first], dict) else ""
        raise LaunchError(f"rank {first} failed: {failures[first]}" + (f"\n{detail}" if detail else ""),
                          failures, results)
    return results
