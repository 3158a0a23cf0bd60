"""The last GPU to arrive in one NVLink domain (gb200-nvl72, dgx-h100, the nvswitch preset, or nodes of one
GPU): cluster.py's late-node form on a grid of one-GPU nodes. Our construction (docs/stragglar.md section 8).

Before its arrival the others AllReduce their buffers (prephase.py; with one GPU per node a ring of the
n - 1 others, its chunks cut fine, each starting at its own arrival, so other late ranks arriving earlier
take part there). After it the late GPU's buffer goes out in M blocks by
cluster.py's pipelined broadcast (the hypercube exchange; on n not a power of two its copy-back variants,
the fastest in the simulator), every receiver adds each block to the sum it holds and sends the final
block on, and the late GPU gets the final blocks back from its broadcast partners. That is about M +
ceil(log2 n) - 1 rounds of s / M bytes after the arrival, against StragglAR's n - 2 + log2 n rounds of
s / (n - 1) (multistraggler's flat form): fewer start-up costs where n is large and s moderate.
gb200-nvl72, one GPU 50 ms late, after the arrival: 64 MiB 0.173 ms (radix 0.195), 256 MiB 0.491 ms
(multistraggler 0.585); at 1 GiB the two tie (1.554 and 1.556 ms) and multistraggler stays (``TIE``).
choose.py builds it beside multistraggler and the fastest synchronous schedule and returns the fastest in
the simulator (also for several late ranks whose last arrives alone: ranks 5 and 40 at 10 and 12 ms on
NVL72, 256 MiB: 0.491 ms after the last arrival, multistraggler 0.585).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collsynth.synth.algorithms.stragglar import cluster, cluster_cost
from collsynth.synth.arrivals import latest_rank
from collsynth.synth.ir import Schedule

MAX_GPUS = 256  # built up to here (like cluster.BALANCED_MAX_GPUS: its copy-back broadcasts are simulated)
MIN_GPUS = 3  # a present AllReduce of at least two GPUs
# choose.py keeps multistraggler's flat form (StragglAR's schedule) unless this form's time after the arrival
# is this much shorter: the flat form only reduce-scatters before the arrival (half the bytes of an AllReduce),
# so it needs a shorter delay; ties such as 8 GPUs at 1 GiB (2.459 against 2.460 ms) keep it
TIE = 0.005


def applies(n: int, times: np.ndarray) -> bool:
    """Whether ``build`` makes the form: MIN_GPUS to MAX_GPUS GPUs, the last to arrive alone and after some
    other (the others may arrive at any earlier times: the AllReduce before it starts with each)."""
    last = times.max()
    return MIN_GPUS <= n <= MAX_GPUS and last > times.min() and int(np.count_nonzero(times == last)) == 1


def build(n: int, times: np.ndarray, size: float, topology: Any) -> Schedule | None:
    """The form for the arrival ``times`` (seconds per rank) of ``size`` bytes per rank on ``topology`` (its
    routes and link classes; its nodes are not used: every GPU is a node of its own), or None where it does
    not apply (``applies``). Its block count is cluster_cost.best_pipeline's for a late node of one GPU (its estimate
    is the simulated time here; below a few MiB 1 to 3 blocks win: gb200-nvl72, one GPU late, 1 MiB: 2 blocks
    31.9 us, 4 blocks 36.9)."""
    if not applies(n, times):
        return None
    late = [latest_rank(times, n)]
    grid = np.arange(n, dtype=np.int64).reshape(n, 1)
    M, runs, rows = cluster_cost.best_pipeline("node", n, 1, size, cluster_cost.link_model(topology, grid))
    plan = cluster.late_node_plan(topology, n, times, size, M, runs, rows, late, grid)
    return cluster.plan_schedule(plan, "domain", late, topology, size)
