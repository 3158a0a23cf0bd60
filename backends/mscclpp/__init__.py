"""MSCCL++ execution-plan backend: emit, check and read plans for MSCCL++'s executor (format 0.9.0).

- ``emit_plan(schedule, ...)``: a verified Schedule as an execution plan (Simple or LL, in place or
  out of place, memory channels inside a node and port channels across nodes, an optional pipeline
  form); checked by the plan checker before it is returned.
- ``check_plan_file(path)`` / ``check_plan_text(text)``: prove any plan (ours or anyone's) correct by
  symbolic execution with the executor's semantics; ``PlanFormatError`` when the executor would refuse
  or misread it (exit 2), a report with ``ok=False`` for races, deadlocks, unbalanced semaphores and
  wrong results (exit 1).
- ``plan_file_to_schedule(path)`` / ``plan_text_to_schedule(text)``: the Schedule a plan runs.
- ``is_plan_object(obj)``: whether decoded JSON is a plan (``verify`` detects plans by content).
- ``fit_cluster_pipeline(schedule, params, ...)``: a clusterstraggler schedule whose automatic block count needs
  more thread blocks than can be resident, rebuilt with the most blocks per part that fit (`synth`).

The rules are in docs/mscclpp-plan.md. Modules: model (the plan's data and the loader's key rules),
load (cross-references, limits, one message size), memory (byte-interval maps), execute (symbolic
execution), check (the checker), lower / emit / fit (the emitter), schedule (plan -> Schedule),
library (the shipped plan library), selector (generated plan selectors).
"""

from __future__ import annotations

from collsynth.backends.mscclpp.check import (
    PlanReport,
    check_plan_file,
    check_plan_text,
    is_plan_object,
    read_plan_file,
    read_plan_text,
)
from collsynth.backends.mscclpp.fit import emit_plan, fit_cluster_pipeline
from collsynth.backends.mscclpp.model import FORMAT_VERSION, PlanFormatError
from collsynth.backends.mscclpp.schedule import plan_file_to_schedule, plan_text_to_schedule

__all__ = ["FORMAT_VERSION", "PlanFormatError", "PlanReport", "check_plan_file", "check_plan_text", "emit_plan",
           "fit_cluster_pipeline", "is_plan_object", "plan_file_to_schedule", "plan_text_to_schedule",
           "read_plan_file", "read_plan_text"]
