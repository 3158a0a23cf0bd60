"""Worker processes for independent candidate builds (opt-in): ``set_jobs(k)``, `collsynth --jobs K` or
COLLSYNTH_JOBS=K.

The constructive searches build and simulate several independent candidates and keep the fastest
(clusterstraggler: the waves form's cutoffs and the funnel choices in synth/algorithms/stragglar/waves.py,
the late-GPU and late-node alternatives and the synchronous schedule in choose.py; the rows of `reproduce
cluster` in cluster_study.py). ``imap_ordered`` runs such a list of calls in up to ``jobs()`` processes and
yields their results in the order of the list, so the caller folds them exactly as a serial loop would: the
chosen schedule, and every file written from it, are byte-identical for every job count. The default is one
job (no process is started): a library that forks inside a training job would surprise its user. On Linux
the processes are forked (they start at once, with this package already imported, and a script needs no ``if
__name__ == "__main__"`` guard; they run only collsynth's own Python and numpy code, nothing of torch's
threads); elsewhere they are spawned (the script then needs that guard). They are kept for the next call
while the job count stays the same; ``set_jobs(None)`` or the end of the program shuts them down.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import TypeVar

from collsynth.errors import CollsynthError
from collsynth.units import parse_count

T = TypeVar("T")
R = TypeVar("R")

MAX_JOBS = 1024
ENV = "COLLSYNTH_JOBS"

_override: int | None = None
_pool: ProcessPoolExecutor | None = None
_pool_jobs = 0


def parse_jobs(text: str, flag: str = "--jobs") -> int:
    """A job count from the command line or COLLSYNTH_JOBS: an integer from 0 to MAX_JOBS, 0 meaning one
    per CPU core; CollsynthError naming ``flag`` otherwise."""
    k = parse_count(text.strip(), flag=flag, lo=0, hi=MAX_JOBS)
    return k if k > 0 else cpu_count()


def cpu_count() -> int:
    """The CPU cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def set_jobs(k: int | None) -> None:
    """Run independent candidate builds in up to ``k`` processes (1: in this process, the default; 0: one
    per CPU core); None restores the default (COLLSYNTH_JOBS, else 1) and shuts the processes down."""
    global _override
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= MAX_JOBS):
        raise CollsynthError(f"jobs must be an integer from 0 (one per CPU core) to {MAX_JOBS}, got {k!r}")
    _override = None if k is None else (k if k > 0 else cpu_count())
    if _pool is not None and (k is None or _pool_jobs != jobs()):
        shutdown()


def jobs() -> int:
    """The job count in force: ``set_jobs``'s, else COLLSYNTH_JOBS, else 1."""
    if _override is not None:
        return _override
    text = os.environ.get(ENV, "").strip()
    return parse_jobs(text, ENV) if text else 1


def processes() -> int:
    """The size of the worker pool in use: 0 until a parallel call starts one, and after ``shutdown``."""
    return _pool_jobs if _pool is not None else 0


def shutdown() -> None:
    """Stop the worker processes (they start again on the next parallel call)."""
    global _pool, _pool_jobs
    if _pool is not None:
        _pool.shutdown(wait=True, cancel_futures=True)
    _pool, _pool_jobs = None, 0


atexit.register(shutdown)


def _executor(k: int) -> ProcessPoolExecutor:
    global _pool, _pool_jobs
    if _pool is None or _pool_jobs != k:
        shutdown()
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        _pool, _pool_jobs = ProcessPoolExecutor(max_workers=k, mp_context=multiprocessing.get_context(method),
                                                initializer=_in_worker), k
    return _pool


def _in_worker() -> None:
    """A worker runs its calls itself: it neither uses its parent's pool (a forked copy of it) nor starts one."""
    global _override, _pool, _pool_jobs
    _override, _pool, _pool_jobs = 1, None, 0


def imap_ordered(fn: Callable[[T], R], items: Sequence[T], at_once: int | None = None) -> Iterator[R]:
    """``fn(x)`` for each of ``items``, yielded in their order: computed one by one as they are asked for
    with one job (so a caller that folds them holds one at a time), else handed to up to ``jobs()`` worker
    processes (``fn`` a module-level function, items and results picklable), all at once or, with
    ``at_once``, at most that many running at a time (a memory cap; the next starts when one finishes).
    A failure is raised where its item is reached, as in a loop."""
    if min(jobs(), len(items), at_once or len(items)) <= 1:
        return (fn(x) for x in items)
    pool = _executor(jobs())
    if at_once is None:
        return pool.map(fn, items, chunksize=1)
    return _ahead(pool, fn, items, at_once)


def _ahead(pool: ProcessPoolExecutor, fn: Callable[[T], R], items: Sequence[T], at_once: int) -> Iterator[R]:
    """The first ``at_once`` calls submitted now, each further one as soon as one of them finishes (not
    when its result is taken: the caller may be busy with work of its own meanwhile), so at most
    ``at_once`` run at any time; finished results wait for their turn."""
    futures: list[Future[R] | None] = [None] * len(items)
    submitted = threading.Condition()
    count = 0

    def submit_next(done: Future[R] | None = None) -> None:
        nonlocal count
        with submitted:
            if count == len(items):
                return
            try:
                future = pool.submit(fn, items[count])
            except RuntimeError as e:  # shut down meanwhile (Ctrl-C): this item and the rest fail, none waits for ever
                future = Future()
                future.set_exception(e)
            futures[count] = future
            count += 1
            submitted.notify_all()
        future.add_done_callback(submit_next)

    for _ in range(min(at_once, len(items))):
        submit_next()

    def results() -> Iterator[R]:
        for i in range(len(items)):
            with submitted:
                submitted.wait_for(lambda: futures[i] is not None)
            future = futures[i]
            assert future is not None
            yield future.result()
    return results()


def map_ordered(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``list(imap_ordered(fn, items))``."""
    return list(imap_ordered(fn, items))
