"""`collsynth bench` and `collsynth calibrate`: real processes on torch.distributed (gloo or NCCL)."""

from __future__ import annotations

import argparse
import sys

from collsynth.backends.torch.bench import DEFAULT_SIZES, parse_delays, prepare_bench, run_bench, run_calibrate
from collsynth.backends.torch.launch import LaunchError, check_backend
from collsynth.commands.catalog import add_command_parser
from collsynth.commands.common import int_arg, print_json, print_table
from collsynth.errors import require_extra
from collsynth.synth.ir import load_schedule
from collsynth.units import format_time, parse_size, parse_time

DEFAULT_ALGORITHMS = "ring,rhd,stragglar,torch"


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = add_command_parser(sub, "bench", description="Start --ranks processes on this machine (torch.distributed, gloo "
                    "on CPU or nccl on GPUs), delay the given ranks before every collective, and time each algorithm "
                    "after the last arrival and from the punctual ranks' arrival. Every result is checked against "
                    "torch.distributed.all_reduce. `torch` is torch's own all_reduce; `auto` detects the straggler at "
                    "run time (StragglerAwareAllReduce); stragglar takes the most delayed rank; algorithms that take "
                    "arrivals (multistraggler, clusterstraggler) are built for the --delay values, and every "
                    "algorithm that takes a size for --size.",
        epilog="example:\n  collsynth bench --backend gloo --ranks 8 --size 32MiB --delay 7=3s "
               "--algorithms ring,stragglar,torch --iters 5")
    p.add_argument("--backend", default="gloo", help="gloo (CPU, default) or nccl (one GPU per rank)")
    p.add_argument("--ranks", "-n", required=True, type=int_arg("--ranks"), help="number of processes (>= 2)")
    p.add_argument("--size", required=True, help="buffer bytes per rank, e.g. 32MiB")
    p.add_argument("--delay", action="append", default=[], metavar="RANK=TIME",
                   help="sleep RANK for TIME before each collective, e.g. --delay 7=3s (repeatable)")
    p.add_argument("--algorithms", "-a", default=DEFAULT_ALGORITHMS,
                   help=f"comma-separated registry algorithms plus torch and auto (default {DEFAULT_ALGORITHMS})")
    p.add_argument("--schedule", action="append", default=[], metavar="FILE",
                   help="also run this AllReduce schedule file (repeatable)")
    p.add_argument("--topology", "-t", default=None,
                   help="preset or JSON file for --ranks GPUs (e.g. dgx-h100): the algorithms that take a "
                        "topology are built for it, and auto runs clusterstraggler's forms on it at --size "
                        "(default: none)")
    p.add_argument("--iters", type=int_arg("--iters"), default=5, help="timed iterations (default 5)")
    p.add_argument("--warmup", type=int_arg("--warmup"), default=1, help="untimed iterations first (default 1)")
    p.add_argument("--dtype", default="float32", help="float32 (default), float16, bfloat16 or float64")
    p.add_argument("--timeout", default=None, help="per-wait fault timeout (default 60s + the largest delay)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.set_defaults(func=cmd_bench)

    p = add_command_parser(sub, "calibrate", description="Start --ranks processes, time messages of several sizes and "
                    "fit t = alpha + size/bandwidth (least squares on relative error). Pattern ring (default): every "
                    "rank sends to the next at once, alternating copy and reduce steps like the executor, so the "
                    "figures predict `collsynth bench` through `collsynth compare --alpha A --bandwidth B`. Pattern "
                    "pingpong: ranks 0 and 1 alone.",
        epilog="example:\n  collsynth calibrate --backend gloo --ranks 8")
    p.add_argument("--backend", default="gloo", help="gloo (CPU, default) or nccl (one GPU per rank)")
    p.add_argument("--ranks", "-n", required=True, type=int_arg("--ranks"), help="number of processes (>= 2)")
    p.add_argument("--sizes", default=None, help="comma-separated message sizes, at least two (default "
                                                   "4KiB,16KiB,...,4MiB: cover the message sizes you will run)")
    p.add_argument("--iters", type=int_arg("--iters"), default=7, help="repetitions per size (default 7)")
    p.add_argument("--pattern", default="ring", help="ring (all ranks at once, default) or pingpong")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.set_defaults(func=cmd_calibrate)


def _spread(st: dict[str, float]) -> str:
    return f"{format_time(st['median'])} [{format_time(st['min'])} .. {format_time(st['max'])}]"


def cmd_bench(args: argparse.Namespace) -> int:
    require_extra("torch", "torch", "bench")
    check_backend(args.backend, args.ranks)
    size = parse_size(args.size, flag="--size")
    delays = parse_delays(args.delay, args.ranks)
    names = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    schedules = [load_schedule(f) for f in args.schedule]
    timeout = parse_time(args.timeout, allow_zero=False, flag="--timeout") if args.timeout else None
    spec = prepare_bench(args.backend, args.ranks, size, delays, names, schedules=schedules, iters=args.iters,
                         warmup=args.warmup, dtype=args.dtype, timeout=timeout, progress=not args.no_progress,
                         topology=args.topology)
    try:
        res = run_bench(spec)
    except LaunchError as e:
        sys.stderr.write(f"collsynth: error: bench failed: {str(e).splitlines()[0]}\n")
        return 1
    bad = [r["algorithm"] for r in res["results"] if not r["correct"]]
    if args.json:
        print_json(res)
    else:
        late = ", ".join(f"rank {r} +{format_time(t)}" for r, t in sorted(delays.items()) if t > 0) or "none"
        where = f", topology {args.topology}" if args.topology else ""
        print(f"{args.backend}, {args.ranks} ranks{where}, {args.size} {args.dtype} per rank, delayed: {late}; "
              f"{args.iters} iterations, median [min .. max]")
        rows = []
        for r in res["results"]:
            rows.append({
                "algorithm": r["algorithm"],
                "after": _spread(r["after_last_arrival_s"]),
                "punctual": _spread(r["from_punctual_arrival_s"]),
                "speedup": f"{r['speedup_vs_torch']:.3f}x" if "speedup_vs_torch" in r else "",
                "ok": ("yes" if r["correct"] else "NO") + ("" if r["identical_across_ranks"] else " (ranks differ)"),
                "note": (f"agreement {format_time(r['agreement_last_rank_s']['median'])}; ran "
                         f"{', '.join(r['chosen'])}" if "chosen" in r else ""),
            })
        print_table(rows, ["algorithm", "after", "punctual", "speedup", "ok", "note"],
                    ["algorithm", "after last arrival", "from punctual arrival", "speedup vs torch",
                     "matches torch", "note"])
    if bad:
        sys.stderr.write(f"collsynth: error: results differ from torch all_reduce for {', '.join(bad)}\n")
        return 1
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    require_extra("torch", "torch", "calibrate")
    check_backend(args.backend, args.ranks)
    sizes = ([parse_size(s.strip(), flag="--sizes") for s in args.sizes.split(",") if s.strip()]
             if args.sizes else DEFAULT_SIZES)
    try:
        res = run_calibrate(args.backend, args.ranks, sizes=sizes, reps=args.iters, pattern=args.pattern,
                            progress=not args.no_progress)
    except LaunchError as e:
        sys.stderr.write(f"collsynth: error: calibrate failed: {str(e).splitlines()[0]}\n")
        return 1
    res["compare"] = (f"collsynth compare --gpus {args.ranks} --size SIZE --alpha {res['alpha']} "
                      f"--bandwidth {res['bandwidth']}")
    if args.json:
        print_json(res)
        return 0
    print(f"{args.backend}, {args.ranks} ranks, pattern {args.pattern}: alpha {res['alpha']}, "
          f"bandwidth {res['bandwidth']}")
    print_table([{"size": p["size_bytes"], "measured": format_time(p["time_s"]), "model": format_time(p["model_s"])}
                 for p in res["points"]], ["size", "measured", "model"], ["bytes", "measured", "alpha + size/B"])
    print(f"predict with: {res['compare']} [--arrival RANK=TIME]")
    return 0

__all__ = ["add_commands", "cmd_bench", "cmd_calibrate"]
