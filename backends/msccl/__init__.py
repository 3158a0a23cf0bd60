"""MSCCL algorithm XML backend: emit, read, check and time MSCCL XML (public API of the backend).

- ``emit_xml(schedule, ...)``: a verified Schedule as MSCCL XML (executor/RCCL or legacy dialect);
  a pipelined StragglAR schedule that does not fit names the largest ``pipeline`` that does (fit.py).
- ``check_xml_file(path)`` / ``check_xml_text(text)``: prove any MSCCL XML file (ours or third-party)
  correct by symbolic execution with the runtime's semantics; ``XmlFormatError`` when it cannot be read
  or loaded.
- ``xml_to_schedule(path)``: the per-rank programs as a collsynth Schedule, for the simulator.
- ``straggler_independence(path, rank)``: which transfers of the other ranks wait for ``rank``.

The rules the code follows are in docs/msccl-xml.md. Modules: parse (tokenizer), model (the XML's
data model and the runtime's limits), load (load-time checks, the interpreter's view), execute
(symbolic execution), check (the checker), levels (timing), lower / deps / emit (the emitter), fit
(largest pipeline depth that fits), schedule (XML -> Schedule), library (the shipped schedule library).
"""

from __future__ import annotations

from collsynth.backends.msccl.check import XmlReport, check_program, check_xml_file, check_xml_text, load_program
from collsynth.backends.msccl.emit import plan
from collsynth.backends.msccl.fit import emit_stragglar_xml as emit_xml
from collsynth.backends.msccl.fit import xml_max_pipeline
from collsynth.backends.msccl.model import XmlFormatError
from collsynth.backends.msccl.parse import parse_xml_text, read_xml_file
from collsynth.backends.msccl.schedule import straggler_independence, xml_text_to_schedule, xml_to_schedule

__all__ = ["XmlFormatError", "XmlReport", "check_program", "check_xml_file", "check_xml_text", "emit_xml",
           "load_program", "parse_xml_text", "plan", "read_xml_file", "straggler_independence", "xml_max_pipeline",
           "xml_text_to_schedule", "xml_to_schedule"]
