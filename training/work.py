"""About the work of a ``train-sim`` run, estimated from its arguments before any of it starts (budget.py:
"estimate the work before allocating it"), and the refusal, in one line naming the flag to change, of a run
above the time budget (``collsynth --max-time``), the memory budget (``--max-memory``) or the clock's
resolution.

Where the time goes (training/model.py, training/comm.py; rates measured on one core, 8-128 ranks, nvswitch):

- schedules: a collective at one size runs through the closed form of training/comm.py, whose n x n matrix
  costs n + 1 runs of the event simulator (``simulate_s``: about 0.5 ms + 40 us a step + 0.4 us a transfer;
  ring at 128 ranks, 20 ms); StragglAR has a schedule, and a matrix, per rank that arrives last: with
  jitter or a trace any of the n ranks (64 GPUs with jitter: 130 matrices, a minute), otherwise the slow
  ranks. Multi-port schedules (direct, twoshot) and ``--exact`` run the simulator for every collective.
- steps: per step and method a Python loop (``STEP_S``), a closed-form collective per AllReduce,
  ReduceScatter, AllGather and *bucket* (``CALL_S`` + ``CALL_N2_S`` n^2), and n x A compute draws; the
  recorded steps (model.RECORD_MICROBATCHES, RECORD_BUCKETS) simulate their collectives exactly.
- ACCO: each rank computes groups of A micro-batches until its round's communication ends, which waits for
  the slowest rank's group, so a rank computes about (round + A tau_slowest) / (A tau_rank) + 1 groups a
  round. With deterministic compute (no --jitter) ComputeStream.run_until skips whole periods in closed
  form, so only the count matters: beyond ``MAX_MICROBATCHES`` per rank and run the float64 clock no longer
  resolves a micro-batch. With --jitter every micro-batch is drawn and kept (``ACCO_DRAW_S``, 8 bytes, for
  every rank up to the furthest one).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from collsynth import budget
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.estimate import work as schedule_work
from collsynth.training.compute import MAX_PERIOD, SKIP_GROUPS

if TYPE_CHECKING:
    from collsynth.training.comm import CollectiveModel
    from collsynth.training.setup import TrainingSetup

SIM_FIXED_S = 5e-4  # one run of synth.simulate: fixed part (measured 0.6-1.0 ms at 8 ranks)
SIM_STEP_S = 4e-5  # per schedule step (ring AllReduce at 128 ranks: 254 steps, 32,512 transfers, 20 ms)
SIM_TRANSFER_S = 4e-7  # per transfer (direct at 128 ranks: one step, 16,256 transfers, 7 ms)
STEP_S = 2.5e-5  # one step of one method's loop, besides its collectives (ddp at 8 ranks: 28 us a step)
CALL_S = 1e-5  # one collective by the closed form, with its bookkeeping (a bucket at 8 ranks: 13-15 us)
CALL_N2_S = 1e-9  # and per entry of its n x n matrix (256 ranks: 63 us)
PICK_S = 7e-6  # and StragglAR's choice of the late rank (a bucket at 8 ranks: 17 us)
DRAW_S = 1e-7  # per micro-batch and rank drawn with --jitter (8 ranks, 64 micro-batches: 80 ns)
READ_S = 1e-8  # per micro-batch and rank read off a constant or a trace
ACCO_RANK_S = 6e-6  # one rank's compute phase in one ACCO round (its first group)
ACCO_SCAN_S = 2e-5  # per further block of groups it reads (ComputeStream.run_until: 12-18 us)
ACCO_READ_S = 2e-8  # per micro-batch it reads off a constant or a trace (16 ns), or sums to skip a period
ACCO_DRAW_S = 4e-8  # per micro-batch and rank of the table ACCO draws with --jitter (17.5 s for 5e8)
SPAN_S = 1e-6  # per timeline entry of a recorded step
SPAN_BYTES = 400  # a timeline entry (a dict of four items)
TABLE_BYTES = 24  # per micro-batch and rank of drawn times: the table, its doubling, the copy while it grows
MAX_MICROBATCHES = 2**40  # per rank and run: its clock (float64 seconds) then still resolves 1/4096 of one
STRAGGLAR = "stragglar"
COUNT_BYTES = 8.0  # ACCO's sample-count AllReduce
RECORD_MICROBATCHES = 128  # a recorded step keeps this many micro-batches per rank one by one, the rest as one span
RECORD_BUCKETS = 64  # and this many buckets' waits and transfers (exact simulation), the rest as one span


@dataclass(frozen=True)
class Size:
    """What scales a run, one flag each: --gpus, --steps, --microbatches, --buckets, and the largest --slow
    factor (factors above ``slow`` are counted as ``slow``)."""

    gpus: int
    steps: int
    microbatches: int
    buckets: int
    slow: float


@dataclass(frozen=True)
class Cost:
    """About the seconds and peak bytes of a run, and the most micro-batches one rank counts in ACCO."""

    seconds: float
    nbytes: float
    microbatches: float = 0.0

    def fits(self) -> bool:
        return (self.seconds <= budget.max_seconds() and self.nbytes <= budget.max_memory()
                and self.microbatches <= MAX_MICROBATCHES)


def simulate_s(algorithm: str, n: int, collective: str) -> float:
    """About the seconds of one synth.simulate run of ``algorithm``'s schedule on n ranks."""
    w = schedule_work(algorithm, n, collective)
    return SIM_FIXED_S + SIM_STEP_S * w.nsteps + SIM_TRANSFER_S * w.transfers


class Estimate:
    """The cost of one simulate_training call as a function of its Size (the knobs a refusal names)."""

    def __init__(self, setup: TrainingSetup, methods: Sequence[str], algorithms: Sequence[str],
                 comm: CollectiveModel, round_s: float = 0.0) -> None:
        self.setup = setup
        self.methods = list(methods)
        self.algorithms = list(algorithms)
        self.comm = comm
        self.round_s = round_s  # ACCO: a round's communication (count AllReduce, ReduceScatter, AllGather)
        cm = setup.compute
        self.jitter = not cm.deterministic
        self.rows = 1 if cm.trace is None else len(cm.trace)
        self.base = cm.mean_s() / cm.slow  # per rank, before its slow factor
        self.factors = np.asarray(cm.slow, np.float64)
        # the ranks StragglAR may find last: any with jitter or a trace, else the slow ones (or the last rank)
        nslow = int(np.count_nonzero(self.factors > 1))
        self.any_last = self.jitter or cm.trace is not None
        self.nlast = max(nslow, 1)
        self.multiport: set[str] | None = None  # algorithms with multi-port schedules, once built (``built``)

    def built(self) -> None:
        """Read which algorithms' schedules are multi-port (their AllReduce is built: comm.check_algorithm)."""
        self.multiport = {a for a in self.algorithms if a != STRAGGLAR
                          and self.comm.schedule(a, "allreduce").ports != 1}

    def size(self) -> Size:
        s = self.setup
        return Size(s.nranks, s.steps, s.microbatches, s.buckets, float(self.factors.max()))

    # ------------------------------------------------------------------ collectives
    def _calls(self, method: str, alg: str, buckets: int) -> list[tuple[str, str, str, int]]:
        """(schedule's algorithm, collective, size, per step) of one method step."""
        has = self.comm.collectives_of(alg)
        rs = (alg, "reducescatter" if "reducescatter" in has else "allreduce", "grad", 1)
        ag = (alg if "allgather" in has else "ring", "allgather", "param", 1)
        if method == "ddp":
            return [(alg, "allreduce", "grad", 1)]
        if method == "ddp-bucketed":
            return [(alg, "allreduce", "bucket", buckets)]
        if method == "zero1":
            return [rs, ag]
        count = [("ring", "allreduce", "count", 2)] if self.setup.count_allreduce else []
        return count + [(a, c, z, 2) for a, c, z, _ in (rs, ag)]  # acco: two rounds a step

    def _schedules(self, n: int) -> int:
        """How many schedules StragglAR builds (one per rank found last)."""
        return n if self.any_last else min(n, self.nlast)

    def cost(self, z: Size) -> Cost:
        s, n, A, K = self.setup, z.gpus, z.microbatches, z.buckets
        rec = min(s.record, z.steps)  # recorded steps (at most)
        calls: Counter[tuple[str, str, str]] = Counter()  # (schedule's algorithm, collective, size): collectives
        exact: Counter[tuple[str, str, str]] = Counter()  # of which the recorded steps simulate
        seconds = nbytes = spans = 0.0
        for m in self.methods:
            for a in self.algorithms:
                seconds += z.steps * STEP_S
                for alg, coll, size, per in self._calls(m, a, K):
                    calls[alg, coll, size] += z.steps * per
                    detail = rec * (min(per, RECORD_BUCKETS) if size == "bucket" else per)
                    exact[alg, coll, size] += detail
                    spans += 2 * detail + (rec if size == "bucket" and per > RECORD_BUCKETS else 0)
                if m == "acco":
                    seconds_acco, bytes_acco, _ = self._acco(z)
                    seconds += seconds_acco
                    nbytes = max(nbytes, bytes_acco)
                    spans += rec * 2 * min(A * float(self._groups(z).max()) + 2, RECORD_MICROBATCHES + 2)
                else:
                    seconds += z.steps * A * n * (DRAW_S if self.jitter else READ_S)
                    if self.jitter:  # the table of drawn times, every rank up to steps x A
                        nbytes = max(nbytes, TABLE_BYTES * n * z.steps * A)
                    spans += rec * (min(A, RECORD_MICROBATCHES) + 1)
        spans *= n
        call = CALL_S + CALL_N2_S * n * n
        late = self.any_last or self.nlast > 1  # StragglAR may find two late ranks: ring runs
        matrices = schedules = transfers = 0.0
        for (alg, coll, size), count in calls.items():
            one = simulate_s(alg, n, coll)
            copies = self._schedules(n) if alg == STRAGGLAR else 1
            every = count * one  # every collective simulated: --exact, or a multi-port schedule
            closed = count * (call + (PICK_S if alg == STRAGGLAR else 0.0)) + exact[alg, coll, size] * one \
                + copies * (n + 1) * one
            if alg == STRAGGLAR and late and n >= 3:
                closed += (n + 1) * simulate_s("ring", n, coll)
            simulated = s.exact or (self.multiport is not None and alg in self.multiport)
            if self.multiport is None and not s.exact:  # not built yet: the cheaper of the two
                simulated = every <= closed
            seconds += every if simulated else closed
            if not simulated:
                matrices += copies + (1 if alg == STRAGGLAR and late else 0)
            schedules += copies
            transfers = max(transfers, schedule_work(alg, n, coll).transfers)
        nbytes += 8.0 * n * n * matrices + budget.SCHEDULE_BYTES_PER_TRANSFER * transfers * schedules
        nbytes += 3 * 8.0 * n * A + SPAN_BYTES * spans  # one step's compute times; the recorded timelines
        seconds += SPAN_S * spans
        return Cost(seconds, nbytes, self._acco(z)[2] if "acco" in self.methods else 0.0)

    # ------------------------------------------------------------------ ACCO
    def _taus(self, z: Size) -> np.ndarray:
        """Per rank: mean time of a micro-batch, slow factors above ``z.slow`` counted as ``z.slow``."""
        return self.base * np.minimum(self.factors, z.slow)

    def _groups(self, z: Size) -> np.ndarray:
        """Per rank: about the groups of A micro-batches it computes in one ACCO round (at least one): until
        its round's communication ends, which starts once the slowest rank has computed its group."""
        taus = self._taus(z)
        A = z.microbatches
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            g = (self.round_s + A * float(taus.max()) + self.setup.swap_s) / (A * taus) + 1.0
        return np.where(np.isfinite(g), g, math.inf)

    def _acco(self, z: Size) -> tuple[float, float, float]:
        """Seconds and bytes of one ACCO run, and the most micro-batches one rank counts in it."""
        n, A = z.gpus, z.microbatches
        g = self._groups(z)
        scale = n / len(g)  # another --gpus: as many ranks of each kind, in proportion
        rounds = 2 * z.steps
        most = A * (1 + rounds * float(g.max()))
        blocks = np.where(g > 1, np.log2(np.maximum(g, 1.0)), 0.0)  # blocks of 4, 8, ... groups after the first
        if self.jitter:  # every micro-batch drawn, for every rank up to the furthest
            seconds = rounds * scale * float(np.sum(ACCO_RANK_S + ACCO_SCAN_S * blocks)) + ACCO_DRAW_S * n * most
            return seconds, TABLE_BYTES * n * most, most
        period = self.rows // math.gcd(self.rows, A)
        skips = period * A <= MAX_PERIOD
        if skips:  # past SKIP_GROUPS, the first block, then whole periods skipped, then at most two read
            near = 8 + 4 * period
            scanned = np.where(g > SKIP_GROUPS, np.minimum(g, near), g)
            blocks = np.where(g > SKIP_GROUPS, math.log2(near), blocks)
        else:
            scanned = g
        per_rank = ACCO_RANK_S + ACCO_SCAN_S * blocks + ACCO_READ_S * A * np.where(g > 1, scanned, 0.0)
        if skips:
            per_rank = per_rank + np.where(g > SKIP_GROUPS, ACCO_READ_S * period * A, 0.0)
        return rounds * scale * float(np.sum(per_rank)), 0.0, most


def _fits_with(est: Estimate, z: Size, field: str) -> Callable[[int], bool]:
    def fits(x: int) -> bool:
        return est.cost(replace(z, **{field: x})).fits()
    return fits


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _largest_slow(est: Estimate, z: Size) -> float | None:
    """The largest --slow factor (about, 3 significant digits, rounded down) at which the run fits."""
    if z.slow <= 1 or not est.cost(replace(z, slow=1.0)).fits():
        return None
    lo, hi = 1.0, z.slow
    for _ in range(60):
        mid = math.exp((math.log(lo) + math.log(hi)) / 2)
        if est.cost(replace(z, slow=mid)).fits():
            lo = mid
        else:
            hi = mid
        if hi / lo < 1.0001:
            break
    digits = 10 ** (math.floor(math.log10(lo)) - 2)
    return math.floor(lo / digits) * digits


KNOBS: Mapping[str, tuple[str, int]] = {  # Size field: (flag, the smallest value it takes)
    "buckets": ("--buckets", 1), "microbatches": ("--microbatches", 1), "steps": ("--steps", 2), "gpus": ("--gpus", 2),
}
DEFAULTS = {"buckets": 4, "microbatches": 1, "steps": 200}


def largest(est: Estimate, z: Size) -> list[str]:
    """The flags that alone bring the run within the budgets, each at the largest value that fits: those
    set above their defaults first, then the others, each group by the share of the value kept; --buckets
    only when ddp-bucketed runs."""
    out: list[tuple[bool, float, str]] = []
    for field, (flag, lo) in KNOBS.items():
        if field == "buckets" and "ddp-bucketed" not in est.methods:
            continue
        cur = int(getattr(z, field))
        if field == "steps":
            lo = max(lo, est.setup.warmup_steps + 1)
        if field == "gpus":  # keep the slow ranks
            lo = max([lo] + [r + 1 for r, f in enumerate(est.factors) if f > 1])
        fit = budget.largest_true(_fits_with(est, z, field), lo, cur - 1)
        if fit >= lo:
            out.append((cur <= DEFAULTS.get(field, cur), -fit / cur, f"{flag} {fit}"))
    slow = _largest_slow(est, z)
    if slow is not None:
        ranks = [r for r, f in enumerate(est.factors) if f > slow]
        out.append((False, -slow / z.slow, "--slow " + ",".join(f"{r}={slow:g}" for r in ranks)))
    return [text for *_, text in sorted(out)][:3]


def describe(est: Estimate, z: Size, acco: bool = True) -> str:
    """``train-sim of R runs x S steps on N GPUs (the flags that grew it; with ``acco``, ACCO's groups when its
    draws are the work)``."""
    runs = len(est.methods) * len(est.algorithms)
    more = [f"--{k} {getattr(z, k)}" for k in ("microbatches", "buckets") if getattr(z, k) > DEFAULTS[k]
            and (k != "buckets" or "ddp-bucketed" in est.methods)]
    if acco and "acco" in est.methods and est.jitter and float(est._groups(z).max()) > 1e3:
        more.append(f"acco computes about {_fmt(float(est._groups(z).max()))} micro-batch groups per rank and "
                    f"round while it waits for its communication and the slowest rank")
    return (f"train-sim of {runs} method/algorithm run{'s' if runs > 1 else ''} x {z.steps} steps on {z.gpus} GPUs"
            + (f" ({'; '.join(more)})" if more else ""))


def refuse(est: Estimate, cost: Cost) -> None:
    """CollsynthError (one line, exit 2) when ``cost`` is beyond a budget, naming what to change."""
    if cost.fits():
        return
    z = est.size()
    fits = largest(est, z)
    options = ", or ".join(fits)
    if cost.microbatches > MAX_MICROBATCHES:
        what = describe(est, z, acco=False)
        g, taus = est._groups(z), est._taus(z) * z.microbatches
        r = int(np.argmax(g))
        comm = f", its round's communication {_fmt(est.round_s)} s" if est.round_s > 0 else ""
        raise CollsynthError(
            f"{what}: acco computes about {_fmt(float(g[r]))} micro-batch groups per rank and round (a group of "
            f"rank {r} takes {_fmt(float(taus[r]))} s, of the slowest rank {_fmt(float(taus.max()))} s{comm}), "
            f"{_fmt(cost.microbatches)} micro-batches on a rank, more than {_fmt(MAX_MICROBATCHES)} (2^40), beyond "
            f"which its clock cannot resolve a micro-batch: " + (f"give {options}, or " if fits else "")
            + "raise --compute, lower --steps or the --slow factors, or leave acco out of --methods")
    what = describe(est, z)
    hints = ["without --jitter acco's waits are computed in closed form"
             if est.jitter and "acco" in est.methods and cost.microbatches > 1e6 else "",
             "without --exact one-port schedules run in closed form" if est.setup.exact else ""]
    hint = "; ".join(h for h in hints if h)
    largest_text = options if fits else ""
    if cost.nbytes > budget.max_memory():
        budget.check(cost.nbytes, what, largest=largest_text, hint=hint)
    budget.check_seconds(cost.seconds, what, largest=largest_text, hint=hint)


def acco_round_s(setup: TrainingSetup, comm: CollectiveModel, algorithms: Sequence[str]) -> float:
    """About one ACCO round's communication (the count AllReduce, ReduceScatter, shard step, AllGather, from
    equal arrivals): the longest over ``algorithms``, one exact simulation per collective."""
    z = np.zeros(setup.nranks)
    longest = 0.0
    for a in algorithms:
        t = comm.run("ring", "allreduce", COUNT_BYTES, z, detail=True).finish if setup.count_allreduce else z
        t = comm.run(a, "reducescatter", setup.grad_bytes, t, detail=True).finish
        t = comm.run(a, "allgather", setup.pbytes, t + setup.optimizer_s / setup.nranks, detail=True).finish
        longest = max(longest, float(np.max(t)))
    return longest


def estimate(setup: TrainingSetup, methods: Sequence[str], algorithms: Sequence[str],
             comm: CollectiveModel) -> Estimate:
    """Refuse (CollsynthError) a run whose estimated time, memory or ACCO micro-batch count exceeds a budget
    before any schedule is built (a lower bound: no schedule's ports known, no ACCO communication); the
    Estimate, for ``check`` once the AllReduce schedules are built."""
    est = Estimate(setup, methods, algorithms, comm)
    refuse(est, est.cost(est.size()))
    return est


def check(est: Estimate) -> None:
    """Refuse the run of ``estimate`` once its AllReduce schedules are built (their ports known), then with
    ACCO's communication simulated once (acco_round_s), before any collective of the run is simulated."""
    est.built()
    refuse(est, est.cost(est.size()))
    if "acco" in est.methods:
        est.round_s = acco_round_s(est.setup, est.comm, est.algorithms)
        refuse(est, est.cost(est.size()))


__all__ = ["COUNT_BYTES", "Cost", "Estimate", "MAX_MICROBATCHES", "RECORD_BUCKETS", "RECORD_MICROBATCHES", "Size",
           "acco_round_s", "check", "estimate", "largest", "simulate_s"]
