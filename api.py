"""Library functions that span stages: schedule files in any format the project reads.

``load_schedule(path)`` reads a collsynth schedule (JSON), an MSCCL XML file or an MSCCL++ execution plan
(checked, then turned into the Schedule its programs run); ``verify_file(path)`` proves any of them
correct. The kind of a file is told by its content (``file_kind``), an ``.xml`` name aside.
"""

from __future__ import annotations

import json

from collsynth.backends.msccl import XmlReport, check_xml_file, xml_to_schedule
from collsynth.backends.mscclpp import PlanReport, check_plan_text, is_plan_object, plan_text_to_schedule
from collsynth.errors import ScheduleFileError
from collsynth.fileio import json_loads, read_text
from collsynth.synth import ir
from collsynth.synth.ir import Schedule
from collsynth.synth.verify import VerifyReport, verify


def is_xml(path: str) -> bool:
    """Whether ``path`` names an MSCCL XML file (by its extension)."""
    return path.lower().endswith(".xml")


def file_kind(path: str) -> str:
    """"xml" (MSCCL XML: by extension, or text that starts with '<'), "plan" (an MSCCL++ execution plan:
    JSON with a "gpus" list) or "schedule" (anything else: read as a collsynth schedule)."""
    if is_xml(path):
        return "xml"
    text = read_text(path, error=ScheduleFileError)
    head = text.lstrip()[:1]
    if head == "<":
        return "xml"
    if head == "{" and '"gpus"' in text:
        try:
            return "plan" if is_plan_object(json_loads(text)) else "schedule"
        except json.JSONDecodeError:
            return "schedule"
    return "schedule"


def load_schedule(path: str) -> Schedule:
    """A Schedule from a collsynth JSON file, an MSCCL XML file or an MSCCL++ plan; CollsynthError when it
    cannot be read (or, for XML and plans, does not verify)."""
    kind = file_kind(path)
    if kind == "xml":
        return xml_to_schedule(path)
    if kind == "plan":
        return plan_text_to_schedule(read_text(path), path)
    return ir.load_schedule(path)


def verify_file(path: str, ports: int | None = None, size: int | None = None) -> VerifyReport | XmlReport | PlanReport:
    """The verifier's report (``.ok``, ``.message``) for a JSON schedule, an MSCCL XML file or an MSCCL++ plan
    (``size``: the message size in bytes a plan is run at; default the smallest that exercises it all)."""
    kind = file_kind(path)
    if kind == "xml":
        return check_xml_file(path)
    if kind == "plan":
        return check_plan_text(read_text(path), path, size=size)
    return verify(ir.load_schedule(path), ports=ports)
