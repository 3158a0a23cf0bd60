"""Straggler-aware AllReduce synthesis: an anytime MILP (pulp; CBC or HiGHS) with a certificate.

``solve`` (registered as algorithm ``solver``) takes any arrival vector and topology and returns a
verified schedule:

1. Warm starts: every constructive algorithm in the registry (ring, rhd, direct, twoshot, stragglar
   with the latest rank as straggler, pipelined variants) and a greedy list scheduler inside the MILP's
   model class (synth/solver/greedy.py) for several chunk counts, all simulated with the given arrivals.
   What is tried follows an estimate of its work, never a clock (so the choice is deterministic): the
   greedy's chunk counts, smallest first, while ``greedy_seconds`` fits half the time limit. With late
   ranks on a cluster the warm starts share a quarter of the limit: clusterstraggler and the synchronous
   hierarchical are built first, the other algorithms while their estimate (synth/algorithms/estimate.py)
   fits, and a greedy chunk count only when the MILP could run on its model (the greedy placement there
   only serves as the MILP's start; the cluster construction is far faster than the model class can be).
2. The time-expanded MILP of synth/solver/model.py over the grid of synth/solver/grid.py (one chunk
   per transfer, a slot = one chunk transfer, slots aligned to the arrival times), for the chunk count
   of the best warm start of its model class, started from it and limited to its horizon. It is not
   run when that warm start already meets the model's slot lower bound (``slot_lower_bound``: then it
   is optimal in the model) or when the model is too large for the time limit (CBC would not get past
   its root node); CBC gets a hard deadline. Without a model-class candidate (a cluster too large for
   the model) it is skipped.
3. With late ranks on a topology with several link classes (a cluster: the warm start is then a
   construction outside the model class, e.g. clusterstraggler), a large-neighbourhood search
   (synth/solver/lns.py) tries simulator-guided moves on the critical path of the fastest candidate
   (synth/solver/critical.py), then re-solves windows of its steps with a small MILP, in the time left
   (less an estimate of the final check), keeping a change only when the schedule verifies and simulates
   faster; ``lns`` records the windows and moves, ``lns.stopped`` whether it ran out of time or of windows.
4. The returned schedule is the fastest verified candidate by simulated completion time. Its
   ``meta["solver"]`` records the status (``optimal``: no schedule of the model class on this grid
   finishes sooner; ``time-limit``: stopped with the gap shown; ``improved``: the search made the warm
   start faster, with ``warm_start_s``, ``improvement`` and ``lns``; ``warm-start``: the MILP did not
   run, found nothing, or something outside its model is faster, see ``note``), the simulated completion
   ``objective_s``, the universal lower bound ``lower_bound_s`` of synth/bounds.py with ``gap``,
   and the model's proven bound ``model_bound_s`` with ``model_gap``.

With a time limit the result depends on how far the solver got (the MILP, and how many windows the
search of step 3 solves), so it can differ between machines; without either running (the common case
for n >= 8 on one switch) it is deterministic.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from collsynth import progress
from collsynth.apitypes import Arrivals, Bytes, Seconds
from collsynth.budget import SECONDS_PER_MOVE, SECONDS_PER_STEP
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms import CONSTRUCTIVE
from collsynth.synth.algorithms.estimate import work
from collsynth.synth.arrivals import latest_rank
from collsynth.synth.bounds import lower_bound
from collsynth.synth.ir import Schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.solver.greedy import greedy_schedules
from collsynth.synth.solver.grid import (
    Grid,
    last_slot,
    make_grid,
    normalize_arrivals,
    place,
    schedule_moves,
    to_schedule,
)
from collsynth.synth.solver.lns import improve
from collsynth.synth.solver.model import (
    SOLVERS,
    SolveResult,
    build_model,
    estimate_binaries,
    set_start,
    slot_lower_bound,
    solve_model,
    symmetric_start,
)
from collsynth.synth.topology import Topology, make_topology, topology_for
from collsynth.synth.verify import check
from collsynth.units import gpu_count, parse_size, parse_time

DEFAULT_SIZE = 1 << 30
DEFAULT_TIME_LIMIT = 30.0
BINARIES_PER_SECOND = 500  # model size CBC can usefully search per second of time limit (measured, 2 cores)
MIN_BINARY_BUDGET = 20000
HOPELESS = 50  # refuse when even the smallest model is this many times the budget (the MILP cannot help)
MAX_GREEDY_CHUNKS = 48
GREEDY_SECONDS = 1.8e-5  # greedy warm-start time per (chunks x ranks)^2, all policies (measured, 2 cores)
GREEDY_S_PER_UNIT = 1e-6  # greedy warm-start time per n^2 C (3n + 2C) (measured 0.4-2e-6 at 8-32 ranks, 2 cores)
GREEDY_FRACTION = 0.5  # elsewhere: the greedy warm starts' estimated time stays in this share of the limit
MAX_CHUNKS_PER_RANK = 8  # the fastest constructive's chunking joins the model's options up to 8n chunks


def _size(size: Any) -> float:
    if size is None:
        return float(DEFAULT_SIZE)
    if isinstance(size, bool):
        raise CollsynthError(f"--size must be a byte count such as 1GiB, not {size!r}")
    value = float(parse_size(size)) if isinstance(size, str) else float(size)
    if not math.isfinite(value) or value <= 0:
        raise CollsynthError(f"--size must be positive, e.g. 1GiB; got {size!r}")
    return value


def _time_limit(limit: Any) -> float:
    if limit is None:
        return DEFAULT_TIME_LIMIT
    if isinstance(limit, bool):
        raise CollsynthError(f"--time-limit must be a time such as 30s, not {limit!r}")
    value = parse_time(limit, allow_zero=False) if isinstance(limit, str) else float(limit)
    if not math.isfinite(value) or value <= 0:
        raise CollsynthError(f"--time-limit must be a positive time such as 30s, got {limit!r}")
    return value


def _chunks(chunks: Any, n: int) -> int | None:
    if chunks is None:
        return None
    if isinstance(chunks, bool) or not isinstance(chunks, int):
        try:
            chunks = int(str(chunks))
        except ValueError:
            raise CollsynthError(f"--chunks must be an integer >= 1, got {chunks!r}") from None
    if chunks < 1:
        raise CollsynthError(f"--chunks must be an integer >= 1, got {chunks}")
    if chunks > 4 * n:
        raise CollsynthError(f"--chunks {chunks} is too many for the exact model on {n} ranks: use at most {4 * n}")
    return chunks


class _Candidate:
    def __init__(self, source: str, schedule: Schedule, sim: Any, placed: Any = None, grid: Grid | None = None):
        self.source, self.schedule, self.sim, self.placed, self.grid = source, schedule, sim, placed, grid

    @property
    def time(self) -> float:
        return float(self.sim.completion_s)


def _simulate(schedule: Schedule, size: float, topo: Any, arrivals: tuple[float, ...]) -> Any:
    return simulate(schedule, size, topo, {r: a for r, a in enumerate(arrivals)})


PIPELINES = (2, 4, "auto")  # extra pipeline depths tried for algorithms that take --pipeline
FIRST_ON_CLUSTERS = ("clusterstraggler", "hierarchical")  # built first with late ranks on a cluster
WARM_FRACTION = 0.25  # with late ranks on a cluster: the warm starts' estimated work stays in this share of the limit


def _variants(n: int, size: float, topo: Any, arrivals: tuple[float, ...],
              cluster: bool) -> list[tuple[Any, str, dict[str, Any]]]:
    """(algorithm, label, parameters) of every warm start ``_constructive`` may build, in the order it
    builds them: the registry's, or on a cluster with late ranks (``cluster``) clusterstraggler and the
    synchronous hierarchical first, and the topology-aware algorithms given the topology."""
    latest = latest_rank(arrivals, n)
    out = []
    for alg in CONSTRUCTIVE:
        if "allreduce" not in alg.collectives:
            continue
        accepted = alg.params()
        base: dict[str, Any] = {"straggler": latest} if "straggler" in accepted else {}
        if "arrivals" in accepted:  # multistraggler: planned for these arrivals on this topology
            base.update(arrivals=dict(enumerate(arrivals)), size=size, topology=topo)
        elif cluster and "topology" in accepted:  # ring, multiring, hierarchical, tree along the cluster's links
            base.update(topology=topo, **({"size": size} if "size" in accepted else {}))
        out.append((alg, "", base))
        if "pipeline" in accepted and "arrivals" not in accepted:  # multistraggler picks its own depth
            out += [(alg, f" pipeline={k}", {**base, "pipeline": k}) for k in PIPELINES]
    if cluster:
        out.sort(key=lambda v: FIRST_ON_CLUSTERS.index(v[0].name) if v[0].name in FIRST_ON_CLUSTERS
                 else len(FIRST_ON_CLUSTERS))  # stable: the rest keep the registry's order
    return out


def _constructive(n: int, size: float, topo: Any, arrivals: tuple[float, ...], budget_s: float | None = None,
                  cluster: bool = False) -> tuple[list[_Candidate], list[str], float]:
    """Every registered AllReduce algorithm except the solver (stragglar with the latest rank as its
    straggler, pipelined variants too), verified and simulated, in ``_variants``' order. With
    ``budget_s`` a variant whose estimated work (synth/algorithms/estimate.py: an estimate, not a
    clock, so the choice is deterministic) would take the total past it is skipped, except the first
    ones on a cluster (FIRST_ON_CLUSTERS). Returns (candidates, skipped labels, estimated seconds spent)."""
    out, skipped, spent = [], [], 0.0
    for alg, label, params in _variants(n, size, topo, arrivals, cluster):
        cost = work(alg.name, n, "allreduce", params).seconds()
        first = cluster and alg.name in FIRST_ON_CLUSTERS and not label
        if budget_s is not None and not first and spent + cost > budget_s:
            skipped.append(alg.name + label)
            continue
        spent += cost
        try:
            s = check(alg.build(n, collective="allreduce", **params))
        except CollsynthError:
            continue  # this variant does not exist for n (or needs options): not a warm start
        out.append(_Candidate(alg.name + label, s, _simulate(s, size, topo, arrivals)))
    return out, skipped, spent


def _chunk_options(n: int, arrivals: tuple[float, ...], chunks: int | None, limit: float) -> list[int]:
    """Chunk counts the greedy warm start tries: the first arrivals' count, n-1 and n, and (finer
    pipelining, as in pipelined StragglAR) multiples of the first group while the greedy's estimated
    cost stays within a quarter of the time limit (an estimate, not a clock: deterministic)."""
    if chunks is not None:
        return [chunks]
    early = max(1, sum(1 for a in arrivals if a == min(arrivals)))
    out = {early, n - 1, n}
    if len(set(arrivals)) > 1:  # pipelining pays off while late ranks are awaited
        cost = 0.0
        for k in range(2, MAX_GREEDY_CHUNKS // early + 1):
            cost += GREEDY_SECONDS * (k * early * n) ** 2
            if cost > 0.25 * limit:
                break
            out.add(k * early)
    return sorted(c for c in out if c >= 1)


def greedy_seconds(n: int, C: int) -> float:
    """About the seconds of the greedy warm start (every rule) for n ranks and C chunks: its slot loop
    checks C chunks over n^2 pairs in each of its 3n + 2C slots (an estimate, not a clock)."""
    return GREEDY_S_PER_UNIT * n * n * C * (3 * n + 2 * C)


def fitting_options(n: int, size: float, topo: Any, arrivals: tuple[float, ...], options: list[int],
                    budget_s: float, binaries: float, cluster: bool) -> tuple[list[int], list[int]]:
    """(chunk counts whose greedy warm start runs, chunk counts skipped), deterministically: smallest
    first, while the greedy's estimated seconds (``greedy_seconds``) fit ``budget_s`` (elsewhere than on a
    cluster with late ranks the smallest always runs: the MILP needs a start). On a cluster with late
    ranks (``cluster``) a greedy placement is only worth building as the MILP's start, so a chunk count
    whose smallest model exceeds the ``binaries`` budget (the MILP cannot run) is skipped: the cluster
    construction outside the model class is the warm start there."""
    kept: list[int] = []
    skipped: list[int] = []
    spent = 0.0
    for C in sorted(options):
        cost = greedy_seconds(n, C)
        fits = spent + cost <= budget_s or (not kept and not cluster)
        if not fits or (cluster and _smallest_model(n, C, size, topo, arrivals) > binaries):
            skipped.append(C)
            continue
        kept.append(C)
        spent += cost
    return kept, skipped


def model_candidates(n: int, size: float, topo: Any, arrivals: tuple[float, ...], options: list[int],
                     constructive: list[_Candidate]) -> list[_Candidate]:
    """Greedy placements for each chunk count, plus the constructive schedules that fit the model class."""

    out = []
    for C in options:
        grid = make_grid(n, C, size, topo, arrivals, final_slots=3 * n + 2 * C + 4)
        for rule, placed in sorted(greedy_schedules(grid).items()):
            s = check(to_schedule(grid, placed, {}))
            out.append(_Candidate(f"greedy-{rule}", s, _simulate(s, size, topo, arrivals), placed, grid))
        for cand in constructive:
            if cand.schedule.nchunks != C:
                continue
            steps = schedule_moves(cand.schedule)
            if steps is None:
                continue
            big = make_grid(n, C, size, topo, arrivals, final_slots=len(steps) + 1)
            fitted = place(big, steps)
            if fitted is None:
                continue
            s = check(to_schedule(big, fitted, {}))
            out.append(_Candidate(cand.source, s, _simulate(s, size, topo, arrivals), fitted, big))
    return out


def _smallest_model(n: int, C: int, size: float, topo: Any, arrivals: tuple[float, ...]) -> int:
    """Binaries of the smallest model the solver could build: C chunks, the slot lower bound as horizon."""
    probe = make_grid(n, C, size, topo, arrivals, final_slots=1)
    return estimate_binaries(make_grid(n, C, size, topo, arrivals, final_slots=slot_lower_bound(probe)))


def largest_n(topology: Any, time_limit: float) -> int:
    """The largest rank count (synchronous arrivals) the solver accepts for ``time_limit`` (for messages)."""

    spec = topology if isinstance(topology, str) else "nvswitch"
    budget = HOPELESS * max(MIN_BINARY_BUDGET, BINARIES_PER_SECOND * time_limit)
    best = 2
    for m in range(2, 257):
        try:
            topo = make_topology(spec, m)
        except CollsynthError:
            continue
        if _smallest_model(m, m, DEFAULT_SIZE, topo, (0.0,) * m) > budget:
            break
        best = m
    return best


def _milp(n: int, nbytes: float, topo: Any, arr: tuple[float, ...], model_cands: list[_Candidate], budget: float,
          limit: float, t_start: float, solver: str,
          threads: int) -> tuple[Grid, SolveResult | None, float | None, str]:
    """The MILP from the fastest model-class warm start when it can help within the time limit:
    (its grid, its result or None, the model's proven bound in seconds or None, a note)."""
    start = min(model_cands, key=lambda c: (c.time, c.source))
    grid0 = start.grid
    assert grid0 is not None and start.placed is not None
    horizon = last_slot(start.placed) - grid0.first_final + 1
    grid = make_grid(n, grid0.nchunks, nbytes, topo, arr, final_slots=horizon)
    est = estimate_binaries(grid)
    placed = place(grid, schedule_moves(start.schedule) or [])
    note = ""
    result = None
    model_bound_s = None
    slot_lb = slot_lower_bound(grid)
    if placed is None:  # cannot happen: the same steps fit the larger grid
        note = "warm start did not fit the model grid"
    elif horizon <= slot_lb:
        result = SolveResult("optimal", None, float(horizon - 1), float(horizon - 1))
        model_bound_s = grid.last_arrival + horizon * grid.tau
        note = f"the warm start meets the model's lower bound of {slot_lb} slots after the last arrival"
    elif est > budget:
        model_bound_s = grid.last_arrival + slot_lb * grid.tau
        note = (f"the model ({est} binaries) is too large for a {limit:g} s time limit: returning the best "
                "warm start with the model's slot bound; raise --time-limit to search")
    else:
        placed = symmetric_start(grid, placed)
        model = build_model(grid)
        set_start(model, placed)
        remaining = limit - (time.monotonic() - t_start)
        if remaining < 1.0:
            note = "time limit too short to run the MILP: returning the best warm start"
        else:
            progress.note(f"solver: MILP ({est} binaries, {solver}, {remaining:.0f} s limit)")
            result = solve_model(model, solver, remaining, warm=True, threads=threads)
            bound_slots = max(float(slot_lb - 1), result.bound if result.bound is not None else 0.0)
            model_bound_s = grid.last_arrival + (math.ceil(bound_slots - 1e-6) + 1) * grid.tau
    return grid, result, model_bound_s, note


def solve(n: int, *, topology: Topology | str | None = None, arrivals: Arrivals = None, chunks: int | str | None = None,
          size: Bytes | None = None, time_limit: Seconds | None = None, solver: str = "cbc", threads: int = 1,
          constructive_starts: bool = True) -> Schedule:
    """The fastest verified AllReduce schedule the solver finds (see the module docstring).
    ``constructive_starts=False`` uses only the greedy warm start (to measure the MILP on its own)."""

    t_start = time.monotonic()
    n = gpu_count(n)
    if solver not in SOLVERS:
        raise CollsynthError(f"unknown --solver {solver!r}: use one of {', '.join(SOLVERS)}")
    topo = topology_for(topology, n)
    nbytes = _size(size)
    limit = _time_limit(time_limit)
    C_opt = _chunks(chunks, n)
    arr = normalize_arrivals(arrivals, n)
    bound = lower_bound(n, nbytes, topo, arr)
    options = _chunk_options(n, arr, C_opt, limit)
    budget = max(MIN_BINARY_BUDGET, BINARIES_PER_SECOND * limit)
    cluster = constructive_starts and _lns_applies(topo, arr)  # the cluster construction is the warm start
    smallest = _smallest_model(n, min(options), nbytes, topo, arr)
    if smallest > HOPELESS * budget and not cluster:
        raise CollsynthError(
            f"{n} ranks need a model of at least {smallest} binaries, too large for a {limit:g} s time limit: "
            f"the solver handles up to about {largest_n(topology, limit)} ranks in that time; raise "
            "--time-limit or use a constructive algorithm (stragglar, ring)")
    progress.note(f"solver: warm starts (constructive algorithms) for {n} ranks")
    warm_s = WARM_FRACTION * limit if cluster else None
    constructive, skipped_alg, spent = (_constructive(n, nbytes, topo, arr, warm_s, cluster) if constructive_starts
                                        else ([], [], 0.0))
    if C_opt is None and constructive:  # also model the chunking of the fastest constructive schedule
        fastest = min(constructive, key=lambda c: (c.time, c.source))
        if fastest.schedule.nchunks <= MAX_CHUNKS_PER_RANK * n:
            options = sorted(set(options) | {fastest.schedule.nchunks})
    greedy_s = warm_s - spent if warm_s is not None else GREEDY_FRACTION * limit
    options, skipped_c = fitting_options(n, nbytes, topo, arr, options, greedy_s, budget, cluster)
    skipped = skipped_alg + [f"greedy for {C} chunks" for C in skipped_c]
    if skipped:
        progress.note(f"solver: skipped warm starts that do not fit the {limit:g} s limit or cannot pay off: "
                      f"{', '.join(skipped)}")
    if options:
        progress.note(f"solver: greedy warm starts for chunk counts {', '.join(map(str, options))}")
    model_cands = model_candidates(n, nbytes, topo, arr, options, constructive)
    if not model_cands and not constructive:
        raise CollsynthError(f"the solver found no schedule of its model class for {n} ranks on "
                             f"{topo.name!r}; use a constructive algorithm (ring, stragglar)")
    grid, result, model_bound_s, note = (_milp(n, nbytes, topo, arr, model_cands, budget, limit, t_start, solver,
                                                threads) if model_cands else
                                          (None, None, None, "the cluster construction is outside the MILP's "
                                           "model class and no model fits the time limit: the MILP did not run"))
    cands = list(constructive) + model_cands
    milp = None
    if result is not None and result.placed and grid is not None:
        s = check(to_schedule(grid, result.placed, {}))
        milp = _Candidate("milp", s, _simulate(s, nbytes, topo, arr), result.placed, grid)
        cands.append(milp)
    best = min(cands, key=lambda c: (c.time, c.schedule.ntransfers, c.source != "milp", c.source))
    in_model = [c.time for c in cands if c.placed is not None and grid is not None
                and c.schedule.nchunks == grid.nchunks]
    model_time = min(in_model) if in_model else math.inf
    reached = best.time >= model_time * (1 - 1e-12)  # the returned time is the model's best time
    if result is None:
        status = "warm-start"
    elif result.status == "optimal":
        status = "optimal" if reached else "warm-start"
        if status == "warm-start":
            note = ("a constructive schedule with other chunking or outside the model class beats the "
                    "model's optimum")
    elif result.status == "feasible":
        status = "time-limit"
    else:
        status = "warm-start"
        note = note or f"{solver} found no schedule within the time limit: returning the best warm start"
    warm = best
    lns = None
    if _lns_applies(topo, arr) and status != "optimal":
        # the final check of the result comes after the search: keep its estimated time (budget.py's rates)
        reserve = SECONDS_PER_MOVE * 2 * int(best.schedule.count.sum()) + SECONDS_PER_STEP * best.schedule.nsteps
        remaining = limit - (time.monotonic() - t_start) - reserve
        if remaining >= LNS_MIN_SECONDS:
            progress.note(f"solver: large-neighbourhood search around {best.source} ({remaining:.0f} s limit)")
            lns = improve(best.schedule, lambda x: _simulate(x, nbytes, topo, arr), topology=topo,
                          time_limit=remaining, solver=solver, size=nbytes)
            if lns.time_s < best.time:
                best = _Candidate("lns", lns.schedule, _simulate(lns.schedule, nbytes, topo, arr))
                status = "improved"
    obj = best.time
    if model_bound_s is not None and abs(obj - model_bound_s) <= 1e-9 * max(obj, 1e-30):
        model_bound_s = obj
    info: dict[str, Any] = {
        "status": status,
        "solver": solver,
        "source": best.source,
        "chunks": best.schedule.nchunks,
        "slot_s": grid.tau if grid is not None else None,
        "model_chunks": grid.nchunks if grid is not None else None,
        "objective_s": obj,
        "after_last_arrival_s": float(best.sim.after_last_arrival_s),
        "lower_bound_s": bound,
        "gap": (obj - bound) / obj if obj > 0 else 0.0,
        "model_bound_s": model_bound_s,
        "model_gap": None if model_bound_s is None or not reached else max(0.0, (obj - model_bound_s) / obj),
        "time_limit_s": limit,
        "arrivals_s": list(arr),
        "size_bytes": nbytes,
        "topology": topo.name,
    }
    if lns is not None or status == "improved":
        assert lns is not None
        info.update(warm_start_source=warm.source, warm_start_s=warm.time,
                    improvement=(warm.time - obj) / warm.time if warm.time > 0 else 0.0,
                    lns={"windows": lns.windows, "kept": lns.improved, "steps_saved": lns.steps_saved,
                         "stopped": lns.stats.get("stopped", ""), "moves": lns.stats.get("moves")})
        if status == "improved":
            note = (f"large-neighbourhood search improved the warm start ({warm.source}) in {lns.improved} of "
                    f"{lns.windows} windows and {lns.moves} of {lns.evals} moves" + (f"; {note}" if note else ""))
        else:
            note = (note + "; " if note else "") + (f"large-neighbourhood search: {lns.evals} moves and {lns.windows} "
                                                    f"windows around {warm.source}, none verified faster")
    if cluster:
        info.setdefault("warm_start_source", warm.source)  # the search's start, also when no time was left for it
        info.setdefault("warm_start_s", warm.time)
    if note:
        info["note"] = note
    out = best.schedule.replace(name=f"solver_allreduce_n{n}", meta={"algorithm": "solver", "solver": info})
    return check(out)


LNS_MIN_SECONDS = 1.0  # the search starts only with this much of the time limit left


def _lns_applies(topo: Any, arrivals: tuple[float, ...]) -> bool:
    """The search runs for late ranks on a topology with several link classes (a cluster), where the
    warm start is a construction outside the MILP's model class (clusterstraggler, hierarchical)."""
    return len(getattr(topo, "classes", ())) > 1 and len(set(arrivals)) > 1


def build(n: int, collective: str = "allreduce", *, topology: Topology | str | None = None, arrivals: Arrivals = None,
          chunks: int | str | None = None, size: Bytes | None = None, time_limit: Seconds | None = None,
          solver: str = "cbc") -> Schedule:
    """The algorithm table's entry for ``solve``: ``topology`` is a preset name, a JSON path or a Topology;
    ``arrivals`` a {rank: seconds} dict or a list; ``size`` bytes (or "1GiB"); ``time_limit`` seconds (or "30s")."""
    if collective != "allreduce":
        raise CollsynthError(f"the solver builds allreduce only, not {collective!r}")
    return solve(n, topology=topology, arrivals=arrivals, chunks=chunks, size=size, time_limit=time_limit,
                 solver=solver)


def _why(note: str) -> str:
    """A few words for why the MILP's answer is not what was returned (from the solver's note)."""
    if note.startswith("large-neighbourhood search improved"):
        return "LNS, " + note.split(") in ", 1)[1].split(";")[0]
    for key, short in (("too large", "MILP too large for the time limit"), ("too short", "time limit too short"),
                       ("meets the model", "warm start meets the model bound"),
                       ("did not fit", "warm start outside the model grid"),
                       ("found no schedule", "no MILP solution in time"),
                       ("beats the model", "beats the model optimum")):
        if key in note:
            return short
    return note


def status_line(info: Mapping[str, Any], *, short: bool = False) -> str:
    """The solver's status (optimal, time limit, warm start and why), objective and gap to the proven lower
    bound, from ``meta["solver"]`` of a solver schedule: one line for the terminal, or (``short``) for
    compare's note."""
    status = str(info.get("status", "?"))
    words = {"optimal": "optimal", "time-limit": "time limit (best found)", "warm-start": "warm start",
             "improved": "improved warm start"}.get(status, status)
    note = str(info.get("note") or "")
    head = f"{words} ({_why(note) if short else note})" if note else words
    obj, gap = info.get("objective_s"), info.get("gap")
    tail = []
    if isinstance(obj, (int, float)) and not short:
        tail.append(f"objective {obj * 1e3:.4g} ms")
    imp, warm = info.get("improvement"), info.get("warm_start_s")
    if isinstance(imp, (int, float)) and isinstance(warm, (int, float)):
        src = info.get("warm_start_source")
        if imp > 0:
            tail.append(f"{imp:.2%} better than the warm start ({src}, {warm * 1e3:.4g} ms)"
                        if not short else f"{imp:.2%} over the warm start")
        else:  # nothing faster found: say so instead of "0.00% better"
            tail.append(f"the warm start ({src}, {warm * 1e3:.4g} ms) as is" if not short else "warm start as is")
    if isinstance(gap, (int, float)):
        tail.append(f"gap {gap:.1%} to the lower bound")
    return ("" if short else "solver: ") + ", ".join([head, *tail])
