"""Bruck's AllGather for any number of ranks (Bruck, Ho, Kipnis, Upfal & Weathersby, "Efficient algorithms
for all-to-all communications in multiport message-passing systems", IEEE TPDS 8(11), 1997): ceil(log2 R)
steps; in the step of distance d rank i sends the blocks it holds, i .. i + min(d, R - d) - 1 (mod R), to
rank i - d (mod R), so that after it rank i holds blocks i .. i + 2d - 1. Every rank sends and receives
R - 1 blocks in all; where R is a power of two recursive doubling does the same in as many steps."""

from __future__ import annotations


def bruck_steps(R: int, mirrored: bool = False) -> list[list[tuple[int, int, int, int]]]:
    """Per step, the (src, dst, first block, blocks) moves of Bruck's AllGather over R ranks, rank i starting
    with block i; block ranges are cyclic (first + blocks may pass R). ``mirrored``: rank i sends to i + d the
    blocks i - c + 1 .. i instead (the ranges then pass R at other ranks)."""
    steps: list[list[tuple[int, int, int, int]]] = []
    d = 1
    while d < R:
        c = min(d, R - d)
        if mirrored:
            steps.append([(i, (i + d) % R, (i - c + 1) % R, c) for i in range(R)])
        else:
            steps.append([(i, (i - d) % R, i, c) for i in range(R)])
        d *= 2
    return steps


def bruck_reduce_steps(R: int, mirrored: bool = False) -> list[list[tuple[int, int, int, int]]]:
    """Per step, the (src, dst, first block, blocks) moves of a ReduceScatter over R ranks: src reduces its
    partial sums of the blocks into dst, and rank i ends with the sum of block i. Bruck's AllGather
    transposed (its steps in reverse order, every move reversed): the AllGather hands each rank each block
    exactly once, so here each rank sends each partial sum once, after every partial sum it gets for it."""
    return [[(dst, src, first, count) for src, dst, first, count in step]
            for step in reversed(bruck_steps(R, mirrored))]


def cyclic_runs(first: int, count: int, total: int) -> list[tuple[int, int]]:
    """The cyclic range first .. first + count - 1 (mod ``total``) as at most two (first, count) runs."""
    first %= total
    if first + count <= total:
        return [(first, count)]
    return [(first, total - first), (0, first + count - total)]
