"""The memory budget: estimate the work before allocating it, and refuse (exit 2) with the largest size that
fits instead of growing past the machine's memory (issue 13, "Scale").

The budget is a share of the memory available when the command starts (half of MemAvailable from
/proc/meminfo; 4 GiB where that cannot be read), or what `collsynth --max-memory SIZE` (or
COLLSYNTH_MAX_MEMORY) sets. Estimates are the bytes of the arrays the code allocates, e.g.
``verify_bytes`` for synth.verify's state; they are upper-bound style ("about"), not measurements.

Time works the same way: ``Work`` (a schedule's transfers, chunk moves, steps and any search before it)
gives about the seconds of building, verifying and simulating it, from per-move and per-step costs
measured with bench/bench_setup.py-style runs on one core (about 2 us per chunk move for build, verify,
simulate and JSON together at n = 1000); work estimated above the time budget (DEFAULT_MAX_SECONDS, or
`collsynth --max-time TIME`, or COLLSYNTH_MAX_TIME) is refused with the largest size that fits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from collsynth import workers
from collsynth.errors import CollsynthError

_FALLBACK = 4 * 2**30
_override: int | None = None
_seconds_override: float | None = None
_sources = {"memory": "--max-memory", "time": "--max-time"}  # what set each budget, for the hint


def set_max_memory(nbytes: int | None, source: str = "--max-memory") -> None:
    """Set the budget in bytes (the CLI's --max-memory, or COLLSYNTH_MAX_MEMORY as ``source``); None restores
    the default."""
    global _override
    _override = None if nbytes is None else int(nbytes)
    _sources["memory"] = "--max-memory" if nbytes is None else source


def _raise_hint(kind: str, flag: str, value: str) -> str:
    """How to raise a budget, naming the environment variable when that is what set it."""
    how = f"raise it with `collsynth {flag} {value} ...`"
    source = _sources[kind]
    return how if source == flag else f"{how} or {source}, which set it"


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux), else a 8 GiB guess."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 2 * _FALLBACK


def max_memory() -> int:
    """The budget in bytes."""
    if _override is not None:
        return _override
    return max(available_bytes() // 2, 64 * 2**20)


def _gib(nbytes: float) -> str:
    try:
        x = float(nbytes)  # an int beyond a float's range (a count read from a file) would overflow below
    except OverflowError:
        return "more than 1e308 bytes"
    return f"{x / 2**30:.3g} GiB" if x >= 2**30 else f"{x / 2**20:.3g} MiB"


SCHEDULE_BYTES_PER_TRANSFER = 48  # a built schedule's columns (step, source, destination, chunk, count, reduce)
BUILD_BYTES_PER_TRANSFER = 144  # a built schedule's columns twice and its builder's temporaries (Work.build_bytes)
VERIFY_BASE_BYTES = 2 * 2**20  # the verifier's fixed working state (traced: 1.7 MB in all for rhd on 64 ranks)


def verify_bytes(nranks: int, nchunks: int, nsteps: int, ntransfers: int, chunk_runs: int | None = None) -> int:
    """About the bytes synth.verify allocates: (ranks x chunks) tables of rank bitsets (the state, the wanted
    result, and up to one more for a step's reads: rhd's first step reads half of them), per-location flags,
    per-step flags, per transfer and per moved chunk indices (the expanded moves and their race and
    duplicate-reduce keys: hierarchical at 256 GPUs, 1.3 million moves, traced 158 MB), and a few MiB of
    fixed working state (bench/bench_estimate.py: rhd at 2,048 ranks measured 3.17 GB, two tables counted
    2.64 GiB; tests/test_estimate.py compares tracemalloc's peak)."""
    words = -(-nranks // 64)
    locs = nranks * nchunks
    moved = ntransfers if chunk_runs is None else chunk_runs
    return 24 * locs * words + 18 * locs + 16 * (nsteps + 1) + 64 * ntransfers + 80 * moved + VERIFY_BASE_BYTES


def schedule_bytes(nranks: int) -> int:
    """About the bytes of building and verifying a typical schedule on ``nranks`` ranks: n chunks, 2n(n-1)
    one-chunk transfers (ring's count; most algorithms are at or below it), and building them."""
    n = max(int(nranks), 2)
    transfers = 2 * n * (n - 1)
    return max(BUILD_BYTES_PER_TRANSFER * transfers, SCHEDULE_BYTES_PER_TRANSFER * transfers
               + verify_bytes(n, n, 2 * n, transfers))


def check(nbytes: float, what: str, *, largest: str = "", hint: str = "") -> None:
    """Refuse ``what`` (e.g. "synth -a ring -n 1000000") when about ``nbytes`` exceed the budget."""
    budget = max_memory()
    if nbytes > budget:
        more = f"; the largest that fits is {largest}" if largest else ""
        raise CollsynthError(f"{what} needs about {_gib(nbytes)} of memory, more than the {_gib(budget)} budget"
                             f"{more}{': ' + hint if hint else ''} ({_raise_hint('memory', '--max-memory', 'SIZE')})")


MAX_SECONDS = 600.0  # the default time budget: estimated work above it is refused (10 minutes)
DEFAULT_MAX_SECONDS = MAX_SECONDS
SECONDS_PER_MOVE = 2e-6  # build + verify + simulate + JSON, per chunk move (measured about 1-2 us, n = 1000)
SECONDS_PER_STEP = 2e-5  # per step: the verifier's and simulator's per-step work


def set_max_seconds(seconds: float | None, source: str = "--max-time") -> None:
    """Set the time budget in seconds (the CLI's --max-time, or COLLSYNTH_MAX_TIME as ``source``); None
    restores the default."""
    global _seconds_override
    _seconds_override = None if seconds is None else float(seconds)
    _sources["time"] = "--max-time" if seconds is None else source


def max_seconds() -> float:
    """The time budget in seconds."""
    return DEFAULT_MAX_SECONDS if _seconds_override is None else _seconds_override


def check_seconds(seconds: float, what: str, *, largest: str = "", hint: str = "") -> None:
    """Refuse ``what`` when its estimated run time exceeds the time budget."""
    limit = max_seconds()
    if seconds > limit:
        more = f"; the largest that fits is {largest}" if largest else ""
        raise CollsynthError(f"{what} would run for about {seconds:.3g} s, more than the {limit:g} s limit{more}"
                             f"{': ' + hint if hint else ''} ({_raise_hint('time', '--max-time', 'TIME')})")


@dataclass(frozen=True)
class Work:
    """About what building, verifying and simulating one schedule handles (upper-bound style), and the
    seconds of any search before it (StragglAR's phase-2 design program for n without a stored design)."""

    nranks: int
    nchunks: int
    nsteps: int
    transfers: int
    moves: int  # chunk moves: the sum of the transfers' counts
    search_s: float = 0.0
    copies: int = 1  # schedules built and simulated to pick one (multistraggler tries several forms)
    extra_bytes: int = 0  # held beside the schedule: by its builder (multistraggler) or afterwards (emitting it)
    composed: bool = False  # verified by composition (synth.composition): no flat bit sets, no chunk moves expanded

    def share_bytes(self) -> int:
        """About the peak bytes of one candidate in one process: the verifier's state (``verify_bytes``; by
        composition the regenerated columns instead) or the simulator's (16 bytes per rank and chunk, 96 per
        transfer, and a quarter more per location for its temporaries: bench/bench_estimate.py), whichever
        is larger, beside the built schedule's columns; or the builder's peak (``build_bytes``) before them,
        if larger (building ends before the checks start)."""
        check_state = 2 * 48 * self.transfers if self.composed else \
            verify_bytes(self.nranks, self.nchunks, self.nsteps, self.transfers, self.moves)
        simulate_state = 20 * self.nranks * self.nchunks + 96 * self.transfers
        return max(self.build_bytes(), SCHEDULE_BYTES_PER_TRANSFER * self.transfers + max(check_state, simulate_state))

    def build_bytes(self) -> int:
        """About the peak bytes of building the schedule: its columns twice and the builder's temporaries
        (traced 103-131 bytes per transfer for ring, rhd, direct and hierarchical), besides what a builder
        holds of its own (``extra_bytes``: multistraggler's Python moves), and a MiB of fixed state."""
        return BUILD_BYTES_PER_TRANSFER * self.transfers + 2**20

    def nbytes(self) -> int:
        """About the peak bytes: ``share_bytes`` and any extra; with worker processes (collsynth.workers) one
        share per candidate built at once, and one more for the schedules that come back."""
        one = self.share_bytes()
        at_once = min(workers.jobs(), self.copies)
        return (one if at_once <= 1 else (at_once + 1) * one) + self.extra_bytes

    def seconds(self) -> float:
        """About the seconds of the whole job on one core (by composition the verifier never expands the
        chunk moves: the transfers count, and the simulator's per-location work, about a sixteenth of a
        move's per (rank, chunk): hierarchical at 2,048 GPUs, 42 million locations, 4.1 s)."""
        per = self.transfers + self.nranks * self.nchunks // 16 if self.composed else max(self.moves, self.transfers)
        return self.copies * (SECONDS_PER_MOVE * per + SECONDS_PER_STEP * self.nsteps) + self.search_s


WorkFn = Callable[[int], "Work | Sequence[Work]"]


def _totals(w: Work | Sequence[Work]) -> tuple[int, float]:
    """Peak bytes and total seconds of one job or of several run one after the other."""
    ws = [w] if isinstance(w, Work) else list(w)
    return max((x.nbytes() for x in ws), default=0), sum(x.seconds() for x in ws)


def check_work(work: WorkFn, n: int, what: str, *, unit: str = "ranks", monotone: WorkFn | None = None,
               hint: str = "", knobs: Sequence[str] = (), step: int = 1) -> None:
    """Refuse ``what`` (n ``unit``) when ``work(n)`` (a Work, or several run one after the other)
    exceeds the memory or the time budget, naming the largest n that fits both and the flag that raises
    the budget. The largest is searched on ``monotone`` (default ``work``), a non-decreasing bound of
    ``work`` (e.g. counting a search at every n), among the multiples of ``step`` (a cluster topology's GPUs
    per node: h100-cluster takes multiples of 8). ``knobs`` are the user's options that also scale the work
    ("--pipeline 1000000"): the largest n is named at them, and the error offers smaller values."""
    nbytes, seconds = _totals(work(n))
    if nbytes <= max_memory() and seconds <= max_seconds():
        return
    bound = monotone or work

    def fits(x: int) -> bool:
        b, t = _totals(bound(x))
        return b <= max_memory() and t <= max_seconds()

    step = max(int(step), 1)
    lo = -(-2 // step)  # the fewest multiples of step that make 2 ranks
    fit = step * largest_true(lambda k: fits(k * step), lo, max((n - 1) // step, lo))  # < 2: none fits
    at = f" at {', '.join(knobs)}" if knobs else ""
    largest = (f"{fit} {unit}{at}" if fit >= 2 else "") + (f" ({hint})" if hint and fit >= 2 else "")
    smaller = f"give a smaller {' or '.join(k.split()[0] for k in knobs)}" if knobs else ""
    if nbytes > max_memory():
        check(nbytes, what, largest=largest, hint=smaller)
    check_seconds(seconds, what, largest=largest, hint=smaller)


def largest_true(fits: Callable[[int], bool], lo: int, hi: int) -> int:
    """The largest integer x in [lo, hi] with fits(x) (true up to some x, false after), lo - 1 if none."""
    if hi < lo or not fits(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def largest_fitting(cost: Callable[[int], float], lo: int = 1, hi: int = 2**62) -> int:
    """The largest integer x in [lo, hi] with cost(x) within the budget (cost non-decreasing), lo - 1 if none."""
    budget = max_memory()
    return largest_true(lambda x: cost(x) <= budget, lo, hi)


def check_ranks(n: int, what: str, *, per_rank_schedules: int = 1) -> None:
    """Refuse ``n`` ranks when building and verifying ``per_rank_schedules`` schedules does not fit."""
    def cost(x: int) -> float:
        return float(schedule_bytes(x)) * (1 if per_rank_schedules <= 1 else 2)

    if cost(n) > max_memory():
        fit = largest_fitting(cost, 2, max(n, 2))
        check(cost(n), what, largest=f"{fit} ranks" if fit >= 2 else "")


__all__ = ["DEFAULT_MAX_SECONDS", "MAX_SECONDS", "Work", "available_bytes", "check", "check_ranks", "check_seconds",
           "check_work", "largest_fitting", "largest_true", "max_memory", "max_seconds", "schedule_bytes",
           "set_max_memory", "set_max_seconds", "verify_bytes"]
