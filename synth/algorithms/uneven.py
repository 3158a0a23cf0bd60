"""The hierarchical AllReduce on nodes of unequal size (a node with a drained GPU: 8, 8, 8 and 7 GPUs).

Our construction. The composition of synth/composition.py needs N nodes of G GPUs, one per rail; on unequal
nodes ``node_grid`` is one flat row and ``hierarchical`` was a ring over every GPU, whose NICs then carry
2(n - 1)/n s each (h100-cluster-like nodes of 8, 8, 8 and 7, 1 GiB: 39-42 ms where 4 x 8 takes about 4).
Here the *core* is the first G_min GPUs (by local index) of every node, G_min the smallest node's size: the
composition runs on that N x G_min grid, and every other GPU x (an *extra*) is folded into its node's core
GPUs: slice by slice (the composition's K slices), x reduces block q of the slice into core GPU q, one block
per step of the core's schedule so that the last lands just before the slice's first step, and after the
slice's last step the core GPUs copy the final blocks back the same way. The simulator starts every transfer
when its data is ready and a link serves the steps in order, so pieces of one block each, spread over the
core GPUs, delay the core's rings by little (8 + 7 GPUs, 1 GiB: 7.0 ms; whole slices into one partner 8.7).
``hierarchical`` builds both and keeps the faster in the simulator (at 1,023 GPUs the whole slices win,
10.27 ms against 10.65).
The extras' data crosses NVLink twice (s out of x, s into x), and the core's rails carry s / G_min per NIC
instead of s / G.

The schedule does not record a composition (the folds are not part of one): it is verified by the flat
verifier, within the memory budget.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collsynth.synth.ir import Schedule


def core_and_extras(topology: Any, n: int) -> tuple[np.ndarray, list[tuple[int, int, int]]] | None:
    """(the N x G_min grid of core ranks, [(extra, its node, its index among the node's extras), ...]) where
    ``topology`` has at least two nodes of unequal size, the smallest of at least 2 GPUs; else None
    (``node_grid`` covers equal nodes)."""
    node_of = getattr(topology, "node_of", None) if topology is not None else None
    if node_of is None or len(node_of) != n:
        return None
    node_of = np.asarray(node_of, np.int64)
    sizes = np.bincount(node_of)
    if len(sizes) < 2 or np.all(sizes == sizes[0]) or sizes.min() < 2:
        return None
    g = int(sizes.min())
    local = np.asarray(getattr(topology, "local_index", np.zeros(n, np.int64)), np.int64)
    core, extras = [], []
    for b in range(len(sizes)):
        members = sorted(np.flatnonzero(node_of == b).tolist(), key=lambda r: (int(local[r]), r))
        core.append(members[:g])
        extras += [(x, b, i) for i, x in enumerate(members[g:])]
    return np.asarray(core, np.int64), extras


def with_extras(base: Schedule, n: int, core: np.ndarray, extras: list[tuple[int, int, int]],
                slice_starts: list[int], meta: dict[str, object], pieces: bool = True) -> Schedule:
    """``base`` (an AllReduce on the core's ranks, numbered row by row: base rank i is ``core.ravel()[i]``) on
    ``n`` ranks with the extras folded in (``slice_starts``: the first chunk of every slice, then the chunk
    count). Each extra's slice is cut into its G_min blocks; the extra with index i in its node reduces block
    q into core GPU q of its node, the pieces (j + i) mod G_min for j = 0, 1, ... listed one per base step so
    that the last lies just before the slice's first step, and after the slice's last step the core GPUs copy
    the final blocks back the same way, one per base step. One message per rank and direction in every added
    step (a node with more than G_min extras takes several rounds of pieces). Without ``pieces``, the whole
    slice into (and back from) core GPU i mod G_min, just before the slice's first step and after its last."""
    G = core.shape[1]
    real = core.ravel()
    src, dst = real[base.src], real[base.dst]
    starts = np.asarray(slice_starts, np.int64)
    K = len(starts) - 1
    sl = np.searchsorted(starts, base.chunk, side="right") - 1
    first = np.full(K, np.iinfo(np.int64).max)
    last = np.full(K, -1)
    np.minimum.at(first, sl, base.step)
    np.maximum.at(last, sl, base.step)
    waves = max((i for _, _, i in extras), default=-1) // G + 1  # targets repeat after G_min extras of a node
    # per base step: the pieces (slice, block, wave, back) listed before it (folds) and after it (copies back)
    before: dict[int, list[tuple[int, int, int, bool]]] = {}
    after: dict[int, list[tuple[int, int, int, bool]]] = {}
    P = waves * G  # pieces per slice and extra: one per base step, the folds ending at the slice's first step
    for k in range(K):
        for m in range(P if pieces else waves):
            j, w = (m % G, m // G) if pieces else (-1, m)
            before.setdefault(max(0, int(first[k]) - (P - m)) if pieces else int(first[k]), []).append(
                (k, j, w, False))
            after.setdefault(int(last[k]) + (m if pieces else 0), []).append((k, j, w, True))
    cols: list[list[int]] = [[], [], [], [], [], []]  # step, src, dst, chunk, count, reduce
    step = 0

    def piece(k: int, j: int, w: int, back: bool) -> None:
        """Block (j + i) mod G of slice k of every extra i of wave w, into (or from) the core GPU of that index;
        j = -1: the whole slice, core GPU i mod G."""
        nonlocal step
        bm = int(starts[k + 1] - starts[k]) // G
        for x, b, i in extras:
            if i // G == w:
                q = (j + i) % G if j >= 0 else i % G
                first_chunk, count = (int(starts[k]) + q * bm, bm) if j >= 0 else (int(starts[k]), G * bm)
                p = int(core[b, q])
                for c, v in zip(cols, (step, p if back else x, x if back else p, first_chunk, count, 0 if back else 1)):
                    c.append(v)
        step += 1

    order = np.argsort(base.step, kind="stable")
    bounds = np.searchsorted(base.step[order], np.arange(base.nsteps + 1))
    for s in range(base.nsteps):
        for pc in before.get(s, []):
            piece(*pc)
        idx = order[bounds[s]:bounds[s + 1]]
        for c, v in zip(cols, (np.full(len(idx), step), src[idx], dst[idx], base.chunk[idx], base.count[idx],
                               base.reduce[idx].astype(np.int64))):
            c.extend(np.asarray(v).tolist())
        step += 1
        for pc in after.get(s, []):
            piece(*pc)
    for s in sorted(t for t in after if t >= base.nsteps):
        for pc in after[s]:
            piece(*pc)
    a = [np.asarray(c, np.int64) for c in cols]
    return Schedule.from_arrays("allreduce", n, base.nchunks, step=a[0], src=a[1], dst=a[2], chunk=a[3],
                                count=a[4], reduce=a[5].astype(bool), nsteps=step, ports=base.ports,
                                name=f"hierarchical_allreduce_n{n}", meta=meta)
