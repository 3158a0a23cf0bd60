"""Training-step simulator: throughput of DDP, bucketed DDP, ZeRO-1 and ACCO under stragglers.

Every rank runs its own clock. Compute times per micro-batch come from a ComputeModel
(training/compute.py); every collective is the schedule simulator (synth/simulate.py, through
training/comm.py) started at the arrival times the compute model produced, and each rank goes
on from its own finish time, so the latest rank changes from step to step. Models (symbols as in
docs/acco.md section 4: A micro-batches per step, tau per micro-batch, M_g / M_p gradient / parameter
bytes, T_opt optimizer step over the full model, K buckets):

- ``ddp``: compute A micro-batches, one AllReduce of M_g, optimizer step T_opt (acco.md 4a).
- ``ddp-bucketed``: bucket k of K (M_g/K bytes) is ready on rank i at
  (A-1 micro-batches) + forward of the last + backward * k/K (backward = ``backward_fraction`` of a
  micro-batch); buckets run one after another on each rank (one communication stream), and
  compute goes on meanwhile; then T_opt (acco.md 4b, with per-rank rather than global bucket order).
- ``zero1``: compute, ReduceScatter of M_g, shard step T_opt/n, AllGather of M_p.
- ``acco``: Nabli et al., arXiv 2406.02613, as in acco.md 1.2-1.4 and 4c. Rounds alternate
  estimate/commit, 2 per optimizer step. A round's communication is (optionally) the AllReduce of the
  sample count, the ReduceScatter of M_g, the shard step T_opt/n and the AllGather of M_p; it starts
  when each rank swaps buffers. Meanwhile each rank keeps computing groups of A micro-batches and
  swaps (cost ``swap_s``) after the first group that ends once its own communication has finished.
  Commit round 2m+1 reduces the micro-batches computed during rounds 2m-1 and 2m (the seed group
  before round 0 for m = 0), so its batch varies; compare methods by throughput.

The work is estimated before any of it starts (training/work.py: schedules, steps, buckets, ACCO's
micro-batches) and a run beyond the time or memory budget is refused in one line naming the flag to change.
Recorded steps keep at most RECORD_MICROBATCHES micro-batches and RECORD_BUCKETS buckets per rank one by
one (the rest as one span each), so a timeline stays small however many there are.

Throughput is measured in steady state: the samples of steps ``warmup..steps-1`` divided by the time
from the end of step ``warmup-1`` (the latest rank) to the end of the last step. Idle fraction of a
rank: the share of the run in which it computes nothing (neither micro-batches nor optimizer).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collsynth.errors import CollsynthError
from collsynth.training.comm import CollectiveModel
from collsynth.training.setup import TrainingSetup
from collsynth.training.work import COUNT_BYTES, RECORD_BUCKETS, RECORD_MICROBATCHES
from collsynth.training.work import check as check_work
from collsynth.training.work import estimate as estimate_work

METHODS: dict[str, str] = {
    "ddp": "compute all micro-batches, then one AllReduce of the gradients, then the optimizer",
    "ddp-bucketed": "K gradient buckets AllReduced one after another as backward releases them",
    "zero1": "ReduceScatter, optimizer step on the 1/n shard, AllGather of the parameters",
    "acco": "ZeRO-1 rounds overlapped with more micro-batches (estimate + commit rounds per step)",
}


@dataclass
class MethodResult:
    """One (method, algorithm) simulation."""

    method: str
    algorithm: str
    throughput: float  # samples/s, steady state
    step_time_s: float  # mean steady-state time per optimizer step
    samples_per_step: float  # mean steady-state global batch
    batch_min: int
    batch_max: int
    idle_fraction: list[float]  # per rank
    collectives: dict[str, int]  # what ran, e.g. {"stragglar@7": 180, "ring": 20}
    elapsed_s: float  # simulated time of the whole run
    timeline: list[dict[str, Any]] = field(default_factory=list)  # recorded steps: rank, kind, start_s, end_s

    def to_json_dict(self, timeline: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "method": self.method, "algorithm": self.algorithm, "throughput_samples_s": self.throughput,
            "step_time_s": self.step_time_s, "samples_per_step": self.samples_per_step,
            "batch_min": self.batch_min, "batch_max": self.batch_max,
            "idle_fraction": self.idle_fraction,
            "idle_fraction_mean": float(np.mean(self.idle_fraction)), "collectives": self.collectives,
            "elapsed_s": self.elapsed_s,
        }
        if timeline:
            d["timeline"] = self.timeline
        return d


class _Run:
    """Shared bookkeeping of one method simulation."""

    def __init__(self, setup: TrainingSetup, comm: CollectiveModel, algorithm: str) -> None:
        self.s = setup
        self.comm = comm
        self.alg = algorithm
        self.n = setup.nranks
        self.stream = setup.compute.stream()
        self.busy = np.zeros(self.n)
        self.step_end = np.zeros(setup.steps)
        self.step_samples = np.zeros(setup.steps, np.int64)
        self.labels: Counter[str] = Counter()
        self.timeline: list[dict[str, Any]] = []
        lo = setup.warmup_steps
        self.rec = range(lo, min(setup.steps, lo + setup.record))

    def recording(self, step: int) -> bool:
        return step in self.rec

    def span(self, kind: str, start: np.ndarray, end: np.ndarray) -> None:
        for r in range(self.n):
            if end[r] > start[r]:
                self.timeline.append({"rank": r, "kind": kind, "start_s": float(start[r]), "end_s": float(end[r])})

    def collective(self, algorithm: str, collective: str, size: float, arr: np.ndarray, rec: bool) -> np.ndarray:
        res = self.comm.run(algorithm, collective, size, arr, detail=rec)
        self.labels[f"{collective}:{res.label}"] += 1
        if rec:
            assert res.first_start is not None
            self.span("wait", arr, res.first_start)
            self.span("comm", res.first_start, res.finish)
        return res.finish

    def compute_spans(self, t0: np.ndarray, taus: np.ndarray) -> None:
        """Record micro-batches (rows of taus) run back to back from t0: the first RECORD_MICROBATCHES one by
        one, any more as one span."""
        t = t0.copy()
        for row in taus[:RECORD_MICROBATCHES]:
            self.span("compute", t, t + row)
            t = t + row
        if len(taus) > RECORD_MICROBATCHES:
            self.span("compute", t, t + taus[RECORD_MICROBATCHES:].sum(axis=0))

    def result(self, method: str) -> MethodResult:
        s = self.s
        w = s.warmup_steps
        t0 = self.step_end[w - 1] if w > 0 else 0.0
        dt = self.step_end[-1] - t0
        counts = self.step_samples[w:]  # micro-batches per step; times --batch in Python ints (no int64 overflow)
        samples = int(counts.sum()) * s.batch
        elapsed = float(self.step_end.max())
        idle = [float(max(0.0, 1.0 - b / elapsed)) if elapsed > 0 else 0.0 for b in self.busy]
        return MethodResult(method, self.alg, samples / dt if dt > 0 else math.inf,
                            dt / (s.steps - w), float(counts.mean()) * s.batch, int(counts.min()) * s.batch,
                            int(counts.max()) * s.batch, idle, dict(sorted(self.labels.items())), elapsed,
                            self.timeline)


def _ddp(run: _Run) -> None:
    s, n, A = run.s, run.n, run.s.microbatches
    t = np.zeros(n)
    for k in range(s.steps):
        rec = run.recording(k)
        taus = run.stream.uniform(A)
        arr = t + taus.sum(axis=0)
        run.busy += taus.sum(axis=0) + s.optimizer_s
        if rec:
            run.compute_spans(t, taus)
        fin = run.collective(run.alg, "allreduce", s.grad_bytes, arr, rec)
        t = fin + s.optimizer_s
        if rec:
            run.span("optimizer", fin, t)
        run.step_end[k] = t.max()
        run.step_samples[k] = n * A


def _ddp_bucketed(run: _Run) -> None:
    s, n, A, K = run.s, run.n, run.s.microbatches, run.s.buckets
    fb = s.backward_fraction
    t = np.zeros(n)
    for k in range(s.steps):
        rec = run.recording(k)
        taus = run.stream.uniform(A)
        last = taus[-1]
        pre = t + taus[:-1].sum(axis=0)
        done = pre + last
        run.busy += taus.sum(axis=0) + s.optimizer_s
        if rec:
            run.compute_spans(t, taus)
        prev = np.full(n, -np.inf)
        tail = None  # recorded steps: where the buckets after RECORD_BUCKETS start (drawn as one span)
        for b in range(1, K + 1):
            ready = pre + (1.0 - fb) * last + fb * last * (b / K)
            arr = np.maximum(ready, prev)
            if rec and b > RECORD_BUCKETS and tail is None:
                tail = arr
            prev = run.collective(run.alg, "allreduce", s.grad_bytes / K, arr, rec and b <= RECORD_BUCKETS)
        if tail is not None:
            run.span("comm", tail, prev)
        end = np.maximum(prev, done)
        t = end + s.optimizer_s
        if rec:
            run.span("optimizer", end, t)
        run.step_end[k] = t.max()
        run.step_samples[k] = n * A


def _zero1(run: _Run) -> None:
    s, n, A = run.s, run.n, run.s.microbatches
    shard = s.optimizer_s / n
    t = np.zeros(n)
    for k in range(s.steps):
        rec = run.recording(k)
        taus = run.stream.uniform(A)
        arr = t + taus.sum(axis=0)
        run.busy += taus.sum(axis=0) + shard
        if rec:
            run.compute_spans(t, taus)
        f1 = run.collective(run.alg, "reducescatter", s.grad_bytes, arr, rec)
        if rec:
            run.span("optimizer", f1, f1 + shard)
        t = run.collective(run.alg, "allgather", s.pbytes, f1 + shard, rec)
        run.step_end[k] = t.max()
        run.step_samples[k] = n * A


def _acco(run: _Run) -> None:
    s, n, A = run.s, run.n, run.s.microbatches
    shard = s.optimizer_s / n
    # seed: one group on theta_0 fills the first communication buffer
    taus = run.stream.uniform(A)
    w = taus.sum(axis=0) + s.swap_s
    run.busy += taus.sum(axis=0)
    prev_count = np.full(n, A, np.int64)  # micro-batches computed in the previous compute phase
    prev_prev = np.zeros(n, np.int64)
    for rnd in range(2 * s.steps):
        k = rnd // 2
        rec = run.recording(k)
        arr = w
        if s.count_allreduce:
            arr = run.collective("ring", "allreduce", COUNT_BYTES, arr, rec)
        f1 = run.collective(run.alg, "reducescatter", s.grad_bytes, arr, rec)
        done = run.collective(run.alg, "allgather", s.pbytes, f1 + shard, rec)
        if rec:
            run.span("optimizer", f1, f1 + shard)
        # compute phase of this round: groups until this rank's communication has finished
        count = np.zeros(n, np.int64)
        w_new = np.empty(n)
        for r in range(n):
            start = float(w[r])
            if rec:
                groups, t = _acco_recorded(run, r, start, float(done[r]))
            else:
                groups, t = run.stream.run_until(r, A, start, float(done[r]))
            count[r] = groups * A
            run.busy[r] += t - start
            w_new[r] = t + s.swap_s
        if rec and s.swap_s:
            run.span("swap", w_new - s.swap_s, w_new)
        if rnd % 2 == 1:  # commit: this round reduced the previous two compute phases
            run.step_end[k] = float(done.max())
            run.step_samples[k] = int(prev_count.sum() + prev_prev.sum())
        prev_prev, prev_count = prev_count, count
        w = w_new


def _acco_recorded(run: _Run, r: int, t: float, until: float) -> tuple[int, float]:
    """ACCO's compute phase of rank r in a recorded round (as ComputeStream.run_until), its micro-batches in
    the timeline: the first RECORD_MICROBATCHES one by one, the rest as one span."""
    A = run.s.microbatches
    groups = kept = 0
    while True:
        g = run.stream.take(r, A)
        keep = min(A, RECORD_MICROBATCHES - kept)
        for x in g[:keep]:
            run.timeline.append({"rank": r, "kind": "compute", "start_s": t, "end_s": t + float(x)})
            t += float(x)
        kept += keep
        if keep < A:
            start, t = t, t + float(g[keep:].sum())
            run.timeline.append({"rank": r, "kind": "compute", "start_s": start, "end_s": t})
        groups += 1
        if t >= until:
            return groups, t
        if kept >= RECORD_MICROBATCHES:
            start = t
            more, t = run.stream.run_until(r, A, t, until)
            run.timeline.append({"rank": r, "kind": "compute", "start_s": start, "end_s": t})
            return groups + more, t


_SIMULATORS: dict[str, Callable[[_Run], None]] = {
    "ddp": _ddp, "ddp-bucketed": _ddp_bucketed, "zero1": _zero1, "acco": _acco,
}


def check_methods(methods: Sequence[str]) -> list[str]:
    """Deduplicated method names; CollsynthError for an unknown one."""
    out: list[str] = []
    for m in methods:
        if m not in METHODS:
            raise CollsynthError(f"unknown method {m!r}: choose from {', '.join(METHODS)}")
        if m not in out:
            out.append(m)
    if not out:
        raise CollsynthError(f"no method given: choose from {', '.join(METHODS)}")
    return out


def simulate_training(setup: TrainingSetup, methods: Sequence[str] = tuple(METHODS),
                      algorithms: Sequence[str] = ("ring", "stragglar"),
                      comm: CollectiveModel | None = None) -> list[MethodResult]:
    """Simulate ``setup.steps`` optimizer steps of every method with every algorithm (method-major order)."""
    setup.check()
    methods = check_methods(methods)
    algs: list[str] = []
    for a in algorithms:
        if a not in algs:
            algs.append(a)
    if not algs:
        raise CollsynthError("no algorithm given: e.g. --algorithms ring,stragglar")
    if comm is None:
        comm = CollectiveModel(setup.topology, exact=setup.exact, window_s=setup.window_s, agree_s=setup.agree_s)
    for a in algs:
        comm.check_algorithm(a, build=False)
    est = estimate_work(setup, methods, algs, comm)  # before any schedule is built
    for a in algs:
        comm.check_algorithm(a)
    check_work(est)
    out = []
    for m in methods:
        for a in algs:
            run = _Run(setup, comm, a)
            _SIMULATORS[m](run)
            out.append(run.result(m))
    return out


__all__ = ["COUNT_BYTES", "METHODS", "MethodResult", "TrainingSetup", "check_methods", "simulate_training"]
