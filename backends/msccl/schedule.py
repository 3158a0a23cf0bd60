"""MSCCL XML back to a collsynth Schedule (for the simulator), and whether a rank's lateness stalls others."""

from __future__ import annotations

from typing import Any

from collsynth.backends.msccl.check import check_program, load_program
from collsynth.backends.msccl.levels import compute_levels, waiting_on_rank, xml_to_schedule_from
from collsynth.backends.msccl.load import resolve
from collsynth.backends.msccl.model import Program
from collsynth.backends.msccl.parse import parse_xml_text
from collsynth.errors import CollsynthError


def _checked(prog: Program, source: str) -> Any:
    report, results = check_program(prog)
    if not report.ok:
        raise CollsynthError(f"{source} does not verify ({report.message}); fix the file before timing it")
    return results[0]


def xml_to_schedule(path: str) -> Any:
    """Read, check and convert an MSCCL XML file into a Schedule (transfers at the steps its per-rank
    programs run them in; see levels.py). XmlFormatError when unreadable, CollsynthError when wrong."""
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
