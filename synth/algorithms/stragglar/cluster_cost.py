"""Alpha-beta estimates of the cluster forms of ``cluster.py`` and the block counts chosen from them.

After one late GPU or one late node arrives (issue 15, points 1 and 2; docs/stragglar.md section 9), the time is
the NVLink front, the rails' pipelined broadcasts (``bcast.broadcast_rounds``: blocks + ceil(log2 N) - 1 rounds, the
one-port optimum of Bar-Noy & Kipnis 1994) and the last row's spread. ``after_arrival_estimate`` (the star and
late-node forms), ``wide_estimate`` (the wide form) and ``bcast_estimate`` (the node-broadcast form) count them in
the grid's ``link_model``; ``best_pipeline``, ``best_rows`` and ``best_bcast`` take the block counts with the least
estimate, and ``late_gpu_forms`` names the forms one late GPU may take. Pure functions of the shape and the model:
the plans themselves are built in ``cluster.py``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from collsynth.synth.algorithms.layout import pair_model
from collsynth.synth.algorithms.stragglar import fanout
from collsynth.synth.composition import radix_factors

MAX_CHUNKS = 4096  # chunks of one cluster plan (G parts of M blocks, each cut for the rings before the arrival)


def make_runs(M: int, run: int, tail: int) -> list[tuple[int, int]]:
    """Messages over a part's M units: runs of ``run`` units, then the last ``tail`` units one by one (a
    chain's drain costs its last message times the hops, so the last messages are small)."""
    tail = min(M, tail)
    bulk = M - tail
    out = [(f, min(run, bulk - f)) for f in range(0, bulk, run)]
    return out + [(f, 1) for f in range(bulk, M)]


def link_model(topology: Any, grid: np.ndarray) -> tuple[float, float, float, float]:
    """(alpha_nv, B_nv, alpha_net, B_net) of the grid's NVLink pair and cross-node rail pair (the estimates' model)."""
    N, G = grid.shape
    a_nv, b_nv = pair_model(topology, int(grid[0, 0]), int(grid[0, 1])) if G > 1 else (0.0, math.inf)
    a_net, b_net = pair_model(topology, int(grid[0, 0]), int(grid[1, 0]))
    return a_nv, b_nv, a_net, b_net


def after_arrival_estimate(form: str, N: int, G: int, M: int, runs: list[tuple[int, int]], size: float,
                           model: tuple[float, ...], rows: list[tuple[int, int]] | None = None) -> float:
    """Alpha-beta estimate of the time after the arrival. Late GPU: its NVLink port's G - 1 messages
    before the rail it serves last starts, that rail's hypercube broadcast (blocks + log2 N - 1 rounds,
    one message per round, each as long as the largest block; bcast.broadcast_rounds), at least the late
    GPU's NVLink port (G messages per block), then the last row's spread (at 16 x 8 and 1 GiB within
    0.1% of the simulated time for 24 to 32 blocks per part). Late node:
    the larger of its GPUs' NVLink work (a ReduceScatter and an AllGather of every NVLink row, default
    one per block: 2(G-1)/G s and 2 log2 G messages per row) and the NIC path (the first row's
    reduction, the blocks, then the later of the last row's AllGather in the late node and the
    broadcast's log2 N - 1 further rounds plus the spread of the last block elsewhere)."""
    a_nv, b_nv, a_net, b_net = model
    unit = size / (G * M)
    hops = math.ceil(math.log2(N)) if N > 1 else 0
    steps = math.ceil(math.log2(G)) if G > 1 else 0
    w_last = runs[-1][1] if runs else 1
    if form == "wide":
        return wide_estimate(N, G, [w * unit * G for _, w in runs], model)
    if form == "node":
        rows = rows if rows is not None else runs
        nv = sum(2 * steps * a_nv + 2 * (G - 1) * w * unit / b_nv for _, w in rows)
        first = steps * a_nv + (G - 1) * rows[0][1] * unit / b_nv
        last = steps * a_nv + (G - 1) * rows[-1][1] * unit / b_nv
        spread = last if len(rows) == len(runs) else (G - 1) * (a_nv + w_last * unit / b_nv)
        nic = sum(a_net + w * unit / b_net for _, w in runs)
        return max(nv, first + nic + max(last, (hops - 1) * (a_net + w_last * unit / b_net) + spread))
    # late GPU: the rail its NVLink serves last gets its first block after G - 1 messages, then the
    # broadcast's blocks + log2 N - 1 rounds, each as long as the largest block, then the last row's
    # spread; its NVLink port (G messages per block, the side work included) at least as long
    w_max = max((w for _, w in runs), default=1)
    front = (G - 1) * (a_nv + runs[0][1] * unit / b_nv) if runs else 0.0
    rails = sum(a_net + w * unit / b_net for _, w in runs) + max(hops - 1, 0) * (a_net + w_max * unit / b_net)
    port = sum(G * (a_nv + w * unit / b_nv) for _, w in runs)
    # the last row: recursive doubling where G is a power of two, else one message per peer (``_spread``; two
    # nodes of 40 GPUs, 64 MiB: 0.604 ms in the simulator, and so estimated, where log2 G said 0.491)
    spread = steps if G & (G - 1) == 0 else G - 1
    return max(front + rails, port) + spread * a_nv + (G - 1) * w_last * unit / b_nv


def radix_node(G: int) -> bool:
    """Whether a whole node of G GPUs reduces and gathers a row by the mixed-radix steps (contiguous runs of
    parts, sum(f - 1) steps over G's prime factors) rather than Bruck's (ceil(log2 G) steps, two messages
    where a run passes part G - 1): G not a power of two and no more steps (72, 24, 12, 6; not a prime).
    Node 1 of 2 x 72 late, 1 GiB, 900 GB/s: 2.515 -> 2.448 ms after the arrival."""
    return G > 2 and G & (G - 1) != 0 and sum(f - 1 for f in radix_factors(G)) <= math.ceil(math.log2(G))


def wide_applies(G: int) -> bool:
    """Whether one late GPU's node may gather its block rows by Bruck's AllGather (``ClusterPlan._wide_row``):
    G not a power of two (there recursive doubling is as short and the star spreads of the roots measured
    faster) and over 2."""
    return G > 2 and G & (G - 1) != 0


def wide_group(R: int) -> int:
    """Peers per group of the wide form (``_wide_row``) with R peers: ceil(sqrt(R)), so that the late GPU's
    reductions (one per group) and a leader's scatter (one per member) are about as many."""
    return math.isqrt(R - 1) + 1


def wide_estimate(N: int, G: int, rows: list[float], model: tuple[float, ...]) -> float:
    """Alpha-beta estimate of the time after one late GPU's arrival in the wide form (``_wide_row``; ``rows``:
    the bytes of each block row): the largest of the late GPU's NVLink port (a reduction per group of about
    sqrt(G) peers and the row), its node's AllGather (per row the Bruck steps and (G - 1)/G of the row, plus
    the scatter and copy back of that row's leaders: the AllGather waits for its slowest member) and the NIC
    path (a block per row and the broadcast's further hops), then the last row's NIC block and AllGather in
    the other nodes. Within 10% of the simulator on 2-4 nodes of 6-72 GPUs at 450 and 900
    GB/s NVLink and 2-16 blocks per part, with no fitted constant (docs/stragglar.md section 9, "Large NVLink
    domains as nodes")."""
    a_nv, b_nv, a_net, b_net = model
    if not rows:
        return 0.0
    R = G - 1
    size = wide_group(R)
    groups = -(-R // size)
    steps = math.ceil(math.log2(R))
    hops = math.ceil(math.log2(N)) if N > 1 else 0
    port = sum(groups * a_nv + B / b_nv for B in rows)
    node = sum((steps + size) * a_nv + (G - 1 + 2 * size - 1) / G * B / b_nv for B in rows)
    nic = sum(a_net + B / G / b_net for B in rows) + max(hops - 1, 0) * (a_net + max(rows) / G / b_net)
    last = rows[-1]
    drain = a_net + last / G / b_net + math.ceil(math.log2(G)) * a_nv + (G - 1) / G * last / b_nv
    return max(port, node, nic) + drain


# candidate blocks per part (1 to 3 since the session of 2026-12-06: below a few MiB the rounds are message
# start-ups; h100-cluster 16 x 8, one GPU late, 1 MiB: 4 blocks 166.6 us after the arrival, 1 block 104.6)
UNITS = (1, 2, 3, 4, 6, 8, 9, 10, 12, 16, 20, 24, 28, 32, 40, 48, 64)
GPU_TIE = 0.0025  # a late GPU: estimates this close to the least are ties (best_pipeline)
ROWS = (1, 2, 3, 4, 5, 6, 8)  # candidate NVLink rows of a late node (at most the blocks)


def even_rows(M: int, R: int) -> list[tuple[int, int]]:
    """R runs of M units, as even as can be (the larger first)."""
    edges = [(M * i + R - 1) // R for i in range(R + 1)]
    return [(edges[i], edges[i + 1] - edges[i]) for i in range(R) if edges[i + 1] > edges[i]]


COARSE_MAX_NODES = 32  # above, rows of several blocks are not used (build time, see coarse_rows_apply)


def coarse_rows_apply(N: int, G: int) -> bool:
    """Whether a late node's NVLink rows may span several blocks (``best_rows``): G a power of two (the
    node reduces whole rows), N a power of two (the hypercube broadcast, where the estimate holds; with
    the greedy broadcast the model measured no gain) and at most COARSE_MAX_NODES (the other nodes then
    spread every block of every part on its own, G - 1 messages instead of log2 G per row: 2.8x the
    transfers and 3.6x the build time at 64 nodes, which would break the 1,024-GPU synthesis budget)."""
    return G & (G - 1) == 0 and N & (N - 1) == 0 and N <= COARSE_MAX_NODES


def best_rows(N: int, G: int, M: int, size: float, model: tuple[float, ...]) -> list[tuple[int, int]]:
    """A late node's NVLink rows over M one-unit blocks: the count of ROWS (at most M) with the least
    estimate (fewer rows: fewer NVLink messages, a longer first reduction and last AllGather)."""
    runs = make_runs(M, 1, M)
    cands = [even_rows(M, R) for R in ROWS if R <= M] + [list(runs)]
    return min(cands, key=lambda rows: (after_arrival_estimate("node", N, G, M, runs, size, model, rows),
                                        len(rows)))


def best_pipeline(form: str, N: int, G: int, size: float,
                  model: tuple[float, ...]) -> tuple[int, list[tuple[int, int]], list[tuple[int, int]]]:
    """(M, runs, rows): the M of UNITS with the least estimate, one block per unit; a late node's
    NVLink rows (``best_rows`` where ``coarse_rows_apply``), else one row per block. A late GPU: estimates
    within GPU_TIE of the least count as ties and go to the most blocks (a smaller last row to spread;
    on 2 x 8 this keeps 20 blocks, the warm start tests/test_solver_lns.py searches around)."""
    cands = [m for m in UNITS if G * m <= MAX_CHUNKS] or [1]
    scored = []
    for m in cands:
        runs = make_runs(m, 1, m)
        rows = best_rows(N, G, m, size, model) if form == "node" and coarse_rows_apply(N, G) else runs
        scored.append((after_arrival_estimate(form, N, G, m, runs, size, model, rows), m, runs, rows))
    least = min(scored, key=lambda x: (x[0], x[1]))
    if form == "gpu":
        least = max((x for x in scored if x[0] <= least[0] * (1 + GPU_TIE)), key=lambda x: x[1])
    return least[1], least[2], least[3]


def bcast_applies(G: int, model: tuple[float, ...]) -> bool:
    """Whether one late GPU's node may take the node-broadcast form (``ClusterPlan._bcast_node``): more than 2
    GPUs whose NICs together carry at least one NVLink port (G B_net >= B_nv: the node's NVLink, not its NICs,
    then sets the pace; two nodes of 24 to 72 GPUs at 900 GB/s measured 10-20% faster than the star and wide
    forms, 8 and 12 GPUs 2-3% slower)."""
    return G > 2 and G * model[3] >= model[1]


BCAST_SPLITS = (2, 3, 4, 6, 8, 12, 16)  # candidate blocks per row of the node-broadcast form (at most G)


def bcast_estimate(N: int, G: int, rows: list[float], split: int, model: tuple[float, ...]) -> float:
    """Alpha-beta estimate of the time after one late GPU's arrival in the node-broadcast form (``_bcast_node``;
    ``rows``: the bytes of each row, cut into ``split`` blocks): L's node's broadcast (blocks + q - 1 rounds, q =
    ceil(log2 G), each as long as the largest block; a block reaches every GPU up to 2 q - 2 rounds after L sends
    it, since the broadcasts hand the blocks out of order), the rails' broadcasts of the rows (rows + ceil(log2 N)
    - 1 NIC rounds after the first row is in L's node), and every other node's AllGather of each row (its steps,
    one more for Bruck's second messages, and (G - 1)/G of the row) once the row is in and the previous one
    gathered; the last row's AllGather after the later of these. Within 10% of the simulator on 2-4 nodes of 24-72
    GPUs."""
    a_nv, b_nv, a_net, b_net = model
    if not rows:
        return 0.0
    q = math.ceil(math.log2(G))
    hops = math.ceil(math.log2(N)) if N > 1 else 0
    block = max(rows) / split
    rnd = a_nv + block / b_nv
    node_a = (split * len(rows) + q - 1) * rnd
    nic = a_net + max(rows) / G / b_net
    steps = sum(f - 1 for f in radix_factors(G)) if radix_node(G) else q if G & (G - 1) == 0 else q + 1
    gather = [steps * a_nv + (G - 1) / G * B / b_nv for B in rows]
    first = (split + 2 * q - 2) * rnd + hops * nic  # the first row in every node
    rails = first + (len(rows) - 1) * nic  # the last row along the rails
    done = first
    for ag in gather[:-1]:  # every other node gathers the rows in order, each once it is in
        done = max(done, first) + ag
    return max(node_a, max(node_a + hops * nic, rails, done) + gather[-1])


def best_bcast(N: int, G: int, size: float, model: tuple[float, ...]) -> tuple[int, int]:
    """(rows, blocks per row) of the node-broadcast form with the least ``bcast_estimate``: rows from UNITS (one NIC
    block each), blocks per row from BCAST_SPLITS (at most G); ties to the fewest rows, then blocks."""
    cands = [m for m in UNITS if G * m <= MAX_CHUNKS] or [1]
    return min(((m, best_split(N, G, m, size, model)) for m in cands),
               key=lambda mk: (bcast_estimate(N, G, [size / mk[0]] * mk[0], mk[1], model), mk))


def best_split(N: int, G: int, M: int, size: float, model: tuple[float, ...]) -> int:
    """The blocks per row of BCAST_SPLITS (at most G) with the least ``bcast_estimate`` for M rows."""
    return min((k for k in BCAST_SPLITS if k <= G), key=lambda k: (bcast_estimate(N, G, [size / M] * M, k, model), k))


def late_gpu_forms(N: int, G: int, model: tuple[float, ...]) -> list[str]:
    """The forms ``late_gpu_plan`` builds for one late GPU on N nodes of G GPUs with ``model``'s links: the star
    form ("gpu"), the wide form where ``wide_applies``, the node-broadcast form ("bcast") where ``bcast_applies``,
    the fan-out form ("fan") where ``fanout.applies``."""
    return (["gpu"] + (["wide"] if wide_applies(G) else []) + (["bcast"] if bcast_applies(G, model) else [])
            + (["fan"] if fanout.applies(N, G) else []))


def late_gpu_builds(N: int, G: int, model: tuple[float, ...]) -> int:
    """How many plans ``late_gpu_plan`` may build and simulate where it searches: one per form of ``late_gpu_forms``,
    the fan-out form once per multiplier (it stops at the first that packs within ``fanout.FAN_TIE``)."""
    forms = late_gpu_forms(N, G, model)
    return len(forms) + (len(fanout.multipliers(G)) - 1 if "fan" in forms else 0)


def best_fan(G: int, size: float, model: tuple[float, ...]) -> int:
    """The blocks per part of UNITS with the least ``fanout.estimate`` of equal parts (the one the simulator meets;
    ties to the most blocks)."""
    cands = [m for m in UNITS if G * m <= MAX_CHUNKS] or [1]
    return min(cands, key=lambda m: (fanout.estimate(G, make_runs(m, 1, m), size, model, uneven=False), -m))


def fan_blocks(G: int, M: int) -> tuple[int, list[tuple[int, int]]]:
    """(units per part, blocks) of the fan-out form with M blocks per part: each block as many units as
    MAX_CHUNKS allows, so that its parts can be uneven (``fanout.merge``)."""
    u = max(1, MAX_CHUNKS // (G * M))
    return M * u, make_runs(M * u, u, 0)
