"""NCCL code backend: generated CUDA/NCCL programs for any schedule, and an MSCCL scheduler plugin.

- ``render_nccl_cuda(schedule, *, name=None, dtypes=None) -> {file: text}`` / ``generate_nccl_cuda(schedule,
  outdir, ...)`` (codegen.py): library ``<name>.cu/.h``, benchmark ``bench_<name>.cu`` and ``Makefile``;
- ``render_msccl_scheduler(xml_dir) -> {file: text}`` / ``generate_msccl_scheduler(xml_dir, outdir, ...)``
  (plugin.py): C source of an ``mscclScheduler`` plugin choosing among MSCCL XML files;
- ``build_plan`` / ``run_plan`` (plan.py): the per-rank plan the generated code runs, and its numpy
  reference interpreter.
"""

from __future__ import annotations

from collsynth.backends.nccl.codegen import generate_nccl_cuda, render_nccl_cuda
from collsynth.backends.nccl.plan import build_plan, run_plan
from collsynth.backends.nccl.plugin import generate_msccl_scheduler, render_msccl_scheduler

__all__ = ["generate_nccl_cuda", "render_nccl_cuda", "generate_msccl_scheduler", "render_msccl_scheduler",
           "build_plan", "run_plan"]
