"""Compare every algorithm for one setting: build, verify and simulate each, fastest first.

The library form of `collsynth compare`. StragglAR (and any algorithm that takes a straggler) gets the
latest arrival as its straggler (synth.arrivals.latest_rank) and the pipeline depth the alpha-beta model
picks for what that rank sees on the topology; the solver runs only when given a time limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from collsynth import progress
from collsynth.apitypes import Arrivals, Bytes
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.layout import node_grid
from collsynth.synth.algorithms.stragglar import domain
from collsynth.synth.algorithms.stragglar.choose import unequal_case
from collsynth.synth.algorithms.stragglar.pipeline import topology_model
from collsynth.synth.arrivals import arrival_vector, latest_rank
from collsynth.synth.bounds import Bound, allreduce_bound
from collsynth.synth.composition import radix_applies
from collsynth.synth.registry import algorithms as algorithm_table
from collsynth.synth.registry import build_schedule, check_works
from collsynth.synth.simulate import simulate
from collsynth.synth.solver.solve import status_line
from collsynth.synth.topology import Topology, topology_for
from collsynth.synth.verify import check, class_port_violation
from collsynth.units import format_time, gpu_count, size_bytes


class CompareRow(TypedDict):
    """One algorithm's row of ``compare`` (times in seconds)."""

    algorithm: str
    completion_s: float
    after_last_arrival_s: float
    steps: int
    note: str
    speedup_vs_ring: float  # ring's after_last_arrival_s over this row's (inf when this row's is 0)
    bound_s: float  # the proven lower bound on completion (synth.bounds.allreduce_bound), the same on every row
    x_bound: float  # after_last_arrival_s over the bound's after-last-arrival part (>= 1)


MULTI_LATE = "multistraggler"  # runs by default only with two or more late ranks (with one it is stragglar)
CLUSTER_LATE = "clusterstraggler"  # by default with a late rank on several nodes, or a last GPU alone in one domain
RADIX = "radix"  # runs by default only where it differs from rhd and the ring


def default_algorithms(late_ranks: int = 0, nodes: int = 1, n: int | None = None,
                       domain_late: bool = False) -> list[str]:
    """The AllReduce algorithms `compare` runs by default: all but the solver; multistraggler only when
    ``late_ranks`` >= 2 (with one late rank it builds StragglAR's schedule), clusterstraggler only with a
    late rank and ``nodes`` >= 2, or on one node where its broadcast form may be built (``domain_late``:
    domain.applies; otherwise there it is multistraggler or a synchronous schedule, and ``compare`` drops
    such a row), radix only where it is neither rhd's nor the ring's schedule (``n`` composite and not a
    power of two; every n when ``n`` is None)."""
    return [a for a, info in algorithm_table().items() if "allreduce" in info.collectives and a != "solver"
            and (a != MULTI_LATE or late_ranks >= 2)
            and (a != CLUSTER_LATE or (late_ranks >= 1 and nodes >= 2) or domain_late)
            and (a != RADIX or n is None or radix_applies(n))]


def compare_bound(n: int, size: Bytes, topology: Topology | str = "nvswitch", arrivals: Arrivals = None) -> Bound:
    """The proven lower bound ``compare`` measures every row against (synth.bounds.allreduce_bound)."""
    size_b = size_bytes(size)
    topo = topology_for(topology, n)
    return allreduce_bound(topo, float(size_b), arrival_vector(arrivals, n))


def compare(n: int, size: Bytes, topology: Topology | str = "nvswitch",
            arrivals: Arrivals = None, algorithms: Sequence[str] | str | None = None,
            solver_time_limit: float | None = None) -> list[CompareRow]:
    """One row per algorithm (``algorithm``, ``completion_s``, ``after_last_arrival_s``, ``steps``,
    ``note``, ``speedup_vs_ring``, ``bound_s``, ``x_bound``), sorted fastest first after the last arrival;
    the bound is ``compare_bound`` (synth.bounds.allreduce_bound). ``topology`` is a
    Topology or a preset name / JSON path; ``arrivals`` a {rank: time} mapping or one time per rank;
    ``algorithms`` names or "ring,hierarchical" (default: those that fit the arrivals and topology)."""
    n = gpu_count(n)
    size_b = size_bytes(size)
    topo = topology_for(topology, n)
    times = arrival_vector(arrivals, n)
    arr = {r: float(t) for r, t in enumerate(times) if t != 0}
    regs = algorithm_table()
    late = sum(1 for t in times if t > times.min())
    nodes = node_grid(topo, n).shape[0]
    if nodes < 2 and unequal_case(n, "allreduce", times, topo) is not None:  # nodes of unequal size
        nodes = topo.node_count
    domain_late = nodes < 2 and domain.applies(n, times)
    if isinstance(algorithms, str):  # "ring,hierarchical", as the CLI's --algorithms reads it
        algorithms = [a.strip() for a in algorithms.split(",") if a.strip()]
    if algorithms is not None and not list(algorithms):
        raise CollsynthError("--algorithms names no algorithm: give one or more, e.g. ring,hierarchical, or leave it "
                             "out for the defaults")
    names = list(algorithms or default_algorithms(late, nodes, n, domain_late))
    drop_flat = not algorithms and domain_late  # then a clusterstraggler row only for the broadcast form
    if solver_time_limit is not None and "solver" not in names:
        names.append("solver")
    for a in names:
        if a not in regs:
            raise CollsynthError(f"unknown algorithm {a!r} in --algorithms: choose from {', '.join(regs)}")
    hide_ring = "ring" not in names
    if hide_ring:
        names = ["ring", *names]
    latest = latest_rank(times, n)
    bound = allreduce_bound(topo, float(size_b), times)
    jobs: list[tuple[str, dict[str, Any]]] = []
    for a in names:
        accepted = regs[a].params()
        params: dict[str, Any] = {}
        if "straggler" in accepted:
            params["straggler"] = latest
        if "pipeline" in accepted:  # pipeline depth from the model the straggler sees on this topology
            params.update(pipeline="auto", size=size_b)
            if "alpha" in accepted:  # filled in below, once the work is known to fit
                params.update(alpha=None, bandwidth=None)
        if "topology" in accepted:  # topology-aware algorithms (ring order, nodes, the model)
            params["topology"] = topo
        if "size" in accepted:
            params["size"] = size_b
        if "arrivals" in accepted:  # algorithms that plan for the arrival times (solver, multistraggler)
            params["arrivals"] = arr
        if a == "solver":
            params.update(time_limit=solver_time_limit)
        jobs.append((a, {k: v for k, v in params.items() if k in accepted}))
    # every row is built, verified and simulated in turn: the estimate of all of them, before the first
    check_works(jobs, n, "allreduce", f"compare of {len(jobs)} algorithms ({', '.join(names)}) on {n} ranks")
    if any("alpha" in p for _, p in jobs):
        al, bw = topology_model(topo, latest)
        for _, p in jobs:
            if "alpha" in p:
                p.update(alpha=al, bandwidth=bw)
    rows: list[CompareRow] = []
    for i, (a, params) in enumerate(jobs):
        progress.note(f"compare [{i + 1}/{len(names)}] {a}")
        note = f"straggler={latest}" if "straggler" in params else ""
        s = check(build_schedule(a, n, "allreduce", **params))
        if a == CLUSTER_LATE and drop_flat and s.meta.get("form") != "domain":  # another row's schedule
            continue
        if a == MULTI_LATE:
            note += f"straggler={s.meta.get('straggler')} late={len(s.meta.get('late', []))}"  # type: ignore[arg-type]
        if a == CLUSTER_LATE and s.meta.get("form") == "synchronous":  # waiting for everyone was faster
            note += f"synchronous ({s.meta.get('synchronous')}: waiting is faster)"
        elif a == CLUSTER_LATE and "form" in s.meta:
            note += cluster_late_text(s.meta, arr)
        elif a == CLUSTER_LATE and s.meta.get("algorithm") == MULTI_LATE:  # one NVLink domain: the flat form
            note += f"flat form (multistraggler), straggler={s.meta.get('straggler')}"
        if a == "solver" and isinstance(s.meta.get("solver"), dict):  # honest status: optimal or not, and the gap
            note += " " + status_line(s.meta["solver"], short=True)  # type: ignore[arg-type]
        if s.meta.get("pipeline", 1) != 1:
            note += f" K={s.meta['pipeline']}"
        if len(topo.classes) > 1 and class_port_violation(s, topo):  # the simulator queues the extra messages
            note += " exceeds the topology's ports per class (queued)"
        res = simulate(s, size_b, topo, arr)
        rows.append({"algorithm": a, "completion_s": res.completion_s,
                     "after_last_arrival_s": res.after_last_arrival_s, "steps": s.nsteps, "note": note.strip(),
                     "speedup_vs_ring": 0.0,  # set below, once ring's time is known
                     "bound_s": bound.value_s, "x_bound": res.after_last_arrival_s / bound.after_last_arrival_s})
    ring = next(r for r in rows if r["algorithm"] == "ring")["after_last_arrival_s"]
    for r in rows:
        r["speedup_vs_ring"] = ring / r["after_last_arrival_s"] if r["after_last_arrival_s"] > 0 else float("inf")
    if hide_ring:
        rows = [r for r in rows if r["algorithm"] != "ring"]
    rows.sort(key=lambda r: (r["after_last_arrival_s"], r["algorithm"]))
    return rows


def cluster_late_text(meta: Mapping[str, Any], arrivals: Mapping[int, float]) -> str:
    """clusterstraggler's note for a late form: the form and its late ranks (``late_ranks_text``), the punctual
    GPUs a late-node form treats as late (meta ``treated_as_late``) named apart, e.g. ``node form, late 8-14
    (20.000 ms), 15 treated as late``; the late-GPU form on large nodes as ``wide gpu form`` or ``node-broadcast
    gpu form``."""
    treated = [int(r) for r in meta.get("treated_as_late", [])]
    late = [r for r in (meta.get("late") or []) if int(r[0] if isinstance(r, (list, tuple)) else r) not in treated]
    # the late GPU's node gathering by Bruck's AllGather or broadcasting its rows (cluster.py)
    form = "wide gpu" if meta.get("wide") else "node-broadcast gpu" if meta.get("node_bcast") else meta["form"]
    text = f"{form} form, late {late_ranks_text(late, arrivals)}"
    return text + (f", {late_ranks_text(treated, {})} treated as late" if treated else "")


def late_ranks_text(late: object, arrivals: Mapping[int, float], most: int = 6) -> str:
    """A schedule's late ranks for a note, from meta's ``late`` (ranks, or [rank, time] pairs; the time from
    ``arrivals`` where the meta has none): consecutive ranks arriving together as one range, at most ``most``
    groups, e.g. ``5 (4.000 ms), 8-15 (10.000 ms)``."""
    pairs: list[tuple[int, float | None]] = []
    items: list[Any] = list(late) if isinstance(late, (list, tuple)) else [late]
    for item in items:
        rank = int(item[0] if isinstance(item, (list, tuple)) else item)
        t = item[1] if isinstance(item, (list, tuple)) else arrivals.get(rank)
        pairs.append((rank, None if t is None else float(t)))
    groups: list[list[Any]] = []
    for rank, t in sorted(pairs):
        if groups and groups[-1][1] == rank - 1 and groups[-1][2] == t:
            groups[-1][1] = rank
        else:
            groups.append([rank, rank, t])
    text = [(f"{a}" if a == b else f"{a}-{b}") + ("" if t is None else f" ({format_time(t)})") for a, b, t in groups]
    more = f", ... ({len(pairs)} late)" if len(text) > most else ""
    return ", ".join(text[:most]) + more
