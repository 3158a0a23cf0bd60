"""Library functions that span stages: schedule files in any format the project reads.

``load_schedule(path)`` reads a collsynth schedule (JSON) or an MSCCL XML file (checked, then turned
into the Schedule its per-rank programs run); ``verify_file(path)`` proves either kind correct.
"""

from __future__ import annotations

from collsynth.backends.msccl import XmlReport, check_xml_file, xml_to_schedule
from collsynth.synth import ir
from collsynth.synth.ir import Schedule
from collsynth.synth.verify import VerifyReport, verify


def is_xml(path: str) -> bool:
    """Whether ``path`` names an MSCCL XML file (by its extension)."""
    return path.lower().endswith(".xml")


def load_schedule(path: str) -> Schedule:
    """A Schedule from a collsynth JSON file or an MSCCL XML file; CollsynthError when it cannot be
    read (or, for XML, does not verify)."""
    return xml_to_schedule(path) if is_xml(path) else ir.load_schedule(path)


def verify_file(path: str, ports: int | None = None) -> VerifyReport | XmlReport:
    """The verifier's report (``.ok``, ``.message``) for a JSON schedule or an MSCCL XML file."""
    if is_xml(path):
        return check_xml_file(path)
    return verify(ir.load_schedule(path), ports=ports)
