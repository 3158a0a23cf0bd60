"""`collsynth topology list|show|import` and the `topologies` alias (argparse and printing only; the work is
the library's: synth.topology and synth.topology_import)."""

from __future__ import annotations

import argparse
import os

from collsynth.commands.catalog import add_command_parser, show_help
from collsynth.commands.common import int_arg, number_arg, print_json
from collsynth.errors import CollsynthError
from collsynth.fileio import check_output, read_bytes, write_text_atomic
from collsynth.synth.topology import (
    Topology,
    load_topology,
    make_topology,
    preset_gpus_per_node,
    topology_from_dict,
    topology_presets,
)
from collsynth.synth.topology_import import (
    FABRICS,
    ImportResult,
    dumps_topology,
    import_topology,
    parse_nic_speed,
)
from collsynth.synth.topology_view import describe, plot_topology
from collsynth.units import format_time, rank_ranges

IMPORT_EPILOG = """examples:
  collsynth topology import nccl_topo.xml -o node.json
  collsynth topology import topo_m.txt -o node.json --nic-speed 400Gb/s --sm 90
  collsynth topology import nccl_topo.xml -o cluster.json --nodes 16 --fabric rail
  collsynth topology import nccl_topo.xml -o cluster.json --nodes 16 --fabric fat-tree --oversubscription 2

FILE is the XML NCCL writes with NCCL_TOPO_DUMP_FILE=path, or the output of `nvidia-smi topo -m`
(told apart by content). Every assumption made is printed; see docs/topology-import.md."""


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = add_command_parser(sub, "topologies", description="List the topology presets (the same as "
                           "`collsynth topology list`; a JSON file works wherever a preset does).",
                           epilog="examples:\n  collsynth topologies\n  collsynth topologies --json\n"
                                  "  collsynth compare --gpus 8 --size 1GiB -t dgx1")
    p.add_argument("--json", action="store_true", help=LIST_JSON_HELP)
    p.set_defaults(func=cmd_list)

    p = add_command_parser(sub, "topology", description="Topologies: list the presets, show one, import a real "
                           "machine's NCCL topology XML or `nvidia-smi topo -m` output as a topology JSON file.",
                           epilog="examples:\n  collsynth topology list\n  collsynth topology show dgx1\n"
                                  "  collsynth topology import nccl_topo.xml -o node.json")
    tsub = p.add_subparsers(dest="topology_command", metavar="ACTION", parser_class=type(p))
    q = tsub.add_parser("list", help="list the presets (same as `collsynth topologies`)",
                        description="List the topology presets.", epilog="example:\n  collsynth topology list",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("--json", action="store_true", help=LIST_JSON_HELP)
    q.set_defaults(func=cmd_list)

    q = tsub.add_parser("show", help="GPUs, nodes, link classes and bisection bandwidth of a topology; --plot draws it",
                        description="Describe a preset, a topology JSON file, or a machine's NCCL topology XML or "
                                    "nvidia-smi topo -m output (imported on the fly): GPUs, server nodes, link "
                                    "classes (ports, alpha and bandwidth of one GPU port), switches, links and the "
                                    "bisection bandwidth (maximum flow between the two halves of the nodes or GPUs).",
                        epilog="examples:\n  collsynth topology show dgx1\n"
                               "  collsynth topology show h100-cluster --gpus 128 --plot cluster.png\n"
                               "  collsynth topology show node.json --json\n"
                               "  collsynth topology show nccl_topo.xml",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("topology", metavar="NAME|FILE", help="a preset (see `collsynth topology list`), a topology JSON "
                   "file, or NCCL XML / nvidia-smi topo -m text")
    q.add_argument("--gpus", "-n", type=int_arg("--gpus"), default=None,
                   help="GPUs for a preset (default 8; a file gives its own)")
    q.add_argument("--alpha", default=None, help="alpha, e.g. 3us, or per link class nvlink=1us,net=3us")
    q.add_argument("--bandwidth", default=None,
                   help="bandwidth, e.g. 450GiB/s, or per link class nvlink=450GB/s,net=50GB/s")
    q.add_argument("--plot", metavar="FILE.png", default=None, help="also draw the topology (PNG)")
    q.add_argument("--json", action="store_true", help="machine-readable output")
    q.set_defaults(func=cmd_show)

    q = tsub.add_parser("import", help="NCCL topology XML or nvidia-smi topo -m output -> topology JSON",
                        description="Read one machine's NCCL topology dump (NCCL_TOPO_DUMP_FILE) or `nvidia-smi "
                                    "topo -m` output and write it as a topology JSON file: GPUs, NVLinks to "
                                    "NVSwitches or peers, NICs, PCIe/CPU placement, bandwidths from link counts "
                                    "and NCCL's per-link constants. With --nodes N, N copies joined by a fabric.",
                        epilog=IMPORT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("file", metavar="FILE", help="NCCL topology XML or nvidia-smi topo -m text")
    q.add_argument("-o", "--output", required=True, help="the topology JSON file to write")
    q.add_argument("--nodes", type=int_arg("--nodes"), default=1, help="copies of the machine (default 1)")
    q.add_argument("--fabric", default=None, choices=FABRICS, help="how the nodes' NICs are joined (needed with "
                   "--nodes > 1): rail (NIC j of every node on rail switch j) or fat-tree (a leaf per node)")
    q.add_argument("--oversubscription", type=number_arg("--oversubscription"), default=1.0,
                   help="spine oversubscription R, 1 to 1000: spine links carry 1/R of the NICs below (default 1)")
    q.add_argument("--sm", type=int_arg("--sm"), default=None,
                   help="nvidia-smi input: compute capability x10 (80 A100, 90 H100/H200, 100 B200); sets NVLink speed")
    q.add_argument("--sms", type=int_arg("--sms"), default=None,
                   help="the GPUs' SM count, recorded as the topology's \"gpu\" (caps an MSCCL++ plan's thread "
                        "blocks per rank; NCCL XML: read from the PCI device id of known GPUs, e.g. 132 for H200)")
    q.add_argument("--nic-speed", default=None,
                   help="every NIC's speed, e.g. 400Gb/s (nvidia-smi input: default 100Gb/s, assumed; NCCL XML: "
                        "replaces the file's speeds)")
    q.add_argument("--name", default=None, help="the topology's name (default: from the file name)")
    q.add_argument("--json", action="store_true", help="print what was read and assumed as JSON")
    q.set_defaults(func=cmd_import)
    p.set_defaults(func=show_help(p))


LIST_JSON_HELP = "print the presets as JSON: name, description, GPUs per node (null where it has no nodes)"


def cmd_list(args: argparse.Namespace) -> int:
    if args.json:
        print_json([{"name": name, "description": desc, "gpus_per_node": preset_gpus_per_node(name)
                     if preset_gpus_per_node(name) > 1 else None} for name, desc in topology_presets().items()])
        return 0
    for name, desc in topology_presets().items():
        print(f"{name:<10} {desc}")
    return 0


def _load(spec: str, gpus: int | None, alpha: str | None, bandwidth: str | None
          ) -> tuple[Topology, ImportResult | None]:
    """(topology, the import result when the file was NCCL XML or nvidia-smi text) for `topology show`."""
    if spec.split(":", 1)[0] in topology_presets() and not os.path.exists(spec):  # a preset, maybe with options
        return make_topology(spec, 8 if gpus is None else gpus, alpha=alpha, bandwidth=bandwidth), None
    if not os.path.lexists(spec):
        raise CollsynthError(f"unknown topology {spec!r}: give a preset ({', '.join(topology_presets())}) or an "
                             "existing file")
    head = read_bytes(spec, what="topology ")[:4096].lstrip()  # a directory or named pipe: one line, exit 2
    if not head.startswith(b"{"):  # NCCL XML or nvidia-smi text: import it
        res = import_topology(spec)
        topo = topology_from_dict(res.topology, gpus, alpha=alpha, bandwidth=bandwidth, source=spec)
        return topo, res
    return load_topology(spec, gpus, alpha=alpha, bandwidth=bandwidth), None


def cmd_show(args: argparse.Namespace) -> int:
    if args.plot is not None and not args.plot.lower().endswith(".png"):
        raise CollsynthError(f"--plot writes PNG: give a file name ending in .png, got {args.plot!r}")
    check_output(args.plot, flag="--plot", inputs=[args.topology])
    topo, imported = _load(args.topology, args.gpus, args.alpha, args.bandwidth)
    d = describe(topo)
    note = plot_topology(topo, args.plot) if args.plot is not None else None
    if args.json:
        print_json({**d, "imported_from": args.topology if imported else None,
                    "assumptions": imported.assumptions if imported else [], "plot": args.plot})
        return 0
    if imported:
        print(f"imported {args.topology} ({imported.model.fmt}), assuming:")
        for a in imported.assumptions:
            print(f"  - {a}")
    per = "/".join(map(str, d["gpus_per_node"]))
    where = (f"{d['nodes']} nodes of {per}" + (f", {d['fabric']} fabric" if d["fabric"] else "")
             if d["nodes"] > 1 else "one node")
    sw = d["switches"]
    print(f"topology {d['name']}: {d['gpus']} GPUs in {where}, {sw} switch{'es' if sw != 1 else ''}, "
          f"{d['links']} links, routing {d['routing']}")
    if topo.gpu is not None:
        print(f"GPU model: {topo.gpu.describe()}")
    print("link classes (per GPU port):")
    width = max(len(c) for c in d["classes"])
    for c, v in d["classes"].items():
        print(f"  {c:<{width}}  {v['ports']} port{'s' if v['ports'] != 1 else ''}, alpha {format_time(v['alpha_s'])}, "
              f"{v['bandwidth_Bps'] / 1e9:g} GB/s")
    print(f"bisection bandwidth ({d['bisection_halves']}): {d['bisection_Bps'] / 1e9:g} GB/s")
    if note:
        print(note)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    check_output(args.output, inputs=[args.file])
    nic = None if args.nic_speed is None else parse_nic_speed(args.nic_speed)
    res = import_topology(args.file, nodes=args.nodes, fabric=args.fabric, oversubscription=args.oversubscription,
                          sm=args.sm, nic_speed=nic, name=args.name, sms=args.sms)
    write_text_atomic(args.output, dumps_topology(res.topology))
    rep = res.report()
    if args.json:
        print_json({**rep, "output": args.output})
        return 0
    fmt = {"nccl-xml": "NCCL topology XML", "nvidia-smi": "nvidia-smi topo -m"}[rep["format"]]
    sms = sorted({g["sm"] for g in rep["node_gpus"] if g["sm"] is not None})
    gpu = res.model.gpu_model
    about = ([f"sm {', '.join(map(str, sms))}"] if sms else []) + ([gpu.describe()] if gpu else [])
    print(f"read {args.file} ({fmt}): {rep['gpus_per_node']} GPUs" + (f" ({'; '.join(about)})" if about else ""))
    links = sorted({g["nvlinks"] for g in rep["node_gpus"]})
    gbps = sorted({g["nvlink_GBps"] for g in rep["node_gpus"]})
    chips = rep["nvswitch_chips"]
    nvl = {"nvswitch": f"through {chips} NVSwitch chips" if chips else "through an NVSwitch (chips not shown)",
           "direct": "direct GPU-GPU links", "none": "none"}[rep["nvlink"]]
    print(f"NVLink: {nvl}" + (f", {'/'.join(map(str, links))} links per GPU ({'/'.join(f'{b:g}' for b in gbps)} "
                              "GB/s per direction)" if rep["nvlink"] != "none" else ""))
    for n in rep["nics"]:
        used = f"used by GPU {rank_ranges(n['gpus'])}" if n["gpus"] else "unused"
        print(f"NIC {n['name']}: {n['speed_Gbps']:g} Gb/s, {n['placement']}, {used}")
    if not rep["nics"]:
        print("NICs: none listed")
    nodes = f"{rep['nodes']} nodes on a {rep['fabric']} fabric, " if rep["nodes"] > 1 else ""
    nsw = len(res.topology["switches"])
    print(f"wrote {args.output}: {nodes}{rep['gpus']} GPUs, {nsw} switch{'es' if nsw != 1 else ''}, "
          f"{len(res.topology['links'])} links")
    print("assumed:")
    for a in rep["assumptions"]:
        print(f"  - {a}")
    return 0
