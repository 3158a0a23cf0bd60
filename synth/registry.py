"""The algorithm table: every constructive algorithm (synth.algorithms) and the solver, in a fixed
order, and ``build_schedule``, the one entry point the CLI, the Python API and the other stages use."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeAlias, cast

from collsynth import budget, progress
from collsynth.apitypes import Arrivals, Seconds
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms import CONSTRUCTIVE, Algorithm
from collsynth.synth.algorithms.estimate import SEARCH_HINT, needs_search, size_knobs, work
from collsynth.synth.arrivals import arrival_vector
from collsynth.synth.ir import Schedule
from collsynth.synth.solver import solve as solver
from collsynth.synth.topology import Topology, make_topology, preset_gpus_per_node, resized, topology_for
from collsynth.synth.verify import ports_travel, record_topology
from collsynth.units import gpu_count, size_bytes

BuildParam: TypeAlias = int | float | str | Topology | Mapping[int, Seconds] | Sequence[Seconds] | None
"""One keyword parameter of an algorithm's ``build`` (``build_schedule(name, n, **params)``): a rank, a
count, a size, a time, a preset name, a Topology or arrival times (see ``algorithm_params(name)``)."""

ALGORITHMS: tuple[Algorithm, ...] = CONSTRUCTIVE + (
    Algorithm("solver", "MILP (pulp: CBC or HiGHS) for any arrival times and topology, warm-started from the "
              "constructive algorithms, with a lower-bound certificate; small n", solver.build),
)

_BY_NAME = {a.name: a for a in ALGORITHMS}
LARGE_N = 256  # rank count from which building can take seconds (a progress line is shown)
_FLAGS = {"arrivals": "--arrival"}  # parameters whose CLI flag is not the parameter's own name


def algorithms() -> dict[str, Algorithm]:
    """Every algorithm by name, in table order (the same in every process)."""
    return dict(_BY_NAME)


def get_algorithm(name: str) -> Algorithm:
    """The table row of ``name``; CollsynthError naming the choices when there is none."""
    if name not in _BY_NAME:
        raise CollsynthError(f"unknown algorithm {name!r}: choose one of {', '.join(_BY_NAME)} "
                             f"(see `collsynth algorithms`)")
    return _BY_NAME[name]


def param_flag(param: str) -> str:
    """The `collsynth synth` flag that sets build parameter ``param``."""
    return _FLAGS.get(param, "--" + param.replace("_", "-"))


def algorithm_params(name: str) -> tuple[str, ...]:
    """The keyword parameters algorithm ``name`` accepts besides n and collective."""
    return get_algorithm(name).params()


_SEARCHING = ("stragglar", "multistraggler", "clusterstraggler")  # phase 2 may run the design program


def check_work(name: str, n: int, collective: str = "allreduce", params: Mapping[str, object] | None = None,
               what: str | None = None) -> None:
    """Refuse building ``name`` on ``n`` ranks when its estimated memory or time (synth.algorithms.estimate)
    exceeds the budget (budget.check_work: one line naming the largest n that fits and the flag to raise it)."""
    check_works([(name, dict(params or {}))], n, collective, what or f"{name} on {n} ranks")


def check_works(jobs: Sequence[tuple[str, Mapping[str, object]]], n: int, collective: str = "allreduce",
                what: str = "") -> None:
    """check_work for several (algorithm, params) built one after the other on ``n`` ranks (``compare``):
    their seconds add up, their memory does not."""
    @functools.cache
    def at(x: int) -> list[tuple[str, Mapping[str, object]]]:  # the jobs on x GPUs: their topology resized to x
        return [(a, p if x == n else at_gpus(p, x)) for a, p in jobs]

    budget.check_work(lambda x: [work(a, x, collective, p) for a, p in at(x)], n, what,
                      monotone=lambda x: [work(a, x, collective, p, always=True) for a, p in at(x)],
                      hint=SEARCH_HINT if any(a in _SEARCHING for a, _ in jobs) and needs_search(n) else "",
                      knobs=size_knobs(p for _, p in jobs), step=gpus_per_node(p for _, p in jobs))


def at_gpus(params: Mapping[str, object], x: int) -> Mapping[str, object]:
    """``params`` with their Topology rebuilt for ``x`` GPUs (``resized``), or without it where it cannot be (the
    estimates then count a flat machine): the largest GPU count that fits is searched over other counts."""
    t = params.get("topology")
    if not isinstance(t, Topology) or t.nranks == x:
        return params
    out = dict(params)
    r = resized(t, x)
    if r is None:
        del out["topology"]
    else:
        out["topology"] = r
    return out


def gpus_per_node(params: Iterable[Mapping[str, object]]) -> int:
    """The GPUs per node of the first cluster topology in ``params`` (a Topology of several nodes of one size, or a
    cluster preset's name), else 1: a largest rank count named to the user is a multiple of it (check_works)."""
    for p in params:
        t = p.get("topology")
        if isinstance(t, str) and preset_gpus_per_node(t) > 1:
            return preset_gpus_per_node(t)
        if isinstance(t, Topology) and t.node_count > 1:
            sizes = {len(t.node_gpus(k)) for k in range(t.node_count)}
            return sizes.pop() if len(sizes) == 1 else 1
    return 1


def build_schedule(name: str, n: int, collective: str = "allreduce", **params: BuildParam) -> Schedule:
    """Build algorithm ``name`` for ``n`` ranks (not yet verified: see synth.verify.check)."""
    info = get_algorithm(name)
    n = gpu_count(n)
    if collective not in info.collectives:
        raise CollsynthError(f"algorithm {name!r} builds {', '.join(info.collectives)}, not {collective!r}")
    accepted = info.params()
    for key in params:
        if key not in accepted:
            raise CollsynthError(f"algorithm {name!r} takes no {param_flag(key)} option"
                                 + (f" (it takes {', '.join(param_flag(a) for a in accepted)})"
                                    if accepted else ""))
    if params.get("size") is not None:  # the API's numbers meet the CLI's rules (units.size_bytes)
        size_bytes(params["size"])
    if params.get("arrivals") is not None:  # only their differences shape a schedule: times from the first arrival
        times = arrival_vector(cast(Arrivals, params["arrivals"]), n)  # (1.7e9 s timestamps leave a us no digits)
        if times.min() > 0:
            params["arrivals"] = (times - times.min()).tolist()
    given = params.get("topology")
    if given is not None and not isinstance(given, str):  # a Topology of n GPUs: refused here, not deep in a build
        topology_for(cast(Topology, given), n)
    by_nodes = name in ("hierarchical", "clusterstraggler")  # their estimates need the topology's nodes
    if not (name == "clusterstraggler" and isinstance(params.get("topology"), str)):
        check_work(name, n, collective, params)  # clusterstraggler on a preset or file: once its nodes are known
    if isinstance(params.get("topology"), str):  # a preset name or JSON path: every algorithm gets a Topology
        params["topology"] = make_topology(str(params["topology"]), n)
        if by_nodes:  # again, with the nodes known
            check_work(name, n, collective, params)
    if n >= LARGE_N:
        progress.note(f"building {name} for {n} ranks")
    schedule = info.build(n, collective=collective, **params)
    topology = params.get("topology")
    if isinstance(topology, Topology) and topology.spec is not None and "topology" not in schedule.meta and \
            ports_travel(topology):
        record_topology(schedule, topology)  # its nodes and per-class ports travel with the schedule
    return schedule
