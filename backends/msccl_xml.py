"""MSCCL algorithm XML backend: emit, read, check and time MSCCL XML (public API of the backend).

- ``emit_xml(schedule, ...)``: a verified Schedule as MSCCL XML (executor/RCCL or legacy dialect);
  ``add_xml_options`` / ``xml_options_from_args`` give the CLI options for it.
- ``check_xml_file(path)``: prove any MSCCL XML file (ours or third-party) correct by symbolic
  execution with the runtime's semantics; ``XmlFormatError`` when it cannot be read or loaded.
- ``xml_to_schedule(path)``: the per-rank programs as a collsynth Schedule, for the simulator.
- ``straggler_independence(path, rank)``: which transfers of the other ranks wait for ``rank``.

The rules the code follows are in docs/msccl-xml.md; the modules: msccl_parse (tokenizer), msccl_load
(load-time checks, the interpreter's view), msccl_exec (symbolic execution), msccl_check (the checker),
msccl_levels (timing), msccl_lower / msccl_deps / msccl_emit (the emitter).
"""

from __future__ import annotations

from typing import Any

from ..errors import CollsynthError
from .msccl_check import XmlReport, check_program, check_xml_file, check_xml_text, load_program
from .msccl_emit import add_xml_options, plan, xml_options_from_args
from .stragglar_xml import emit_stragglar_xml as emit_xml  # names the largest --pipeline that fits
from .msccl_levels import compute_levels, waiting_on_rank, xml_to_schedule_from
from .msccl_load import resolve
from .msccl_model import Program, XmlFormatError
from .msccl_parse import parse_xml_text, read_xml_file


def _checked(prog: Program, source: str) -> Any:
    report, results = check_program(prog)
    if not report.ok:
        raise CollsynthError(f"{source} does not verify ({report.message}); fix the file before timing it")
    return results[0]


def xml_to_schedule(path: str) -> Any:
    """Read, check and convert an MSCCL XML file into a Schedule (transfers at the steps its per-rank
    programs run them in; see msccl_levels). XmlFormatError when unreadable, CollsynthError when wrong."""
    prog = load_program(path)
    return xml_to_schedule_from(prog, _checked(prog, path), source=path)


def xml_text_to_schedule(text: str, source: str = "<xml>") -> Any:
    """Like xml_to_schedule, from text."""
    prog = resolve(parse_xml_text(text, source), source)
    return xml_to_schedule_from(prog, _checked(prog, source), source=source)


def straggler_independence(path_or_text: str, rank: int, *, text: bool = False) -> dict[str, Any]:
    """Does any transmission of another rank wait (transitively) for ``rank`` before ``rank`` takes part?

    Returns ``first_level`` (the first step, in the timing model, in which ``rank`` sends or receives),
    ``waiting`` (transmissions of other ranks that wait for ``rank``), and ``early`` (those among them
    that run before ``first_level``: with MSCCL's data-driven execution they would stall while ``rank``
    is late). StragglAR's punctual ranks must have no early waiting transmission: their phase 1 then
    runs while the straggler is late, without a barrier."""
    source = "<xml>" if text else path_or_text
    prog = resolve(parse_xml_text(path_or_text, source), source) if text else load_program(path_or_text)
    if not 0 <= rank < prog.ngpus:
        raise CollsynthError(f"rank {rank} is outside 0..{prog.ngpus - 1}")
    res = _checked(prog, source)
    lv = compute_levels(prog, res)
    tbs = prog.all_tbs()
    mine = [lv.level_of((t, j)) for t, tb in enumerate(tbs) if tb.gpu == rank for j in range(len(tb.txs))]
    first = min(mine) if mine else None
    waiting = waiting_on_rank(prog, res, rank)
    early = sorted(x for x in waiting if first is None or lv.level_of(x) < first)
    return {"rank": rank, "first_level": first, "waiting": len(waiting),
            "early": [(tbs[t].gpu, tbs[t].id, tbs[t].txs[j].s) for t, j in early],
            "before": sum(1 for t, tb in enumerate(tbs) if tb.gpu != rank for j in range(len(tb.txs))
                          if first is not None and lv.level_of((t, j)) < first)}


__all__ = ["XmlFormatError", "XmlReport", "add_xml_options", "check_program", "check_xml_file", "check_xml_text",
           "emit_xml", "load_program", "plan", "read_xml_file", "straggler_independence", "xml_options_from_args",
           "xml_text_to_schedule", "xml_to_schedule"]
