"""clusterstraggler's entry point (issue 15): the fastest of its forms for the given arrivals.

cluster.py builds the late-GPU or the late-node form (waves.py several late ranks, with its own choices where
waves.searched, one funnel form beyond). Their AllReduce before the arrival (prephase.py) is
hidden only behind a delay long enough; for a shorter one, or close arrivals of several ranks, waiting for
everybody and running the fastest synchronous schedule (synth/algorithms/synchronous.py: ``hierarchical`` on
h100-cluster) can finish first. So with a late rank and ``pipeline="auto"`` both are simulated
(synth/simulate.py, the arrivals given) and the faster is returned; the synchronous one as form
"synchronous" (as waves.py does), its meta naming it and the late ranks. One late GPU
also weighs the funnel form (``one_late_calls``: before the arrival only a reduction toward its node, which a
medium delay hides where the others' AllReduce does not; beyond waves.searched the one funnel
that reduces by trees). In one NVLink domain (cluster.build makes multistraggler's flat form there) with a
late rank, the same weighing against the fastest synchronous schedule (``one_domain_late``), with the last
GPU arriving alone also against domain.py's broadcast form, kept where it is faster by more than domain.TIE after the
arrival (gb200-nvl72, 50 ms late, 64 MiB: 0.173 ms after the arrival, where radix takes 0.195 and
multistraggler 0.343). Without a late rank, or with an explicit ``pipeline``, the constructed form is
returned as is (the run-time families, synth/algorithms/stragglar/family.py, need the late forms themselves).

Several late ranks (after waves.py's search, or its one funnel beyond waves.searched, where the
synchronous schedule is weighed here): when the others are all in at least
GPU_FORM_GAP_T times T = s/(G B_net) (funnel.rail_time) before the last rank L, the late-GPU form for L alone
(cluster.merged_plan: every other rank in the AllReduce before L's arrival, at its own arrival time) is also
simulated and returned when it completes first: its AllReduce (about 7 ms, 2.6 T, at 8 x 8 and 1 GiB) then
ends before L arrives, and after L it is the late-GPU form (3.479 ms at 8 x 8, against 3.505 ms for the
funnel at best; docs/stragglar.md section 11). When the late ranks are all in one node but not all of it,
the late-node form for that node (``whole_node``, its punctual GPUs treated as late) is simulated too
(beyond waves.searched only where the late-GPU form is not, and that one without fit_delay's smaller
block counts: one build each, so that 1,024 GPUs build in under 30 s).

Nodes of unequal size with late GPUs among the first G_min of their nodes (``unequal_nodes``): the choice above
for the N x G_min core alone, the other GPUs added around its late form (uneven.around), weighed against the
fastest synchronous schedule.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from collsynth.apitypes import Arrivals
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms import synchronous, uneven
from collsynth.synth.algorithms.layout import node_grid
from collsynth.synth.algorithms.stragglar import cluster, cluster_cost, domain, funnel, waves
from collsynth.synth.arrivals import arrival_vector, latest_rank, sooner
from collsynth.synth.ir import Schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology
from collsynth.synth.topology.restrict import restricted
from collsynth.units import parse_size
from collsynth.workers import imap_ordered, map_ordered


def build(n: int, collective: str = "allreduce", arrivals: Arrivals = None, size: int | float | str | None = None,
          topology: Any = None, pipeline: int | str = "auto") -> Schedule:
    """The late-GPU / late-node form of cluster.build, or the fastest synchronous schedule when that
    completes first for these arrivals (module docstring). The other candidates do not depend on that
    form: with worker processes (collsynth.workers) they are built while it is, and weighed after it in
    the same order as without."""
    on_core = unequal_nodes(n, collective, arrivals, size, topology, pipeline)
    if on_core is not None:
        return on_core
    late_calls = one_late_calls(n, collective, arrivals, size, topology, pipeline)
    more_calls = several_late_calls(n, collective, arrivals, size, topology, pipeline)
    # beyond waves.searched the one funnel waits for the late-GPU form: built only where that one spilled
    defer = bool(late_calls) and not waves.searched_on(topology, n)
    late_pending = imap_ordered(waves.candidate_run, late_calls[-1:] if defer else late_calls)
    more_pending = imap_ordered(alternative_run, more_calls)
    s = cluster.build(n, collective, arrivals, size, topology, pipeline)
    if pipeline == "auto" and s.meta.get("form") in ("waves", "funnel", "synchronous"):
        times, s_bytes = arrival_vector(arrivals, n), _bytes(size)
        best_s = simulate(s, s_bytes, topology, times).completion_s
        alts: Iterable[tuple[float, Schedule] | None] = more_pending
        if not more_calls:  # without waves.searched one alternative at most, the late-GPU form first:
            # after the last arrival it is the faster where both apply, and 1,024 GPUs build in under 30 s
            alone = alternative_run(("alone", (n, times, s_bytes, topology)))
            alts = [alone, alternative_run(("node", (n, times, s_bytes, topology))) if alone is None else None]
        last = float(times.max())
        best, best_s = waves.keep_fastest(s, best_s, (a for a in alts if a is not None), last)
        if not waves.searched_on(topology, n):  # one funnel, the synchronous one not weighed
            sync = synchronous.fastest(n, topology, s_bytes, times)
            if sooner(sync.completion_s, best_s, last):
                return sync.as_form("clusterstraggler", times)
        return best
    if pipeline == "auto" and one_domain_late(n, collective, arrivals, topology):  # multistraggler's flat form
        times, s_bytes = arrival_vector(arrivals, n), _bytes(size)
        topo = topology if topology is not None else make_topology("nvswitch", n)  # the flat form's own model
        best, best_s = s, simulate(s, s_bytes, topo, times).completion_s
        bcast = domain.build(n, times, s_bytes, topo)  # the last GPU alone: the broadcast form (else None)
        if bcast is not None:
            t_bcast = simulate(bcast, s_bytes, topo, times).completion_s
            if sooner(t_bcast, best_s, float(times.max()), domain.TIE):
                best, best_s = bcast, t_bcast
        sync = synchronous.fastest(n, topo, s_bytes, times)
        if sooner(sync.completion_s, best_s, float(times.max())):
            return sync.as_form("clusterstraggler", times)
        return best
    if not late_calls or s.meta.get("form") not in ("gpu", "node"):  # chosen by waves.py, or no late rank
        return s
    s_bytes = _bytes(size)
    res = simulate(s, s_bytes, topology, arrival_vector(arrivals, n))
    ours, funnels = res.completion_s, late_calls[:-1]
    if defer:  # reduce only, where the late-GPU form spilled (one_late_calls): its AllReduce before the arrival
        # ended after it (meta pre_end_s, the list-scheduling model) and it ends over its estimate
        est, pre_end = s.meta.get("after_arrival_estimate_s"), s.meta.get("pre_end_s")
        spilt = not isinstance(est, float) or (cluster.spilled(res.after_last_arrival_s, est)
                                               and not (isinstance(pre_end, float) and pre_end <= res.last_arrival_s))
        reduce_only = iter(map_ordered(waves.candidate_run, funnels) if spilt else [])
    else:
        reduce_only = (next(late_pending) for _ in funnels)
    s, ours = waves.keep_fastest(s, ours, (r[0] for r in reduce_only), res.last_arrival_s)
    (t_sync, waited), = next(late_pending)
    return waited if sooner(t_sync, ours, res.last_arrival_s) else s


def one_domain_late(n: int, collective: str, arrivals: Arrivals, topology: Any) -> bool:
    """Whether cluster.build makes multistraggler's flat form (a topology of ``n`` GPUs without nodes of two
    or more GPUs: one NVLink domain such as dgx-h100 or gb200-nvl72, or nodes of one GPU; None: nvswitch) for
    an AllReduce with someone late. ``build`` then weighs it against the fastest synchronous schedule: on
    gb200-nvl72 at 64 MiB, one GPU 5 ms late, multistraggler (StragglAR's n - 2 + log2 n rounds after the
    arrival) takes 0.343 ms after it, and radix 0.195 ms (bench/bench_one_domain.py)."""
    if collective != "allreduce" or (topology is not None and getattr(topology, "nranks", None) != n):
        return False
    try:
        grid, times = node_grid(topology, n), arrival_vector(arrivals, n)
    except CollsynthError:
        return False
    return (grid.shape[0] < 2 or grid.shape[1] < 2) and bool(np.any(times > times.min()))


def _late_case(n: int, collective: str, arrivals: Arrivals, size: int | float | str | None, topology: Any,
               pipeline: int | str) -> tuple[str, bool, np.ndarray, float] | None:
    """(cluster.late_form's form, whether several ranks are late, arrival times, bytes) where cluster.build
    makes a late form that ``build`` weighs against other candidates (pipeline "auto", nodes of two or more
    GPUs, someone late), else None (also for input that cluster.build refuses: it says why)."""
    if pipeline != "auto" or collective != "allreduce" or getattr(topology, "nranks", None) != n:
        return None
    try:
        grid, times, s_bytes = node_grid(topology, n), arrival_vector(arrivals, n), _bytes(size)
    except CollsynthError:
        return None
    N, G = grid.shape
    late = int(np.count_nonzero(times > times.min()))
    if N < 2 or G < 2 or not late:
        return None
    form, _ = cluster.late_form(grid, times)
    return form, form == "gpu" and late >= 2, times, s_bytes


def one_late_calls(n: int, collective: str, arrivals: Arrivals, size: int | float | str | None, topology: Any,
                   pipeline: int | str) -> list[tuple[str, tuple[Any, ...]]]:
    """The candidates ``build`` weighs against the late-GPU form or the late-node form, as calls of
    waves.candidate_run, in the order it folds them (ties keep the earlier); [] where cluster.build makes
    neither. One late GPU: first the funnel form of each of waves.funnel_choices (*reduce only*: before the
    arrival only a reduction toward the late GPU's node instead of an AllReduce of the others, issue 15
    point 1's "only a ReduceScatter", where that wins in total; beyond waves.searched the one
    funnel that reduces by trees). h100-cluster 8 x 8, 1 GiB, one GPU 4 ms late: the synchronous schedule
    5.548 ms after the arrival, the funnel 3.477 ms; 10 ms late: the late-GPU form stays (3.479 ms;
    bench/bench_late_gpu_delay.py). 64 x 8, 5 ms late: synchronous 6.590 ms, the funnel with trees 4.109
    ms. Then, for either form, the fastest synchronous schedule. Beyond waves.searched ``build`` makes that
    funnel only where the late-GPU form spilled (cluster.spilled: its AllReduce before the arrival did not
    fit the delay); where it fits, the funnel's time after the arrival is about the late-GPU form's (at 4 to
    32 nodes, 10 ms late, within 0.1% or slower), and at 128 x 8, 50 ms late, it took 4.4 s of the 12.6 s
    build for 4.235 ms against the late-GPU form's 3.869."""
    case = _late_case(n, collective, arrivals, size, topology, pipeline)
    if case is None or case[1]:  # several late ranks: waves.build's search
        return []
    form, _, times, s_bytes = case
    funnels = waves.funnel_calls(n, arrivals, s_bytes, topology, times) if form == "gpu" else []
    return [*funnels, ("sync", (n, topology, s_bytes, times))]


def several_late_calls(n: int, collective: str, arrivals: Arrivals, size: int | float | str | None, topology: Any,
                       pipeline: int | str) -> list[tuple[str, tuple[Any, ...]]]:
    """Several late ranks where waves.build searches (``waves.searched``): ``last_alone`` and ``whole_node`` as
    calls of ``alternative_run``, which ``build`` weighs after waves.build's choice; [] otherwise."""
    case = _late_case(n, collective, arrivals, size, topology, pipeline)
    if case is None or not case[1] or not waves.searched_on(topology, n):
        return []
    _, _, times, s_bytes = case
    return [(kind, (n, times, s_bytes, topology)) for kind in ("alone", "node")]


def alternative_run(call: tuple[str, tuple[Any, ...]]) -> tuple[float, Schedule] | None:
    """("alone" or "node", (n, times, bytes, topology)): ``last_alone``'s or ``whole_node``'s schedule with
    its completion in the simulator, or None where it does not apply (run here or in a worker process)."""
    kind, (n, times, s_bytes, topology) = call
    alt = (last_alone if kind == "alone" else whole_node)(n, times, s_bytes, topology)
    return None if alt is None else (simulate(alt, s_bytes, topology, times).completion_s, alt)


GPU_FORM_GAP_T = 2.5  # several late ranks: the late-GPU form for the last one weighed from this gap (in T) on


def _bytes(size: int | float | str | None) -> float:
    return cluster.DEFAULT_SIZE if size is None else float(parse_size(size) if isinstance(size, str) else size)


def last_alone(n: int, times: np.ndarray, size: int | float | str | None, topology: Any) -> Schedule | None:
    """Several late ranks (arrival ``times`` per rank): when every other rank is in at least GPU_FORM_GAP_T T
    before the last rank L (module docstring), the late-GPU form for L with the others in the AllReduce
    before it (its block count by cluster_cost.best_pipeline, fewer where that AllReduce spills past L's arrival:
    cluster.fit_delay); else None. ``build`` returns it where it completes first in the simulator."""
    grid = node_grid(topology, n)
    N, G = grid.shape
    if N < 2 or G < 2:
        return None
    L = latest_rank(times, n)
    others = np.delete(times, L)
    s_bytes = _bytes(size)
    T = funnel.rail_time(topology, n, s_bytes)
    if not others.size or float(times[L]) - float(others.max()) < GPU_FORM_GAP_T * T:
        return None
    plan, est = cluster.late_gpu_plan(topology, n, times, s_bytes, L, search=waves.searched(n, G))
    if waves.searched(n, G):  # (else one build, for the time of synthesis)
        plan = cluster.fit_delay(plan, topology, n, times, s_bytes, [L], est)
    t0 = float(times.min())
    present = sorted(np.flatnonzero(times > t0).tolist(), key=lambda r: (float(times[r]), r))
    return cluster.plan_schedule(plan, "gpu", [L], topology, s_bytes,
                                 {"present_late": [[int(r), float(times[r])] for r in present if r != L]})


def whole_node(n: int, times: np.ndarray, size: int | float | str | None, topology: Any) -> Schedule | None:
    """Several late ranks (arrival ``times`` per rank), all in one node b but not all of it: the late-node
    form for b (cluster.py), its punctual GPUs treated as late (they arrive, for the plan, with b's first
    late rank: ``promoted``), the other nodes in the AllReduce before it; else None. ``build`` returns it
    where it completes first in the simulator: with most of a node late the waves merge the late GPUs one
    wave at a time through the few punctual ones, while the node form spreads over all G NICs (h100-cluster
    16 x 8, 1 GiB, 5 of node 1's GPUs 20 ms late: waves 5.916 ms after the last arrival, this form 4.257)."""
    grid = node_grid(topology, n)
    N, G = grid.shape
    if N < 2 or G < 2:
        return None
    t0 = float(times.min())
    late = np.flatnonzero(times > t0)
    if late.size < 2:
        return None
    members = sorted(int(r) for r in grid[int(np.argwhere(grid == late[0])[0, 0])])  # the first late rank's node
    if not set(late.tolist()) < set(members):
        return None
    treated = [r for r in members if times[r] <= t0]
    promoted = np.array(times, np.float64)
    promoted[treated] = float(times[late].min())
    s_bytes = _bytes(size)
    model = cluster_cost.link_model(topology, grid)
    M, runs, rows = cluster_cost.best_pipeline("node", N, G, s_bytes, model)
    plan = cluster.merged_plan(topology, n, promoted, s_bytes, M, runs, rows, members)
    return cluster.plan_schedule(plan, "node", members, topology, s_bytes, {"treated_as_late": treated})


UNEQUAL_MAX_GPUS = 256  # nodes of unequal size: the core's late-GPU form up to this many GPUs (verified flat)


def unequal_case(n: int, collective: str, arrivals: Arrivals, topology: Any
                 ) -> tuple[np.ndarray, list[tuple[int, int, int]], np.ndarray, list[int]] | None:
    """(core grid, extras, arrival times, the late ranks) where ``unequal_nodes`` applies, else None (also for
    arrivals that cluster.build refuses: it says why)."""
    if collective != "allreduce" or getattr(topology, "routing", None) != "shortest" \
            or getattr(topology, "nranks", None) != n or n > UNEQUAL_MAX_GPUS:
        return None
    split = uneven.core_and_extras(topology, n)
    if split is None:
        return None
    try:
        times = arrival_vector(arrivals, n)
    except CollsynthError:
        return None
    core, extras = split
    late = [int(r) for r in np.flatnonzero(times > times.min())]
    if not late or not set(late) <= set(core.ravel().tolist()):
        return None  # someone late among the extras (they arrive with the first, folded in before it)
    punctual = times == times.min()
    if any(not punctual[core[b]].any() for b in {b for _, b, _ in extras}):
        return None  # a node with extras needs a punctual core GPU to fold them into
    return core, extras, times, late


def unequal_nodes(n: int, collective: str, arrivals: Arrivals, size: int | float | str | None, topology: Any,
                  pipeline: int | str) -> Schedule | None:
    """Late GPUs on nodes of unequal size (a topology file's, up to UNEQUAL_MAX_GPUS GPUs, every late GPU among the
    first G_min of its node, every node with more keeping a punctual one): ``build``'s choice for the N x G_min
    core alone (synth.topology.restrict), and where that is a late form (gpu, node, waves, funnel), the other GPUs
    added around it (uneven.around: their buffers folded into their node's punctual core GPUs before those send
    the chunks on, the final chunks copied to them as they are ready; the fastest of uneven.AROUND_CHOICES),
    returned where it completes before the fastest synchronous schedule on every GPU (else that one; with an
    explicit ``pipeline`` as it is, as cluster.build returns its forms). None where this does not apply:
    ``build`` then goes on as before (one row of all GPUs: multistraggler's flat form or waiting). Nodes of 8, 8,
    8 and 7 GPUs as a topology JSON (h100-cluster's links), 1 GiB, rank 5 late by 50 ms: 4.189 ms after the
    arrival against 5.438 for ``hierarchical``; the core's 4 x 7 alone takes 3.750."""
    case = unequal_case(n, collective, arrivals, topology)
    if case is None:
        return None
    core, extras, times, late = case
    real = np.sort(core.ravel())
    base = build(len(real), collective, times[real], size, restricted(topology, real.tolist()), pipeline)
    form = base.meta.get("form")
    if form not in ("gpu", "node", "waves", "funnel"):  # waiting on the core: no faster than waiting on every GPU
        return None
    keep = ("algorithm", "form", "nodes", "pipeline", "units_per_block", "messages_per_part", "nvlink_rows", "wide",
            "node_bcast")
    meta: dict[str, object] = {**{k: base.meta[k] for k in keep if k in base.meta}, "late": late,
                               "core_gpus_per_node": int(core.shape[1]), "extras": len(extras),
                               "topology_name": topology.name}
    if getattr(topology, "spec", None) is not None:
        meta["topology"] = topology.spec
    node = int(topology.node_of[late[0]])
    name = f"clusterstraggler_{form}_n{n}_" + (f"node{node}" if form == "node" else f"l{latest_rank(times, n)}")
    s_bytes = _bytes(size)
    s, ours = None, 0.0
    several = max(i for _, _, i in extras) >= 1  # a node with two or more extras: chains through them too
    punctual = times == times.min()
    for pieces, lag, direct in uneven.AROUND_CHOICES:  # the first of the fastest
        if direct and not several:
            continue
        got = uneven.around(base, n, core, extras, punctual, meta, name, pieces, lag, direct)
        t = simulate(got, s_bytes, topology, times).completion_s
        if s is None or t < ours:
            s, ours = got, t
    assert s is not None
    if pipeline != "auto":  # the form itself, as cluster.build returns it
        return s
    sync = synchronous.fastest(n, topology, s_bytes, times)
    return sync.as_form("clusterstraggler", times) if sooner(sync.completion_s, ours, float(times.max())) else s
