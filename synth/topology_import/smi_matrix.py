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

Refused as malformed (one line naming the row and column): a header naming a device twice or GPU columns
other than GPU0..GPU<n-1>; a row missing, repeated or naming no header device; a row with more cells than
the header has columns or fewer than one per device (a tab-separated GPU row also needs its affinity
cells); a cell other than X, NV<k>, PIX, PXB, PHB, NODE, SYS (or SOC); X off the diagonal or another
cell on it; NV<k> with k outside 1..MAX_NVLINK_COUNT or in a NIC's row or column; a cell that differs
from its mirror (the matrix is symmetric); direct NVLinks adding up to more than MAX_NVLINK_COUNT for
one GPU.
"""

from __future__ import annotations

import re

from collsynth.errors import CollsynthError
from collsynth.synth.topology_import.constants import (
    GB,
    MAX_NVLINK_COUNT,
    MAX_NVLINKS_PER_GPU,
    QPI_BW_GBPS,
    bounded_int,
    nvlink_gbps,
    pcie_gbps,
)
from collsynth.synth.topology_import.node import DISTANCES, Gpu, Nic, NodeModel

AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
DEFAULT_NIC_BPS = 100e9 / 8  # 100 Gb/s: NCCL's reference NIC (NET_BW, src/graph/topo.h)
# two GPU columns side by side (GPU0 GPU1 in any real matrix; a matrix lacking GPU1 is then refused by name)
_HEADER = re.compile(r"(^|[\t ])GPU[0-9]+[\t ]+GPU[0-9]+([\t ]|$)")
_GPU = re.compile(r"GPU([0-9]+)$")
_NV = re.compile(r"NV([0-9]+)$")
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
    twice = next((d for i, d in enumerate(devices) if d in devices[:i]), None)
    if twice is not None:
        raise CollsynthError(f"{where}: the header names {twice} twice; each column must be one device")
    gpu_labels = sorted((d for d in devices if _GPU.match(d)), key=lambda d: int(d[3:]))
    if [int(d[3:]) for d in gpu_labels] != list(range(len(gpu_labels))):
        raise CollsynthError(f"{where}: GPU columns are {', '.join(gpu_labels)}; expected GPU0..GPU<n-1>")
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
        if label in rows:
            raise CollsynthError(f"{where}: row {label} appears twice; each device has one row: remove the "
                                 "duplicate")
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
        cells = _fit_row(label, _repair(label, devices, list(cells), corrupt), len(devices), aff_names, tabs, where)
        for k, dev in enumerate(devices):
            cell[label, dev] = _cell(cells[k].strip(), label, dev, where)
        affinity[label] = dict(zip(aff_names, (x.strip() for x in cells[len(devices):])))
    _check_symmetric(devices, cell, where)
    if corrupt:
        more = f" and {len(corrupt) - 1} more" if len(corrupt) > 1 else ""
        model.assume(f"cell {corrupt[0]}{more} read as PHB followed by the CPU affinity (a copy that lost \"B\" "
                     "and a tab)")
    if len(gpu_labels) < 2:
        raise CollsynthError(f"{where}: shows {len(gpu_labels)} GPU; a topology needs at least 2")
    _gpus(model, gpu_labels, affinity)
    _nvlinks(model, gpu_labels, cell, sm, where)
    _nics(model, [d for d in devices if not _GPU.match(d)], gpu_labels, cell, text, nic_speed)
    return model


def _repair(label: str, devices: list[str], cells: list[str], corrupt: list[str]) -> list[str]:
    """``cells`` with each device cell like ``PH0-115`` (a copy that lost "B" and a tab) split back into
    ``PHB`` and the CPU affinity; each one noted in ``corrupt``."""
    for k, dev in enumerate(devices[:len(cells)]):
        c = cells[k].strip()
        m = _CORRUPT_PHB.match(c)
        if m:
            corrupt.append(f"{label}/{dev} {c!r}")
            cells[k:k + 1] = ["PHB", m.group(1)]
    return cells


def _fit_row(label: str, cells: list[str], ndev: int, aff_names: list[str], tabs: bool, where: str) -> list[str]:
    """A row's cells, one per header column: newer drivers' GPU rows carry an empty field before the GPU NUMA
    ID, dropped here. Refused: more cells than the header has columns (trailing empty fields aside: newer
    drivers pad NIC rows), fewer than one per device, or a tab-separated GPU row without its affinity cells
    (a space-aligned copy may have merged or dropped them)."""
    naff = len(aff_names)
    if "GPU NUMA ID" in aff_names and len(cells) == ndev + naff + 1 and not cells[-2].strip():
        cells = cells[:-2] + cells[-1:]
    most = ndev + naff
    used = len(cells)
    while used and not cells[used - 1].strip():
        used -= 1
    fewest = ndev + naff if tabs and _GPU.match(label) else ndev
    if used > most or len(cells) < fewest:
        more = f" and {naff} more ({', '.join(aff_names)})" if aff_names else ""
        raise CollsynthError(f"{where}: row {label} has {used if used > most else len(cells)} cells; the header "
                             f"has {ndev} device columns{more}: give each row one cell per column")
    return cells


def _nv_count(c: str) -> int | None:
    """k of an ``NV<k>`` cell (absurdly long k: MAX_NVLINK_COUNT + 1), None for any other cell."""
    m = _NV.match(c)
    if not m:
        return None
    return bounded_int(m.group(1), MAX_NVLINK_COUNT)


def _cell(c: str, label: str, dev: str, where: str) -> str:
    """One matrix cell, checked (``SOC``, older drivers' name for SYS, read as SYS)."""
    if c == "SOC":
        c = "SYS"
    k = _nv_count(c)
    if not (c == "X" or k is not None or c in DISTANCES) and re.fullmatch(r"[0-9][0-9,\-]*|N/A", c):
        raise CollsynthError(f"{where}: row {label}, column {dev}: cell {c!r} looks like an affinity value, so the "
                             "row has fewer device cells than the header has device columns; give one cell per "
                             "column")
    if not (c == "X" or k is not None or c in DISTANCES):
        raise CollsynthError(f"{where}: row {label}, column {dev}: cell {c!r} is not X, NV<k>, PIX, PXB, "
                             "PHB, NODE or SYS")
    if (c == "X") != (label == dev):
        raise CollsynthError(f"{where}: row {label}, column {dev}: cell {c!r}; X belongs on the diagonal "
                             "only")
    if k is not None and not 1 <= k <= MAX_NVLINK_COUNT:
        raise CollsynthError(f"{where}: row {label}, column {dev}: cell {c!r}; NV<k> is k bonded NVLinks, k from 1 "
                             f"to {MAX_NVLINK_COUNT}: fix the count")
    if k is not None and not (_GPU.match(label) and _GPU.match(dev)):
        raise CollsynthError(f"{where}: row {label}, column {dev}: cell {c!r}; NVLinks join GPUs only: a NIC's "
                             "cell is its PCIe distance (PIX, PXB, PHB, NODE or SYS)")
    return c


def _check_symmetric(devices: list[str], cell: dict[tuple[str, str], str], where: str) -> None:
    """Refuse a matrix whose cell for a and b differs from the one for b and a."""
    for i, a in enumerate(devices):
        for b in devices[i + 1:]:
            if cell[a, b] != cell[b, a]:
                raise CollsynthError(f"{where}: row {a}, column {b} is {cell[a, b]} but row {b}, column {a} is "
                                     f"{cell[b, a]}; the matrix is symmetric: fix one of the two cells")


def _gpus(model: NodeModel, labels: list[str], affinity: dict[str, dict[str, str]]) -> None:
    numa = [affinity[g].get("NUMA Affinity", "") or "N/A" for g in labels]
    groups = sorted(set(numa), key=numa.index)
    model.cpus = [f"NUMA {x}" for x in groups]
    for r, g in enumerate(labels):
        model.gpus.append(Gpu(rank=r, label=g, cpu=groups.index(numa[r]), pcie_bw=pcie_gbps(16.0, 16) * GB))
    model.pcie_note = ("PCIe speeds are not in nvidia-smi output: assumed Gen4 x16 (24 GB/s, NCCL's formula) per "
                       f"GPU and {model.cpu_link_bw / GB:g} GB/s between CPUs (NCCL's Skylake figure)")


def _nvlinks(model: NodeModel, labels: list[str], cell: dict[tuple[str, str], str], sm: int | None,
             where: str) -> None:
    """The GPUs' NVLinks from the (checked, symmetric) NV<k> cells: a switch or direct links."""
    n = len(labels)
    count: dict[tuple[int, int], int] = {}
    for a in range(n):
        for b in range(a + 1, n):
            k = _nv_count(cell[labels[a], labels[b]])
            if k:
                count[a, b] = k
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
        top = max(range(n), key=per_gpu.__getitem__)
        if per_gpu[top] > MAX_NVLINK_COUNT:
            raise CollsynthError(f"{where}: the NV<k> cells of {labels[top]} add up to {per_gpu[top]} direct "
                                 f"NVLinks; a GPU has at most {MAX_NVLINK_COUNT}: behind an NVSwitch every GPU pair "
                                 "shows the same NV<k>, fix the cells that differ")
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
