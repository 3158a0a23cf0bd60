"""One imported machine (a "node"): what the readers found, turned into the topology JSON schema.

The NCCL XML reader (``nccl_xml``) and the ``nvidia-smi topo -m`` reader (``smi_matrix``) both fill a
``NodeModel``; ``node_topology_dict`` writes it as the schema of ``collsynth.synth.topology`` (links
with a ``"class"``, ``"ports"`` per class). The modelling choices, each also reported as an assumption:

- NVSwitch chips (visible targets with ``tclass 0x068000`` or the hidden ``fffffff:ff:ff.0`` one) become
  one non-blocking switch ``nvswitch``, as NCCL itself merges them into one NVS node (``topo.cc``,
  ncclTopoAddNvLinks); a GPU's link to it carries the sum of its links to every chip, each link
  ``nvlink_gbps(sm)``. Half the NVLink alpha on each side, so GPU to GPU costs one NVLink alpha.
- Direct GPU-GPU NVLinks are one link per pair of ``count`` NVLinks.
- GPUs that NVLink does not join reach each other over PCIe through their CPU (switches ``cpu<k>``,
  class ``pcie``, CPUs joined pairwise at NCCL's inter-CPU bandwidth).
- NICs are not part of a one-node topology (nothing to reach through them); ``cluster.replicate``
  wires them to the fabric. Each GPU uses its closest NIC by PCIe distance (PIX < PXB < PHB < NODE <
  SYS), ties going to the NIC with the fewest GPUs so far, as NCCL spreads GPUs over equally close NICs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from collsynth.errors import CollsynthError
from collsynth.synth.topology.gpus import GpuModel
from collsynth.synth.topology_import.constants import GB, NVLINK_ALPHA, PCIE_ALPHA, nvlink_gbps

# PCIe distance of a GPU to a NIC, closest first (nvidia-smi's legend; NCCL's PATH_PIX..PATH_SYS)
DISTANCES = ("PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass
class Gpu:
    """One GPU as imported: its rank, where it sits and what it is."""

    rank: int
    label: str                 # PCI bus id (XML) or GPU<k> (nvidia-smi)
    sm: int | None = None      # compute capability x10 (90 for H100), None when the input does not say
    cpu: int = 0               # index into NodeModel.cpus
    pcie_bw: float | None = None  # bytes/s of its PCIe path to the CPU (None: unknown)


@dataclass
class Nic:
    """One network interface as imported."""

    name: str
    bandwidth: float           # bytes/s per direction
    placement: str             # where it sits, in words
    distance: dict[int, int] = field(default_factory=dict)  # GPU rank -> index into DISTANCES
    gdr: bool | None = None
    gpus: list[int] = field(default_factory=list)  # filled by assign_nics


@dataclass
class NodeModel:
    """Everything a reader found in one machine's file."""

    name: str
    fmt: str                                  # "nccl-xml" | "nvidia-smi"
    gpus: list[Gpu]
    cpus: list[str]                           # CPU/NUMA labels
    cpu_link_bw: float                        # bytes/s between two CPUs
    switch_links: dict[int, int] = field(default_factory=dict)  # GPU -> NVLinks to the NVSwitch(es)
    switch_chips: int = 0                     # visible NVSwitch chips (0: hidden or none)
    direct: dict[tuple[int, int], int] = field(default_factory=dict)  # (a < b) -> NVLinks
    nics: list[Nic] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    pcie_note: str = ""                       # what was guessed about PCIe (said only when PCIe is used)
    gpu_model: GpuModel | None = None         # the GPUs' model (NCCL XML: PCI device id; else --sms), or None
    gpu_unknown: str = "not named by the file"  # why gpu_model is None (said as an assumption)

    def assume(self, text: str) -> None:
        if text not in self.assumptions:
            self.assumptions.append(text)


def link_bw(model: NodeModel, a: int, b: int | None, count: int) -> float:
    """Bytes/s of ``count`` NVLinks from GPU a (to GPU b, or to the switch when b is None)."""
    sms = [model.gpus[a].sm] + ([model.gpus[b].sm] if b is not None else [])
    return count * min(nvlink_gbps(s) for s in sms) * GB


def nvlink_connected(model: NodeModel) -> bool:
    """True when NVLink alone joins every GPU."""
    n = len(model.gpus)
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    on_switch = sorted(model.switch_links)
    for g in on_switch[1:]:
        parent[find(g)] = find(on_switch[0])
    for a, b in model.direct:
        parent[find(a)] = find(b)
    return len({find(g) for g in range(n)}) == 1


def assign_nics(model: NodeModel) -> None:
    """Give every GPU its closest NIC (ties: the NIC with the fewest GPUs so far, then file order)."""
    for nic in model.nics:
        nic.gpus = []
    if not model.nics:
        return
    for g in range(len(model.gpus)):
        best = min(range(len(model.nics)),
                   key=lambda k: (model.nics[k].distance.get(g, len(DISTANCES)), len(model.nics[k].gpus), k))
        model.nics[best].gpus.append(g)


def node_topology_dict(model: NodeModel) -> dict[str, Any]:
    """The topology JSON schema (``collsynth.synth.topology``) for one machine."""
    n = len(model.gpus)
    if n < 2:
        raise CollsynthError(f"{model.name}: has {n} GPU; a topology needs at least 2 GPUs")
    switches: list[str] = []
    links: list[dict[str, Any]] = []
    ports: dict[str, int] = {}
    if model.switch_links:
        switches.append("nvswitch")
        ports["nvlink"] = 1
        for g in sorted(model.switch_links):
            links.append({"src": g, "dst": "nvswitch", "class": "nvlink", "alpha": NVLINK_ALPHA / 2,
                          "bandwidth": link_bw(model, g, None, model.switch_links[g])})
    for (a, b), count in sorted(model.direct.items()):
        ports["nvlink"] = 1
        links.append({"src": a, "dst": b, "class": "nvlink", "alpha": NVLINK_ALPHA,
                      "bandwidth": link_bw(model, a, b, count)})
    if not nvlink_connected(model):
        ports["pcie"] = 1
        used = sorted({gpu.cpu for gpu in model.gpus})
        for c in used:
            switches.append(f"cpu{c}")
        for gpu in model.gpus:
            bw = gpu.pcie_bw
            if bw is None:
                raise CollsynthError(f"{model.name}: GPU {gpu.rank} has no NVLink to every other GPU and its PCIe "
                                     "speed is unknown")
            links.append({"src": gpu.rank, "dst": f"cpu{gpu.cpu}", "class": "pcie", "alpha": PCIE_ALPHA / 2,
                          "bandwidth": bw})
        for i, c in enumerate(used):
            for d in used[i + 1:]:
                links.append({"src": f"cpu{c}", "dst": f"cpu{d}", "class": "pcie", "alpha": 0.0,
                              "bandwidth": model.cpu_link_bw})
        if model.pcie_note:
            model.assume(model.pcie_note)
        model.assume("NVLink does not join every GPU: GPUs also reach each other over PCIe through their CPUs "
                     f"(class pcie, alpha {PCIE_ALPHA * 1e6:g}us per GPU-GPU route, CPU to CPU "
                     f"{model.cpu_link_bw / GB:g} GB/s)")
    return {"name": model.name, "gpus": n, "switches": switches, "ports": ports, "links": links}
