"""Read ``nvidia-smi topo -m`` output into a ``NodeModel``.

The matrix has a row and a column per GPU and NIC; cells are ``X`` (self), ``NV<k>`` (k bonded
NVLinks), or the PCIe distance ``PIX``/``PXB``/``PHB``/``NODE``/``SYS`` (older drivers: ``SOC`` for
SYS), then CPU Affinity, NUMA Affinity and (newer drivers) GPU NUMA ID columns; GPU rows then carry
one more (empty) tab field than the header. Older drivers name NIC columns ``mlx5_<k>`` directly;
newer ones use ``NIC<k>`` and a "NIC Legend". Tab-separated output is read as printed; a copy whose
tabs became spaces is split at runs of two or more spaces. See ../shared clusters.md, section 2,
and vectors/topologies/SOURCES.md for the quirks.

What the matrix does not say, and is assumed (each reported): the GPU generation (per-link NVLink
bandwidth; pass ``sm``), whether NVLinks go to an NVSwitch or straight to the peer (a switch when
every GPU pair shows the same ``NV<k>`` and k x (GPUs - 1) exceeds 18 links, the most any GPU has),
the NIC speed (pass ``nic_speed``), and PCIe speeds.
"""

from __future__ import annotations

import re

from collsynth.errors import CollsynthError
from collsynth.synth.topology_import.constants import (
    GB,
    MAX_NVLINKS_PER_GPU,
    QPI_BW_GBPS,
    nvlink_gbps,
    pcie_gbps,
)
from collsynth.synth.topology_import.node import DISTANCES, Gpu, Nic, NodeModel

AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
DEFAULT_NIC_BPS = 100e9 / 8  # 100 Gb/s: NCCL's reference NIC (NET_BW, src/graph/topo.h)
_HEADER = re.compile(r"(^|[\t ])GPU0[\t ]+GPU1([\t ]|$)")
_GPU = re.compile(r"GPU(\d+)$")
_NV = re.compile(r"NV(\d+)$")
_CORRUPT_PHB = re.compile(r"PH(\d[\d,\-]*)$")  # "PHB\t0-115" with "B\t" lost, as published


def looks_like_smi(text: str) -> bool:
    """True when one of the first 30 lines is a matrix header (columns GPU0, GPU1, ...)."""
    return any(_HEADER.search(ln) for ln in text.splitlines()[:30])


def _split(line: str, tabs: bool) -> list[str]:
    if tabs:
        return line.split("\t")
    return re.split(r" {2,}", line.strip())


def read_smi_matrix(text: str, name: str, where: str, *, sm: int | None = None,
                    nic_speed: float | None = None) -> NodeModel:
    """A ``NodeModel`` from ``nvidia-smi topo -m`` text; ``sm`` (e.g. 90) and ``nic_speed`` (bytes/s)
    fill in what the matrix does not say."""
    lines = text.splitlines()
    head = next((i for i, ln in enumerate(lines) if _HEADER.search(ln)), None)
    if head is None:
        raise CollsynthError(f"{where}: no matrix header (a line of column names starting with GPU0) found; give the "
                             "output of `nvidia-smi topo -m`")
    tabs = "\t" in lines[head]
    fields = [f.strip() for f in _split(lines[head], tabs)]
    if fields and fields[0] == "":
        fields = fields[1:]
    if not tabs:
        model_note = "the matrix is space-aligned (not tab-separated): split at runs of 2+ spaces"
    else:
        model_note = ""
    ndev = next((i for i, f in enumerate(fields) if f in AFFINITY_COLUMNS), len(fields))
    devices = fields[:ndev]
    aff_names = [f for f in fields[ndev:] if f]
    if len(set(devices)) != len(devices):
        raise CollsynthError(f"{where}: the header names a device twice; each column must be one device")
    rows: dict[str, list[str]] = {}
    for ln in lines[head + 1:]:
        if not ln.strip():
            break
        cells = _split(ln, tabs)
        label = cells[0].strip()
        if label.startswith("Legend"):
            break
        if label not in devices:
            raise CollsynthError(f"{where}: row {label!r} is not a device of the header ({', '.join(devices)})")
        rows[label] = cells[1:]
    missing = [d for d in devices if d not in rows]
    if missing:
        raise CollsynthError(f"{where}: the matrix has no row for {missing[0]}; give the complete output")
    model = NodeModel(name=name, fmt="nvidia-smi", gpus=[], cpus=[], cpu_link_bw=QPI_BW_GBPS["intel-skl"] * GB)
    if model_note:
        model.assume(model_note)
    cell: dict[tuple[str, str], str] = {}
    affinity: dict[str, dict[str, str]] = {}
    corrupt: list[str] = []
    for label, cells in rows.items():
        cells = list(cells)
        for k, dev in enumerate(devices):
            if k >= len(cells):
                raise CollsynthError(f"{where}: row {label} has {len(cells)} cells; the header names {len(devices)} "
                                     "devices")
            c = cells[k].strip()
            m = _CORRUPT_PHB.match(c)
            if m:
                corrupt.append(f"{label}/{dev} {c!r}")
                cells[k] = "PHB"
                cells.insert(k + 1, m.group(1))
                c = "PHB"
            if c == "SOC":
                c = "SYS"
            if not (c == "X" or _NV.match(c) or c in DISTANCES):
                raise CollsynthError(f"{where}: row {label}, column {dev}: cell {c!r} is not X, NV<k>, PIX, PXB, "
                                     "PHB, NODE or SYS")
            if (c == "X") != (label == dev):
                raise CollsynthError(f"{where}: row {label}, column {dev}: cell {c!r}; X belongs on the diagonal "
                                     "only")
            cell[label, dev] = c
        rest = [x.strip() for x in cells[len(devices):]]
        if "GPU NUMA ID" in aff_names and len(rest) == len(aff_names) + 1 and rest[-2] == "":
            del rest[-2]
        affinity[label] = dict(zip(aff_names, rest))
    if corrupt:
        more = f" and {len(corrupt) - 1} more" if len(corrupt) > 1 else ""
        model.assume(f"cell {corrupt[0]}{more} read as PHB followed by the CPU affinity (a copy that lost \"B\" "
                     "and a tab)")
    gpu_labels = sorted((d for d in devices if _GPU.match(d)), key=lambda d: int(d[3:]))
    if [int(d[3:]) for d in gpu_labels] != list(range(len(gpu_labels))):
        raise CollsynthError(f"{where}: GPU columns are {', '.join(gpu_labels)}; expected GPU0..GPU<n-1>")
    if len(gpu_labels) < 2:
        raise CollsynthError(f"{where}: shows {len(gpu_labels)} GPU; a topology needs at least 2")
    _gpus(model, gpu_labels, affinity)
    _nvlinks(model, gpu_labels, cell, sm)
    _nics(model, [d for d in devices if not _GPU.match(d)], gpu_labels, cell, text, nic_speed)
    return model


def _gpus(model: NodeModel, labels: list[str], affinity: dict[str, dict[str, str]]) -> None:
    numa = [affinity[g].get("NUMA Affinity", "") or "N/A" for g in labels]
    groups = sorted(set(numa), key=numa.index)
    model.cpus = [f"NUMA {x}" for x in groups]
    for r, g in enumerate(labels):
        model.gpus.append(Gpu(rank=r, label=g, cpu=groups.index(numa[r]), pcie_bw=pcie_gbps(16.0, 16) * GB))
    model.pcie_note = ("PCIe speeds are not in nvidia-smi output: assumed Gen4 x16 (24 GB/s, NCCL's formula) per "
                       f"GPU and {model.cpu_link_bw / GB:g} GB/s between CPUs (NCCL's Skylake figure)")


def _nvlinks(model: NodeModel, labels: list[str], cell: dict[tuple[str, str], str], sm: int | None) -> None:
    n = len(labels)
    count: dict[tuple[int, int], int] = {}
    for a in range(n):
        for b in range(a + 1, n):
            ma, mb = _NV.match(cell[labels[a], labels[b]]), _NV.match(cell[labels[b], labels[a]])
            ka, kb = (int(ma.group(1)) if ma else 0), (int(mb.group(1)) if mb else 0)
            if ka != kb:
                model.assume(f"GPU{a}/GPU{b} shows NV{ka} one way and NV{kb} the other: the smaller is used")
            if min(ka, kb) > 0:
                count[a, b] = min(ka, kb)
    ks = set(count.values())
    switch = len(count) == n * (n - 1) // 2 and len(ks) == 1 and next(iter(ks)) * (n - 1) > MAX_NVLINKS_PER_GPU
    per_gpu = [0] * n
    if switch:
        k = next(iter(ks))
        model.switch_links = {g: k for g in range(n)}
        per_gpu = [k] * n
        model.assume(f"every GPU pair shows NV{k} and {k} x {n - 1} peers exceeds {MAX_NVLINKS_PER_GPU} links per GPU: "
                     f"the GPUs hang off an NVSwitch with {k} NVLinks each (modelled as one non-blocking switch)")
    elif count:
        model.direct = dict(count)
        for (a, b), k in count.items():
            per_gpu[a] += k
            per_gpu[b] += k
        model.assume("NV<k> cells are read as k direct NVLinks between the two GPUs (no NVSwitch)")
    if count:
        if sm is None and max(per_gpu) >= MAX_NVLINKS_PER_GPU:
            sm = 90
            model.assume(f"the GPU generation is not in nvidia-smi output: {max(per_gpu)} NVLinks per GPU read as "
                         f"H100/H200 (sm 90), {nvlink_gbps(sm):g} GB/s per NVLink (NCCL's figure); pass --sm 100 for "
                         "B200 (40.1 GB/s)")
        elif sm is None:
            model.assume(f"the GPU generation is not in nvidia-smi output: {max(per_gpu)} NVLinks per GPU read as "
                         f"V100/A100, {nvlink_gbps(None):g} GB/s per NVLink (NCCL's figure for sm 70 and 80); pass "
                         "--sm for another generation")
        else:
            model.assume(f"sm {sm} given: {nvlink_gbps(sm):g} GB/s per NVLink (NCCL's figure, src/graph/topo.h)")
    for g in model.gpus:
        g.sm = sm


def _nics(model: NodeModel, nic_labels: list[str], gpu_labels: list[str], cell: dict[tuple[str, str], str],
          text: str, nic_speed: float | None) -> None:
    legend = dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)\s*$", text, re.M))
    if not nic_labels:
        return
    if nic_speed is None:
        nic_speed = DEFAULT_NIC_BPS
        model.assume("NIC speeds are not in nvidia-smi output: assumed 100 Gb/s each (NCCL's reference NIC); "
                     "pass --nic-speed, e.g. --nic-speed 400Gb/s")
    for lab in nic_labels:
        name = legend.get(lab, lab)
        nic = Nic(name=name, bandwidth=nic_speed, placement="")
        for r, g in enumerate(gpu_labels):
            nic.distance[r] = DISTANCES.index(cell[g, lab]) if cell[g, lab] in DISTANCES else len(DISTANCES)
        best = min(nic.distance.values())
        near = [r for r, d in nic.distance.items() if d == best]
        nic.placement = f"PCIe, {DISTANCES[best]} to GPU {', '.join(map(str, near))}"
        model.nics.append(nic)
