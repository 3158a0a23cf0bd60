"""Core commands: algorithms, topologies, synth, info, verify, simulate, compare (argparse and printing;
the work is the library's: synth.registry, synth.verify, synth.simulate, synth.compare, backends)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from collsynth.api import file_kind, load_schedule, verify_file
from collsynth.backends import emit
from collsynth.backends.cost import check_emit, check_synth_emit
from collsynth.backends.mscclpp import fit_cluster_pipeline
from collsynth.commands.catalog import add_command_parser
from collsynth.commands.common import add_model_args, int_arg, print_json, print_table
from collsynth.commands.emit_cmds import (
    add_msccl_xml_options,
    add_mscclpp_options,
    check_format_flags,
    msccl_xml_options,
    mscclpp_plan_options,
)
from collsynth.errors import CollsynthError, GpuCountError
from collsynth.fileio import check_output, write_text_atomic
from collsynth.synth.algorithms.stragglar.family import write_cluster_family, write_family
from collsynth.synth.compare import compare, compare_bound
from collsynth.synth.ir import Schedule
from collsynth.synth.registry import algorithm_params, algorithms, build_schedule, param_flag
from collsynth.synth.simulate import simulate
from collsynth.synth.solver.solve import status_line
from collsynth.synth.topology import DEFAULT_TOPOLOGY, make_topology
from collsynth.synth.verify import check, record_topology, schedule_topology
from collsynth.units import (
    check_class_values,
    format_time,
    parse_arrivals,
    parse_count,
    parse_rate,
    parse_size,
    parse_time,
    rank_ranges,
)


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = add_command_parser(sub, "algorithms", description="List every algorithm, in table order: name, what it builds, "
                           "the collectives it supports and the options `synth` takes for it.",
                           epilog="examples:\n  collsynth algorithms\n  collsynth algorithms --json")
    p.add_argument("--json", action="store_true", help="print the list as JSON: name, description, collectives, "
                   "options")
    p.set_defaults(func=cmd_algorithms)

    p = add_command_parser(sub, "synth", description="Build a schedule with a named algorithm, verify it, and write it "
                    "(JSON by default). An unverified schedule is never written.",
        epilog="examples:\n  collsynth synth -a ring -n 8 -o ring8.json\n"
               "  collsynth synth -a stragglar -n 8 --straggler 3 -o s8.json\n"
               "  collsynth synth -a stragglar -n 8 --straggler all -o family/\n"
               "  collsynth synth -a clusterstraggler -n 16 -t h100-cluster --straggler all -o cluster-family/\n"
               "  collsynth synth -a ring -n 8 --format msccl-xml -o ring8.xml\n"
               "  collsynth synth -a stragglar -n 8 --format mscclpp-plan -o s8.plan.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algorithm", "-a", required=True, help="algorithm name (see `collsynth algorithms`)")
    p.add_argument("--gpus", "-n", required=True, type=int_arg("--gpus"), help="number of ranks (>= 2)")
    p.add_argument("--collective", "-c", default="allreduce",
                   choices=["allreduce", "reducescatter", "allgather"], help="collective (default allreduce)")
    p.add_argument("--topology", "-t", default=None,
                   help="topology preset or JSON file the schedule targets (checked; used by the solver)")
    p.add_argument("--straggler", default=None, help="stragglar: the late rank (default n-1), or `all` for one "
                                                     "schedule per rank plus a manifest in the -o directory; "
                                                     "clusterstraggler: `all` for one schedule per late GPU and "
                                                     "per late node of -t's machine")
    p.add_argument("--phase1", default=None, help="stragglar: ReduceScatter among punctual ranks: ring|direct|rhd")
    p.add_argument("--pipeline", default=None, help="stragglar: chunks per punctual rank (K >= 1 or auto)")
    g = p.add_argument_group("model inputs (stragglar --pipeline auto, solver)")
    g.add_argument("--size", default=None, help="buffer bytes per rank, e.g. 1GiB (default 1GiB)")
    g.add_argument("--alpha", default=None,
                   help="per-message latency, e.g. 3us, or per link class nvlink=1us,net=3us (default: the topology's)")
    g.add_argument("--bandwidth", default=None,
                   help="per-port bandwidth, e.g. 450GiB/s, or per link class nvlink=450GB/s,net=50GB/s "
                        "(default: the topology's)")
    g = p.add_argument_group("solver")
    g.add_argument("--arrival", action="append", metavar="RANK=TIME", default=None,
                   help="solver: when RANK arrives (default 0); repeat per rank")
    g.add_argument("--chunks", default=None, type=int_arg("--chunks"), help="solver: chunks per buffer")
    g.add_argument("--time-limit", default=None, help="solver: wall-clock limit, e.g. 60s")
    g.add_argument("--solver", default=None, choices=["cbc", "highs"], help="solver: MILP backend (default cbc)")
    p.add_argument("--format", "-f", default="json", help="json (default), msccl-xml or mscclpp-plan")
    p.add_argument("-o", "--output", default=None, help="output file (stdout when omitted)")
    p.add_argument("--force", action="store_true", help="with --straggler all: overwrite a non-empty directory")
    add_msccl_xml_options(p)
    add_mscclpp_options(p)
    p.set_defaults(func=cmd_synth)

    p = add_command_parser(sub, "info", description="Ranks, chunks, steps, transfers, steps per phase and bytes "
                           "each rank sends per byte of buffer, for a schedule JSON, an MSCCL XML file or an "
                           "MSCCL++ plan.",
                           epilog="examples:\n  collsynth info ring8.json\n  collsynth info s8.xml --json")
    p.add_argument("file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_info)

    p = add_command_parser(sub, "verify", description="Exit 0 with `OK ...` when the schedule computes its collective, "
                           "1 with the first violation when not, 2 when the file cannot be read or the runtime would "
                           "refuse or misread it. FILE is a schedule JSON, any MSCCL XML file or any MSCCL++ "
                           "execution plan (told apart by content).",
                           epilog="examples:\n  collsynth verify ring8.json\n  collsynth verify s8.xml --json\n"
                                  "  collsynth verify ring8.json --ports 2\n  collsynth verify s8.plan.json\n"
                                  "  collsynth verify s8.plan.json --size 1MiB")
    p.add_argument("file")
    p.add_argument("--ports", type=int_arg("--ports", lo=1), default=None,
                   help="messages a rank may send and receive per step (default: the schedule's own)")
    p.add_argument("--size", default=None, help="MSCCL++ plans: the message size to run it at, e.g. 1MiB (default: "
                                                "the smallest that exercises every slice and pipeline iteration)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_verify)

    p = add_command_parser(sub, "simulate", description="Event-driven alpha-beta simulation with per-rank arrival "
                                   "times and link sharing. Times are measured from 0; --arrival RANK=TIME delays a "
                                   "rank.",
                       epilog="example:\n  collsynth simulate ring8.json --size 1GiB --alpha 3us "
                              "--bandwidth 450GiB/s --arrival 7=5ms")
    p.add_argument("file")
    add_model_args(p, recorded=True)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--timeline", metavar="FILE", default=None, help="also write every transfer's start/end as JSON")
    p.set_defaults(func=cmd_simulate)

    p = add_command_parser(sub, "compare", description="Build, verify and simulate every algorithm for the same "
                                   "ranks, size, model and arrivals; rows sorted fastest first. stragglar takes the "
                                   "latest arrival as its straggler.",
                       epilog="example:\n  collsynth compare --gpus 8 --size 1GiB --alpha 3us --bandwidth 450GiB/s "
                              "--arrival 7=5ms")
    p.add_argument("--gpus", "-n", required=True, type=int_arg("--gpus"), help="number of ranks (>= 2)")
    add_model_args(p)
    p.add_argument("--algorithms", "-a", default=None,
                   help="comma-separated subset (default: every allreduce algorithm)")
    p.add_argument("--solver-time-limit", default=None, help="also run the MILP solver with this time limit")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_compare)


# ---------------------------------------------------------------------------------------- helpers
def model_from_args(args: argparse.Namespace, n: int, schedule: Schedule | None = None) -> tuple[int, Any,
                                                                                            dict[int, float]]:
    """(size bytes, Topology, arrivals) from --size/--alpha/--bandwidth/--topology/--arrival. Without
    --topology (None): the topology ``schedule`` records (a cluster's, from `synth -t`), else nvswitch."""
    size = parse_size(args.size, flag="--size")
    check_class_values(args.alpha, parse_time, "--alpha")
    check_class_values(args.bandwidth, parse_rate, "--bandwidth")
    recorded = (schedule_topology(schedule, args.alpha, args.bandwidth)
                if args.topology is None and schedule is not None else None)
    try:
        topo = recorded if recorded is not None else make_topology(args.topology or DEFAULT_TOPOLOGY, n,
                                                                   alpha=args.alpha, bandwidth=args.bandwidth)
    except GpuCountError as e:
        if schedule is None:  # the count is --gpus, which the message names
            raise
        raise e.for_count(f"the schedule has {n} ranks", f"give -t a topology of {n} GPUs (e.g. nvswitch), or synth "
                          f"the schedule for {e.takes}") from None
    arrivals = parse_arrivals(args.arrival, n)
    return size, topo, arrivals


# ---------------------------------------------------------------------------------------- commands
def cmd_algorithms(args: argparse.Namespace) -> int:
    if args.json:
        print_json([{"name": name, "description": info.description, "collectives": list(info.collectives),
                     "options": [param_flag(o) for o in algorithm_params(name)]}
                    for name, info in algorithms().items()])
        return 0
    for name, info in algorithms().items():
        opts = " ".join(param_flag(o) for o in algorithm_params(name))
        colls = ",".join(info.collectives)
        print(f"{name:<10} {info.description} [{colls}]" + (f" options: {opts}" if opts else ""))
    return 0


def _synth_params(args: argparse.Namespace) -> dict[str, Any]:
    """build_schedule keywords from the synth flags."""
    params: dict[str, Any] = {}
    if args.straggler is not None and args.straggler != "all":
        try:
            params["straggler"] = parse_count(args.straggler, flag="--straggler")
        except CollsynthError:
            raise CollsynthError(f"--straggler must be a rank number or `all`, got {args.straggler!r}") from None
    if args.phase1 is not None:
        params["phase1"] = args.phase1
    if args.pipeline is not None:
        params["pipeline"] = args.pipeline if args.pipeline == "auto" else _pipeline_int(args.pipeline)
    if args.size is not None:
        params["size"] = parse_size(args.size, flag="--size")
    takes_topology = "topology" in algorithm_params(args.algorithm)
    if args.alpha is not None:  # one value or per link class when the topology carries the model
        params["alpha"] = (check_class_values(args.alpha, parse_time, "--alpha") if takes_topology
                           else parse_time(args.alpha, flag="--alpha"))
    if args.bandwidth is not None:
        params["bandwidth"] = (check_class_values(args.bandwidth, parse_rate, "--bandwidth") if takes_topology
                               else parse_rate(args.bandwidth, flag="--bandwidth"))
    if args.arrival is not None:
        params["arrivals"] = parse_arrivals(args.arrival, args.gpus)
    if args.chunks is not None:
        params["chunks"] = args.chunks
    if args.time_limit is not None:
        params["time_limit"] = parse_time(args.time_limit, allow_zero=False, flag="--time-limit")
    if args.solver is not None:
        params["solver"] = args.solver
    if takes_topology:  # the topology carries the model: fold --alpha/--bandwidth in
        params["topology"] = make_topology(args.topology or "nvswitch", args.gpus,
                                           alpha=params.pop("alpha", None), bandwidth=params.pop("bandwidth", None))
    return params


def _pipeline_int(text: str) -> int:
    try:
        return parse_count(text, flag="--pipeline")
    except CollsynthError:
        raise CollsynthError(f"--pipeline must be a positive integer or `auto`, got {text!r}") from None


def _emit_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.format == "msccl-xml":
        return msccl_xml_options(args)
    return mscclpp_plan_options(args) if args.format == "mscclpp-plan" else {}


def cmd_synth(args: argparse.Namespace) -> int:
    n = args.gpus
    if n < 2:  # before any topology is built for the algorithm
        raise CollsynthError(f"--gpus must be an integer >= 2, got {n}")
    check_output(args.output, flag="-o", inputs=[args.topology], folder=args.straggler == "all")
    check_class_values(args.alpha, parse_time, "--alpha")
    check_class_values(args.bandwidth, parse_rate, "--bandwidth")
    topo = make_topology(args.topology, n, alpha=args.alpha, bandwidth=args.bandwidth) if args.topology else None
    params = _synth_params(args)
    if args.format not in ("json", "msccl-xml", "mscclpp-plan"):
        raise CollsynthError(f"unknown --format {args.format!r}: use json, msccl-xml or mscclpp-plan")
    check_format_flags(args, args.format)
    if args.straggler == "all":
        if args.format != "json":  # the family folder holds JSON schedules; its emitters are emit's
            raise CollsynthError(f"--straggler all writes JSON schedules, not {args.format}: drop -f/--format "
                                 "(and its options), then `collsynth emit` the schedule of the straggler wanted")
        return _synth_family(args, params)
    nodes = topo.node_count if topo is not None else 1
    if args.format != "json":  # building, verifying and emitting, estimated before any of it
        check_synth_emit(args.format, args.algorithm, n, args.collective, params, _emit_options(args), nodes)
    schedule = build_schedule(args.algorithm, n, args.collective, **params)
    if topo is not None and len(topo.classes) > 1:
        record_topology(schedule, topo)  # verify FILE enforces its per-class ports again
    check(schedule)
    if args.format != "json":  # on the schedule built (emit checks it again, after any fitting)
        check_emit(args.format, schedule, _emit_options(args))
    if args.format == "mscclpp-plan":
        schedule, note = fit_cluster_pipeline(schedule, params, **_emit_options(args))
        if note:
            print(note, file=sys.stderr)
    if args.format in ("msccl-xml", "mscclpp-plan"):
        text = emit(schedule, args.format, **_emit_options(args))
    else:
        text = schedule.to_json()
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        write_text_atomic(args.output, text)
        print(f"wrote {args.output}: {schedule.name}, {schedule.nsteps} steps, {schedule.ntransfers} transfers "
              f"(verified)", file=sys.stderr)
    if isinstance(schedule.meta.get("solver"), dict):  # optimal, time limit or warm start, and the gap
        print(status_line(schedule.meta["solver"]), file=sys.stderr)  # type: ignore[arg-type]
    return 0


def _synth_family(args: argparse.Namespace, params: dict[str, Any]) -> int:
    if args.algorithm not in ("stragglar", "clusterstraggler"):
        raise CollsynthError("--straggler all applies to -a stragglar and -a clusterstraggler only")
    if not args.output or args.output == "-":
        raise CollsynthError("--straggler all writes one file per straggler: give a directory with -o DIR")
    if args.algorithm == "clusterstraggler":
        if args.arrival:
            raise CollsynthError("--straggler all builds a schedule for every late GPU and late node: drop --arrival")
        if args.topology is None:
            raise CollsynthError("clusterstraggler --straggler all needs the machine: give -t TOPOLOGY (e.g. "
                                 "h100-cluster or gb200-nvl72)")
        topology = params.pop("topology")
        manifest = write_cluster_family(topology, args.output, force=args.force, **params)
    else:
        manifest = write_family(args.gpus, args.output, force=args.force, **params)
    print(f"wrote {len(manifest['schedules'])} verified schedules and manifest.json to {args.output}", file=sys.stderr)
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    s = load_schedule(args.file)
    try:
        info = s.summary()
    except CollsynthError as e:
        raise CollsynthError(f"{args.file}: {e}") from None
    if args.json:
        print_json(info)
        return 0
    sent = info["bytes_sent_per_buffer_byte"]
    print(f"{info['name'] or args.file}: {s.collective}, {s.nranks} ranks, {s.nchunks} chunks, {s.nsteps} steps, "
          f"{s.ntransfers} transfers, ports {s.ports}")
    for ph in s.phases:
        waits = "all ranks" if len(ph.waits_for) == s.nranks else f"ranks {rank_ranges(ph.waits_for)}"
        print(f"  phase {ph.name}: steps {ph.start}..{ph.stop - 1} ({ph.stop - ph.start}), waits for {waits}")
    if not s.phases:
        print(f"  one phase: {s.nsteps} steps, waits for all ranks")
    if s.meta.get("topology") is not None:
        try:
            topo = schedule_topology(s)
            assert topo is not None  # meta names one
            nodes = f", {topo.node_count} nodes" if topo.node_count > 1 else ""
            print(f"  topology: {topo.name}{nodes} (recorded: verify enforces its ports per link class, "
                  f"simulate runs on it)")
        except CollsynthError as e:
            print(f"  topology: recorded, but {e}")
    print(f"  bytes sent per buffer byte: min {min(sent):.4f}, max {max(sent):.4f}, mean {sum(sent) / len(sent):.4f}")
    if s.nranks <= 16:
        print("  per rank: " + ", ".join(f"{r}:{x:.4f}" for r, x in enumerate(sent)))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    size = None
    if args.size is not None:
        size = parse_size(args.size, flag="--size")
    report = verify_file(args.file, ports=args.ports, size=size)
    if args.json:
        print_json({"file": args.file, "ok": report.ok, "message": report.message})
    else:
        print(report.message)
    return 0 if report.ok else 1


def cmd_simulate(args: argparse.Namespace) -> int:
    check_output(args.timeline, flag="--timeline", inputs=[args.file, args.topology])
    s = load_schedule(args.file)  # an XML file or a plan is checked as it is read
    if file_kind(args.file) == "schedule":
        check(s, source=args.file)
    size, topo, arrivals = model_from_args(args, s.nranks, s)
    res = simulate(s, size, topo, arrivals, timeline=bool(args.timeline))
    out = {
        "file": args.file,
        "ranks": s.nranks,
        "size_bytes": size,
        "completion_s": res.completion_s,
        "after_last_arrival_s": res.after_last_arrival_s,
        "last_arrival_s": res.last_arrival_s,
        "rank_finish_s": list(res.rank_finish_s),
        "topology": topo.name,
    }
    bound = compare_bound(s.nranks, size, topo, arrivals) if s.collective == "allreduce" else None
    if bound is not None:  # the distance to the proven bound compare measures against (synth.bounds)
        out.update(bound.to_json_dict())
        out["x_bound"] = res.after_last_arrival_s / bound.after_last_arrival_s
    if args.timeline:
        write_text_atomic(args.timeline, json.dumps(res.timeline) + "\n")
    if args.json:
        print_json(out)
    else:
        tail = (f"; {out['x_bound']:.3f}x the lower bound of {format_time(bound.after_last_arrival_s)} "
                f"after it ({bound.kind})" if bound is not None else "")
        print(f"{s.name or args.file}: completion {format_time(res.completion_s)}, "
              f"{format_time(res.after_last_arrival_s)} after the last arrival "
              f"({format_time(res.last_arrival_s)}){tail}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    n = args.gpus
    if n < 2:
        raise CollsynthError(f"--gpus must be an integer >= 2, got {n}")
    size, topo, arrivals = model_from_args(args, n)
    limit = (parse_time(args.solver_time_limit, allow_zero=False, flag="--solver-time-limit")
             if args.solver_time_limit else None)
    rows = compare(n, size, topo, arrivals, args.algorithms, limit)
    bound = compare_bound(n, size, topo, arrivals)
    if args.json:
        print_json({"gpus": n, "size_bytes": size, "topology": args.topology,
                    "arrivals": {str(k): v for k, v in sorted(arrivals.items())},
                    "bound_s": bound.value_s, "bound_after_last_arrival_s": bound.after_last_arrival_s,
                    "bound": {"kind": bound.kind, "formula": bound.formula, "numbers": bound.numbers},
                    "rows": rows})
        return 0
    late = ", ".join(f"rank {r} at {format_time(t)}" for r, t in sorted(arrivals.items()) if t > 0) or "none"
    print(f"{n} ranks, {args.size} per rank, topology {args.topology}, late arrivals: {late}")
    print(f"bound: {format_time(bound.after_last_arrival_s)} after the last arrival ({bound.kind}: {bound.formula})")
    table = [{**r, "completion": format_time(r["completion_s"]),
              "after_last": format_time(r["after_last_arrival_s"]),
              "speedup": f"{r['speedup_vs_ring']:.3f}x", "xb": f"{r['x_bound']:.2f}x"} for r in rows]
    print_table(table, ["algorithm", "completion", "after_last", "speedup", "xb", "steps", "note"],
                ["algorithm", "completion", "after last arrival", "speedup vs ring", "x bound", "steps", "note"])
    return 0
