"""`collsynth reproduce stragglar`: the StragglAR paper's analytic study from simulated schedules;
`collsynth reproduce cluster`: straggler-aware AllReduce on clusters of 2 to 128 nodes (issue 15)."""

from __future__ import annotations

import argparse
from typing import Any

from collsynth.commands.catalog import add_command_parser, show_help
from collsynth.commands.common import int_arg, print_json, print_table
from collsynth.errors import CollsynthError, require_extra
from collsynth.fileio import check_output
from collsynth.synth.algorithms.stragglar.analysis import DEFAULT_NS, plot, reproduce
from collsynth.synth.algorithms.stragglar.cluster_study import DEFAULT_NODES, plot_cluster, reproduce_cluster
from collsynth.units import format_time, parse_count, parse_rate, parse_size, parse_time


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = add_command_parser(sub, "reproduce", description="Reproduce a paper's analytic results by building, "
                           "verifying and simulating schedules (not by evaluating formulas).",
                           epilog="example:\n  collsynth reproduce stragglar -n 4,8,16 --json")
    rsub = p.add_subparsers(dest="study", metavar="STUDY", parser_class=type(p))
    q = rsub.add_parser(
        "stragglar", help="StragglAR (arXiv 2505.23523): rounds, beta, speedup over ring, critical delay",
        description="For each n: phase-2 rounds, the beta coefficient (bytes a rank sends after the straggler "
                    "arrives, per buffer byte), the simulated time after the straggler's arrival of ring, rhd, "
                    "direct and stragglar with the straggler late enough to hide phase 1 (ideal) and on time "
                    "(worst), stragglar's speedup over ring in both cases, and the critical delay above which "
                    "stragglar beats ring (bisection on the simulator).",
        epilog="example:\n  collsynth reproduce stragglar --plot speedup.png\n"
               "  collsynth reproduce stragglar -n 8,16 --size 256MiB --json\n"
               "  collsynth reproduce stragglar -n 4,8,16,32,64 --pipeline auto",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("--gpus", "-n", default=None,
                   help="comma-separated GPU counts (default 4,8,...,256 and 6,12,...,192)")
    q.add_argument("--size", default="1GiB", help="buffer bytes per rank (default 1GiB)")
    q.add_argument("--alpha", default="3us", help="per-message latency (default 3us)")
    q.add_argument("--bandwidth", default="450GiB/s", help="per-port bandwidth (default 450GiB/s)")
    q.add_argument("--topology", "-t", default="nvswitch", help="topology preset or JSON file (default nvswitch)")
    q.add_argument("--pipeline", default=None, metavar="K|auto",
                   help="also the pipelined schedule with K(n-1) chunks (auto: K from the alpha-beta model); "
                        "adds K, its rounds, time, speedup over ring and time over the s/B + alpha floor")
    q.add_argument("--json", action="store_true", help="print JSON instead of a table")
    q.add_argument("--plot", metavar="FILE.png", default=None, help="also plot speedup over ring against n")
    q.set_defaults(func=cmd_reproduce_stragglar)
    c = rsub.add_parser(
        "cluster", help="straggler-aware AllReduce on clusters: a late GPU, a late node, random arrivals (issue 15)",
        description="For each node count (nodes of 8 GPUs on h100-cluster, 1 GiB per rank) and each case (one "
                    "late GPU, one late node, a seeded random arrival vector of 2 to 8 late ranks with delays in "
                    "0-10 ms): the time after the last arrival of the best synchronous schedule (fastest of ring, "
                    "multiring, hierarchical, tree, rhd, radix, direct, twoshot), of ours (clusterstraggler; for "
                    "random arrivals the faster of clusterstraggler and multistraggler) and the proven lower bound, "
                    "with the ratios. Every schedule is built, verified and simulated.",
        epilog="example:\n  collsynth reproduce cluster --nodes 2,4 --json\n"
               "  collsynth reproduce cluster --plot cluster.png\n"
               "  collsynth reproduce cluster   # 2 to 128 nodes (bench/bench_cluster_study.py times each)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--nodes", "-N", default=None,
                   help=f"comma-separated node counts >= 2 (default {','.join(map(str, DEFAULT_NODES))}; more "
                        f"is slower)")
    c.add_argument("--size", default="1GiB", help="buffer bytes per rank (default 1GiB)")
    c.add_argument("--topology", "-t", default="h100-cluster",
                   help="cluster preset, built for nodes x 8 GPUs (default h100-cluster; options as "
                        "h100-cluster:fabric=fat-tree), or a topology JSON file with --nodes nodes")
    c.add_argument("--gpus-per-node", type=int, default=8, metavar="G",
                   help="GPUs per node (default 8, what h100-cluster has; for topology files)")
    c.add_argument("--delay", default="50ms", help="how late the late GPU or node is (default 50ms: hides the work "
                                                   "before its arrival)")
    c.add_argument("--seed", type=int_arg("--seed", lo=0, hi=2**32 - 1), default=15,
                   help="seed of the random arrival vectors (default 15)")
    c.add_argument("--json", action="store_true", help="print JSON instead of a table")
    c.add_argument("--plot", metavar="FILE.png", default=None,
                   help="also plot the times after the last arrival against the node count")
    c.set_defaults(func=cmd_reproduce_cluster)
    p.set_defaults(func=show_help(p))


def _gpus(text: str | None) -> list[int]:
    if text is None:
        return list(DEFAULT_NS)
    out = []
    for part in text.split(","):
        try:
            n = parse_count(part, flag="--gpus")
        except CollsynthError:
            raise CollsynthError(f"--gpus must be comma-separated integers >= 2, got {text!r}") from None
        if n < 2:
            raise CollsynthError(f"--gpus values must be >= 2, got {n}")
        out.append(n)
    return out


def _pipeline(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        k = parse_count(text, flag="--pipeline")
    except CollsynthError:
        k = 0
    if k < 1:
        raise CollsynthError(f"--pipeline must be a positive integer or auto, got {text!r}")
    return k


def cmd_reproduce_stragglar(args: argparse.Namespace) -> int:
    ns = _gpus(args.gpus)
    model: dict[str, Any] = {"size": parse_size(args.size, flag="--size"),
                             "alpha": parse_time(args.alpha, flag="--alpha"),
                             "bandwidth": parse_rate(args.bandwidth, flag="--bandwidth"), "topology": args.topology}
    if args.pipeline is not None:
        model["pipeline"] = _pipeline(args.pipeline)
    _check_plot(args.plot, args.topology)
    rows = reproduce(ns, **model)
    if args.plot is not None:
        plot(rows, args.plot)
    if args.json:
        print_json({"size_bytes": model["size"], "alpha_s": model["alpha"], "bandwidth_Bps": model["bandwidth"],
                    "topology": args.topology, "rows": rows})
        return 0
    print(f"StragglAR study: {args.size} per rank, alpha {args.alpha}, {args.bandwidth}, {args.topology}; "
          f"times after the straggler (rank n-1) arrives")
    table = []
    for r in rows:
        t = {"n": r["n"], "rounds": r["phase2_rounds"], "bound": r["lower_bound"], "beta": round(r["beta"], 4)}
        for case in ("ideal", "worst"):
            for a in ("ring", "rhd", "direct", "stragglar"):
                t[f"{a}_{case}"] = format_time(r[f"{a}_{case}_s"])
            t[f"x_{case}"] = f"{r[f'speedup_{case}']:.3f}"
        t["crit"] = "never" if r["critical_delay_s"] is None else format_time(r["critical_delay_s"])
        if "pipelined_k" in r:
            t.update(K=r["pipelined_k"], rounds_k=f"{r['pipelined_rounds']}/{r['pipelined_lower_bound']}",
                     strag_k=format_time(r["stragglar_pipelined_ideal_s"]),
                     x_k=f"{r['speedup_pipelined_ideal']:.3f}", x_k_worst=f"{r['speedup_pipelined_worst']:.3f}",
                     floor_k=f"{r['pipelined_over_floor']:.3f}",
                     crit_k="never" if r["pipelined_critical_delay_s"] is None
                     else format_time(r["pipelined_critical_delay_s"]))
        table.append(t)
    cols = ["n", "rounds", "bound", "beta", "ring_ideal", "rhd_ideal", "direct_ideal", "stragglar_ideal", "x_ideal",
            "stragglar_worst", "x_worst", "crit"]
    heads = ["n", "rounds", "bound", "beta", "ring", "rhd", "direct", "stragglar", "speedup", "stragglar(d=0)",
             "speedup(d=0)", "critical delay"]
    if "pipeline" in model:
        cols += ["K", "rounds_k", "strag_k", "x_k", "x_k_worst", "floor_k", "crit_k"]
        heads += ["K", "rounds(K)/bound", "stragglar(K)", "speedup(K)", "speedup(K,d=0)", "(K)/floor",
                  "critical delay(K)"]
    print_table(table, cols, heads)
    print("ring/rhd/direct take the same time in both cases (every step waits for every rank); "
          "speedup = ring / stragglar" + ("; (K) = pipelined with K(n-1) chunks, floor = s/B + alpha"
                                          if "pipeline" in model else ""))
    if args.plot is not None:
        print(f"wrote {args.plot}")
    return 0


def _nodes(text: str | None) -> list[int]:
    if text is None:
        return list(DEFAULT_NODES)
    out = []
    for part in text.split(","):
        try:
            n = int(part)
        except ValueError:
            raise CollsynthError(f"--nodes must be comma-separated integers >= 2, got {text!r}") from None
        if n < 2:
            raise CollsynthError(f"--nodes values must be >= 2 (the study compares nodes), got {n}")
        out.append(n)
    return out


def cmd_reproduce_cluster(args: argparse.Namespace) -> int:
    nodes = _nodes(args.nodes)
    if args.gpus_per_node < 2:
        raise CollsynthError(f"--gpus-per-node must be an integer >= 2, got {args.gpus_per_node}")
    model: dict[str, Any] = {"size": parse_size(args.size, flag="--size"),
                             "delay": parse_time(args.delay, flag="--delay"), "topology": args.topology,
                             "seed": args.seed, "gpus_per_node": args.gpus_per_node}
    if not model["delay"] > 0:
        raise CollsynthError(f"--delay must be a positive time (the late GPU or node must be late), got {args.delay!r}")
    _check_plot(args.plot, args.topology)
    rows = reproduce_cluster(nodes, **model)
    if args.plot is not None:
        plot_cluster(rows, args.plot)
    if args.json:
        print_json({"study": "cluster", "size_bytes": model["size"], "topology": args.topology,
                    "delay_s": model["delay"], "seed": args.seed, "rows": rows})
        return 0
    print(f"Cluster straggler study: {args.size} per rank, {args.topology}, late GPU/node {args.delay} late, "
          f"random seed {args.seed}; times after the last arrival")
    table = [{"nodes": r["nodes"], "gpus": r["gpus"], "case": r["case"],
              "late": len(r["late_ranks"]), "sync": f"{r['best_sync']} {format_time(r['sync_after_s'])}",
              "ours": f"{r['ours']} {format_time(r['ours_after_s'])}", "bound": format_time(r["bound_after_s"]),
              "speedup": f"{r['speedup']:.3f}", "ours_x": f"{r['ours_x_bound']:.3f}",
              "sync_x": f"{r['sync_x_bound']:.3f}"} for r in rows]
    print_table(table, ["nodes", "gpus", "case", "late", "sync", "ours", "bound", "speedup", "ours_x", "sync_x"],
                ["nodes", "GPUs", "late", "late ranks", "best synchronous", "ours", "bound", "speedup",
                 "ours/bound", "sync/bound"])
    print("speedup = best synchronous / ours; bound = synth.bounds.allreduce_bound after the last arrival")
    pruned = sorted({(r["nodes"], a) for r in rows for a in r["sync_pruned"]})
    if pruned:
        print("not built (their lower bound is above the best synchronous time): "
              + ", ".join(f"{a} at {N} nodes" for N, a in pruned))
    if args.plot is not None:
        print(f"wrote {args.plot}")
    return 0


def _check_plot(path: str | None, topology: str) -> None:
    """--plot, before any work: a .png name that is not the input topology, and matplotlib installed."""
    if path is None:
        return
    if not path.lower().endswith(".png"):
        raise CollsynthError(f"--plot writes PNG: give a file name ending in .png, got {path!r}")
    check_output(path, flag="--plot", inputs=[topology])
    require_extra("matplotlib", "plot", "--plot")
