"""Where a Schedule's data live in a runtime's buffers (shared by the MSCCL XML and MSCCL++ lowerings),
and on which node each rank is (``nodes_of``).

A location (rank, chunk) lives in the input ``i`` until it is first written, then in the output ``o``
(reducescatter: ``o`` for the rank's own block, scratch ``s`` for partial sums of the other chunks;
allgather: ``o`` throughout, the rank's own block copied there first). The same program is then correct
in place (where ``o`` aliases ``i``) and out of place (where ``i`` is never written). ReduceScatter and
AllGather need rank r to own the contiguous block r*m..r*m+m-1 (``check_block_owners``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collsynth.errors import CollsynthError, quoted
from collsynth.synth.verify import schedule_topology

Loc = tuple[str, int]  # (buffer i/o/s, chunk index)


class Layout:
    """Where (rank, chunk) lives; ``m`` chunks per rank block; ``inplace`` for ``hazard``."""

    def __init__(self, coll: str, n: int, N: int, inplace: bool = True) -> None:
        self.coll, self.n, self.N, self.inplace = coll, n, N, inplace
        self.m = N // n

    def read(self, r: int, c: int, written: bool) -> Loc:
        if self.coll == "allgather":
            return ("o", c)
        if not written:
            return ("i", c)
        return self.write(r, c)

    def write(self, r: int, c: int) -> Loc:
        if self.coll == "reducescatter":
            m = self.m
            if c // m == r:
                return ("o", c - r * m)
            return ("s", c if c < r * m else c - m)
        return ("o", c)

    def hazard(self, r: int, loc: Loc) -> Loc:
        """The physical location in place (aliases merged) for dependency analysis."""
        buf, k = loc
        if not self.inplace:
            return loc
        if self.coll == "allgather" and buf == "i":
            return ("o", r * self.m + k)
        if self.coll == "reducescatter" and buf == "o":
            return ("i", r * self.m + k)
        if self.coll == "allreduce" and buf == "o":
            return ("i", k)
        return loc

    def written0(self) -> np.ndarray:
        """(rank, chunk) locations that hold data before the first step: an allgather's own blocks."""
        written = np.zeros((self.n, self.N), np.bool_)
        if self.coll == "allgather":
            for r in range(self.n):
                written[r, r * self.m:(r + 1) * self.m] = True
        return written

    def scratch_base(self) -> int:
        """Scratch chunks the layout itself uses (reducescatter partial sums)."""
        return self.N - self.m if self.coll == "reducescatter" else 0

    def chunks(self) -> tuple[int, int]:
        """(input chunks, output chunks) of every rank."""
        if self.coll == "allgather":
            return self.m, self.N
        if self.coll == "reducescatter":
            return self.N, self.m
        return self.N, self.N


def check_block_owners(s: Any, runtime: str) -> None:
    """ReduceScatter/AllGather: ``runtime`` needs equal contiguous blocks owned in rank order."""
    n, N = s.nranks, s.nchunks
    if s.collective == "allreduce":
        return
    if N % n:
        raise CollsynthError(f"{s.collective} with {N} chunks on {n} ranks: {runtime} needs nchunks to be a multiple "
                             f"of the rank count (each rank owns an equal block)")
    m = N // n
    if tuple(s.owner) != tuple(c // m for c in range(N)):
        raise CollsynthError(f"{s.collective}: {runtime} needs rank r to own chunks r*{m}..r*{m}+{m - 1} (contiguous "
                             f"blocks in rank order); relabel the schedule's chunks")


def contiguous_runs(roles: list[list[Loc]]) -> list[tuple[int, int]]:
    """Positions 0..len-1 cut into runs that are contiguous in every role's buffer."""
    count = len(roles[0])
    if all(_one_run(r) for r in roles):  # the common case, without a comparison per position
        return [(0, count)] if count else []
    out, start = [], 0
    for k in range(1, count + 1):
        if k == count or any(r[k - 1][0] != r[k][0] or r[k][1] != r[k - 1][1] + 1 for r in roles):
            out.append((start, k))
            start = k
    return out


def _one_run(locs: list[Loc]) -> bool:
    """Whether ``locs`` are consecutive offsets of one buffer."""
    if not locs:
        return True
    buf, off = locs[0]
    n = len(locs)
    return (locs[-1][1] - off == n - 1 and [x[1] for x in locs] == list(range(off, off + n))
            and [x[0] for x in locs] == [buf] * n)


def nodes_of(schedule: Any, gpus_per_node: int | None) -> list[int]:
    """The node of every rank: ``gpus_per_node`` consecutive ranks per node; by default the schedule's
    ``meta["gpus_per_node"]``, else the nodes of the topology it records (synth.verify.record_topology),
    else one node."""
    n = schedule.nranks
    g = gpus_per_node if gpus_per_node is not None else schedule.meta.get("gpus_per_node")
    if g is None:
        topology = schedule_topology(schedule)
        if topology is None:
            return [0] * n
        return [int(x) for x in topology.node_of]
    flag = gpus_per_node is not None
    name = schedule.name or schedule.collective
    where = "--gpus-per-node" if flag else f"schedule {name}: its meta \"gpus_per_node\""
    fix = "" if flag else " (fix it, or give --gpus-per-node)"
    if isinstance(g, bool) or not isinstance(g, int) or g < 1:
        raise CollsynthError(f"{where} must be an integer >= 1, got {quoted(g)}{fix}")
    if n % g:
        raise CollsynthError(f"{where} {g} does not divide the schedule's {n} ranks{fix}")
    return [r // g for r in range(n)]
