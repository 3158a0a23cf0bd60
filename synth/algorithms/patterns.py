"""Reusable building blocks: ring and direct ReduceScatter/AllGather over any group of ranks.

Each adds steps to a ScheduleBuilder; ``group[i]`` owns chunk ``chunks[i]`` (the chunk it holds fully
reduced after a ReduceScatter, and the chunk it contributes to an AllGather). Algorithms and StragglAR's
phase 1 compose these, so a pattern is written once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from collsynth.synth.ir import ScheduleBuilder


def _arrays(group: Sequence[int], chunks: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    g = np.asarray(group, np.int64)
    c = np.asarray(chunks, np.int64)
    if len(g) != len(c):
        raise ValueError("group and chunks must have the same length")
    return g, c


def add_ring_reducescatter(b: ScheduleBuilder, group: Sequence[int], chunks: Sequence[int]) -> None:
    """Ring ReduceScatter (Patarasuk & Yuan 2009): m-1 steps; in step k member i reduces chunk
    chunks[i-k-1] into member i+1, so member i ends holding chunks[i] summed over the group."""
    g, c = _arrays(group, chunks)
    m = len(g)
    i = np.arange(m)
    for k in range(m - 1):
        b.new_step()
        b.add_many(g, g[(i + 1) % m], c[(i - k - 1) % m], 1, True)


def add_ring_allgather(b: ScheduleBuilder, group: Sequence[int], chunks: Sequence[int]) -> None:
    """Ring AllGather: m-1 steps; in step k member i copies chunk chunks[i-k] to member i+1."""
    g, c = _arrays(group, chunks)
    m = len(g)
    i = np.arange(m)
    for k in range(m - 1):
        b.new_step()
        b.add_many(g, g[(i + 1) % m], c[(i - k) % m], 1, False)


def shifted_pairs(m: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair (i, j), i != j, of m members as (src, dst) index arrays, in m - 1 rounds: round d
    = 1..m-1 pairs every i with i + d mod m (as NCCL's all-to-all orders its peers), so each round is a
    permutation: a rank whose sends queue behind one another in a step (more messages than ports) never
    finds all the others sending to the same receiver first, as in the order by source (everyone to 0,
    then to 1, ...)."""
    i = np.arange(m, dtype=np.int64)
    d = np.arange(1, m, dtype=np.int64)
    return np.tile(i, m - 1), ((i[None, :] + d[:, None]) % m).ravel()


def add_direct_reducescatter(b: ScheduleBuilder, group: Sequence[int], chunks: Sequence[int]) -> None:
    """Direct ReduceScatter in one step: every member reduces each owner's chunk straight into the
    owner (m-1 messages per rank, so the schedule needs ports >= m-1)."""
    g, c = _arrays(group, chunks)
    src, dst = shifted_pairs(len(g))
    b.new_step()
    b.add_many(g[src], g[dst], c[dst], 1, True)


def add_direct_allgather(b: ScheduleBuilder, group: Sequence[int], chunks: Sequence[int]) -> None:
    """Direct AllGather in one step: every owner copies its chunk to every other member."""
    g, c = _arrays(group, chunks)
    src, dst = shifted_pairs(len(g))
    b.new_step()
    b.add_many(g[src], g[dst], c[src], 1, False)
