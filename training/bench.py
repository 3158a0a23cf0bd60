"""``collsynth train-bench``: real training runs on gloo, measured next to ``train-sim``'s prediction.

Steps: check the request (nothing starts on bad input); run every ``METHOD:ALGORITHM`` in one set of
processes (``training.run.train_worker``), each right after a calibration in the same processes (the
ring pattern of ``collsynth calibrate``, ``backends.torch.bench``'s worker, on the job's message sizes), so that
the model sees the machine's load of that moment (this 2-core machine is shared); then simulate the
same settings with ``synth.training.simulate_training`` on an nvswitch model with that run's alpha and
bandwidth and the costs measured in the run that are not communication (optimizer step, ACCO buffer
swap, run-time detection). ``ddp:torch`` runs torch's own all_reduce, not a collsynth schedule, so it
is modelled as a ring whose alpha and bandwidth are fitted to timed ``dist.all_reduce`` calls of the
job's sizes instead. ``--alpha``/``--bandwidth`` skip every calibration. Two predictions per run:
``predicted`` takes the compute times each micro-batch really took as a trace (on a loaded machine
forward+backward can outgrow the injected time), ``predicted_nominal`` the nominal
--compute/--slow/--jitter draws. Throughput is measured as the simulator measures it: samples of steps
``warmup..steps-1`` over the time from the end of step ``warmup-1`` (latest rank) to the end of the
last step, on the machine-wide monotonic clock.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from collsynth.backends.torch.bench import fit_alpha_beta, format_alpha, format_rate
from collsynth.backends.torch.launch import check_backend, check_memory, launch
from collsynth.errors import CollsynthError
from collsynth.synth.registry import algorithms
from collsynth.synth.topology import make_topology
from collsynth.training.compute import ComputeModel
from collsynth.training.model import TrainingSetup, simulate_training
from collsynth.training.run import RUN_METHODS, TrainSpec, train_worker, vocab_for


def parse_runs(text: str) -> tuple[tuple[str, str], ...]:
    """``ddp:torch,acco:ring`` into ((method, algorithm), ...); CollsynthError names what to change."""

    regs = algorithms()
    out: list[tuple[str, str]] = []
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            continue
        method, sep, alg = item.partition(":")
        if not sep:
            raise CollsynthError(f"--runs {item!r}: write METHOD:ALGORITHM, e.g. ddp:ring or acco:ring")
        if method not in RUN_METHODS:
            raise CollsynthError(f"--runs {item!r}: unknown method {method!r}; real runs are {', '.join(RUN_METHODS)} "
                                 f"(train-sim also models ddp-bucketed and zero1)")
        if alg == "torch":
            if method != "ddp":
                raise CollsynthError(f"--runs {item!r}: the ACCO loop runs collsynth schedules; use acco:ring")
        elif alg not in regs or "allreduce" not in regs[alg].collectives:
            names = [a for a, i in regs.items() if "allreduce" in i.collectives]
            raise CollsynthError(f"--runs {item!r}: unknown algorithm {alg!r}; choose torch or one of "
                                 f"{', '.join(names)}")
        if (method, alg) not in out:
            out.append((method, alg))
    if not out:
        raise CollsynthError("--runs is empty: e.g. --runs ddp:torch,ddp:ring,ddp:stragglar,acco:ring")
    return tuple(out)


def prepare(nranks: int, runs: Sequence[tuple[str, str]], *, grad_bytes: int, compute_s: float | None,
            jitter: float = 0.0, slow: dict[int, float] | None = None, trace: Any = None,
            microbatches: int = 1, batch: int = 16, steps: int = 20, warmup: int = 2, seed: int = 0,
            lr: float = 1e-2, window_s: float = 0.25, fixed_groups: bool = False,
            timeout_s: float = 120.0) -> TrainSpec:
    """A validated TrainSpec (CollsynthError on bad input)."""

    check_backend("gloo", nranks)
    for name, v in (("--microbatches", microbatches), ("--batch", batch), ("--steps", steps)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise CollsynthError(f"{name} must be an integer >= 1, got {v!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or not 0 <= warmup < steps:
        raise CollsynthError(f"--warmup must be an integer in 0..{steps - 1} (below --steps), got {warmup!r}")
    if not (isinstance(grad_bytes, int) and grad_bytes >= 1024):
        raise CollsynthError(f"--grad-bytes must be at least 1KiB, got {grad_bytes!r}")
    if not (math.isfinite(lr) and lr > 0):
        raise CollsynthError(f"--lr must be a positive number, got {lr!r}")
    spec = TrainSpec(nranks=nranks, runs=tuple(runs), steps=steps, warmup=warmup, microbatches=microbatches,
                     batch=batch, vocab=vocab_for(grad_bytes), compute_s=compute_s, jitter=float(jitter),
                     slow=tuple(sorted((slow or {}).items())), seed=seed, lr=float(lr), window_s=float(window_s),
                     timeout_s=float(timeout_s), fixed_groups=bool(fixed_groups), trace=trace)
    full = 4 * spec.params
    chunk = max(4096, full // nranks)  # a ring step's message
    spec = replace(spec, calib_sizes=tuple(sorted({4096, max(4096, chunk // 4), chunk, 2 * chunk, 4 * chunk})),
                   calib_reps=7,
                   torch_sizes=(max(4096, full // 4), max(8192, full), max(16384, 4 * full)))
    spec.compute_model()  # validates compute, jitter, slow ranks and trace shape
    return spec

# ---------------------------------------------------------------------------------------------- measure
def _median(xs: Sequence[float], default: float = 0.0) -> float:
    return float(statistics.median(xs)) if xs else default


def measure(spec: TrainSpec, results: dict[int, Any], label: str) -> dict[str, Any]:
    """Throughput and the non-communication costs of one run, from every rank's stamps."""
    n, w, S = spec.nranks, spec.warmup, spec.steps
    method = label.split(":", 1)[0]
    per = [results[r][label] for r in range(n)]
    if method == "ddp":
        ends = [max(p["steps"][k]["end"] for p in per) for k in range(S)]
        start = min(p["steps"][0]["start"] for p in per)
        samples = [n * spec.microbatches * spec.batch] * S
        opt = _median([s["opt_s"] for p in per for s in p["steps"]])
        out: dict[str, Any] = {"optimizer_s": opt, "buckets": max(s["buckets"] for p in per for s in p["steps"])}
        if per[0]["agree_s"]:
            last = [max(range(n), key=lambda r: per[r]["steps"][k]["arrive"]) for k in range(S)]
            out["agree_s"] = _median([per[last[k]]["agree_s"][k] for k in range(S)])
            out["chosen"] = sorted(set(per[0]["chosen"]))
    else:
        rounds = [p["rounds"] for p in per]
        ends = [max(rr[2 * k + 1]["done"] for rr in rounds) for k in range(S)]
        start = min(rr[0]["launch"] for rr in rounds)
        samples = [rounds[0][2 * k + 1]["count"] * spec.batch for k in range(S)]
        out = {"optimizer_s": n * _median([x["opt_s"] for rr in rounds for x in rr]),
               "swap_s": _median([x for p in per for x in p["swap_s"]])}
        agree = [x["agree_s"] for rr in rounds for x in rr if "agree_s" in x]
        if agree:
            out["agree_s"] = _median(agree)
    t0 = ends[w - 1] if w > 0 else start
    steady = samples[w:]
    length = min(len(p["compute_s"]) for p in per)
    out.update({
        "throughput_samples_s": sum(steady) / (ends[-1] - t0),
        "samples_per_step": sum(steady) / len(steady),
        "loss": per[0]["loss"],
        "compute_mean_s": [float(sum(p["compute_s"]) / max(1, len(p["compute_s"]))) for p in per],
        "compute_overrun_s": max(p["over_s"] for p in per),
        "compute_trace_s": [[p["compute_s"][k] for p in per] for k in range(length)],
    })
    return out


def fit_run(spec: TrainSpec, results: dict[int, Any], label: str) -> tuple[float, float] | None:
    """(alpha, bandwidth) from the calibration made right before run ``label``: for a collsynth run,
    ``collsynth calibrate``'s fit (slowest rank per repetition, median over repetitions, least squares
    on relative error); for torch's all_reduce, T(M) = 2(n-1)(alpha + M/(n B)) fitted the same way.
    None when the run was not calibrated; latency only (bandwidth 1e15 B/s) when noise hid the size term."""

    n = spec.nranks
    per = [results[r][label] for r in range(n)]
    if "torch_allreduce_s" in per[0]:
        key, sizes = "torch_allreduce_s", list(spec.torch_sizes)
    elif "calibrate_s" in per[0]:
        key, sizes = "calibrate_s", list(spec.calib_sizes)
    else:
        return None
    med = [_median([max(p[key][str(s)][i] for p in per) for i in range(spec.calib_reps)]) for s in sizes]
    if key == "torch_allreduce_s":  # per message of a 2(n-1)-step ring: size M/n, time T/(2(n-1))
        sizes, med = [s // n for s in sizes], [t / (2 * (n - 1)) for t in med]
    try:
        return fit_alpha_beta(sizes, med)
    except CollsynthError:  # noise hid the bandwidth term: latency only
        return float(sum(med) / len(med)), 1e15


def predict(spec: TrainSpec, label: str, measured: dict[str, Any], alpha: float, bandwidth: float,
            *, trace: bool = True) -> dict[str, Any]:
    """train-sim for the same settings with this run's measured costs (optimizer step, ACCO swap, run-time
    detection). Compute: the per-micro-batch times the run measured (``trace=True``, a trace file in
    train-sim's terms; what happened, including CPU contention) or the nominal --compute/--slow/--jitter
    draws the run was padded to (``trace=False``)."""
    import numpy as np

    method, alg = label.split(":", 1)
    n = spec.nranks
    model_alg = "ring" if alg == "torch" else alg
    if method == "ddp":
        grad = 4.0 * spec.params
    else:
        nch = n  # ring ReduceScatter chunks; one count slot per chunk
        grad = 4.0 * nch * (-(-spec.params // nch) + 1)
    rows = measured.get("compute_trace_s") if trace else None
    compute = ComputeModel(n, trace=np.asarray(rows)) if rows else spec.compute_model()
    setup = TrainingSetup(
        compute=compute, topology=make_topology("nvswitch", n, alpha=alpha, bandwidth=bandwidth),
        grad_bytes=grad, microbatches=spec.microbatches, batch=spec.batch, optimizer_s=measured["optimizer_s"],
        swap_s=measured.get("swap_s", 0.0), count_allreduce=False, steps=spec.steps, warmup=spec.warmup,
        record=0, window_s=spec.window_s, agree_s=measured.get("agree_s", 0.0))
    r = simulate_training(setup, [method], [model_alg])[0]
    return {"throughput_samples_s": r.throughput, "samples_per_step": r.samples_per_step,
            "model": f"{method}+{model_alg}"}

# ---------------------------------------------------------------------------------------------- run
def run_train_bench(spec: TrainSpec, *, alpha: float | None = None, bandwidth: float | None = None,
                    progress: bool = True) -> dict[str, Any]:
    """Run (each run calibrated first unless alpha and bandwidth are given), measure and predict;
    JSON-ready."""

    # parameters, gradients, optimizer state, ACCO's extra gradient copies and the collective's buffers: about
    # 10 copies of the fp32 parameters, and the calibration's largest message 5 times
    need = 10.0 * 4 * spec.params + 5.0 * max((*spec.calib_sizes, *spec.torch_sizes), default=0)
    check_memory(spec.nranks, need, f"train-bench of {4 * spec.params} gradient bytes",
                 "use a smaller --grad-bytes or fewer --ranks")
    fixed = alpha is not None and bandwidth is not None
    if fixed:
        spec = replace(spec, calib_sizes=(), torch_sizes=())
    mean = max(spec.compute_model().mean_s())
    budget = 120.0 + len(spec.runs) * (spec.steps * (4 * spec.microbatches * mean + 5.0) + 60.0)

    def done(rank: int, payload: Any) -> None:
        if progress and rank == 0:
            sys.stderr.write(f"train-bench: rank 0 finished {len(payload)} runs\n")

    if progress:
        sys.stderr.write(f"train-bench: {', '.join(f'{m}:{a}' for m, a in spec.runs)} on {spec.nranks} ranks, "
                         f"{spec.steps} steps each" + ("" if fixed else ", each calibrated first") + "\n")
    t = time.perf_counter()
    results = launch(train_worker, spec.nranks, (spec,), backend="gloo", timeout=budget,
                     pg_timeout=max(300.0, spec.timeout_s * 2), on_result=done)
    wall = time.perf_counter() - t
    rows = []
    for method, alg in spec.runs:
        label = f"{method}:{alg}"
        meas = measure(spec, results, label)
        fit = (alpha, bandwidth) if alpha is not None and bandwidth is not None else fit_run(spec, results, label)
        if fit is None:
            raise CollsynthError(f"could not calibrate run {label} (no bandwidth cost visible): pass --alpha and "
                                 f"--bandwidth, or use a larger --grad-bytes")
        a, b = fit
        pred = predict(spec, label, meas, a, b)
        nominal = predict(spec, label, meas, a, b, trace=False)
        rows.append({"run": label, "alpha_s": a, "bandwidth_Bps": b, "alpha": format_alpha(a),
                     "bandwidth": format_rate(b), "calibrated": not fixed, "measured": meas, "predicted": pred,
                     "error": pred["throughput_samples_s"] / meas["throughput_samples_s"] - 1.0,
                     "predicted_nominal": nominal,
                     "error_nominal": nominal["throughput_samples_s"] / meas["throughput_samples_s"] - 1.0})
    return {
        "backend": "gloo", "ranks": spec.nranks, "params": spec.params, "grad_bytes": 4 * spec.params,
        "compute": spec.compute_model().describe(), "microbatches": spec.microbatches, "batch": spec.batch,
        "steps": spec.steps, "warmup": spec.warmup, "calibrated": not fixed,
        "calibration_sizes": list(spec.calib_sizes), "torch_allreduce_sizes": list(spec.torch_sizes),
        "wall_s": wall, "runs": rows, "gains": gains(rows),
    }


def gains(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Throughput ratios (measured and predicted) of each later run over each earlier DDP run."""
    out = []
    for i, a in enumerate(rows):
        for b in rows[:i]:
            if not b["run"].startswith("ddp:"):
                continue
            g = {"run": a["run"], "over": b["run"]}
            for key in ("measured", "predicted", "predicted_nominal"):
                if key in a and key in b:
                    g[key] = a[key]["throughput_samples_s"] / b[key]["throughput_samples_s"]
            out.append(g)
    return out

__all__ = ["fit_run", "gains", "measure", "parse_runs", "predict", "prepare", "run_train_bench"]
