"""`collsynth train-sim` (training-step simulator) and `collsynth train-bench` (real gloo run vs model)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from collsynth import budget
from collsynth.backends.torch.launch import LaunchError
from collsynth.commands.catalog import add_command_parser
from collsynth.commands.common import int_arg, number_arg, print_json, print_table
from collsynth.errors import CollsynthError, require_extra
from collsynth.fileio import check_output
from collsynth.synth.topology import make_topology
from collsynth.training.bench import parse_runs, prepare, run_train_bench
from collsynth.training.compute import ComputeModel, load_trace, parse_slow
from collsynth.training.model import TrainingSetup, check_methods, simulate_training
from collsynth.training.plot import plot_training
from collsynth.units import format_time, parse_rate, parse_size, parse_time

DEFAULT_METHODS = "ddp,ddp-bucketed,zero1,acco"
DEFAULT_ALGORITHMS = "ring,stragglar"
DEFAULT_RUNS = "ddp:torch,ddp:ring,ddp:stragglar,acco:ring"


def _add_workload_args(p: argparse.ArgumentParser, *, trace: bool = True, compute: str | None = None,
                       batch: int = 1, steps: int = 200, warmup: int | None = None) -> None:
    p.add_argument("--compute", default=compute, help="forward+backward time per micro-batch, e.g. 100ms"
                   + (f" (default {compute})" if compute else ""))
    p.add_argument("--jitter", type=number_arg("--jitter"), default=0.0,
                   help="lognormal sigma of per-micro-batch noise, mean 1 (default 0; 0.1 = about 10%%)")
    p.add_argument("--slow", action="append", default=[], metavar="RANK=FACTOR",
                   help="rank RANK takes FACTOR (>= 1) times --compute, e.g. --slow 7=1.3 (repeatable)")
    if trace:
        p.add_argument("--trace", default=None, metavar="FILE",
                       help="measured per-rank times instead of --compute: CSV or JSON, one row per micro-batch, "
                            "one column per rank (cycled)")
    p.add_argument("--microbatches", type=int_arg("--microbatches"), default=1,
                   help="micro-batches per rank per step (ACCO: per check of the communication flag) (default 1)")
    p.add_argument("--batch", type=int_arg("--batch"), default=batch,
                   help=f"samples per micro-batch (default {batch}"
                        + (": throughput in micro-batches/s)" if batch == 1 else ")"))
    p.add_argument("--steps", type=int_arg("--steps"), default=steps, help=f"optimizer steps (default {steps})")
    p.add_argument("--warmup", type=int_arg("--warmup"), default=warmup,
                   help="steps left out of the throughput (default "
                        + ("steps/10, at most 20)" if warmup is None else f"{warmup})"))
    p.add_argument("--seed", type=int_arg("--seed", lo=0, hi=2**63 - 1), default=0, help="jitter seed (default 0)")


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = add_command_parser(sub, "train-sim", description="Simulate many training steps on --gpus ranks: per-rank "
                    "compute per micro-batch (constant, jitter, persistent slow ranks, or a trace) and every "
                    "collective through the schedule simulator at the arrival times that compute produces (stragglar: "
                    "the rank that arrives last, as the run-time detector picks it). Prints throughput (samples/s, "
                    "steady state), the batch per optimizer step (ACCO's varies), and per-rank idle time. Methods: ddp "
                    "(compute, then AllReduce), ddp-bucketed (K buckets during backward), zero1 (ReduceScatter, shard "
                    "step, AllGather), acco (ZeRO-1 rounds overlapped with more micro-batches, arXiv 2406.02613). An "
                    "algorithm without a ReduceScatter (stragglar, rhd) runs its AllReduce in its place.",
        epilog="example:\n  collsynth train-sim --gpus 8 --grad-bytes 2.5GB --compute 100ms --jitter 0.1 --slow 7=1.3 "
               "--methods ddp,ddp-bucketed,zero1,acco --algorithms ring,stragglar --plot train.png")
    p.add_argument("--gpus", "-n", required=True, type=int_arg("--gpus"), help="number of ranks (>= 2)")
    p.add_argument("--grad-bytes", required=True, help="gradient bytes per rank, e.g. 2.5GB (bf16: 2 x parameters)")
    p.add_argument("--param-bytes", default=None,
                   help="parameter bytes gathered by ZeRO-1/ACCO (default = --grad-bytes)")
    _add_workload_args(p)
    p.add_argument("--optimizer", default="0s",
                   help="optimizer step over the whole model (ZeRO shard: 1/n) (default 0)")
    p.add_argument("--buckets", type=int_arg("--buckets"), default=4, help="ddp-bucketed: gradient buckets (default 4)")
    p.add_argument("--backward-fraction", type=number_arg("--backward-fraction"), default=2 / 3,
                   help="backward share of a micro-batch (buckets are released during it) (default 0.667)")
    p.add_argument("--swap", default="0s", help="ACCO buffer swap per round (about two full-buffer copies) (default 0)")
    p.add_argument("--acco-count", default="allreduce", choices=("allreduce", "in-buffer"),
                   help="ACCO sample count: its own AllReduce before the ReduceScatter (default, as in the ACCO "
                        "code) or folded into the gradient buffer (no extra barrier)")
    p.add_argument("--methods", default=DEFAULT_METHODS, help=f"comma-separated (default {DEFAULT_METHODS})")
    p.add_argument("--algorithms", "-a", default=DEFAULT_ALGORITHMS,
                   help=f"comma-separated AllReduce algorithms (default {DEFAULT_ALGORITHMS})")
    p.add_argument("--topology", "-t", default="nvswitch", help="topology preset or JSON file (default nvswitch)")
    p.add_argument("--alpha", default=None, help="per-message latency (default: the topology's)")
    p.add_argument("--bandwidth", default=None, help="per-port bandwidth (default: the topology's)")
    p.add_argument("--window", default="100ms",
                   help="stragglar: if the second-to-last rank is this much later than the third-to-last, two are "
                        "late and ring runs (the run-time detector's window) (default 100ms)")
    p.add_argument("--agree", default="0s",
                   help="stragglar: run-time detection cost added to the straggler (default 0)")
    p.add_argument("--exact", action="store_true",
                   help="call the event simulator for every collective (slower; same numbers for one-port schedules)")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="write throughput per method and algorithm and a per-rank timeline of a few steps")
    p.set_defaults(func=cmd_train_sim)

    p = add_command_parser(sub, "train-bench", description="Train a small model (embedding bag + MLP, synthetic "
                    "regression) with --ranks processes on this machine (torch.distributed, gloo), each micro-batch "
                    "padded with sleep to --compute times the rank's --slow factor (and --jitter), for each run "
                    "METHOD:ALGORITHM: ddp:torch (DDP, torch's all_reduce), ddp:ring / ddp:stragglar (DDP with the "
                    "collsynth comm hook; stragglar detects the late rank at run time), acco:ring (ACCO loop: a "
                    "communication thread does ReduceScatter, shard AdamW, AllGather while the main thread keeps "
                    "computing). Prints measured throughput next to train-sim's prediction for the same settings, with "
                    "alpha and bandwidth measured right before each run with `collsynth calibrate`'s ring pattern "
                    "(torch's all_reduce: timed on the job's sizes), the measured optimizer and swap costs, and the "
                    "compute times each micro-batch really took (and, as a second figure, the nominal compute).",
        epilog="example:\n  collsynth train-bench --ranks 4 --compute 40ms --slow 3=1.3 --grad-bytes 8MiB --steps 20")
    p.add_argument("--ranks", "-n", type=int_arg("--ranks"), default=4, help="processes (default 4)")
    p.add_argument("--runs", default=DEFAULT_RUNS, help=f"comma-separated METHOD:ALGORITHM (default {DEFAULT_RUNS})")
    p.add_argument("--grad-bytes", default="8MiB", help="fp32 gradient bytes (sets the embedding table) (default 8MiB)")
    _add_workload_args(p, trace=False, compute="40ms", batch=16, steps=20, warmup=2)
    p.add_argument("--lr", type=number_arg("--lr"), default=1e-2, help="AdamW learning rate (default 0.01)")
    p.add_argument("--window", default="250ms", help="stragglar run-time detection window (default 250ms)")
    p.add_argument("--alpha", default=None, help="skip calibration: per-message latency (with --bandwidth)")
    p.add_argument("--bandwidth", default=None, help="skip calibration: per-port bandwidth (with --alpha)")
    p.add_argument("--acco-fixed-groups", action="store_true",
                   help="ACCO computes exactly one group per round (deterministic; for loss comparisons)")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.set_defaults(func=cmd_train_bench)

# ---------------------------------------------------------------------------------------------- train-sim
def _time(flag: str, text: str, *, allow_zero: bool = True) -> float:
    """parse_time with the flag named in the error."""
    try:
        return parse_time(text, allow_zero=allow_zero)
    except CollsynthError as e:
        raise CollsynthError(f"{flag}: {e}") from None


def _names(text: str, what: str) -> list[str]:
    out = [a.strip() for a in str(text).split(",") if a.strip()]
    if not out:
        raise CollsynthError(f"{what} is empty: give a comma-separated list")
    return out


def compute_model_from_args(args: argparse.Namespace, n: int) -> Any:
    slow = parse_slow(args.slow, n)
    trace_path = getattr(args, "trace", None)
    if trace_path and args.compute:
        raise CollsynthError("give either --compute or --trace, not both")
    if not trace_path and not args.compute:
        raise CollsynthError("give --compute TIME (e.g. 100ms) or --trace FILE")
    if trace_path:
        return ComputeModel(n, trace=load_trace(trace_path, n), slow=slow, jitter=args.jitter, seed=args.seed)
    return ComputeModel(n, _time("--compute", args.compute, allow_zero=False), jitter=args.jitter, slow=slow,
                        seed=args.seed)


def setup_from_args(args: argparse.Namespace) -> Any:
    n = args.gpus
    if isinstance(n, bool) or n < 2:
        raise CollsynthError(f"--gpus must be an integer >= 2, got {n}")
    budget.check_ranks(n, f"train-sim on {n} ranks")
    compute = compute_model_from_args(args, n)
    alpha = None if args.alpha is None else _time("--alpha", args.alpha)
    bandwidth = None if args.bandwidth is None else parse_rate(args.bandwidth, flag="--bandwidth")
    topo = make_topology(args.topology, n, alpha=alpha, bandwidth=bandwidth)
    setup = TrainingSetup(
        compute=compute, topology=topo, grad_bytes=float(parse_size(args.grad_bytes, flag="--grad-bytes")),
        param_bytes=float(parse_size(args.param_bytes, flag="--param-bytes")) if args.param_bytes else None,
        microbatches=args.microbatches, batch=args.batch, optimizer_s=_time("--optimizer", args.optimizer),
        buckets=args.buckets, backward_fraction=args.backward_fraction, swap_s=_time("--swap", args.swap),
        count_allreduce=args.acco_count == "allreduce", steps=args.steps, warmup=args.warmup,
        window_s=_time("--window", args.window, allow_zero=False), agree_s=_time("--agree", args.agree),
        exact=args.exact)
    setup.check()
    return setup


def _main_collective(r: Any) -> str:
    """The gradient collective that ran, with shares, e.g. 'stragglar@7 95%, ring 5%'."""
    main = "reducescatter" if r.method in ("zero1", "acco") else "allreduce"
    items = [(k.split(":", 1)[1], v) for k, v in r.collectives.items() if k.startswith(main + ":")]
    total = sum(v for _, v in items) or 1
    items.sort(key=lambda kv: (-kv[1], kv[0]))
    if len(items) == 1:
        return items[0][0]
    shown = ", ".join(f"{k} {v / total:.0%}" for k, v in items[:2])
    return shown + (f", {len(items) - 2} more" if len(items) > 2 else "")


def rows_for(results: Sequence[Any]) -> list[dict[str, Any]]:
    """Table rows (shared by train-sim and the README generator)."""
    base = results[0].throughput
    rows = []
    for r in results:
        idle = r.idle_fraction
        rows.append({
            "method": r.method, "algorithm": r.algorithm, "throughput": f"{r.throughput:.4g}",
            "speedup": f"{r.throughput / base:.3f}x" if base > 0 else "",
            "step": format_time(r.step_time_s),
            "batch": (f"{r.samples_per_step:.4g}" if r.batch_min == r.batch_max
                      else f"{r.samples_per_step:.4g} [{r.batch_min}..{r.batch_max}]"),
            "idle": f"{sum(idle) / len(idle):.1%} / {max(idle):.1%}",
            "ran": _main_collective(r),
        })
    return rows

TABLE_COLUMNS = ["method", "algorithm", "throughput", "speedup", "step", "batch", "idle", "ran"]


def table_headers(first: Any) -> list[str]:
    return ["method", "algorithm", "samples/s", f"vs {first.method}+{first.algorithm}", "time/step",
            "batch/step", "idle mean/max", "gradient collective"]


def setup_summary(setup: Any) -> dict[str, Any]:
    t = setup.topology
    return {
        "gpus": setup.nranks, "topology": t.name, "grad_bytes": setup.grad_bytes, "param_bytes": setup.pbytes,
        "compute": setup.compute.describe(), "compute_mean_s": setup.compute.mean_s().tolist(),
        "microbatches": setup.microbatches, "batch": setup.batch, "optimizer_s": setup.optimizer_s,
        "buckets": setup.buckets, "backward_fraction": setup.backward_fraction, "swap_s": setup.swap_s,
        "acco_count": "allreduce" if setup.count_allreduce else "in-buffer", "steps": setup.steps,
        "warmup": setup.warmup_steps, "window_s": setup.window_s, "agree_s": setup.agree_s,
    }


def cmd_train_sim(args: argparse.Namespace) -> int:
    setup = setup_from_args(args)
    methods = check_methods(_names(args.methods, "--methods"))
    algorithms = _names(args.algorithms, "--algorithms")
    if args.plot and not args.plot.lower().endswith(".png"):
        raise CollsynthError(f"--plot {args.plot}: the picture is a PNG, name it FILE.png")
    if args.plot:
        check_output(args.plot, flag="--plot", inputs=[args.trace, args.topology])
        require_extra("matplotlib", "plot", "--plot")
    results = simulate_training(setup, methods, algorithms)
    if args.plot:
        plot_training(results, args.plot, title=_title(setup))
    if args.json:
        print_json({"setup": setup_summary(setup), "results": [r.to_json_dict() for r in results]})
        return 0
    print(_title(setup))
    print_table(rows_for(results), TABLE_COLUMNS, table_headers(results[0]))
    if args.plot:
        print(f"wrote {args.plot}")
    return 0


def _title(setup: Any) -> str:
    """One line: GPUs, topology (rank 0 -> 1 latency and the narrowest link), workload."""
    t = setup.topology
    links, alpha = t.pair_table([[0, 1]])
    path = [k for k in links[0].tolist() if k >= 0]
    bw = float(min(t.link_bw[path])) if path else float(t.link_bw.min())
    return (f"{setup.nranks} GPUs ({t.name}, alpha {format_time(float(alpha[0]))}, {bw / 2**30:.4g} GiB/s), "
            f"gradients {setup.grad_bytes / 1e6:.4g} MB, compute {setup.compute.describe()}, "
            f"{setup.microbatches} micro-batch(es)/step, {setup.steps} steps")

# ---------------------------------------------------------------------------------------------- train-bench
def cmd_train_bench(args: argparse.Namespace) -> int:
    require_extra("torch", "torch", "train-bench")
    if (args.alpha is None) != (args.bandwidth is None):
        raise CollsynthError("give both --alpha and --bandwidth (to skip calibration) or neither")
    alpha = _time("--alpha", args.alpha) if args.alpha is not None else None
    bandwidth = parse_rate(args.bandwidth, flag="--bandwidth") if args.bandwidth is not None else None
    if args.ranks < 2:
        raise CollsynthError(f"--ranks must be an integer >= 2, got {args.ranks}")
    spec = prepare(args.ranks, parse_runs(args.runs), grad_bytes=parse_size(args.grad_bytes, flag="--grad-bytes"),
                   compute_s=_time("--compute", args.compute, allow_zero=False), jitter=args.jitter,
                   slow=parse_slow(args.slow, args.ranks), microbatches=args.microbatches, batch=args.batch,
                   steps=args.steps, warmup=args.warmup, seed=args.seed, lr=args.lr,
                   window_s=_time("--window", args.window, allow_zero=False), fixed_groups=args.acco_fixed_groups)
    try:
        res = run_train_bench(spec, alpha=alpha, bandwidth=bandwidth, progress=not args.no_progress)
    except LaunchError as e:
        sys.stderr.write(f"collsynth: error: train-bench failed: {str(e).splitlines()[0]}\n")
        return 1
    if args.json:
        print_json(res)
        return 0
    print(f"gloo, {res['ranks']} ranks, {res['params']} parameters ({res['grad_bytes'] / 2**20:.3g} MiB fp32 "
          f"gradients), compute {res['compute']}, {res['microbatches']} micro-batch(es) of {res['batch']} samples, "
          f"{res['steps']} steps ({res['warmup']} warm-up); alpha and bandwidth "
          + ("calibrated right before each run" if res["calibrated"] else "as given"))
    rows = []
    for r in res["runs"]:
        m, p = r["measured"], r["predicted"]
        q = r["predicted_nominal"]
        rows.append({"run": r["run"], "measured": f"{m['throughput_samples_s']:.4g}",
                     "predicted": f"{p['throughput_samples_s']:.4g}", "error": f"{r['error']:+.1%}",
                     "nominal": f"{q['throughput_samples_s']:.4g} ({r['error_nominal']:+.1%})",
                     "compute": format_time(sum(m["compute_mean_s"]) / len(m["compute_mean_s"])),
                     "batch": f"{m['samples_per_step']:.4g} / {p['samples_per_step']:.4g}",
                     "opt": format_time(m["optimizer_s"]), "loss": f"{m['loss']:.4f}",
                     "model": f"{r['alpha']}, {r['bandwidth']}"})
    print_table(rows, ["run", "measured", "predicted", "error", "nominal", "compute", "batch", "opt", "model", "loss"],
                ["run", "measured samples/s", "predicted", "error", "predicted, nominal compute",
                 "measured compute", "batch/step meas/pred", "optimizer", "alpha, bandwidth", "final loss"])
    print("predicted: train-sim with the compute times the run measured; nominal: with --compute/--slow/--jitter")
    for g in res["gains"]:
        print(f"{g['run']} over {g['over']}: measured {g['measured']:.3f}x, predicted {g['predicted']:.3f}x, "
              f"nominal {g['predicted_nominal']:.3f}x")
    return 0

__all__ = ["add_commands", "cmd_train_sim", "cmd_train_bench", "setup_from_args", "rows_for"]
