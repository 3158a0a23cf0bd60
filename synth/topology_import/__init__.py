"""Import a real machine's topology: NCCL's topology XML or ``nvidia-smi topo -m`` output, to the
topology JSON schema of ``collsynth.synth.topology``, one node or replicated into a cluster.

``import_topology(path, nodes=1, fabric=None, ...)`` detects the format, reads the file
(``nccl_xml.read_nccl_xml`` or ``smi_matrix.read_smi_matrix``), builds the topology dict
(``node.node_topology_dict`` or ``cluster.cluster_topology_dict``) and returns it with everything it
assumed. Constants and their sources: ``constants``; the how-to: docs/topology-import.md.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from collsynth.errors import CollsynthError
from collsynth.fileio import read_text
from collsynth.synth.topology.gpus import GpuModel, check_sms
from collsynth.synth.topology_import.cluster import FABRICS, check_cluster_args, cluster_topology_dict
from collsynth.synth.topology_import.constants import GB, MAX_NIC_MBPS, nvlink_gbps
from collsynth.synth.topology_import.nccl_xml import looks_like_nccl_xml, read_nccl_xml
from collsynth.synth.topology_import.node import NodeModel, assign_nics, node_topology_dict
from collsynth.synth.topology_import.smi_matrix import looks_like_smi, read_smi_matrix

__all__ = ["FABRICS", "ImportResult", "MAX_FILE_BYTES", "dumps_topology", "import_topology", "parse_nic_speed",
           "read_node"]

MAX_FILE_BYTES = 16 * 2**20  # real dumps are a few KB; anything this large is not one


@dataclass
class ImportResult:
    """What ``import_topology`` returns: the topology dict, the machine as read, and the assumptions."""

    topology: dict[str, Any]
    model: NodeModel
    nodes: int
    fabric: str | None

    @property
    def assumptions(self) -> list[str]:
        return list(self.model.assumptions)

    def report(self) -> dict[str, Any]:
        """JSON-ready description of what was read and assumed (for `collsynth topology import --json`)."""
        m = self.model
        nv = {g: m.switch_links.get(g, 0) + sum(k for (a, b), k in m.direct.items() if g in (a, b))
              for g in range(len(m.gpus))}
        return {
            "format": m.fmt, "name": self.topology["name"], "gpus_per_node": len(m.gpus), "nodes": self.nodes,
            "gpus": self.topology["gpus"], "fabric": self.fabric,
            "nvlink": ("nvswitch" if m.switch_links else "direct" if m.direct else "none"),
            "nvswitch_chips": m.switch_chips,
            "node_gpus": [{"rank": g.rank, "id": g.label, "sm": g.sm, "cpu": m.cpus[g.cpu] if m.cpus else None,
                           "nvlinks": nv[g.rank], "nvlink_GBps": round(nvlink_gbps(g.sm) * nv[g.rank], 6)}
                          for g in m.gpus],
            "nics": [{"name": n.name, "speed_Gbps": n.bandwidth * 8 / GB, "placement": n.placement,
                      "gpus": list(n.gpus)} for n in m.nics],
            "gpu": m.gpu_model.to_json() if m.gpu_model else None,
            "assumptions": list(m.assumptions),
        }


def dumps_topology(topo: dict[str, Any]) -> str:
    """The topology dict as JSON text, one link and one node per line (deterministic, diff-friendly)."""
    lines = ["{"]
    items = list(topo.items())
    for i, (key, value) in enumerate(items):
        end = "," if i < len(items) - 1 else ""
        if key in ("links", "nodes", "switches") and isinstance(value, list) and value:
            lines.append(f"  {json.dumps(key)}: [")
            lines += [f"    {json.dumps(v)}{',' if j < len(value) - 1 else ''}" for j, v in enumerate(value)]
            lines.append(f"  ]{end}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}{end}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def parse_nic_speed(text: str) -> float:
    """Bytes/s from a NIC speed: bits ("400Gb/s", "400Gbps", "100Gbit/s", "200000Mb/s") or bytes ("50GB/s")."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(b|bit|B)(?:/s|ps)?\s*", str(text))
    if not m:
        raise CollsynthError(f"cannot read NIC speed {text!r}: write e.g. 400Gb/s (bits) or 50GB/s (bytes)")
    value = float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m.group(2)]
    bps = value if m.group(3) == "B" else value / 8
    if bps <= 0:
        raise CollsynthError(f"NIC speed {text!r} must be positive")
    if bps < 1e6 / 8:
        raise CollsynthError(f"NIC speed {text!r} is under 1 Mb/s: write e.g. 400Gb/s (bits) or 50GB/s (bytes)")
    if bps > MAX_NIC_MBPS * 1e6 / 8:
        raise CollsynthError(f"NIC speed {text!r} is over {MAX_NIC_MBPS // 10**6} Tb/s, more than any NIC: write "
                             "e.g. 400Gb/s")
    return bps


def read_node(path: str, *, sm: int | None = None, nic_speed: float | None = None) -> NodeModel:
    """Read one machine's file (NCCL XML or nvidia-smi matrix, detected from the content)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0  # read_text names the problem
    if size > MAX_FILE_BYTES:
        raise CollsynthError(f"topology file {path} is larger than {MAX_FILE_BYTES} bytes; an NCCL dump or "
                             "nvidia-smi matrix is a few KB: give the right file")
    text = read_text(path, what="topology file ")
    if len(text) > MAX_FILE_BYTES:
        raise CollsynthError(f"topology file {path} is larger than {MAX_FILE_BYTES} bytes; give the right file")
    name = os.path.splitext(os.path.basename(path))[0] or "imported"
    where = f"topology file {path}"
    if looks_like_nccl_xml(text):
        model = read_nccl_xml(text, name, where)
        if sm is not None:
            model.assume("--sm is ignored for NCCL XML: the file gives each GPU's sm")
        if nic_speed is not None:
            for nic in model.nics:
                nic.bandwidth = nic_speed
            model.assume(f"--nic-speed {nic_speed * 8 / GB:g} Gb/s replaces the speeds the file gives")
        return model
    if looks_like_smi(text):
        return read_smi_matrix(text, name, where, sm=sm, nic_speed=nic_speed)
    if text.lstrip().startswith("<"):
        raise CollsynthError(f"{where}: XML whose root is not NCCL's <system>: give the file NCCL_TOPO_DUMP_FILE wrote")
    raise CollsynthError(f"{where}: neither NCCL topology XML (<system> root) nor `nvidia-smi topo -m` output "
                         "(a header row GPU0 GPU1 ...)")


def import_topology(path: str, *, nodes: int = 1, fabric: str | None = None, oversubscription: float = 1.0,
                    sm: int | None = None, nic_speed: float | None = None, name: str | None = None,
                    sms: int | None = None) -> ImportResult:
    """Read ``path`` and build its topology dict: one node, or ``nodes`` copies joined by ``fabric``;
    ``sms`` sets the GPUs' SM count (``"gpu"``, which an NCCL dump's PCI device id gives for known GPUs)."""
    check_cluster_args(nodes, fabric, oversubscription)
    if sm is not None and (isinstance(sm, bool) or not isinstance(sm, int) or not 30 <= sm <= 200):
        raise CollsynthError(f"--sm is the compute capability x10 (80 for A100, 90 for H100), got {sm!r}")
    model = read_node(path, sm=sm, nic_speed=nic_speed)
    if sms is not None:
        check_sms(sms, "--sms")
        known = model.gpu_model
        model.gpu_model = GpuModel(known.name if known and known.sms == sms else None, sms)
        if known is not None and known.sms != sms:
            model.assume(f"--sms {sms} replaces the {known.sms} SMs of the {known.name} the file names")
    elif model.gpu_model is None:
        model.assume(f"GPU model {model.gpu_unknown}: MSCCL++ plans for this topology allow an A100's 108 thread "
                     f"blocks per rank unless `topology import --sms` or `emit --sms` gives the SMs")
    if nodes == 1:
        topo = node_topology_dict(model)
        assign_nics(model)
        if name:
            topo["name"] = name
    else:
        assert fabric is not None
        topo = cluster_topology_dict(model, nodes, fabric, oversubscription, name=name)
    if model.gpu_model is not None:  # before "links", the long part
        gpu = model.gpu_model.to_json()
        topo = {**{k: v for k, v in topo.items() if k != "links"}, "gpu": gpu, "links": topo["links"]}
    return ImportResult(topo, model, nodes, fabric if nodes > 1 else None)


