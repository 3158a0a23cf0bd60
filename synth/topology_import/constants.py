"""Per-link constants the importers turn link counts into bandwidths with (NCCL's model, cited).

NVLink: NCCL ``src/graph/topo.h`` models one NVLink per direction as SM60 18.0, SM70/SM80 20.0,
SM86 12.0, SM90 20.6 and SM100 40.1 GB/s (1 GB = 1e9 bytes); a GPU's link to an NVSwitch or a peer
is ``count`` times that (``topo.cc``, ncclTopoAddNvLinks). PCIe: ``topo.cc`` reads ``link_speed``
("16.0 GT/s PCIe") as a per-lane figure in units of 100 Mb/s (2.5 GT/s 15, 5 GT/s 30, 8 GT/s 60,
16 GT/s 120, 32 GT/s 240, 64 GT/s 480) and takes ``width * speed / 80`` GB/s (a width of 0 counts as
16). CPU to CPU (the SMP interconnect): ``topo.h`` BDW_QPI_BW 6, SKL_QPI_BW 10 (Intel family 6, model
>= 0x55), SRP_QPI_BW 22 (>= 0x8F), ERP_QPI_BW 40 (>= 0xCF), AMD_BW 16, ARM_BW 6, P9_BW 32 GB/s.
NICs: ``<net speed=>`` is in Mb/s; NCCL takes ``speed / 8000`` GB/s, and 10000 when speed <= 0.

Start-up costs (alpha) per link class come from NCCL's tuning model (``src/graph/tuning.cc``,
hwLatencies, Ring column, Simple protocol, the one large buffers use): NVLink 3.4 us, PCIe 5.7 us,
network 14 us (the values the dgx-h100 and h100-cluster presets use for nvlink and net).
"""

from __future__ import annotations

GB = 1e9

# (lowest compute capability x10, GB/s per NVLink per direction), checked from the top
_NVLINK_BW_BY_SM: tuple[tuple[int, int, float], ...] = (
    (100, 10_000, 40.1), (90, 99, 20.6), (86, 86, 12.0), (80, 89, 20.0), (70, 79, 20.0), (60, 69, 18.0),
)
NVLINK_BW_DEFAULT_GBPS = 20.0  # NCCL's fallback (SM80_NVLINK_BW) for a compute capability it does not list

PCIE_GEN_PER_LANE = {2.5: 15, 5.0: 30, 8.0: 60, 16.0: 120, 32.0: 240, 64.0: 480}  # 100 Mb/s units per lane
# the lane counts a PCIe link can have (the spec's x1..x32; what sysfs max_link_width reports). NCCL takes
# any integer and reads 0 as 16; 0 (an unknown width, in VM dumps) is accepted, other values are typos
PCIE_LANE_WIDTHS = (1, 2, 4, 8, 12, 16, 32)

QPI_BW_GBPS = {"intel-bdw": 6.0, "intel-skl": 10.0, "intel-srp": 22.0, "intel-erp": 40.0, "amd": 16.0,
               "arm": 6.0, "power": 32.0}

NIC_DEFAULT_MBPS = 10000  # NCCL's figure for a NIC that reports speed <= 0
MAX_NIC_MBPS = 100_000_000  # 100 Tb/s: over 100x today's fastest NIC (800 Gb/s); a larger speed is a typo

NVLINK_ALPHA = 3.4e-6
PCIE_ALPHA = 5.7e-6
NET_ALPHA = 14e-6

# the most NVLinks one GPU of any generation has (H100, H200, B200: 18); used to tell a switch from
# direct links in an nvidia-smi matrix
MAX_NVLINKS_PER_GPU = 18

# the most NVLinks an NCCL XML may give one GPU (one <nvlink count=> or all of a GPU's together). NCCL
# reads at most 18 links per GPU (maxNvLinks in src/graph/xml.cc, NVML_NVLINK_MAX_LINKS: V100 6, A100 12,
# H100/H200/B200/GB200 18, a hidden NVSwitch's one target carries all 18); twice that leaves room for a
# generation with more links while a typo or a hostile count (999999999999) is refused, not turned into
# an absurd bandwidth
MAX_NVLINK_COUNT = 2 * MAX_NVLINKS_PER_GPU



def bounded_int(digits: str, cap: int) -> int:
    """The value of a string of decimal digits, or cap + 1 when it has more digits than cap (a count of 5,000
    digits is refused by its range check, not parsed: Python's int() stops at 4,300 digits)."""
    d = digits.lstrip("0") or "0"
    return int(d) if len(d) <= len(str(cap)) else cap + 1

def nvlink_gbps(sm: int | None) -> float:
    """NCCL's per-link NVLink bandwidth (GB/s, one direction) for compute capability ``sm`` (e.g. 90)."""
    if sm is None:
        return NVLINK_BW_DEFAULT_GBPS
    for lo, hi, bw in _NVLINK_BW_BY_SM:
        if lo <= sm <= hi:
            return bw
    return NVLINK_BW_DEFAULT_GBPS


def pcie_gbps(gts: float, width: int) -> float:
    """NCCL's PCIe link bandwidth (GB/s) for ``gts`` GT/s per lane and ``width`` lanes."""
    per_lane = PCIE_GEN_PER_LANE[gts]
    return (width or 16) * per_lane / 80.0


def cpu_link_gbps(arch: str | None, vendor: str | None, family: int | None, model: int | None) -> float:
    """NCCL's CPU-to-CPU bandwidth (GB/s) for a CPU described as in NCCL's XML (``topo.cc``)."""
    a, v = (arch or "").lower(), (vendor or "").lower()
    if a in ("ppc64", "power"):
        return QPI_BW_GBPS["power"]
    if a in ("arm64", "aarch64", "arm"):
        return QPI_BW_GBPS["arm"]
    if "intel" in v:
        m = model or 0
        if family == 6 and m >= 0xCF:
            return QPI_BW_GBPS["intel-erp"]
        if family == 6 and m >= 0x8F:
            return QPI_BW_GBPS["intel-srp"]
        if family == 6 and m >= 0x55:
            return QPI_BW_GBPS["intel-skl"]
        return QPI_BW_GBPS["intel-bdw"]
    if "amd" in v:
        return QPI_BW_GBPS["amd"]
    return QPI_BW_GBPS["intel-bdw"]
