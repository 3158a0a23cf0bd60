"""``collsynth bench``: time schedules against torch's own all_reduce with real processes.

The parent validates everything (backend, ranks, delays, algorithms, schedule files) and builds and
verifies the schedules before it starts a process, so bad input costs nothing. Each iteration every
rank restores its input, passes a barrier, the delayed ranks sleep, each rank stamps its arrival on
the machine-wide monotonic clock (``time.perf_counter``, CLOCK_MONOTONIC on Linux, shared by all
processes of one machine), runs the collective and stamps its finish. Algorithms take turns inside
every iteration so that they see the same machine load. Per iteration:

- ``after_last_arrival_s`` = last finish - last arrival (with a straggler: after it arrives);
- ``from_punctual_arrival_s`` = last finish - arrival of the last punctual (undelayed) rank.

Every result is checked against ``torch.distributed.all_reduce`` of the same inputs (computed once,
untimed), and a checksum of the result is compared across ranks (bitwise identical or not).
"""

from __future__ import annotations

import functools
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from collsynth.backends.torch.executor import allreduce
from collsynth.backends.torch.launch import check_backend, check_memory, launch
from collsynth.backends.torch.straggler import StragglerAwareAllReduce, cluster_family
from collsynth.errors import CollsynthError, GpuCountError
from collsynth.synth.ir import Schedule
from collsynth.synth.registry import algorithm_params, build_schedule
from collsynth.synth.registry import algorithms as registry
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import check
from collsynth.units import parse_rank_map

DTYPES = ("float32", "float16", "bfloat16", "float64")
SPECIAL = ("torch", "auto")


def parse_delays(items: Sequence[str] | None, nranks: int) -> dict[int, float]:
    """``--delay RANK=TIME`` pairs (``7=2s``) into {rank: seconds}; the rank must exist."""
    return parse_rank_map(items, nranks, flag="--delay", example="7=2s")


@dataclass
class BenchSpec:
    """A validated benchmark: what each worker runs."""

    backend: str
    nranks: int
    size_bytes: int
    dtype: str
    delays: dict[int, float]
    iters: int
    warmup: int
    timeout: float
    entries: list[tuple[str, Any]] = field(default_factory=list)  # (label, Schedule | "torch" | "auto")
    straggler: int | None = None
    progress: bool = True
    topology: str | None = None  # preset or JSON file: the algorithms that take one, and auto's cluster family

    @property
    def numel(self) -> int:
        import torch

        return self.size_bytes // torch.empty(0, dtype=getattr(torch, self.dtype)).element_size()


def prepare_bench(backend: str, nranks: int, size_bytes: int, delays: dict[int, float],
                  algorithms: Sequence[str], *, schedules: Sequence[Schedule] = (), iters: int = 5,
                  warmup: int = 1, dtype: str = "float32", timeout: float | None = None,
                  progress: bool = True, topology: str | None = None) -> BenchSpec:
    """Check the request and build + verify every schedule (CollsynthError on bad input). ``topology`` (a
    preset or JSON file for ``nranks`` GPUs): the algorithms that take one are built for it, and ``auto``
    runs StragglerAwareAllReduce's cluster family on it (clusterstraggler's forms at this size)."""

    check_backend(backend, nranks)
    if dtype not in DTYPES:
        raise CollsynthError(f"unknown --dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    for r in delays:
        if not 0 <= r < nranks:
            raise CollsynthError(f"--delay for rank {r}, which does not exist with --ranks {nranks}")
    if iters < 1 or warmup < 0:
        raise CollsynthError(f"--iters must be >= 1 and --warmup >= 0, got {iters} and {warmup}")
    spec = BenchSpec(backend, nranks, int(size_bytes), dtype, dict(delays), int(iters), int(warmup), 0.0,
                     progress=progress, topology=topology)
    try:
        topo = make_topology(topology, nranks) if topology is not None else None
    except GpuCountError as e:
        raise e.for_count(f"--ranks is {nranks}", f"set --ranks to {e.takes}, or give another --topology") from None
    if spec.numel < 1:
        raise CollsynthError(f"--size {size_bytes} B holds no {dtype} element: use a larger size")
    # input, output, reference and the executor's scratch: about 5 buffers per rank (measured 4.7 at 256 MiB)
    check_memory(nranks, 5.0 * size_bytes, f"bench of {size_bytes} bytes per rank",
                 "use a smaller --size or fewer --ranks")
    late = [r for r, t in delays.items() if t > 0]
    spec.straggler = max(late, key=lambda r: (delays[r], r)) if late else None
    spec.timeout = timeout if timeout is not None else 60.0 + max(delays.values(), default=0.0)
    regs = registry()
    seen = set()
    for name in algorithms:
        if name in seen:
            continue
        seen.add(name)
        if name in SPECIAL:
            if name == "auto" and topo is not None:  # its family fits the topology (a bad one fails here, not in
                cluster_family(nranks, topo, None, auto_params(spec), None)  # the processes)
            spec.entries.append((name, name))
            continue
        if name not in regs or "allreduce" not in regs[name].collectives:
            names = [a for a, i in regs.items() if "allreduce" in i.collectives]
            raise CollsynthError(f"unknown algorithm {name!r} in --algorithms: choose from "
                                 f"{', '.join(names + list(SPECIAL))}")
        params: dict[str, Any] = {}
        takes = algorithm_params(name)
        if "straggler" in takes:
            params["straggler"] = spec.straggler if spec.straggler is not None else nranks - 1
        if "arrivals" in takes and late:  # multistraggler, clusterstraggler, solver: built for these delays
            params["arrivals"] = {r: delays[r] for r in sorted(late)}
        if "size" in takes:
            params["size"] = spec.size_bytes
        if "topology" in takes and topo is not None:
            params["topology"] = topo
        spec.entries.append((name, check(build_schedule(name, nranks, "allreduce", **params))))
    for s in schedules:
        if s.collective != "allreduce":
            raise CollsynthError(f"schedule {s.name or '(unnamed)'} is a {s.collective} schedule: bench runs "
                                 f"allreduce schedules")
        if s.nranks != nranks:
            raise CollsynthError(f"schedule {s.name or '(unnamed)'} is for {s.nranks} ranks, not --ranks {nranks}: "
                                 f"pass --ranks {s.nranks} or a schedule built for {nranks} ranks")
        spec.entries.append((s.name or f"schedule{len(spec.entries)}", check(s)))
    if not spec.entries:
        raise CollsynthError("nothing to run: give --algorithms or --schedule")
    return spec

# ---------------------------------------------------------------------------------------------- worker
def _progress(done: int, total: int, label: str) -> None:
    width = 30
    fill = int(width * done / total) if total else width
    sys.stderr.write(f"\rbench [{'#' * fill}{'.' * (width - fill)}] {done}/{total} {label:<12}")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _bench_worker(rank: int, nranks: int, spec: BenchSpec) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    dev = torch.device("cuda", rank) if spec.backend == "nccl" else torch.device("cpu")
    dtype = getattr(torch, spec.dtype)
    gen = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(spec.numel, generator=gen, dtype=torch.float32).to(dtype=dtype, device=dev)
    ref = x.clone()
    dist.all_reduce(ref)
    buf = torch.empty_like(x)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    auto = None
    runners: list[tuple[str, Callable[[Any], object]]] = []
    for label, what in spec.entries:
        if what == "torch":
            runners.append((label, lambda t: dist.all_reduce(t)))
        elif what == "auto":
            auto = StragglerAwareAllReduce(timeout=spec.timeout, window=0.25, topology=spec.topology,
                                           cluster_params=auto_params(spec))
            runners.append((label, auto))
        else:
            runners.append((label, functools.partial(allreduce, schedule=what, timeout=spec.timeout)))
    delay = spec.delays.get(rank, 0.0)
    tol = {"float32": 1e-4, "float64": 1e-9, "float16": 5e-2, "bfloat16": 2e-1}[spec.dtype]
    scale = float(ref.abs().max()) or 1.0
    records = []
    total = (spec.warmup + spec.iters) * len(runners)
    done = 0
    for it in range(spec.warmup + spec.iters):
        for k, (label, fn) in enumerate(runners):
            buf.copy_(x)
            sync()
            dist.barrier()
            if delay:
                time.sleep(delay)
            t_arr = time.perf_counter()
            fn(buf)
            sync()
            t_done = time.perf_counter()
            err = float((buf - ref).abs().max())
            rec = {"alg": k, "it": it - spec.warmup, "arrive": t_arr, "done": t_done, "err": err,
                   "ok": err <= tol * scale, "sum": _checksum(buf)}
            if auto is not None and fn is auto and auto.last is not None:
                rec["agree_s"] = auto.last.agree_s
                rec["order"] = auto.last.order
                rec["chosen"] = auto.last.schedule
            if it >= spec.warmup:
                records.append(rec)
            done += 1
            if rank == 0 and spec.progress:
                _progress(done, total, label)
    return {"records": records}


def _checksum(buf: Any) -> tuple[int, int]:
    """Two integer sums over the raw words: equal for bitwise-equal buffers; a rounding difference
    anywhere changes them (with overwhelming probability)."""
    import torch

    words = buf.detach().reshape(-1).view({8: torch.int64, 4: torch.int32, 2: torch.int16,
                                           1: torch.uint8}[buf.element_size()])
    return int(words.sum(dtype=torch.int64)), int(words[::3].sum(dtype=torch.int64))

# ---------------------------------------------------------------------------------------------- summary
def _stats(values: Sequence[float]) -> dict[str, float]:
    v = sorted(values)
    q = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else [v[0]] * 3
    return {"median": statistics.median(v), "min": v[0], "max": v[-1], "iqr": q[2] - q[0]}


def summarize(spec: BenchSpec, results: dict[int, Any]) -> dict[str, Any]:
    """Combine the ranks' stamps into per-algorithm statistics (JSON-ready)."""
    n = spec.nranks
    punctual = [r for r in range(n) if spec.delays.get(r, 0.0) <= 0] or list(range(n))
    by: dict[tuple[int, int], dict[int, dict[str, Any]]] = {}  # (algorithm, iteration) -> rank -> record
    for r in range(n):
        for rec in results[r]["records"]:
            by.setdefault((rec["alg"], rec["it"]), {})[r] = rec
    rows = []
    for k, (label, what) in enumerate(spec.entries):
        after, total, agree, chosen = [], [], [], []
        ok, identical, maxerr = True, True, 0.0
        for it in range(spec.iters):
            recs = [by[(k, it)][r] for r in range(n)]
            last_done = max(rec["done"] for rec in recs)
            after.append(last_done - max(rec["arrive"] for rec in recs))
            total.append(last_done - max(recs[r]["arrive"] for r in punctual))
            ok &= all(rec["ok"] for rec in recs)
            identical &= len({rec["sum"] for rec in recs}) == 1
            maxerr = max(maxerr, *(rec["err"] for rec in recs))
            if "agree_s" in recs[0]:
                order = sorted(range(n), key=lambda r: recs[r]["order"])
                agree.append(recs[order[-1]]["agree_s"])  # the last arrival's cost: on the critical path
                chosen.append(recs[0]["chosen"])
        row: dict[str, Any] = {
            "algorithm": label,
            "schedule": what.name if isinstance(what, Schedule) else ("torch.distributed.all_reduce"
                                                                     if what == "torch" else "StragglerAwareAllReduce"),
            "after_last_arrival_s": _stats(after),
            "from_punctual_arrival_s": _stats(total),
            "correct": ok, "identical_across_ranks": identical, "max_abs_error": maxerr,
        }
        if agree:
            row["agreement_last_rank_s"] = _stats(agree)
            row["chosen"] = sorted(set(chosen))
        rows.append(row)
    torch_row = next((r for r in rows if r["algorithm"] == "torch"), None)
    for entry in rows:
        if torch_row is not None:
            for key, out in (("after_last_arrival_s", "speedup_vs_torch"),
                             ("from_punctual_arrival_s", "speedup_vs_torch_from_punctual")):
                mine = entry[key]["median"]
                entry[out] = torch_row[key]["median"] / mine if mine > 0 else math.inf
    return {
        "backend": spec.backend, "ranks": n, "size_bytes": spec.size_bytes, "dtype": spec.dtype,
        "delays_s": {str(r): t for r, t in sorted(spec.delays.items())}, "straggler": spec.straggler,
        "iters": spec.iters, "warmup": spec.warmup, "topology": spec.topology, "results": rows,
    }


def auto_params(spec: BenchSpec) -> dict[str, Any] | None:
    """``cluster_params`` of the ``auto`` entry: the bench's size where a topology is given, else None."""
    return {"size": spec.size_bytes} if spec.topology is not None else None


def run_bench(spec: BenchSpec) -> dict[str, Any]:
    """Start the processes, run, and summarize. Raises CollsynthError if a result is wrong."""
    budget = (spec.warmup + spec.iters) * len(spec.entries) * (spec.timeout + 5) + 120
    results = launch(_bench_worker, spec.nranks, (spec,), backend=spec.backend, timeout=budget,
                     pg_timeout=max(300.0, spec.timeout * 2))
    return summarize(spec, results)

# ---------------------------------------------------------------------------------------------- calibrate
PATTERNS = ("ring", "pingpong")
# 4 KiB .. 4 MiB: the message sizes of a 32 MiB AllReduce on 8 ranks and below. Larger messages fall out
# of the CPU caches on gloo and stop being linear; pass --sizes to calibrate another range.
DEFAULT_SIZES = tuple(4096 * 4**i for i in range(6))


def calibrate_in_group(rank: int, nranks: int, backend: str, sizes: Sequence[int], reps: int,
                       pattern: str, progress: bool) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    dev = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    out: dict[str, list[float]] = {}
    nxt, prv = (rank + 1) % nranks, (rank - 1) % nranks
    for si, size in enumerate(sizes):
        numel = max(1, size // 4)
        a = torch.ones(numel, device=dev)
        b = torch.empty(numel, device=dev)
        c = torch.empty(numel, device=dev)
        inner = 2 * max(1, min(10, (4 << 20) // max(size, 1)))
        flip = [False]

        def once() -> None:
            if pattern == "ring":  # alternate a copy step and a reduce step, as the executor runs them
                flip[0] = not flip[0]
                ops = [dist.P2POp(dist.isend, a, nxt), dist.P2POp(dist.irecv, b if flip[0] else c, prv)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()
                if not flip[0]:
                    b.add_(c)
                return
            if rank == 0:
                dist.send(a, 1)
                dist.recv(b, 1)
                return
            elif rank == 1:
                dist.recv(b, 0)
                dist.send(a, 0)
                return

        once()
        once()
        times = []
        for _ in range(reps):
            sync()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(inner):
                once()
            sync()
            dt = (time.perf_counter() - t0) / inner
            times.append(dt / 2 if pattern == "pingpong" else dt)  # one-way time per message
        out[str(size)] = times
        if rank == 0 and progress:
            sys.stderr.write(f"\rcalibrate [{'#' * (si + 1)}{'.' * (len(sizes) - si - 1)}] {si + 1}/{len(sizes)}")
            if si + 1 == len(sizes):
                sys.stderr.write("\n")
            sys.stderr.flush()
    return out


def fit_alpha_beta(sizes: Sequence[int], times: Sequence[float]) -> tuple[float, float]:
    """Least squares of t = alpha + size/bandwidth on relative error; returns (alpha_s, bandwidth_Bps)."""
    import numpy as np

    m = np.asarray(sizes, float)
    t = np.asarray(times, float)
    if len(m) < 2 or len(set(m.tolist())) < 2:
        raise CollsynthError("calibration needs at least two different sizes")
    A = np.stack([np.ones_like(m), m], axis=1) / t[:, None]
    alpha, beta = np.linalg.lstsq(A, np.ones_like(t), rcond=None)[0]
    if alpha < 0:  # latency too small to see: fit bandwidth alone
        alpha = 0.0
        beta = float(np.sum(m / t) / np.sum((m / t) ** 2))
    if beta <= 0:
        raise CollsynthError("calibration could not see any bandwidth cost: use larger --sizes")
    return float(alpha), float(1.0 / beta)


def format_rate(bps: float) -> str:
    """A rate that units.parse_rate reads back (4 significant digits)."""
    for unit, f in (("GiB/s", 2**30), ("MiB/s", 2**20), ("KiB/s", 2**10)):
        if bps >= f:
            return f"{bps / f:.4g}{unit}"
    return f"{bps:.4g}B/s"


def format_alpha(seconds: float) -> str:
    """A time that units.parse_time reads back."""
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.4g}ms"
    return f"{seconds * 1e6:.4g}us"


def run_calibrate(backend: str, nranks: int, *, sizes: Sequence[int] = DEFAULT_SIZES, reps: int = 7,
                  pattern: str = "ring", progress: bool = True) -> dict[str, Any]:
    """Measure per-message latency and per-port bandwidth of a fresh process group of ``nranks``.

    ``pattern="ring"`` (default): every rank sends to the next and receives from the previous at once,
    alternately copying and reducing (receive into scratch, add), exactly the work of one ring or
    StragglAR step in the executor; the fit is the per-port bandwidth under full load.
    ``"pingpong"``: ranks 0 and 1 alone (an idle machine's single-link figure). The result's
    ``alpha``/``bandwidth`` strings go straight to ``collsynth compare --alpha --bandwidth``.
    """
    check_backend(backend, nranks)
    if pattern not in PATTERNS:
        raise CollsynthError(f"unknown --pattern {pattern!r}: use ring or pingpong")
    sizes = sorted({int(s) for s in sizes})
    if len(sizes) < 2 or sizes[0] < 4:
        raise CollsynthError("--sizes needs at least two different sizes of 4 bytes or more")
    if reps < 1:
        raise CollsynthError(f"--iters must be >= 1, got {reps}")
    check_memory(nranks, 5.0 * sizes[-1], f"calibrate up to {sizes[-1]} bytes", "use smaller --sizes or fewer --ranks")
    results = launch(calibrate_in_group, nranks, (backend, sizes, reps, pattern, progress), backend=backend,
                     timeout=600.0)
    med = []
    for s in sizes:
        per_rep = [max(results[r][str(s)][i] for r in range(nranks)) for i in range(reps)]
        med.append(statistics.median(per_rep))
    alpha, bw = fit_alpha_beta(sizes, med)
    return {
        "backend": backend, "ranks": nranks, "pattern": pattern,
        "alpha_s": alpha, "bandwidth_Bps": bw, "alpha": format_alpha(alpha), "bandwidth": format_rate(bw),
        "points": [{"size_bytes": s, "time_s": t, "model_s": alpha + s / bw} for s, t in zip(sizes, med)],
    }
