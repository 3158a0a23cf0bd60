"""Replicate one imported machine into a multi-node cluster (topology JSON schema).

``cluster_topology_dict(model, nodes, fabric)``: node k holds GPUs k*G .. k*G+G-1 (G GPUs per node, local
order kept) and a copy of the node's switches named ``n<k>.<switch>``. Each NIC a GPU uses (``assign_nics``)
joins the fabric, class ``net``, at the NIC's speed, half the network alpha on each side:

- ``rail``: NIC j of every node connects to rail switch ``rail<j>`` (a rail-optimized fabric: GPUs with the
  same NIC index are one switch hop apart); the rails meet in one ``spine`` whose link to a rail carries
  the rail's total NIC bandwidth divided by the oversubscription.
- ``fat-tree``: every node's NICs connect to the node's leaf ``leaf<k>``; leaves meet in one ``spine``
  whose link to a leaf carries the node's total NIC bandwidth divided by the oversubscription.

A NIC shared by several GPUs becomes a switch ``n<k>.nic<j>`` (GPU to NIC links at the NIC's speed with
no alpha), so the GPUs share its bandwidth. The result carries ``"nodes"`` (GPUs per server node),
``"fabric"`` and ``"routing": "shortest"`` (a file routes by shortest paths; the switch order makes ties
go through NVLink first, so a message to another rail crosses NVLink to the GPU on that rail, as NCCL's
PXN does, rather than the spine).
"""

from __future__ import annotations

import math
from typing import Any

from collsynth import budget
from collsynth.errors import CollsynthError
from collsynth.synth.topology.cluster import MAX_OVERSUBSCRIPTION
from collsynth.synth.topology_import.constants import NET_ALPHA
from collsynth.synth.topology_import.node import NodeModel, assign_nics, node_topology_dict

FABRICS = ("rail", "fat-tree")
LINK_BYTES = 700  # about the memory of one link of the topology dict and its JSON text


def check_cluster_args(nodes: int, fabric: str | None, oversubscription: float) -> None:
    """One-line errors for --nodes/--fabric/--oversubscription."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise CollsynthError(f"--nodes must be an integer >= 1, got {nodes!r}")
    if fabric is not None and fabric not in FABRICS:
        raise CollsynthError(f"unknown fabric {fabric!r}: use --fabric rail or --fabric fat-tree")
    if nodes > 1 and fabric is None:
        raise CollsynthError(f"--nodes {nodes} needs a fabric: add --fabric rail or --fabric fat-tree")
    if not (isinstance(oversubscription, (int, float)) and math.isfinite(oversubscription)
            and 1 <= oversubscription <= MAX_OVERSUBSCRIPTION):
        raise CollsynthError(f"--oversubscription must be a number from 1 (non-blocking) to {MAX_OVERSUBSCRIPTION:g}, "
                             f"got {oversubscription!r}")


def cluster_topology_dict(model: NodeModel, nodes: int, fabric: str, oversubscription: float = 1.0,
                          name: str | None = None) -> dict[str, Any]:
    """The topology JSON schema for ``nodes`` copies of ``model`` joined by ``fabric``."""
    check_cluster_args(nodes, fabric, oversubscription)
    base = node_topology_dict(model)
    assign_nics(model)
    used = [nic for nic in model.nics if nic.gpus]
    if not used:
        raise CollsynthError(f"{model.name}: lists no NIC, so its copies cannot be joined; import a dump that "
                             "shows the NICs (nvidia-smi topo -m lists them as NIC<k> or mlx5_<k> columns)")
    g = base["gpus"]
    per_node = len(base["links"]) + sum(len(nic.gpus) + (len(nic.gpus) > 1) for nic in used) + 1  # + the fabric's

    def size(k: int) -> float:
        return float(k * per_node * LINK_BYTES)

    budget.check(size(nodes), f"importing {nodes} nodes of {g} GPUs ({nodes * per_node} links)",
                 largest=f"--nodes {budget.largest_fitting(size, 1, nodes)}")
    switches: list[str] = []
    links: list[dict[str, Any]] = []
    half = NET_ALPHA / 2
    hubs: list[str] = []
    for k in range(nodes):
        off = k * g

        def rename(x: Any, k: int = k, off: int = off) -> Any:
            return x + off if isinstance(x, int) else f"n{k}.{x}"

        switches += [f"n{k}.{s}" for s in base["switches"]]
        for ln in base["links"]:
            links.append({**ln, "src": rename(ln["src"]), "dst": rename(ln["dst"])})
        for j, nic in enumerate(used):
            up = f"rail{j}" if fabric == "rail" else f"leaf{k}"
            if len(nic.gpus) == 1:
                links.append({"src": off + nic.gpus[0], "dst": up, "class": "net", "alpha": half,
                              "bandwidth": nic.bandwidth})
                continue
            hub = f"n{k}.nic{j}"
            hubs.append(hub)
            for gpu in nic.gpus:
                links.append({"src": off + gpu, "dst": hub, "class": "net", "alpha": 0.0, "bandwidth": nic.bandwidth})
            links.append({"src": hub, "dst": up, "class": "net", "alpha": half, "bandwidth": nic.bandwidth})
    # node switches first, then NIC hubs, then the fabric: among equally short routes the lowest-numbered
    # next node wins, so a GPU prefers NVLink inside its node and, across rails, NVLink to the GPU on the
    # destination's rail (NCCL's PXN) over the spine
    switches += hubs
    if fabric == "rail":
        switches += [f"rail{j}" for j in range(len(used))]
    else:
        switches += [f"leaf{k}" for k in range(nodes)]
    switches.append("spine")
    if fabric == "rail":
        for j, nic in enumerate(used):
            links.append({"src": f"rail{j}", "dst": "spine", "class": "net", "alpha": 0.0,
                          "bandwidth": nodes * nic.bandwidth / oversubscription})
    else:
        node_bw = sum(nic.bandwidth for nic in used)
        for k in range(nodes):
            links.append({"src": f"leaf{k}", "dst": "spine", "class": "net", "alpha": 0.0,
                          "bandwidth": node_bw / oversubscription})
    shared = [nic.name for nic in used if len(nic.gpus) > 1]
    model.assume(f"{nodes} nodes on a {fabric} fabric: each used NIC links to "
                 + ("its rail switch" if fabric == "rail" else "its node's leaf switch")
                 + f" (class net, alpha {NET_ALPHA * 1e6:g}us per GPU-GPU route, NCCL tuning.cc Ring Simple); one "
                 f"spine joins them at 1/{oversubscription:g} of the NIC bandwidth below it, switch-to-spine hops "
                 "add no alpha")
    if shared:
        model.assume(f"NICs shared by several GPUs ({', '.join(shared)}): the GPUs share its bandwidth")
    unused = [nic.name for nic in model.nics if not nic.gpus]
    if unused:
        model.assume(f"NICs no GPU is closest to are left out: {', '.join(unused)}")
    ports = dict(base["ports"])
    ports["net"] = 1
    return {"name": name or f"{base['name']}-x{nodes}-{fabric}", "gpus": g * nodes, "switches": switches,
            "ports": ports, "nodes": [list(range(k * g, (k + 1) * g)) for k in range(nodes)], "fabric": fabric,
            "routing": "shortest", "links": links}
