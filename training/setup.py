"""What a training simulation runs on: the compute model, the topology, the sizes and the loop's options
(``TrainingSetup``), validated before training/work.py estimates the run and training/model.py simulates it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from collsynth.errors import CollsynthError
from collsynth.synth.topology import Topology
from collsynth.training.compute import ComputeModel


@dataclass(frozen=True)
class TrainingSetup:
    """What is being trained and on what; validated by ``check``."""

    compute: ComputeModel
    topology: Topology
    grad_bytes: float
    param_bytes: float | None = None  # default: grad_bytes
    microbatches: int = 1  # A
    batch: int = 1  # samples per micro-batch
    optimizer_s: float = 0.0  # full-model optimizer step
    buckets: int = 4
    backward_fraction: float = 2.0 / 3.0
    swap_s: float = 0.0
    count_allreduce: bool = True
    steps: int = 200
    warmup: int | None = None  # default: steps // 10, at most 20
    record: int = 3  # optimizer steps whose per-rank timeline is kept (from step ``warmup``)
    window_s: float = 0.1
    agree_s: float = 0.0
    exact: bool = False

    @property
    def nranks(self) -> int:
        return self.topology.nranks

    @property
    def pbytes(self) -> float:
        return float(self.grad_bytes if self.param_bytes is None else self.param_bytes)

    @property
    def warmup_steps(self) -> int:
        return min(20, self.steps // 10) if self.warmup is None else self.warmup

    def check(self) -> None:
        if self.compute.nranks != self.topology.nranks:
            raise CollsynthError(f"the compute model has {self.compute.nranks} ranks but the topology has "
                                 f"{self.topology.nranks} GPUs: use the same --gpus for both")
        for name, v in (("--grad-bytes", self.grad_bytes), ("--param-bytes", self.pbytes)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise CollsynthError(f"{name} must be a positive size, got {v!r}")
        for name, v in (("--microbatches", self.microbatches), ("--batch", self.batch),
                        ("--buckets", self.buckets), ("--steps", self.steps)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise CollsynthError(f"{name} must be an integer >= 1, got {v!r}")
        for name, v in (("--optimizer", self.optimizer_s), ("--swap", self.swap_s), ("--agree", self.agree_s)):
            if not (math.isfinite(v) and v >= 0):
                raise CollsynthError(f"{name} must be a time >= 0, got {v!r}")
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise CollsynthError(f"--window must be a positive time, got {self.window_s!r}")
        if not 0 < self.backward_fraction <= 1:
            raise CollsynthError(f"--backward-fraction must be in (0, 1], got {self.backward_fraction!r}")
        w = self.warmup_steps
        if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w < self.steps:
            raise CollsynthError(f"--warmup must be an integer in 0..{self.steps - 1} (below --steps), got {w!r}")


__all__ = ["TrainingSetup"]
