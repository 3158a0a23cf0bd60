"""Read the topology XML NCCL writes with ``NCCL_TOPO_DUMP_FILE`` into a ``NodeModel``.

Format (NCCL ``src/graph/xml.cc``/``topo.cc``; ../shared clusters.md, section 2): root
``<system version="1">``; ``<cpu numaid= arch= vendor= familyid= modelid=>`` children; nested
``<pci busid= class= link_speed= link_width=>``; a GPU is ``<gpu dev= sm= rank=>`` inside its ``<pci>``,
with ``<nvlink target= count= tclass=>`` children (tclass 0x068000: an NVSwitch, 0x03....: a GPU);
a NIC is ``<nic>`` holding ``<net name= speed= gdr=>`` (speed in Mb/s), under a ``<pci>`` or, for a
socket NIC, directly under a ``<cpu>`` (then repeated under every CPU). Quirks handled: a hidden
NVSwitch (one ``fffffff:ff:ff.0`` target with all links), link_speed strings with or without
"PCIe" or empty, NVLinks pointing at the GPU itself, vendor skeletons with no ``<gpu>`` (refused).
Refused as malformed (one line naming the element and attribute): a busid or NVLink target that is not
domain:bus:device.function in hex, one PCI device given twice (two <pci> with one busid, compared as
numbers, or two <gpu> in one <pci>), a negative or repeated GPU rank, an NVLink count outside
1..MAX_NVLINK_COUNT (one element or a GPU's total), an NVSwitch-class NVLink whose target is a GPU (the
GPU itself included), a nonpositive sm, a link_width other than 0 or a PCIe lane count (PCIE_LANE_WIDTHS).
A GPU-class NVLink to the GPU's own busid is ignored and noted, not refused: Azure's NC A100 v4 topology
file (azhpc-images topology/ncv4-topo.xml) gives every GPU such a link.

The XML is untrusted: DOCTYPE and entity declarations are refused before parsing, the file size and
the nesting depth are capped.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from collsynth.errors import CollsynthError
from collsynth.synth.topology.gpus import gpu_of_pci_device
from collsynth.synth.topology_import.constants import (
    GB,
    MAX_NIC_MBPS,
    MAX_NVLINK_COUNT,
    NIC_DEFAULT_MBPS,
    PCIE_GEN_PER_LANE,
    PCIE_LANE_WIDTHS,
    bounded_int,
    cpu_link_gbps,
    nvlink_gbps,
    pcie_gbps,
)
from collsynth.synth.topology_import.node import DISTANCES, Gpu, Nic, NodeModel

MAX_DEPTH = 64
NVSWITCH_CLASS = "0x068000"
HIDDEN_NVSWITCH = "fffffff:ff:ff.0"
# a PCI bus id domain:bus:device.function in hex, as NCCL writes it (int64ToBusId: "%04lx:%02lx:%02lx.%01lx",
# so the domain may be longer than 4 digits; the hidden NVSwitch marker's has 7)
BUSID = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")


def looks_like_nccl_xml(text: str) -> bool:
    """True when the text's first element is ``<system``."""
    body = re.sub(r"<!--.*?-->", "", text[:4096], flags=re.S).lstrip()
    if body.startswith("<?xml"):
        body = body[body.find("?>") + 2:].lstrip()
    return body.startswith(("<system", "<!DOCTYPE"))


def _parse(text: str, where: str) -> ET.Element:
    if re.search(r"<!DOCTYPE|<!ENTITY", text, re.I):
        raise CollsynthError(f"{where}: has a DOCTYPE or ENTITY declaration, which NCCL never writes; remove it")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        line, col = e.position
        raise CollsynthError(f"{where}: not well-formed XML at line {line}, column {col + 1}") from None
    stack = [(root, 1)]
    while stack:
        el, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise CollsynthError(f"{where}: elements nested deeper than {MAX_DEPTH} levels; not an NCCL topology")
        stack.extend((c, depth + 1) for c in el)
    if root.tag != "system":
        raise CollsynthError(f"{where}: root element is <{root.tag}>, expected NCCL's <system>: give the file "
                             "NCCL_TOPO_DUMP_FILE wrote")
    return root


def _int(el: ET.Element, attr: str, where: str, what: str, default: int | None = None, base: int = 10) -> int:
    raw = el.get(attr)
    if raw is None or raw.strip() == "":
        if default is not None:
            return default
        raise CollsynthError(f"{where}: {what} has no {attr}=\"...\" attribute; add it")
    try:
        return int(raw.strip(), base)
    except ValueError:
        raise CollsynthError(f"{where}: {what} has {attr}={raw!r}, not an integer") from None


def _busid(raw: str | None) -> str:
    return (raw or "").strip().lower()


def _checked_busid(el: ET.Element, attr: str, where: str, what: str) -> str:
    """``el``'s bus id attribute ``attr``, lower case ("" when absent); refused unless it is a PCI bus id."""
    busid = _busid(el.get(attr))
    if busid and not BUSID.fullmatch(busid):
        raise CollsynthError(f"{where}: {what} has {attr}={el.get(attr)!r}, not a PCI bus id; write "
                             "domain:bus:device.function in hex, e.g. 0000:1b:00.0")
    return busid


def _width(el: ET.Element, where: str) -> int:
    """A <pci> element's link_width (lanes; 0 when absent, empty or 0, as NCCL reads it); refused unless
    0 or a PCIe lane count (PCIE_LANE_WIDTHS)."""
    raw = (el.get("link_width") or "").strip()
    if raw and not re.fullmatch(r"[0-9]+", raw):
        raise CollsynthError(f"{where}: <pci busid={el.get('busid')!r}> has link_width={el.get('link_width')!r}; "
                             "expected the lane count, an integer such as 16")
    width = bounded_int(raw, PCIE_LANE_WIDTHS[-1]) if raw else 0
    if width != 0 and width not in PCIE_LANE_WIDTHS:
        lanes = ", ".join(map(str, PCIE_LANE_WIDTHS[:-1])) + f" or {PCIE_LANE_WIDTHS[-1]}"
        raise CollsynthError(f"{where}: <pci busid={el.get('busid')!r}> has link_width={el.get('link_width')!r}; "
                             f"a PCIe link has {lanes} lanes (0: unknown, read as 16): fix the width")
    return width


def _busid_key(busid: str) -> tuple[int, ...]:
    """A checked bus id as numbers (domain, bus, device, function): 0000:1b:00.0 and 00000000:1b:00.0 are one
    device, as NCCL's busIdToInt64 reads them."""
    return tuple(int(x, 16) for x in re.split(r"[:.]", busid))


def _check_unique_pcis(cpus: list[ET.Element], where: str) -> None:
    """Refuse a <pci> (under any <cpu>, in file order) whose bus id an earlier one has (by ``_busid_key``)."""
    seen: dict[tuple[int, ...], str] = {}
    for pci in (p for cpu in cpus for p in cpu.iter("pci")):
        busid = _checked_busid(pci, "busid", where, "<pci>")
        if not busid:
            continue
        key, raw = _busid_key(busid), pci.get("busid") or ""
        if key in seen:
            same = "" if seen[key] == raw else f" (the same device as busid={seen[key]!r})"
            raise CollsynthError(f"{where}: <pci busid={raw!r}> appears twice{same}; each PCI device must appear "
                                 "once: remove the duplicate or fix its busid")
        seen[key] = raw


def _sm(el: ET.Element, where: str, what: str) -> int | None:
    """A <gpu> element's sm (compute capability x10), None when the file does not give it."""
    if (el.get("sm") or "").strip() == "":
        return None
    sm = _int(el, "sm", where, what)
    if sm <= 0:
        raise CollsynthError(f"{where}: {what} has sm={el.get('sm')!r}; sm is the compute capability x10, a "
                             "positive integer (80 for A100, 90 for H100)")
    return sm


def _pcie(el: ET.Element, where: str, model: NodeModel) -> float | None:
    """NCCL's bandwidth (bytes/s) of one <pci> element's link, None when it names no speed."""
    speed = (el.get("link_speed") or "").strip()
    m = re.match(r"([0-9.]+)\s*GT/s", speed)
    width = _width(el, where)
    if not m:
        if speed:
            raise CollsynthError(f"{where}: <pci busid={el.get('busid')!r}> has link_speed={speed!r}; "
                                 "expected e.g. \"16.0 GT/s PCIe\"")
        return None
    gts = float(m.group(1))
    if gts not in PCIE_GEN_PER_LANE:
        raise CollsynthError(f"{where}: <pci busid={el.get('busid')!r}> has link_speed={speed!r}; NCCL knows "
                             "2.5, 5, 8, 16, 32 and 64 GT/s")
    if width == 0:
        model.assume("a PCIe link_width of 0 counts as 16 lanes (as NCCL does)")
    return pcie_gbps(gts, width) * GB


def read_nccl_xml(text: str, name: str, where: str) -> NodeModel:
    """A ``NodeModel`` from the text of an NCCL topology XML file (``where`` names it in errors)."""
    root = _parse(text, where)
    cpus = [c for c in root if c.tag == "cpu"]
    hosts = sorted({c.get("host_hash") or "" for c in cpus} - {""})
    if len(hosts) > 1:
        raise CollsynthError(f"{where}: describes {len(hosts)} hosts (host_hash {', '.join(hosts)}); import one "
                             "host's dump and use --nodes to build the cluster")
    _check_unique_pcis(cpus, where)
    model = NodeModel(name=name, fmt="nccl-xml", gpus=[], cpus=[], cpu_link_bw=0.0)
    found: list[dict[str, Any]] = []  # gpus in file order
    nets: list[tuple[ET.Element, int, tuple[str, ...], bool]] = []  # (net, cpu, pci path, under a pci)
    gpu_slots = 0
    cpu_bws: list[float] = []
    for ci, cpu in enumerate(cpus):
        numa = cpu.get("numaid", str(ci))
        model.cpus.append(f"cpu {ci} (NUMA {numa})")
        fam = _int(cpu, "familyid", where, f"<cpu numaid={numa!r}>", default=-1)
        mod = _int(cpu, "modelid", where, f"<cpu numaid={numa!r}>", default=-1)
        cpu_bws.append(cpu_link_gbps(cpu.get("arch"), cpu.get("vendor"), fam, mod) * GB)
        # walk the PCI tree below this CPU: (element, path of pci busids, bottleneck bytes/s or None)
        stack: list[tuple[ET.Element, tuple[str, ...], float | None]] = [(cpu, (), None)]
        while stack:
            el, path, bott = stack.pop()
            for child in reversed(list(el)):
                if child.tag == "pci":
                    bw = _pcie(child, where, model)
                    nb = bott if bw is None else (bw if bott is None else min(bott, bw))
                    cls = (child.get("class") or "").lower()
                    if cls.startswith("0x03"):
                        gpu_slots += 1
                    busid = _checked_busid(child, "busid", where, "<pci>")
                    stack.append((child, path + (busid,), nb))
                elif child.tag == "gpu":
                    found.append({"el": child, "busid": path[-1] if path else "", "cpu": ci, "bw": bott,
                                  "path": path, "pci": el})
                elif child.tag == "nic":
                    for net in child:
                        if net.tag == "net":
                            nets.append((net, ci, path, el.tag == "pci"))
    if not found:
        what = f"{gpu_slots} GPU PCI slots but " if gpu_slots else ""
        raise CollsynthError(f"{where}: has {what}no <gpu> elements: it is a vendor topology skeleton (a PCI tree "
                             "NCCL fills in at run time), not a dump; run NCCL on the machine with "
                             "NCCL_TOPO_DUMP_FILE=topo.xml and import that file")
    model.cpu_link_bw = min(cpu_bws) if cpu_bws else 0.0
    ordered = _order_gpus(found, where)
    by_busid: dict[str, int] = {}
    for r, f in enumerate(ordered):
        sm = _sm(f["el"], where, f"<gpu> under <pci busid={f['busid']!r}>")
        if sm is None:
            model.assume(f"GPU {r} has no sm attribute: NVLinks counted at {nvlink_gbps(None):g} GB/s each")
        model.gpus.append(Gpu(rank=r, label=f["busid"], sm=sm, cpu=f["cpu"], pcie_bw=f["bw"]))
        f["rank"] = r
        if f["busid"] in by_busid:
            raise CollsynthError(f"{where}: <pci busid={f['busid']!r}> holds two <gpu> elements (GPUs "
                                 f"{by_busid[f['busid']]} and {r}); each PCI device must appear once: give each "
                                 "GPU its own <pci>")
        if f["busid"]:
            by_busid[f["busid"]] = r
    if any(f["bw"] is None for f in ordered):
        model.assume("some PCIe link_speed is empty: those GPUs' PCIe speed is unknown")
    sms = sorted({g.sm for g in model.gpus if g.sm is not None})
    for f in ordered:
        _read_nvlinks(model, f, by_busid, where)
    if model.switch_links:
        chips = sorted({_busid(nv.get("target")) for f in ordered for nv in f["el"]
                        if nv.tag == "nvlink" and (nv.get("tclass") or "").lower() == NVSWITCH_CLASS}
                       - {HIDDEN_NVSWITCH})
        model.switch_chips = len(chips)
        if len(chips) > 1:
            model.assume(f"{len(chips)} NVSwitch chips modelled as one non-blocking switch carrying each GPU's "
                         "links to all of them (as NCCL merges them)")
    if model.switch_links or model.direct:
        model.assume("NVLink bandwidth = link count x NCCL's per-link figure: "
                     + ", ".join(f"sm {s} {nvlink_gbps(s):g} GB/s" for s in sms) + " (src/graph/topo.h)")
    _read_nets(model, nets, found, where)
    _read_gpu_model(model, found)
    return model


def _rank(el: ET.Element, where: str, what: str) -> int | None:
    """A <gpu> element's rank, None when the file does not give it; refused when negative. It only orders the
    GPUs (they are numbered 0..n-1 in that order): a dump of another node of a job (NCCL_TOPO_DUMP_FILE_RANK)
    holds that node's global ranks, e.g. 8..15."""
    if (el.get("rank") or "").strip() == "":
        return None
    rank = _int(el, "rank", where, what)
    if rank < 0:
        raise CollsynthError(f"{where}: {what} has rank={el.get('rank')!r}; a rank is 0 or more (NCCL's global "
                             "rank of the GPU): fix it or drop the attribute")
    return rank


def _order_gpus(found: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """The GPUs in rank order (rank attribute, else dev, else file order); two GPUs with one rank refused."""
    keyed = []
    owner: dict[int, str] = {}
    for i, f in enumerate(found):
        what = f"<gpu> under <pci busid={f['busid']!r}>"
        rank = _rank(f["el"], where, what)
        if rank is not None and rank in owner:
            raise CollsynthError(f"{where}: {what} has rank={rank}, as does {owner[rank]}; give each GPU its "
                                 f"own rank")
        if rank is not None:
            owner[rank] = what
        dev = _int(f["el"], "dev", where, what, default=i)
        keyed.append((1 << 30 if rank is None else rank, dev, i, f))
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed]


def _nvlink_count(nv: ET.Element, where: str, what: str) -> int:
    """An <nvlink> element's count, refused unless 1..MAX_NVLINK_COUNT."""
    count = _int(nv, "count", where, what)
    if count <= 0:
        raise CollsynthError(f"{where}: {what} has count={count}; a link count must be positive")
    if count > MAX_NVLINK_COUNT:
        raise CollsynthError(f"{where}: {what} has count={count}; a GPU has at most {MAX_NVLINK_COUNT} NVLinks "
                             "(18 on H100/B200): fix the count")
    return count


def _nvlink_target(nv: ET.Element, where: str, what: str) -> str:
    """An <nvlink> element's target bus id, refused when absent or not a bus id."""
    target = _checked_busid(nv, "target", where, what)
    if not target:
        raise CollsynthError(f"{where}: {what} has no target=\"...\" attribute; add the bus id of the GPU or "
                             "NVSwitch it leads to")
    return target


def _add_direct(model: NodeModel, a: int, b: int, count: int) -> None:
    """Record ``count`` direct NVLinks between GPUs a and b (the smaller count when the two sides disagree)."""
    key = (min(a, b), max(a, b))
    old = model.direct.get(key)
    if old is not None and old != count:
        model.assume(f"GPUs {key[0]} and {key[1]} disagree on their NVLink count ({old} vs {count}): "
                     "the smaller is used")
    model.direct[key] = count if old is None else min(old, count)


def _read_nvlinks(model: NodeModel, f: dict[str, Any], by_busid: dict[str, int], where: str) -> None:
    """Add one GPU's <nvlink> children (and notes for its <c2c>) to ``model``."""
    r = f["rank"]
    total = 0
    for nv in f["el"]:
        if nv.tag == "c2c":
            model.assume(f"GPU {r}'s C2C link to its Grace CPU is not modelled (no GPU-to-GPU traffic uses it)")
        if nv.tag != "nvlink":
            continue
        what = f"<nvlink> of GPU {r} ({f['busid']})"
        count = _nvlink_count(nv, where, what)
        target = _nvlink_target(nv, where, what)
        tclass = (nv.get("tclass") or "").lower()
        if tclass == NVSWITCH_CLASS:
            peer = by_busid.get(target)
            if peer is not None:
                which, fix = (("the GPU itself", "give the NVSwitch's bus id (fffffff:ff:ff.0 for a hidden one)")
                              if peer == r else
                              (f"GPU {peer}", "use tclass=\"0x030200\" for a direct GPU link or the NVSwitch's bus id"))
                raise CollsynthError(f"{where}: {what} has target={target!r}, which is {which}, but "
                                     f"tclass={nv.get('tclass')!r} (an NVSwitch); {fix}")
            model.switch_links[r] = model.switch_links.get(r, 0) + count
            if target == HIDDEN_NVSWITCH:
                model.assume("hidden NVSwitch (NVLinks target fffffff:ff:ff.0 with the total link count): "
                             "modelled as one non-blocking switch")
        elif tclass.startswith("0x03"):
            if target == f["busid"]:
                model.assume(f"GPU {r}'s NVLink points at its own bus id {target}: ignored")
                continue
            peer = by_busid.get(target)
            if peer is None:
                raise CollsynthError(f"{where}: {what} targets {target!r}, which is no GPU in this file; "
                                     "fix the target bus id or import the complete dump")
            _add_direct(model, r, peer, count)
        elif tclass == "0x068001":
            model.assume(f"GPU {r}'s NVLink to a CPU is not modelled")
        else:
            raise CollsynthError(f"{where}: {what} has tclass={nv.get('tclass')!r}; expected 0x068000 "
                                 "(NVSwitch) or 0x03.... (GPU)")
        total += count
        if total > MAX_NVLINK_COUNT:
            raise CollsynthError(f"{where}: the <nvlink> count attributes of GPU {r} ({f['busid']}) add up to "
                                 f"{total}; a GPU has at most {MAX_NVLINK_COUNT} NVLinks: fix the counts")


def _read_gpu_model(model: NodeModel, found: list[dict[str, Any]]) -> None:
    """The GPUs' model from their PCI vendor and device ids (synth.topology.gpus), when all are one known
    model; otherwise why not (``gpu_unknown``, which import_topology says)."""
    pcis = [f["pci"] if f["pci"].tag == "pci" else None for f in found]
    ids = sorted({(p.get("vendor") or "?", p.get("device") or "?") if p is not None else ("?", "?") for p in pcis})
    models = {gpu_of_pci_device(v, d) for v, d in ids}
    if len(models) == 1 and None not in models:
        model.gpu_model = models.pop()
        return
    known = [f"{v}:{d}" for v, d in ids if (v, d) != ("?", "?")]
    model.gpu_unknown = (f"not known from its PCI device id ({', '.join(known)})" if known
                         else "not known (its <pci> gives no vendor and device id)")


def _read_nets(model: NodeModel, nets: list[tuple[ET.Element, int, tuple[str, ...], bool]],
               found: list[dict[str, Any]], where: str) -> None:
    seen: dict[str, int] = {}
    for net, ci, path, under_pci in nets:
        name = (net.get("name") or "").strip() or f"net{net.get('dev', len(model.nics))}"
        if name in seen:
            continue  # a socket NIC is listed under every CPU
        what = f"<net name={name!r}>"
        mbps = _int(net, "speed", where, what, default=0)
        if mbps > MAX_NIC_MBPS:
            raise CollsynthError(f"{where}: {what} has speed={net.get('speed')!r} Mb/s, over {MAX_NIC_MBPS // 10**6} "
                                 "Tb/s, more than any NIC: fix the speed (in Mb/s: 400000 is 400 Gb/s)")
        if mbps <= 0:
            model.assume(f"NIC {name} reports speed {mbps}: taken as {NIC_DEFAULT_MBPS} Mb/s (as NCCL does)")
            mbps = NIC_DEFAULT_MBPS
        gdr = net.get("gdr")
        place = (f"PCIe {path[-1]} under cpu {ci}" if under_pci and path else
                 "socket NIC under every CPU" if not under_pci else f"cpu {ci}")
        nic = Nic(name=name, bandwidth=mbps * 1e6 / 8, placement=place,
                  gdr=None if gdr is None else gdr.strip() == "1")
        for f in found:
            nic.distance[f["rank"]] = _distance(f["cpu"], f["path"], ci, path if under_pci else None)
        seen[name] = len(model.nics)
        model.nics.append(nic)
    if model.nics:
        model.assume("NIC bandwidth = the speed attribute (Mb/s) / 8 per direction")
    if any(not n.gdr for n in model.nics):
        model.assume("NICs without GPUDirect RDMA (gdr=0) are used as if they had it")


def _distance(gcpu: int, gpath: tuple[str, ...], ncpu: int, npath: tuple[str, ...] | None) -> int:
    """PCIe distance (index into DISTANCES) of a GPU from a NIC, from their PCI paths."""
    if npath is None:  # socket NIC: reached through the CPU
        return DISTANCES.index("PHB")
    if gcpu != ncpu:
        return DISTANCES.index("SYS")
    common = 0
    for a, b in zip(gpath[:-1], npath[:-1]):
        if a != b:
            break
        common += 1
    if common == 0:
        return DISTANCES.index("PHB")
    # the last common bridge is the GPU's or the NIC's direct parent: one bridge apart
    if common >= len(gpath) - 1 and common >= len(npath) - 1:
        return DISTANCES.index("PIX")
    return DISTANCES.index("PXB")
