"""The GPU model a topology names (``Topology.gpu``), for the limits a backend sets per GPU: an MSCCL++
plan's thread blocks wait on each other, so all of a rank's blocks must be resident at once, one
1024-thread block per SM (backends/mscclpp/emit.py ``resident_limit``).

SM counts: NVIDIA's architecture whitepapers (Tesla V100: 80; A100: 108; H100 SXM5: 132, H100 PCIe: 114);
the H200 SXM is the H100 SXM5's GH100 with 132 SMs; the B200 148 (a CUDA device query, pytorch/ao pull
request 4002). PCI device ids: the PCI ID repository (pci-ids.ucw.cz), as in the NCCL dumps of
../shared/vectors/topologies. A topology JSON file names its GPU as ``"gpu": {"name": ..., "sms": ...}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from collsynth.errors import CollsynthError

MAX_SMS = 1024  # well above any GPU's SM count: a larger "sms" is a typo


class GpuSms(TypedDict):
    """The required part of ``GpuJson``."""

    sms: int


class GpuJson(GpuSms, total=False):
    """A topology file's ``"gpu"`` object (``name`` optional; typing.NotRequired needs Python 3.11)."""

    name: str


@dataclass(frozen=True)
class GpuModel:
    """A GPU's name (None when only its SM count is known) and its number of SMs."""

    name: str | None
    sms: int

    def to_json(self) -> GpuJson:
        """The topology file's ``"gpu"`` object."""
        return {"name": self.name, "sms": self.sms} if self.name else {"sms": self.sms}

    def describe(self) -> str:
        """'H200 SXM, 132 SMs' or '132 SMs'."""
        return f"{self.name}, {self.sms} SMs" if self.name else f"{self.sms} SMs"


V100_SXM2 = GpuModel("Tesla V100 SXM2", 80)
A100 = GpuModel("A100", 108)
H100_SXM5 = GpuModel("H100 SXM5", 132)

# PCI device id (vendor 0x10de) -> model
GPUS_BY_PCI_DEVICE: dict[int, GpuModel] = {
    0x1DB1: GpuModel("Tesla V100 SXM2 16GB", 80),
    0x1DB5: GpuModel("Tesla V100 SXM2 32GB", 80),
    0x20B0: GpuModel("A100 SXM4 40GB", 108),
    0x20B2: GpuModel("A100 SXM4 80GB", 108),
    0x20B5: GpuModel("A100 PCIe 80GB", 108),
    0x20F1: GpuModel("A100 PCIe 40GB", 108),
    0x2330: GpuModel("H100 SXM5 80GB", 132),
    0x2331: GpuModel("H100 PCIe", 114),
    0x2335: GpuModel("H200 SXM 141GB", 132),
    0x2901: GpuModel("B200", 148),
}

# the presets that model one GPU (synth/topology/presets.py); the generic ones name none
PRESET_GPUS: dict[str, GpuModel] = {"dgx1": V100_SXM2, "dgx-h100": H100_SXM5, "h100-cluster": H100_SXM5}


def gpu_of_pci_device(vendor: str | None, device: str | None) -> GpuModel | None:
    """The model of an NVIDIA PCI device id such as "0x2335" (as NCCL's XML writes it), or None."""
    if vendor is None or device is None or vendor.strip().lower() != "0x10de":
        return None
    try:
        return GPUS_BY_PCI_DEVICE.get(int(device, 16))
    except ValueError:
        return None


def check_sms(sms: Any, where: str) -> int:
    """``sms`` as an SM count (1..MAX_SMS); CollsynthError naming ``where`` otherwise."""
    if isinstance(sms, bool) or not isinstance(sms, int) or not 1 <= sms <= MAX_SMS:
        raise CollsynthError(f"{where} must be a GPU's SM count, an integer 1..{MAX_SMS} (132 for an H100 "
                             f"SXM5), got {sms!r}")
    return sms


def gpu_from_json(x: Any, where: str) -> GpuModel:
    """A topology file's ``"gpu"`` object, checked."""
    if not isinstance(x, dict) or "sms" not in x or set(x) - {"name", "sms"}:
        raise CollsynthError(f"{where}: \"gpu\" must be an object {{\"name\": \"H100 SXM5\", \"sms\": 132}} "
                             f"(\"name\" optional), got {x!r}")
    name = x.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise CollsynthError(f"{where}: \"gpu\" \"name\" must be a non-empty string, got {name!r}")
    return GpuModel(name, check_sms(x["sms"], f"{where}: \"gpu\" \"sms\""))


def gpu_of_spec(spec: Any) -> GpuModel | None:
    """The GPU a recorded topology spec (``Topology.spec``, a schedule's ``meta["topology"]``) names,
    read from the spec alone (no topology is built); None when it names none or is malformed (the
    verifier reports a malformed spec)."""
    if not isinstance(spec, Mapping):
        return None
    preset = spec.get("preset")
    if isinstance(preset, str):
        return PRESET_GPUS.get(preset.split(":", 1)[0])
    d = spec.get("file")
    if isinstance(d, Mapping) and "gpu" in d:
        try:
            return gpu_from_json(d["gpu"], "topology")
        except CollsynthError:
            return None
    return None
