"""NCCL code backend: generated CUDA/NCCL programs for any schedule, and an MSCCL scheduler plugin.

- ``generate_nccl_cuda(schedule, outdir, *, name=None, force=False, dtypes=None) -> list[str]``
  (codegen.py): library ``<name>.cu/.h``, benchmark ``bench_<name>.cu`` and ``Makefile``;
- ``generate_msccl_scheduler(xml_dir, outdir, *, force=False, stragglers=None) -> list[str]``
  (plugin.py): C source of an ``mscclScheduler`` plugin choosing among MSCCL XML files;
- ``build_plan`` / ``run_plan`` (plan.py): the per-rank plan the generated code runs, and its numpy
  reference interpreter.
"""

from __future__ import annotations

from typing import Any

__all__ = ["generate_nccl_cuda", "render_nccl_cuda", "generate_msccl_scheduler", "render_msccl_scheduler",
           "build_plan", "run_plan"]


def __getattr__(name: str) -> Any:
    if name in ("generate_nccl_cuda", "render_nccl_cuda"):
        from . import codegen
        return getattr(codegen, name)
    if name in ("generate_msccl_scheduler", "render_msccl_scheduler"):
        from . import plugin
        return getattr(plugin, name)
    if name in ("build_plan", "run_plan"):
        from . import plan
        return getattr(plan, name)
    raise AttributeError(name)
