"""The StragglAR paper's analytic study, reproduced from schedules on the simulator (not formulas).

For each n: build and verify ring, rhd, direct and stragglar (straggler n-1), simulate them on the
topology with the straggler late by a delay long enough to hide phase 1 (the "ideal" case) and with
no delay (the "worst" case), and search the simulator for the critical delay above which stragglar
finishes sooner after the straggler's arrival than ring. Defaults are the paper's large-n study
(docs/stragglar.md): s = 1 GiB, alpha = 3 us, 450 GiB/s per direction, an NVSwitch.

With ``pipeline`` (K or "auto", issue 9) each row also has the pipelined schedule (K(n-1) chunks, K
chosen from the alpha-beta model for "auto"): its rounds, times, speedups over ring, critical delay,
and its time after arrival over the one-straggler floor s/B + alpha.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from collsynth import budget, progress
from collsynth.budget import Work
from collsynth.fileio import save_figure
from collsynth.synth.algorithms.estimate import SEARCH_HINT, needs_search, work
from collsynth.synth.registry import algorithms, build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import check

BASELINES = ("ring", "rhd", "direct")
DEFAULT_NS = (4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)


def closed_form_speedup(n: int, size: float, alpha: float, bandwidth: float) -> float:
    """stragglar.md's ideal-case speedup over ring: 2(n-1)(a + s/(nB)) / ((n-2+log2 n)(a + s/((n-1)B)));
    ceil(log2 n) for n that is not a power of two (the lower-bound round count)."""
    k = (n - 1).bit_length()
    return 2 * (n - 1) * (alpha + size / (n * bandwidth)) / ((n - 2 + k) * (alpha + size / ((n - 1) * bandwidth)))


def after_delay(schedule: Any, size: float, topo: Any, delay: float) -> float:
    """Modelled time after the last arrival when rank n - 1 arrives ``delay`` seconds late (0: all on time)."""
    arrivals = {schedule.nranks - 1: delay} if delay > 0 else None
    return simulate(schedule, size, topo, arrivals).after_last_arrival_s


def stragglar_row(n: int, size: float = 2**30, alpha: float = 3e-6, bandwidth: float = 450 * 2**30,
                  topology: str = "nvswitch", rel_tol: float = 1e-6,
                  pipeline: int | str | None = None) -> dict[str, Any]:
    """One row of the study for n GPUs (see the module docstring)."""
    algorithms()
    topo = make_topology(topology, n, alpha=alpha, bandwidth=bandwidth)
    s = check(build_schedule("stragglar", n))
    comp = {ph.name: ph for ph in s.phases}["completion"]
    sent = [0] * n
    sent_all = [0] * n
    for t in s.transfers():
        sent_all[t.src] += t.count
        if comp.start <= t.step < comp.stop:
            sent[t.src] += t.count
    full = simulate(s, size, topo).completion_s
    ideal_delay = 2 * full  # phase 1 is long over by then
    row: dict[str, Any] = {"n": n, "phase2_rounds": s.meta["phase2_rounds"], "lower_bound": s.meta["lower_bound"],
                           "beta": max(sent) / s.nchunks, "beta_worst": max(sent_all) / s.nchunks}
    times: dict[str, dict[str, float]] = {"ideal": {}, "worst": {}}
    for name in (*BASELINES, "stragglar"):
        sched = s if name == "stragglar" else check(build_schedule(name, n))
        times["ideal"][name] = after_delay(sched, size, topo, ideal_delay)
        times["worst"][name] = after_delay(sched, size, topo, 0.0)
    for case in ("ideal", "worst"):
        for name, secs in times[case].items():
            row[f"{name}_{case}_s"] = secs
        row[f"speedup_{case}"] = times[case]["ring"] / times[case]["stragglar"]
    row["closed_form_speedup_ideal"] = closed_form_speedup(n, size, alpha, bandwidth)
    row["critical_delay_s"] = critical_delay(s, size, topo, times["ideal"]["ring"], ideal_delay, rel_tol)
    row["floor_s"] = size / bandwidth + alpha
    if pipeline is not None:
        row.update(_pipelined(n, size, alpha, bandwidth, topo, pipeline, times, ideal_delay, rel_tol))
    return row


def _pipelined(n: int, size: float, alpha: float, bandwidth: float, topo: Any, pipeline: int | str,
               times: dict[str, dict[str, float]], ideal_delay: float, rel_tol: float) -> dict[str, Any]:
    """The pipelined columns of a row (keys prefixed ``pipelined_``)."""
    s = check(build_schedule("stragglar", n, pipeline=pipeline, size=size, alpha=alpha, bandwidth=bandwidth))
    ideal = after_delay(s, size, topo, ideal_delay)
    worst = after_delay(s, size, topo, 0.0)
    return {"pipelined_k": s.meta["pipeline"], "pipelined_rounds": s.meta["phase2_rounds"],
            "pipelined_lower_bound": s.meta["lower_bound"],
            "stragglar_pipelined_ideal_s": ideal, "stragglar_pipelined_worst_s": worst,
            "speedup_pipelined_ideal": times["ideal"]["ring"] / ideal,
            "speedup_pipelined_worst": times["worst"]["ring"] / worst,
            "pipelined_over_floor": ideal / (size / bandwidth + alpha),
            "pipelined_critical_delay_s": critical_delay(s, size, topo, times["ideal"]["ring"], ideal_delay, rel_tol)}


def critical_delay(s: Any, size: float, topo: Any, ring_after: float, hi: float, rel_tol: float = 1e-6) -> float | None:
    """Smallest straggler delay at which stragglar's time after arrival is below ring's (bisection on
    the simulator; the time after arrival does not grow with the delay). None if it never is."""
    if after_delay(s, size, topo, 0.0) < ring_after:
        return 0.0
    if after_delay(s, size, topo, hi) >= ring_after:
        return None
    lo = 0.0
    while hi - lo > rel_tol * hi:
        mid = (lo + hi) / 2
        if after_delay(s, size, topo, mid) < ring_after:
            hi = mid
        else:
            lo = mid
    return hi


SIMULATIONS = 60  # about the simulations of one stragglar schedule per row (two critical-delay bisections)


def _row_work(n: int, pipeline: int | str | None, always: bool = False) -> list[Work]:
    """About the work of one row (synth.algorithms.estimate): the baselines, StragglAR (and its pipelined
    form) built once and simulated about SIMULATIONS times (a simulation is about a fifth of the work)."""
    jobs = [work(a, n, always=always) for a in (*BASELINES, "stragglar")]
    if pipeline is not None:
        jobs.append(work("stragglar", n, params={"pipeline": pipeline}, always=always))
    sims = [replace(w, search_s=0.0, copies=max(1, SIMULATIONS // 5)) for w in jobs[len(BASELINES):]]
    return jobs + sims


def check_reproduce(ns: Sequence[int], pipeline: int | str | None = None) -> None:
    """Refuse (budget.check_work) an n whose row exceeds the memory or time budget, before any row."""
    for n in sorted(set(ns)):
        budget.check_work(lambda x: _row_work(x, pipeline), n, f"reproduce stragglar on {n} ranks",
                          monotone=lambda x: _row_work(x, pipeline, True),
                          hint=SEARCH_HINT if needs_search(n) else "")


def reproduce(ns: Sequence[int] = DEFAULT_NS, **model: Any) -> list[dict[str, Any]]:
    """The study's rows for every n in ``ns`` (sorted)."""
    check_reproduce(ns, model.get("pipeline"))
    rows = []
    for i, n in enumerate(sorted(set(ns))):
        progress.note(f"reproduce stragglar [{i + 1}/{len(set(ns))}] n={n}")
        rows.append(stragglar_row(n, **model))
    return rows


def plot(rows: Sequence[dict[str, Any]], path: str) -> None:
    """Speedup over ring against n, ideal and worst case, written to ``path`` (PNG) atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for series, keep in (("n = 2^k", lambda n: n & (n - 1) == 0), ("n = 3 * 2^k", lambda n: n & (n - 1) != 0)):
        pts = [r for r in rows if keep(r["n"])]
        if not pts:
            continue
        xs = [r["n"] for r in pts]
        ax.plot(xs, [r["speedup_ideal"] for r in pts], "o-", label=f"ideal (phase 1 hidden), {series}")
        ax.plot(xs, [r["speedup_worst"] for r in pts], "s--", label=f"worst (no delay), {series}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs n")
    ax.set_ylabel("speedup over ring (time after straggler arrives)")
    ax.set_title("StragglAR vs ring, simulated")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=120)
    finally:
        plt.close(fig)
