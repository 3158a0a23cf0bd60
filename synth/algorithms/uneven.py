"""The hierarchical AllReduce on nodes of unequal size (a node with a drained GPU: 8, 8, 8 and 7 GPUs).

Our construction. The composition of synth/composition.py needs N nodes of G GPUs, one per rail; on unequal
nodes ``node_grid`` is one flat row and ``hierarchical`` was a ring over every GPU, whose NICs then carry
2(n - 1)/n s each (h100-cluster-like nodes of 8, 8, 8 and 7, 1 GiB: 39-42 ms where 4 x 8 takes about 4).
Here the *core* is the first G_min GPUs (by local index) of every node, G_min the smallest node's size: the
rail phase of the composition runs on that N x G_min grid, and every other GPU (an *extra*) joins one of two
ways:

- the *ring form* (``with_ring``): each node's ReduceScatter and AllGather run around a ring of all its GPUs,
  the core's G_min blocks travelling it (the extras own none), so a node of g GPUs takes g - 1 ring steps and
  each of its GPUs moves (g - 1)/G_min s over NVLink per phase; the list-scheduling model counts those steps
  (8 + 7 GPUs, 1 GiB: 5.18 ms, modelled exactly; 7 + 7 alone 4.50). A node of k G_min GPUs (16 + 8, 12 + 4)
  instead cuts every block into k parts, one ending at the block's core GPU and one at each of k - 1 extras,
  which hand theirs over in k - 1 regroup rounds and get the final parts back after the rail phase: (g - 1)/g s
  per GPU and phase, plus s/g (16 + 8: 9.2 -> 6.4 ms; 12 + 4: 12.9 -> 7.5);
- the *fold forms* (``with_extras``): slice by slice (the composition's K slices), the extra reduces block q of
  the slice into core GPU q, one block per step of the core's schedule so that the last lands just before the
  slice's first step, and after the slice's last step the core GPUs copy the final blocks back the same way
  (or whole slices into one partner and back). Each extra's data then crosses NVLink twice more, outside the
  model: 8 + 7 GPUs 7.0 ms.

``hierarchical`` builds the three and keeps the fastest in the simulator. The schedule records no composition
(the extras' moves are not part of one): it is verified by the flat verifier, within the memory budget.

``around`` adds the extras to any AllReduce of the core instead (clusterstraggler's late forms built for the
core, synth/algorithms/stragglar/choose.py): folds before the core GPUs first send the chunks, copies of the
final chunks after they are made, directly or through a chain of a node's extras (docs/stragglar.md section 9,
"Nodes of unequal size").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from collsynth.synth.composition import Emitter, LinkModel, NodeSteps, chains, inter_steps, list_schedule
from collsynth.synth.ir import Phase, Schedule, ScheduleBuilder

Part = tuple[int, int, int]  # (block, part, parts): part j of block q cut into ``parts`` equal parts
Move = tuple[int, int, int, int, bool]  # src, dst, first chunk, count, reduce
# ``around``'s (pieces, lag, direct) choose tries; direct 1 (one chain through a node's extras) only where a node
# has two or more
AROUND_CHOICES = ((4, 0, 0), (1, 0, 0), (4, 3, 0), (1, 3, 0), (4, 5, 0), (1, 5, 0), (4, 0, 1), (4, 3, 1))


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

    def piece(k: int, j: int, w: int, back: bool) -> list[Move]:
        """Block (j + i) mod G of slice k of every extra i of wave w, into (or from) the core GPU of that index;
        j = -1: the whole slice, core GPU i mod G (one step)."""
        bm = int(starts[k + 1] - starts[k]) // G
        out = []
        for x, b, i in extras:
            if i // G == w:
                q = (j + i) % G if j >= 0 else i % G
                first_chunk, count = (int(starts[k]) + q * bm, bm) if j >= 0 else (int(starts[k]), G * bm)
                p = int(core[b, q])
                out.append((p, x, first_chunk, count, False) if back else (x, p, first_chunk, count, True))
        return out

    return interleaved(base, n, core.ravel(), {s: [piece(*pc) for pc in pcs] for s, pcs in before.items()},
                       {s: [piece(*pc) for pc in pcs] for s, pcs in after.items()}, set(), meta,
                       f"hierarchical_allreduce_n{n}")


def interleaved(base: Schedule, n: int, real: np.ndarray, before: dict[int, list[list[Move]]],
                after: dict[int, list[list[Move]]], joining: set[int], meta: dict[str, object], name: str) -> Schedule:
    """``base`` on ``n`` ranks (its rank i is ``real[i]``) with steps of added moves: ``before[s]`` just before
    base step s, ``after[s]`` just after it (from base.nsteps on: at the end, in order), each a list of steps; the
    phases of ``base`` keep their steps (the added ones before its first step join the first phase) and wait for
    ``joining`` too."""
    src, dst = real[base.src], real[base.dst]
    cols: list[list[int]] = [[], [], [], [], [], []]  # step, src, dst, chunk, count, reduce
    step = 0

    def put(steps: list[list[Move]]) -> None:
        nonlocal step
        for group in steps:
            for mv in group:
                for c, v in zip(cols, (step, *mv)):
                    c.append(int(v))
            step += 1

    order = np.argsort(base.step, kind="stable")
    bounds = np.searchsorted(base.step[order], np.arange(base.nsteps + 1))
    at = np.zeros(base.nsteps + 1, np.int64)  # base step -> its step here
    for s in range(base.nsteps):
        put(before.get(s, []))
        at[s] = step
        idx = order[bounds[s]:bounds[s + 1]]
        for c, v in zip(cols, (np.full(len(idx), step), src[idx], dst[idx], base.chunk[idx], base.count[idx],
                               base.reduce[idx].astype(np.int64))):
            c.extend(np.asarray(v).tolist())
        step += 1
        put(after.get(s, []))
    for s in sorted(t for t in after if t >= base.nsteps):
        put(after[s])
    at[base.nsteps] = step
    phases = tuple(Phase(p.name, 0 if p.start == 0 else int(at[p.start]), int(at[p.stop]),
                         tuple(sorted({int(real[r]) for r in p.waits_for} | joining))) for p in base.phases)
    a = [np.asarray(c, np.int64) for c in cols]
    return Schedule.from_arrays("allreduce", n, base.nchunks, step=a[0], src=a[1], dst=a[2], chunk=a[3],
                                count=a[4], reduce=a[5].astype(bool), nsteps=step, phases=phases, ports=base.ports,
                                name=name, meta=meta)


@dataclass(frozen=True)
class NodeRings:
    """The node phases of the ring form (``node_rings``): per node its ring of ranks and, per ring position, the
    part of a block it ends the ReduceScatter with (None: an extra of a ring-only node), the regroup rounds (per
    round (extra, core GPU, part) moves, at most one per rank) and ``split``, the parts' common multiple (the
    slices' chunks are cut that much finer)."""

    rings: tuple[np.ndarray, ...]
    own: tuple[tuple[Part | None, ...], ...]
    rounds: tuple[tuple[tuple[int, int, Part], ...], ...]
    split: int

    def steps(self) -> NodeSteps:
        """The node phases' steps for composition.chains: per ring step and regroup round the largest part
        moved (in blocks)."""
        longest = max(len(r) for r in self.rings)
        ring = tuple(max(1 / p[2] for r, own in zip(self.rings, self.own) if t < len(r) - 1 for p in own if p)
                     for t in range(longest - 1))
        regroup = tuple(max(1 / part[2] for _, _, part in moves) for moves in self.rounds)
        return ring + regroup, regroup[::-1] + ring

    def transfers(self) -> int:
        """The node phases' transfers per slice: both rings' and the regroup moves there and back."""
        return 2 * sum((len(r) - 1) * sum(p is not None for p in own) for r, own in zip(self.rings, self.own)) + (
            2 * sum(map(len, self.rounds)))


def node_rings(core: np.ndarray, local: list[int], extras: list[tuple[int, int, int]]) -> NodeRings:
    """Per node a ring of all its GPUs, the core GPUs first in the ring order ``local`` (composition's). A node of
    k G_min GPUs cuts each block into k parts, one ending at the block's core GPU and one at each of k - 1
    extras, which hand theirs to the core GPU in k - 1 regroup rounds; any other node's extras own no part."""
    N, G = core.shape
    rings: list[list[int]] = [core[b, local].tolist() for b in range(N)]
    mine: list[list[tuple[int, int]]] = [[] for _ in range(N)]
    for x, b, i in extras:
        rings[b].append(x)
        mine[b].append((x, i))
    own: list[tuple[Part | None, ...]] = []
    rounds: dict[int, list[tuple[int, int, Part]]] = {}
    split = 1
    for b in range(N):
        k = len(rings[b]) // G if len(rings[b]) % G == 0 else 1
        split = math.lcm(split, k)
        own.append(tuple((local[p], 0, k) for p in range(G)) + tuple(
            (i % G, 1 + i // G, k) if k > 1 else None for _, i in mine[b]))
        for x, i in mine[b] if k > 1 else []:
            rounds.setdefault(i // G, []).append((x, int(core[b, i % G]), (i % G, 1 + i // G, k)))
    return NodeRings(tuple(np.asarray(r, np.int64) for r in rings), tuple(own),
                     tuple(tuple(rounds[j]) for j in sorted(rounds)), split)


def with_ring(n: int, core: np.ndarray, local: list[int], extras: list[tuple[int, int, int]], weights: list[int],
              kind: str, lm: LinkModel, size: float, meta: dict[str, object]) -> Schedule:
    """The ring form (module docstring): each node's ReduceScatter and AllGather around its ``node_rings`` ring
    (position i sends to i + 1 the part ending at i - t - 1, or started by i - t, in step t), the regroup rounds
    before the rail phase and their copies back after it, the rail phase the composition's on the core
    (``kind``); the steps of all slices ordered by composition.list_schedule with these node steps."""
    N, G = core.shape
    nr = node_rings(core, local, extras)
    M = inter_steps(kind, N)[0]
    fine = [w * nr.split for w in weights]  # a block of slice k: fine[k] M chunks, each part a whole run of them
    order, _ = list_schedule(chains(N, G, weights, kind, size, lm, "ring", nr.steps()))
    emit = Emitter(core, local, kind, M, fine)
    start = np.concatenate([[0], np.cumsum(fine)]) * G * M
    ring_steps = max(len(r) for r in nr.rings) - 1
    b = ScheduleBuilder("allreduce", n, int(start[-1]), name=f"hierarchical_allreduce_n{n}", ports=2, meta=meta)
    for sub in order:
        b.new_step()
        if sub.phase == 1:
            emit(b, sub)
            continue
        bm, s0 = fine[sub.slice] * M, int(start[sub.slice])
        t = sub.index if sub.phase == 0 else sub.index - len(nr.rounds)
        if not 0 <= t < ring_steps:  # a regroup round (phase 0: after the ring) or its copy back (before it)
            for x, c, (q, j, k) in nr.rounds[t - ring_steps if sub.phase == 0 else len(nr.rounds) - 1 - sub.index]:
                b.add(x if sub.phase == 0 else c, c if sub.phase == 0 else x, s0 + q * bm + j * (bm // k), bm // k)
            continue
        for ring, own in zip(nr.rings, nr.own):
            m = len(ring)
            for i in range(m) if t < m - 1 else []:
                part = own[(i - t - (1 if sub.phase == 0 else 0)) % m]
                if part is not None:
                    q, j, k = part
                    b.add(int(ring[i]), int(ring[(i + 1) % m]), s0 + q * bm + j * (bm // k), bm // k, sub.phase == 0)
    return b.build()


def packed(moves: list[Move]) -> list[list[Move]]:
    """``moves`` (src, dst, first chunk, count, reduce) in steps of at most one send and one receive per rank,
    each in the first step that has both ports free and follows every earlier move into its sender (greedy, in
    list order: a relay forwards what it received)."""
    steps: list[list[Move]] = []
    busy: list[tuple[set[int], set[int]]] = []
    got: dict[int, int] = {}  # rank -> the last step a listed move delivered to it
    for mv in moves:
        j = next((k for k in range(got.get(mv[0], -1) + 1, len(steps))
                  if mv[0] not in busy[k][0] and mv[1] not in busy[k][1]), len(steps))
        if j == len(steps):
            steps.append([])
            busy.append((set(), set()))
        steps[j].append(mv)
        busy[j][0].add(mv[0])
        busy[j][1].add(mv[1])
        got[mv[1]] = max(got.get(mv[1], -1), j)
    return steps


def chunk_steps(base: Schedule, ranks: np.ndarray, on: np.ndarray, last: bool) -> np.ndarray:
    """Per rank of ``ranks`` and chunk: the last (``last``) or first step of a transfer of ``base`` whose ``on``
    column (real ranks, one per transfer) is that rank and that moves the chunk; -1 (last) or nsteps (first)
    where none does."""
    out = np.full((len(ranks), base.nchunks), -1 if last else base.nsteps, np.int64)
    rep, chunk = base.units(np.flatnonzero(np.isin(on, ranks)))
    at = on[rep]
    for q, r in enumerate(ranks):
        mine = at == r
        (np.maximum if last else np.minimum).at(out[q], chunk[mine], base.step[rep[mine]])
    return out


def around(base: Schedule, n: int, core: np.ndarray, extras: list[tuple[int, int, int]], punctual: np.ndarray,
           meta: dict[str, object], name: str = "", pieces: int = 4, lag: int = 0, direct: int = 0) -> Schedule:
    """``base``, an AllReduce on the core's ranks (base rank i is the i-th smallest core rank, as
    synth.topology.restrict numbers them), on all ``n`` ranks (our construction: a straggler form built for
    N x G_min GPUs serves nodes of unequal size). Every extra's buffer, in ``pieces`` G_min pieces, is reduced
    into ``punctual`` core GPUs of its node, each piece into the one that forwards it last and just before that
    step (so the core's work before the arrival goes on while the extras fold); each chunk is copied to the node's
    extras from the node's core GPU that holds it final first, ``lag`` base steps after the one that made it final
    (0: right after; later copies leave the core's own sends listed before them). ``direct`` (0: all) extras of a
    node deal with the core; extra i >= direct reduces into extra i - direct and gets its copies from it, the
    farthest first (with 1, a chain: 16 + 8 GPUs, rank 5 late, 1 GiB: 3.96 ms after the arrival where the core
    GPUs serving all eight extras took 6.5 and waiting 6.23)."""
    N, G = core.shape
    real = np.sort(core.ravel())
    src, dst = real[base.src], real[base.dst]
    C = base.nchunks
    before: dict[int, list[Move]] = {}
    after: dict[int, list[Move]] = {}
    P = min(C, pieces * G)
    edges = [k * C // P for k in range(P + 1)]
    for b in sorted({b for _, b, _ in extras}):
        mine = [(x, i) for x, nb, i in extras if nb == b]
        ok = [q for q in range(G) if punctual[core[b, q]]]
        read = chunk_steps(base, core[b, ok], src, last=False)  # when each punctual core GPU first sends a chunk
        final = chunk_steps(base, core[b], dst, last=True)  # when each core GPU holds a chunk final
        first_q = np.argmin(np.where(final < 0, np.iinfo(np.int64).max, final), axis=0)
        when = final[first_q, np.arange(C)]
        d = direct if 0 < direct < len(mine) else len(mine)  # extras served by the core; extra i >= d by i - d
        folded = np.zeros(C, np.int64)  # the last base step a chunk of an extra is folded in before
        for x, i in mine[:d]:
            for k, (lo, hi) in enumerate(zip(edges, edges[1:])):
                if hi == lo:
                    continue
                first = read[:, lo:hi].min(axis=1)  # the latest reader; ties rotate with the piece and the extra
                pick = max(range(len(ok)), key=lambda j: (first[j], -((j - k - i) % len(ok))))
                moves = before.setdefault(int(first[pick]), [])
                chain = mine[i::d]  # the extras relayed through x, reduced into it from the farthest first
                moves += [(chain[m][0], chain[m - 1][0], lo, hi - lo, True) for m in range(len(chain) - 1, 0, -1)]
                moves.append((x, int(core[b, ok[pick]]), lo, hi - lo, True))
                folded[lo:hi] = np.maximum(folded[lo:hi], first[pick])
        for x, i in mine:
            # a core GPU's first send can follow its last write (it owns the chunk): the copy then waits for the fold
            copy = np.minimum(np.maximum(when, folded) + lag, base.nsteps - 1)
            cut = np.flatnonzero((np.diff(first_q) != 0) | (np.diff(copy) != 0)) + 1
            for lo, hi in zip(np.concatenate([[0], cut]), np.concatenate([cut, [C]])):
                frm = int(core[b, first_q[lo]]) if i < d else mine[i - d][0]
                after.setdefault(int(copy[lo]), []).append((frm, x, int(lo), int(hi - lo), False))
    return interleaved(base, n, real, {s: packed(m) for s, m in before.items()},
                       {s: packed(m) for s, m in after.items()}, {x for x, _, _ in extras}, meta, name or base.name)
