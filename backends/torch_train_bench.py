"""``collsynth train-bench``: real training runs on gloo, measured next to ``train-sim``'s prediction.

Steps: check the request (nothing starts on bad input); calibrate alpha and bandwidth of a process
group of the same size (``torch_bench.run_calibrate``, ring pattern) unless both are given; run every
``METHOD:ALGORITHM`` in one set of processes (``torch_train.train_worker``); then simulate the same
settings with ``synth.training.simulate_training`` on an nvswitch model with the calibrated alpha and
bandwidth and the costs measured in the run that are not communication (optimizer step, ACCO buffer
swap, run-time detection). Throughput is measured as the simulator measures it: samples of steps
``warmup..steps-1`` over the time from the end of step ``warmup-1`` (latest rank) to the end of the
last step, on the machine-wide monotonic clock.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from typing import Any, Sequence

from ..errors import CollsynthError
from .torch_train import RUN_METHODS, TrainSpec, train_worker, vocab_for


def parse_runs(text: str) -> tuple[tuple[str, str], ...]:
    """``ddp:torch,acco:ring`` into ((method, algorithm), ...); CollsynthError names what to change."""
    from ..synth.algorithms import algorithms

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
            raise CollsynthError(f"--runs {item!r}: unknown algorithm {alg!r}; choose torch or one of {', '.join(names)}")
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
    from .torch_launch import check_backend

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
    spec.compute_model()  # validates compute, jitter, slow ranks and trace shape
    return spec


def calibration_sizes(spec: TrainSpec) -> list[int]:
    """Message sizes from 4 KiB up to past the largest ring chunk of this job."""
    top = max(4 << 20, 2 * spec.params * 4 // spec.nranks)
    sizes, s = [], 4096
    while s <= top:
        sizes.append(s)
        s *= 4
    return sizes


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
    out.update({
        "throughput_samples_s": sum(steady) / (ends[-1] - t0),
        "samples_per_step": sum(steady) / len(steady),
        "loss": per[0]["loss"],
        "compute_overrun_s": max(p["over_s"] for p in per),
    })
    return out


def predict(spec: TrainSpec, label: str, measured: dict[str, Any], alpha: float, bandwidth: float) -> dict[str, Any]:
    """train-sim for the same settings (same compute draws) with this run's measured costs."""
    from ..synth.topology import make_topology
    from ..synth.training import TrainingSetup, simulate_training

    method, alg = label.split(":", 1)
    n = spec.nranks
    model_alg = "ring" if alg == "torch" else alg
    if method == "ddp":
        grad = 4.0 * spec.params
    else:
        nch = n  # ring ReduceScatter chunks; one count slot per chunk
        grad = 4.0 * nch * (-(-spec.params // nch) + 1)
    setup = TrainingSetup(
        compute=spec.compute_model(), topology=make_topology("nvswitch", n, alpha=alpha, bandwidth=bandwidth),
        grad_bytes=grad, microbatches=spec.microbatches, batch=spec.batch, optimizer_s=measured["optimizer_s"],
        swap_s=measured.get("swap_s", 0.0), count_allreduce=False, steps=spec.steps, warmup=spec.warmup,
        record=0, window_s=spec.window_s, agree_s=measured.get("agree_s", 0.0))
    r = simulate_training(setup, [method], [model_alg])[0]
    return {"throughput_samples_s": r.throughput, "samples_per_step": r.samples_per_step,
            "model": f"{method}+{model_alg}"}


# ---------------------------------------------------------------------------------------------- run
def run_train_bench(spec: TrainSpec, *, alpha: float | None = None, bandwidth: float | None = None,
                    progress: bool = True) -> dict[str, Any]:
    """Calibrate (unless alpha and bandwidth are given), run, measure and predict; JSON-ready."""
    from .torch_bench import format_alpha, format_rate, run_calibrate
    from .torch_launch import launch

    calib: dict[str, Any] | None = None
    if alpha is None or bandwidth is None:
        if progress:
            sys.stderr.write(f"train-bench: calibrating gloo with {spec.nranks} ranks\n")
        calib = run_calibrate("gloo", spec.nranks, sizes=calibration_sizes(spec), progress=False)
        alpha = calib["alpha_s"] if alpha is None else alpha
        bandwidth = calib["bandwidth_Bps"] if bandwidth is None else bandwidth
    mean = max(spec.compute_model().mean_s())
    budget = 120.0 + len(spec.runs) * spec.steps * (4 * spec.microbatches * mean + 5.0)

    def done(rank: int, payload: Any) -> None:
        if progress and rank == 0:
            sys.stderr.write(f"train-bench: rank 0 finished {len(payload)} runs\n")

    if progress:
        sys.stderr.write(f"train-bench: {', '.join(f'{m}:{a}' for m, a in spec.runs)} on {spec.nranks} ranks, "
                         f"{spec.steps} steps each\n")
    t = time.perf_counter()
    results = launch(train_worker, spec.nranks, (spec,), backend="gloo", timeout=budget,
                     pg_timeout=max(300.0, spec.timeout_s * 2), on_result=done)
    wall = time.perf_counter() - t
    rows = []
    for method, alg in spec.runs:
        label = f"{method}:{alg}"
        meas = measure(spec, results, label)
        pred = predict(spec, label, meas, alpha, bandwidth)
        err = pred["throughput_samples_s"] / meas["throughput_samples_s"] - 1.0
        rows.append({"run": label, "measured": meas, "predicted": pred, "error": err})
    return {
        "backend": "gloo", "ranks": spec.nranks, "params": spec.params, "grad_bytes": 4 * spec.params,
        "compute": spec.compute_model().describe(), "microbatches": spec.microbatches, "batch": spec.batch,
        "steps": spec.steps, "warmup": spec.warmup, "alpha_s": alpha, "bandwidth_Bps": bandwidth,
        "alpha": format_alpha(alpha), "bandwidth": format_rate(bandwidth), "calibration": calib,
        "wall_s": wall, "runs": rows, "gains": gains(rows),
    }


def gains(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Throughput ratios (measured and predicted) of each later run over each earlier DDP run."""
    out = []
    for i, a in enumerate(rows):
        for b in rows[:i]:
            if not b["run"].startswith("ddp:"):
                continue
            out.append({"run": a["run"], "over": b["run"],
                        "measured": a["measured"]["throughput_samples_s"] / b["measured"]["throughput_samples_s"],
                        "predicted": a["predicted"]["throughput_samples_s"] / b["predicted"]["throughput_samples_s"]})
    return out


__all__ = ["calibration_sizes", "gains", "measure", "parse_runs", "predict", "prepare", "run_train_bench"]
