"""The memory budget: estimate the work before allocating it, and refuse (exit 2) with the largest size that
fits instead of growing past the machine's memory (issue 13, "Scale").

The budget is a share of the memory available when the command starts (half of MemAvailable from
/proc/meminfo; 4 GiB where that cannot be read), or what `collsynth --max-memory SIZE` (or
COLLSYNTH_MAX_MEMORY) sets. Estimates are the bytes of the arrays the code allocates, e.g.
``verify_bytes`` for synth.verify's state; they are upper-bound style ("about"), not measurements.
"""

from __future__ import annotations

from collections.abc import Callable

from collsynth.errors import CollsynthError

_FALLBACK = 4 * 2**30
_override: int | None = None


def set_max_memory(nbytes: int | None) -> None:
    """Set the budget in bytes (the CLI's --max-memory); None restores the default."""
    global _override
    _override = None if nbytes is None else int(nbytes)


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
    return f"{nbytes / 2**30:.3g} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.3g} MiB"


def verify_bytes(nranks: int, nchunks: int, nsteps: int, ntransfers: int, chunk_runs: int | None = None) -> int:
    """About the bytes synth.verify allocates: two (ranks x chunks) tables of rank bitsets (the state and
    the wanted result), per-location flags, per-step flags, and per transfer and per moved chunk indices."""
    words = -(-nranks // 64)
    locs = nranks * nchunks
    moved = ntransfers if chunk_runs is None else chunk_runs
    return 16 * locs * words + 18 * locs + 16 * (nsteps + 1) + 64 * ntransfers + 48 * moved


def schedule_bytes(nranks: int) -> int:
    """About the bytes of building and verifying a typical schedule on ``nranks`` ranks: n chunks, 2n(n-1)
    one-chunk transfers (ring's count; most algorithms are at or below it), kept twice while building."""
    n = max(int(nranks), 2)
    transfers = 2 * n * (n - 1)
    return verify_bytes(n, n, 2 * n, transfers) + 2 * 48 * transfers


def check(nbytes: float, what: str, *, largest: str = "", hint: str = "") -> None:
    """Refuse ``what`` (e.g. "synth -a ring -n 1000000") when about ``nbytes`` exceed the budget."""
    budget = max_memory()
    if nbytes > budget:
        more = f"; the largest that fits is {largest}" if largest else ""
        raise CollsynthError(f"{what} needs about {_gib(nbytes)} of memory, more than the {_gib(budget)} budget"
                             f"{more}{': ' + hint if hint else ''} (raise it with `collsynth --max-memory SIZE ...`)")


MAX_SECONDS = 600.0  # estimated run time above which a simulation is refused (10 minutes)


def check_seconds(seconds: float, what: str, *, largest: str = "") -> None:
    """Refuse ``what`` when its estimated run time exceeds MAX_SECONDS."""
    if seconds > MAX_SECONDS:
        more = f"; the largest that fits is {largest}" if largest else ""
        raise CollsynthError(f"{what} would run for about {seconds:.3g} s, more than the {MAX_SECONDS:g} s "
                             f"limit{more}")


def largest_fitting(cost: Callable[[int], float], lo: int = 1, hi: int = 2**62) -> int:
    """The largest integer x in [lo, hi] with cost(x) within the budget (cost non-decreasing), lo - 1 if none."""
    budget = max_memory()
    if cost(lo) > budget:
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cost(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def check_ranks(n: int, what: str, *, per_rank_schedules: int = 1) -> None:
    """Refuse ``n`` ranks when building and verifying ``per_rank_schedules`` schedules does not fit."""
    def cost(x: int) -> float:
        return float(schedule_bytes(x)) * (1 if per_rank_schedules <= 1 else 2)

    if cost(n) > max_memory():
        fit = largest_fitting(cost, 2, max(n, 2))
        check(cost(n), what, largest=f"{fit} ranks" if fit >= 2 else "")


__all__ = ["MAX_SECONDS", "available_bytes", "check", "check_ranks", "check_seconds", "largest_fitting",
           "max_memory", "schedule_bytes", "set_max_memory", "verify_bytes"]
