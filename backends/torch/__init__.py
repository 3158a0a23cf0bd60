"""torch.distributed backend: run any verified schedule on a process group (gloo on CPU, NCCL on GPUs).

- ``allreduce`` / ``reduce_scatter`` / ``all_gather`` / ``run_schedule`` (executor.py): one
  ``batch_isend_irecv`` per step, no barrier, any tensor length and dtype;
- ``StragglerAwareAllReduce`` (straggler.py): picks the StragglAR schedule for whichever rank is late,
  agreed through the process group's store;
- ``CommHookState`` / ``comm_hook`` (hook.py): a DistributedDataParallel communication hook;
- bench.py / launch.py: `collsynth bench` and `collsynth calibrate` on local processes.

PyTorch is imported on first use, not here: ``pip install 'collsynth[torch]'``.
"""

from __future__ import annotations

from collsynth.backends.torch.executor import (
                                               DEFAULT_TIMEOUT_S,
                                               CollectiveError,
                                               all_gather,
                                               allreduce,
                                               chunk_bounds,
                                               reduce_scatter,
                                               run_schedule,
)
from collsynth.backends.torch.hook import CommHookState, comm_hook
from collsynth.backends.torch.straggler import Agreement, StragglerAwareAllReduce

__all__ = ["DEFAULT_TIMEOUT_S", "Agreement", "CollectiveError", "CommHookState", "StragglerAwareAllReduce",
           "all_gather", "allreduce", "chunk_bounds", "comm_hook", "reduce_scatter", "run_schedule"]
