"""Core commands: algorithms, topologies, synth, info, verify, simulate, compare."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import CollsynthError, ScheduleFileError
from ..fileio import write_text_atomic
from ..units import format_time, parse_arrivals, parse_rate, parse_size, parse_time
from .common import add_model_args, int_arg, print_json, print_table


def add_commands(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("algorithms", help="list the algorithms", description="List every registered algorithm.")
    p.set_defaults(func=cmd_algorithms)

    p = sub.add_parser("topologies", help="list the topology presets",
                       description="List the topology presets (a JSON file works wherever a preset does).")
    p.set_defaults(func=cmd_topologies)

    p = sub.add_parser(
        "synth", help="build and verify a schedule",
        description="Build a schedule with a named algorithm, verify it, and write it (JSON by default). "
                    "An unverified schedule is never written.",
        epilog="examples:\n  collsynth synth -a ring -n 8 -o ring8.json\n"
               "  collsynth synth -a stragglar -n 8 --straggler 3 -o s8.json\n"
               "  collsynth synth -a stragglar -n 8 --straggler all -o family/\n"
               "  collsynth synth -a ring -n 8 --format msccl-xml -o ring8.xml",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algorithm", "-a", required=True, help="algorithm name (see `collsynth algorithms`)")
    p.add_argument("--gpus", "-n", required=True, type=int_arg("--gpus"), help="number of ranks (>= 2)")
    p.add_argument("--collective", "-c", default="allreduce",
                   choices=["allreduce", "reducescatter", "allgather"], help="collective (default allreduce)")
    p.add_argument("--topology", "-t", default=None,
                   help="topology preset or JSON file the schedule targets (checked; used by the solver)")
    p.add_argument("--straggler", default=None, help="stragglar: the late rank (default n-1), or `all` for one "
                                                     "schedule per rank plus a manifest in the -o directory")
    p.add_argument("--phase1", default=None, help="stragglar: ReduceScatter among punctual ranks: ring|direct|rhd")
    p.add_argument("--pipeline", default=None, help="stragglar: chunks per punctual rank (K >= 1 or auto)")
    g = p.add_argument_group("model inputs (stragglar --pipeline auto, solver)")
    g.add_argument("--size", default=None, help="buffer bytes per rank, e.g. 1GiB (default 1GiB)")
    g.add_argument("--alpha", default=None, help="per-message latency, e.g. 3us (default: the topology's)")
    g.add_argument("--bandwidth", default=None, help="per-port bandwidth, e.g. 450GiB/s (default: the topology's)")
    g = p.add_argument_group("solver")
    g.add_argument("--arrival", action="append", metavar="RANK=TIME", default=None,
                   help="solver: when RANK arrives (default 0); repeat per rank")
    g.add_argument("--chunks", default=None, type=int_arg("--chunks"), help="solver: chunks per buffer")
    g.add_argument("--time-limit", default=None, help="solver: wall-clock limit, e.g. 60s")
    g.add_argument("--solver", default=None, choices=["cbc", "highs"], help="solver: MILP backend (default cbc)")
    p.add_argument("--format", "-f", default="json", help="json (default) or msccl-xml")
    p.add_argument("-o", "--output", default=None, help="output file (stdout when omitted)")
    p.add_argument("--force", action="store_true", help="with --straggler all: overwrite a non-empty directory")
    _add_xml_options(p)
    p.set_defaults(func=cmd_synth)

    p = sub.add_parser("info", help="summarize a schedule file", description="Ranks, chunks, steps, transfers, "
                       "steps per phase and bytes each rank sends per byte of buffer.")
    p.add_argument("file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("verify", help="prove a schedule (JSON or MSCCL XML) correct",
                       description="Exit 0 with `OK ...` when the schedule computes its collective, 1 with the "
                                   "first violation when not, 2 when the file cannot be read.")
    p.add_argument("file")
    p.add_argument("--ports", type=int_arg("--ports"), default=None,
                   help="messages a rank may send and receive per step (default: the schedule's own)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("simulate", help="time a schedule in the alpha-beta model",
                       description="Event-driven alpha-beta simulation with per-rank arrival times and link "
                                   "sharing. Times are measured from 0; --arrival RANK=TIME delays a rank.",
                       epilog="example: collsynth simulate ring8.json --size 1GiB --alpha 3us "
                              "--bandwidth 450GiB/s --arrival 7=5ms")
    p.add_argument("file")
    add_model_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--timeline", metavar="FILE", default=None, help="also write every transfer's start/end as JSON")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("compare", help="rank algorithms for one setting",
                       description="Build, verify and simulate every algorithm for the same ranks, size, model "
                                   "and arrivals; rows sorted fastest first. stragglar takes the latest "
                                   "arrival as its straggler.",
                       epilog="example: collsynth compare --gpus 8 --size 1GiB --alpha 3us --bandwidth 450GiB/s "
                              "--arrival 7=5ms")
    p.add_argument("--gpus", "-n", required=True, type=int_arg("--gpus"), help="number of ranks (>= 2)")
    add_model_args(p)
    p.add_argument("--algorithms", default=None, help="comma-separated subset (default: every allreduce algorithm)")
    p.add_argument("--solver-time-limit", default=None, help="also run the MILP solver with this time limit")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_compare)


# ---------------------------------------------------------------------------------------- helpers


def _xml_module() -> Any:
    try:
        from ..backends import msccl_xml
    except ImportError:
        return None
    return msccl_xml


def _add_xml_options(p: argparse.ArgumentParser) -> None:
    mod = _xml_module()
    if mod is not None and hasattr(mod, "add_xml_options"):
        mod.add_xml_options(p)


def _is_xml(path: str) -> bool:
    return path.lower().endswith(".xml")


def load_any(path: str) -> Any:
    """A Schedule from a JSON schedule or an MSCCL XML file."""
    if _is_xml(path):
        mod = _xml_module()
        if mod is None:
            raise ScheduleFileError(f"{path}: reading MSCCL XML needs collsynth.backends.msccl_xml")
        return mod.xml_to_schedule(path)
    from ..synth.ir import load_schedule
    return load_schedule(path)


def model_from_args(args: argparse.Namespace, n: int) -> tuple[int, Any, dict[int, float]]:
    """(size bytes, Topology, arrivals) from --size/--alpha/--bandwidth/--topology/--arrival."""
    from ..synth.topology import make_topology

    size = parse_size(args.size)
    alpha = parse_time(args.alpha) if args.alpha is not None else None
    bw = parse_rate(args.bandwidth) if args.bandwidth is not None else None
    topo = make_topology(args.topology, n, alpha=alpha, bandwidth=bw)
    arrivals = parse_arrivals(args.arrival, n)
    return size, topo, arrivals


# ---------------------------------------------------------------------------------------- commands
def cmd_algorithms(args: argparse.Namespace) -> int:
    from ..synth.algorithms import algorithm_params, algorithms, param_flag

    for name, info in algorithms().items():
        opts = " ".join(param_flag(o) for o in algorithm_params(name))
        colls = ",".join(info.collectives)
        print(f"{name:<10} {info.description} [{colls}]" + (f" options: {opts}" if opts else ""))
    return 0


def cmd_topologies(args: argparse.Namespace) -> int:
    from ..synth.topology import topology_presets

    for name, desc in topology_presets().items():
        print(f"{name:<10} {desc}")
    return 0


def _synth_params(args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if args.straggler is not None and args.straggler != "all":
        try:
            params["straggler"] = int(args.straggler)
        except ValueError:
            raise CollsynthError(f"--straggler must be a rank number or `all`, got {args.straggler!r}") from None
    if args.phase1 is not None:
        params["phase1"] = args.phase1
    if args.pipeline is not None:
        params["pipeline"] = args.pipeline if args.pipeline == "auto" else _pipeline_int(args.pipeline)
    if args.size is not None:
        params["size"] = parse_size(args.size)
    if args.alpha is not None:
        params["alpha"] = parse_time(args.alpha)
    if args.bandwidth is not None:
        params["bandwidth"] = parse_rate(args.bandwidth)
    if args.arrival is not None:
        params["arrivals"] = parse_arrivals(args.arrival, args.gpus)
    if args.chunks is not None:
        params["chunks"] = args.chunks
    if args.time_limit is not None:
        params["time_limit"] = parse_time(args.time_limit, allow_zero=False)
    if args.solver is not None:
        params["solver"] = args.solver
    accepted = _accepts(args.algorithm)
    if "topology" in accepted:  # the topology carries the model: fold --alpha/--bandwidth into it
        from ..synth.topology import make_topology
        params["topology"] = make_topology(args.topology or "nvswitch", args.gpus,
                                           alpha=params.pop("alpha", None), bandwidth=params.pop("bandwidth", None))
    return params


def _pipeline_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise CollsynthError(f"--pipeline must be a positive integer or `auto`, got {text!r}") from None


def cmd_synth(args: argparse.Namespace) -> int:
    from ..synth.algorithms import build_schedule
    from ..synth.verify import check

    n = args.gpus
    if args.topology is not None:
        from ..synth.topology import make_topology
        make_topology(args.topology, n)
    params = _synth_params(args)
    if args.format not in ("json", "msccl-xml"):
        raise CollsynthError(f"unknown --format {args.format!r}: use json or msccl-xml")
    if args.straggler == "all":
        return _synth_family(args, params)
    schedule = check(build_schedule(args.algorithm, n, args.collective, **params))
    if args.format == "msccl-xml":
        mod = _xml_module()
        if mod is None:
            raise CollsynthError("--format msccl-xml needs collsynth.backends.msccl_xml")
        text = mod.emit_xml(schedule, **mod.xml_options_from_args(args))
    else:
        text = schedule.to_json()
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        write_text_atomic(args.output, text)
        print(f"wrote {args.output}: {schedule.name}, {schedule.nsteps} steps, {schedule.ntransfers} transfers "
              f"(verified)", file=sys.stderr)
    return 0


def _accepts(algorithm: str) -> tuple[str, ...]:
    from ..synth.algorithms import algorithm_params
    return algorithm_params(algorithm)


def _synth_family(args: argparse.Namespace, params: dict[str, Any]) -> int:
    if args.algorithm != "stragglar":
        raise CollsynthError("--straggler all applies to -a stragglar only")
    if not args.output or args.output == "-":
        raise CollsynthError("--straggler all writes one file per straggler: give a directory with -o DIR")
    from ..synth.algorithms.stragglar import write_family

    manifest = write_family(args.gpus, args.output, force=args.force, **params)
    count = len(manifest["schedules"]) if isinstance(manifest, dict) and "schedules" in manifest else args.gpus
    print(f"wrote {count} verified schedules and manifest.json to {args.output}", file=sys.stderr)
    return 0


def schedule_summary(s: Any) -> dict[str, Any]:
    """The facts `collsynth info` prints."""
    sent = s.bytes_sent_per_rank()
    return {
        "name": s.name,
        "collective": s.collective,
        "ranks": s.nranks,
        "chunks": s.nchunks,
        "steps": s.nsteps,
        "transfers": s.ntransfers,
        "ports": s.ports,
        "steps_per_phase": s.steps_per_phase(),
        "phases": [ph.to_json() for ph in s.phases],
        "bytes_sent_per_buffer_byte": [round(float(x), 12) for x in sent],
        "meta": s.meta,
    }


def cmd_info(args: argparse.Namespace) -> int:
    s = load_any(args.file)
    info = schedule_summary(s)
    if args.json:
        print_json(info)
        return 0
    sent = info["bytes_sent_per_buffer_byte"]
    print(f"{info['name'] or args.file}: {s.collective}, {s.nranks} ranks, {s.nchunks} chunks, {s.nsteps} steps, "
          f"{s.ntransfers} transfers, ports {s.ports}")
    for ph in s.phases:
        waits = "all ranks" if len(ph.waits_for) == s.nranks else f"ranks {_ranges(ph.waits_for)}"
        print(f"  phase {ph.name}: steps {ph.start}..{ph.stop - 1} ({ph.stop - ph.start}), waits for {waits}")
    if not s.phases:
        print(f"  one phase: {s.nsteps} steps, waits for all ranks")
    print(f"  bytes sent per buffer byte: min {min(sent):.4f}, max {max(sent):.4f}, mean {sum(sent) / len(sent):.4f}")
    if s.nranks <= 16:
        print("  per rank: " + ", ".join(f"{r}:{x:.4f}" for r, x in enumerate(sent)))
    return 0


def _ranges(ranks: tuple[int, ...]) -> str:
    out, start, prev = [], None, None
    for r in ranks:
        if start is None:
            start = prev = r
        elif r == prev + 1:
            prev = r
        else:
            out.append(f"{start}-{prev}" if prev != start else str(start))
            start = prev = r
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(out)


def cmd_verify(args: argparse.Namespace) -> int:
    if _is_xml(args.file):
        mod = _xml_module()
        if mod is None:
            raise ScheduleFileError(f"{args.file}: reading MSCCL XML needs collsynth.backends.msccl_xml")
        report = mod.check_xml_file(args.file)
    else:
        from ..synth.ir import load_schedule
        from ..synth.verify import verify
        report = verify(load_schedule(args.file), ports=args.ports)
    if args.json:
        print_json({"file": args.file, "ok": report.ok, "message": report.message})
    else:
        print(report.message)
    return 0 if report.ok else 1


def _verified(s: Any, path: str) -> Any:
    from ..synth.verify import verify

    report = verify(s)
    if not report.ok:
        raise CollsynthError(f"{path} does not verify ({report.message}); fix the schedule before timing it")
    return s


def cmd_simulate(args: argparse.Namespace) -> int:
    from ..synth.simulate import simulate

    s = load_any(args.file)
    if not _is_xml(args.file):
        _verified(s, args.file)
    size, topo, arrivals = model_from_args(args, s.nranks)
    res = simulate(s, size, topo, arrivals, timeline=bool(args.timeline))
    out = {
        "file": args.file,
        "ranks": s.nranks,
        "size_bytes": size,
        "completion_s": res.completion_s,
        "after_last_arrival_s": res.after_last_arrival_s,
        "last_arrival_s": res.last_arrival_s,
        "rank_finish_s": list(res.rank_finish_s),
    }
    if args.timeline:
        import json
        write_text_atomic(args.timeline, json.dumps(res.timeline) + "\n")
    if args.json:
        print_json(out)
    else:
        print(f"{s.name or args.file}: completion {format_time(res.completion_s)}, "
              f"{format_time(res.after_last_arrival_s)} after the last arrival "
              f"({format_time(res.last_arrival_s)})")
    return 0


def compare_rows(n: int, size: int, topo: Any, arrivals: dict[int, float], names: list[str] | None = None,
                 solver_time_limit: float | None = None, progress: bool = False) -> list[dict[str, Any]]:
    """Build, verify and simulate each algorithm; rows sorted fastest first (after the last arrival)."""
    from ..synth.algorithms import algorithms, build_schedule
    from ..synth.simulate import simulate
    from ..synth.verify import check

    regs = algorithms()
    default = [a for a, info in regs.items() if "allreduce" in info.collectives and a != "solver"]
    names = list(names or default)
    if solver_time_limit is not None and "solver" not in names:
        names.append("solver")
    for a in names:
        if a not in regs:
            raise CollsynthError(f"unknown algorithm {a!r} in --algorithms: choose from {', '.join(regs)}")
    if "ring" not in names:
        names = ["ring", *names]
        hide_ring = True
    else:
        hide_ring = False
    times = [arrivals.get(r, 0.0) for r in range(n)]
    latest = max(range(n), key=lambda r: (times[r], r))
    rows = []
    for i, a in enumerate(names):
        if progress:
            print(f"[{i + 1}/{len(names)}] {a}", file=sys.stderr)
        params: dict[str, Any] = {}
        note = ""
        accepted = _accepts(a)
        if "straggler" in accepted:
            params["straggler"] = latest
            note = f"straggler={latest}"
        if a == "stragglar":  # pipeline depth from the model the straggler sees on this topology
            from ..synth.algorithms.stragglar_pipeline import topology_model
            al, bw = topology_model(topo, latest)
            params.update(pipeline="auto", size=size, alpha=al, bandwidth=bw)
        if a == "solver":
            params.update(arrivals=arrivals, time_limit=solver_time_limit, size=size, topology=topo)
        s = check(build_schedule(a, n, "allreduce", **{k: v for k, v in params.items() if k in accepted}))
        if "pipeline" in s.meta and s.meta.get("pipeline", 1) != 1:
            note += f" K={s.meta['pipeline']}"
        res = simulate(s, size, topo, arrivals)
        rows.append({"algorithm": a, "completion_s": res.completion_s,
                     "after_last_arrival_s": res.after_last_arrival_s, "steps": s.nsteps, "note": note.strip()})
    ring = next(r for r in rows if r["algorithm"] == "ring")["after_last_arrival_s"]
    for r in rows:
        r["speedup_vs_ring"] = ring / r["after_last_arrival_s"] if r["after_last_arrival_s"] > 0 else float("inf")
    if hide_ring:
        rows = [r for r in rows if r["algorithm"] != "ring"]
    rows.sort(key=lambda r: (r["after_last_arrival_s"], r["algorithm"]))
    return rows


def cmd_compare(args: argparse.Namespace) -> int:
    n = args.gpus
    if n < 2:
        raise CollsynthError(f"--gpus must be an integer >= 2, got {n}")
    size, topo, arrivals = model_from_args(args, n)
    names = [a.strip() for a in args.algorithms.split(",") if a.strip()] if args.algorithms else None
    limit = parse_time(args.solver_time_limit, allow_zero=False) if args.solver_time_limit else None
    rows = compare_rows(n, size, topo, arrivals, names, limit, progress=sys.stderr.isatty() and not args.json)
    if args.json:
        print_json({"gpus": n, "size_bytes": size, "topology": args.topology,
                    "arrivals": {str(k): v for k, v in sorted(arrivals.items())}, "rows": rows})
        return 0
    late = ", ".join(f"rank {r} at {format_time(t)}" for r, t in sorted(arrivals.items()) if t > 0) or "none"
    print(f"{n} ranks, {args.size} per rank, topology {args.topology}, late arrivals: {late}")
    table = [{**r, "completion": format_time(r["completion_s"]),
              "after_last": format_time(r["after_last_arrival_s"]),
              "speedup": f"{r['speedup_vs_ring']:.3f}x"} for r in rows]
    print_table(table, ["algorithm", "completion", "after_last", "speedup", "steps", "note"],
                ["algorithm", "completion", "after last arrival", "speedup vs ring", "steps", "note"])
    return 0
