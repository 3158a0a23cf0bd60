"""The solver's time grid and model class: slots, allowed pairs, and the rules a schedule must obey.

Time grid (justification). Every transfer carries one chunk of ``size/C`` bytes between two GPUs that
are joined without another GPU on the route (a direct link or a path through switches only). On a
one-port uniform network (``nvswitch``, ``full-mesh``, ``ring``, ``torus2d``) every such transfer costs
the same ``tau = alpha + (size/C)/B``, so a grid of equal slots of length tau is exact: a schedule
whose steps sit in consecutive slots takes exactly (slots used) x tau in the step-synchronous model, and
the event-driven simulator, which starts every transfer as soon as its inputs, ports and ranks are
ready, is never slower. On heterogeneous links (``dgx1``, JSON files) the grid keeps only the fastest
pairs when they connect every GPU (within 10% of the fastest), otherwise every direct pair with tau =
the slowest of them (a conservative grid; the simulated time is what gets reported).

Arrivals split time into epochs at the distinct arrival times; epoch e's slots start at
``arrival_e + k*tau`` and only ranks that have arrived take part. A waiting period holds at most
``floor(gap/tau)`` slots, capped at ``pre_cap`` (default C+1): before the last arrival no chunk can be
complete, so only the early ranks' reductions run then and each rank forwards each chunk once.

Model class (what the MILP searches, and what a warm start must fit; see ``ModelState``):
- reduce: a rank that still holds a live partial sum of chunk c sends it once, to a live rank, which
  adds it (a reduction tree per chunk, as in ring, Rabenseifner and StragglAR). After sending, a rank
  takes no more reductions of c. The live partial sums therefore always partition the contributions:
  exactly-once holds by construction, and the last live rank holds the full sum.
- exchange: the last two live ranks of a chunk may swap their partial sums in one slot and both add
  (StragglAR's X(g, c)); both then hold the full sum.
- copy: a rank holding the full sum copies it to a rank that does not.
- ports: per slot a rank sends at most p and receives at most p transfers (p from the topology); a
  location is written by at most one transfer per slot; links shared by several pairs carry one
  transfer per slot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from collsynth.apitypes import Arrivals
from collsynth.errors import CollsynthError
from collsynth.synth.arrivals import arrival_vector
from collsynth.synth.ir import Phase, Schedule, ScheduleBuilder

REDUCE, EXCHANGE, COPY = "r", "e", "y"


@dataclass(frozen=True)
class Grid:
    """Slots, pairs and presence for one solver instance (see the module docstring)."""

    n: int
    nchunks: int
    size: float
    ports: int
    tau: float
    pairs: tuple[tuple[int, int], ...]  # allowed directed pairs
    shared_links: tuple[tuple[int, ...], ...]  # pair indices that share a link (capacity 1 per slot)
    slot_start: tuple[float, ...]
    slot_epoch: tuple[int, ...]
    epoch_time: tuple[float, ...]
    epoch_ranks: tuple[tuple[int, ...], ...]
    first_final: int  # index of the first slot after the last arrival
    arrivals: tuple[float, ...]

    @property
    def nslots(self) -> int:
        return len(self.slot_start)

    @property
    def final_slots(self) -> int:
        return self.nslots - self.first_final

    @property
    def last_arrival(self) -> float:
        return self.epoch_time[-1]

    def present(self, slot: int) -> tuple[int, ...]:
        return self.epoch_ranks[self.slot_epoch[slot]]

    def slot_pairs(self, slot: int) -> list[int]:
        """Indices of pairs whose two ranks have both arrived at ``slot``."""
        here = set(self.present(slot))
        return [i for i, (u, v) in enumerate(self.pairs) if u in here and v in here]

    def completion(self, last_slot: int) -> float:
        """Grid time at which slot ``last_slot`` ends."""
        return self.slot_start[last_slot] + self.tau


def normalize_arrivals(arrivals: Arrivals, n: int) -> tuple[float, ...]:
    """A dict {rank: seconds} or a sequence of n times as a tuple (synth.arrivals.arrival_vector)."""
    return tuple(float(t) for t in arrival_vector(arrivals, n))


def pair_costs(topology: Any, n: int,
               chunk_bytes: float) -> tuple[list[tuple[int, int]], list[float], list[tuple[int, ...]]]:
    """Direct pairs (no GPU in between), their transfer time for one chunk, and their route links."""
    pairs = [(u, v) for u in range(n) for v in range(n) if u != v]
    links, alpha = topology.pair_table(np.array(pairs, np.int64))
    out_pairs, out_cost, out_links = [], [], []
    for i, (u, v) in enumerate(pairs):
        route = [int(x) for x in links[i] if x >= 0]
        inner = [int(topology.link_dst[x]) for x in route[:-1]]
        if any(node < n for node in inner):
            continue  # the route crosses another GPU: not a direct pair
        bw = min(float(topology.link_bw[x]) for x in route)
        out_pairs.append((u, v))
        out_cost.append(float(alpha[i]) + chunk_bytes / bw)
        out_links.append(tuple(route))
    return out_pairs, out_cost, out_links


def _connected(n: int, pairs: Sequence[tuple[int, int]]) -> bool:
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(pairs)
    return nx.is_strongly_connected(g)


def make_grid(n: int, nchunks: int, size: float, topology: Any, arrivals: Sequence[float],
              final_slots: int, pre_cap: int | None = None) -> Grid:
    """Build the slot grid; ``final_slots`` slots follow the last arrival."""
    chunk_bytes = float(size) / nchunks
    pairs, cost, routes = pair_costs(topology, n, chunk_bytes)
    if not pairs or not _connected(n, pairs):
        raise CollsynthError(f"topology {topology.name!r}: the GPUs are not connected by direct pairs; "
                             "the solver needs a link (or a switch path) between neighbouring GPUs")
    fastest = min(cost)
    keep = [i for i, c in enumerate(cost) if c <= fastest * 1.1]
    if _connected(n, [pairs[i] for i in keep]):
        tau = max(cost[i] for i in keep)
    else:
        keep = list(range(len(pairs)))
        tau = max(cost)
    pairs = [pairs[i] for i in keep]
    routes = [routes[i] for i in keep]
    ports = max(1, int(getattr(topology, "ports", 1)))
    users: dict[int, list[int]] = {}
    for i, route in enumerate(routes):
        for link in route:
            users.setdefault(link, []).append(i)
    shared = []
    for _link, idx in sorted(users.items()):
        if len(idx) < 2:
            continue
        same_src = len({pairs[i][0] for i in idx}) == 1
        same_dst = len({pairs[i][1] for i in idx}) == 1
        if ports == 1 and (same_src or same_dst):
            continue  # the one port already serialises them
        shared.append(tuple(idx))
    shared = sorted(set(shared))
    if pre_cap is None:
        pre_cap = nchunks + 1
    times = sorted(set(arrivals))
    starts: list[float] = []
    epochs: list[int] = []
    for e, a in enumerate(times[:-1]):
        k = min(int(math.floor((times[e + 1] - a) / tau + 1e-9)), pre_cap)
        starts += [a + i * tau for i in range(k)]
        epochs += [e] * k
    first_final = len(starts)
    starts += [times[-1] + i * tau for i in range(final_slots)]
    epochs += [len(times) - 1] * final_slots
    epoch_ranks = tuple(tuple(r for r in range(n) if arrivals[r] <= a) for a in times)
    return Grid(n, nchunks, float(size), ports, tau, tuple(pairs), tuple(shared), tuple(starts), tuple(epochs),
                tuple(times), epoch_ranks, first_final, tuple(float(a) for a in arrivals))


# ---------------------------------------------------------------------------------- model state
Move = tuple[str, int, int, int]  # (kind, chunk, src, dst); an exchange lists the lower rank first


class ModelState:
    """Per-chunk live/full state under the model-class rules; ``apply`` rejects a slot that breaks them."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        n, c = grid.n, grid.nchunks
        self.live = np.ones((c, n), np.bool_)
        self.full = np.zeros((c, n), np.bool_)
        self.dead = np.zeros(c, np.int64)
        self._pair_index = {p: i for i, p in enumerate(grid.pairs)}

    def done(self) -> bool:
        return bool(self.full.all())

    def copy(self) -> ModelState:
        other = ModelState.__new__(ModelState)
        other.grid, other._pair_index = self.grid, self._pair_index
        other.live, other.full, other.dead = self.live.copy(), self.full.copy(), self.dead.copy()
        return other

    def check(self, slot: int, moves: Sequence[Move]) -> str | None:
        """Why ``moves`` cannot run in ``slot`` (None when they can)."""
        g = self.grid
        n = g.n
        here = set(g.present(slot))
        sends = np.zeros(n, np.int64)
        recvs = np.zeros(n, np.int64)
        writes: set[tuple[int, int]] = set()
        reduce_send: set[tuple[int, int]] = set()
        reduce_recv: set[tuple[int, int]] = set()
        link_use = [0] * len(g.shared_links)
        used_pairs: list[int] = []
        for kind, c, u, v in moves:
            if not (0 <= c < g.nchunks and 0 <= u < n and 0 <= v < n and u != v):
                return f"transfer {kind} c{c} {u}->{v} out of range"
            if u not in here or v not in here:
                return f"rank {u if u not in here else v} has not arrived by slot {slot}"
            for a, b in ((u, v), (v, u)) if kind == EXCHANGE else ((u, v),):
                if (a, b) not in self._pair_index:
                    return f"{a}->{b} is not a direct pair of the topology grid"
                used_pairs.append(self._pair_index[(a, b)])
                sends[a] += 1
                recvs[b] += 1
                if (b, c) in writes:
                    return f"chunk {c} at rank {b} written twice in slot {slot}"
                writes.add((b, c))
            if kind == COPY:
                if not self.full[c, u]:
                    return f"copy of chunk {c} from rank {u}, which does not hold its full sum"
                if self.full[c, v]:
                    return f"copy of chunk {c} to rank {v}, which already holds it"
            elif kind == REDUCE:
                if not (self.live[c, u] and self.live[c, v]):
                    return f"reduce of chunk {c} {u}->{v} between ranks that are not both live"
                reduce_send.add((u, c))
                reduce_recv.add((v, c))
            elif kind == EXCHANGE:
                if not (self.live[c, u] and self.live[c, v]) or self.dead[c] != n - 2:
                    return f"exchange of chunk {c} between {u} and {v} that are not the last two live ranks"
                reduce_send.update({(u, c), (v, c)})
            else:
                return f"unknown transfer kind {kind!r}"
        if (sends > g.ports).any() or (recvs > g.ports).any():
            return f"a rank exceeds {g.ports} port(s) in slot {slot}"
        if reduce_send & reduce_recv:
            return f"a rank sends and receives a one-way reduce of the same chunk in slot {slot}"
        for k, idx in enumerate(g.shared_links):
            members = set(idx)
            link_use[k] = sum(1 for p in used_pairs if p in members)
            if link_use[k] > 1:
                return f"a shared link carries two transfers in slot {slot}"
        return None

    def apply(self, slot: int, moves: Sequence[Move]) -> None:
        """Apply a slot (call ``check`` first)."""
        n = self.grid.n
        touched: set[int] = set()
        for kind, c, u, v in moves:
            if kind == REDUCE:
                self.live[c, u] = False
                self.dead[c] += 1
                touched.add(c)
            elif kind == EXCHANGE:
                self.live[c, u] = self.live[c, v] = False
                self.dead[c] += 2
                self.full[c, u] = self.full[c, v] = True
        for kind, c, _u, v in moves:
            if kind == COPY:
                self.full[c, v] = True
        for c in touched:
            if self.dead[c] == n - 1:
                self.full[c, np.flatnonzero(self.live[c])[0]] = True


# ---------------------------------------------------------------------------------- encode / decode
def schedule_moves(schedule: Schedule) -> list[list[Move]] | None:
    """Per-step moves of a schedule, or None when it is not an AllReduce. A transfer of a run of k
    chunks becomes k one-chunk moves in k consecutive sub-steps (its i-th chunk in sub-step i); the
    placement and the verifier then decide whether the split schedule is still valid."""
    if schedule.collective != "allreduce":
        return None
    steps: list[list[Move]] = []
    for k in range(schedule.nsteps):
        subs: dict[int, tuple[list[Move], dict[tuple[int, int, int], bool]]] = {}
        for t in schedule.transfers(k):
            for i in range(t.count):
                moves, reduces = subs.setdefault(i, ([], {}))
                if t.reduce:
                    reduces[(t.chunk + i, t.src, t.dst)] = True
                else:
                    moves.append((COPY, t.chunk + i, t.src, t.dst))
        for i in sorted(subs):
            moves, reduces = subs[i]
            for (c, u, v) in sorted(reduces):
                if (c, v, u) in reduces:
                    if u < v:
                        moves.append((EXCHANGE, c, u, v))
                else:
                    moves.append((REDUCE, c, u, v))
            steps.append(sorted(moves, key=lambda m: (m[1], m[2], m[3], m[0])))
    return steps


def place(grid: Grid, steps: Sequence[Sequence[Move]]) -> list[tuple[int, list[Move]]] | None:
    """Put consecutive steps into the earliest slots where their ranks have arrived and the model rules
    hold; None when a step breaks the rules or the grid runs out of slots."""
    state = ModelState(grid)
    out: list[tuple[int, list[Move]]] = []
    slot = 0
    for moves in steps:
        if not moves:
            continue
        ranks = {m[2] for m in moves} | {m[3] for m in moves}
        while slot < grid.nslots and not ranks <= set(grid.present(slot)):
            slot += 1
        if slot >= grid.nslots or state.check(slot, moves) is not None:
            return None
        state.apply(slot, moves)
        out.append((slot, list(moves)))
        slot += 1
    return out if state.done() else None


def last_slot(placed: Sequence[tuple[int, Sequence[Move]]]) -> int:
    return max(s for s, _ in placed)


def to_schedule(grid: Grid, placed: Sequence[tuple[int, Sequence[Move]]], meta: dict[str, Any]) -> Schedule:
    """A Schedule from slot-placed moves; each epoch with transfers becomes a phase waiting for its ranks."""
    b = ScheduleBuilder("allreduce", grid.n, grid.nchunks, name=f"solver_allreduce_n{grid.n}",
                        ports=grid.ports, meta=meta)
    by_slot = sorted(placed, key=lambda x: x[0])
    current = -1
    for slot, moves in by_slot:
        e = grid.slot_epoch[slot]
        if e != current:
            ranks = grid.epoch_ranks[e]
            b.begin_phase(f"after {format_ranks(ranks, grid.n)} arrive", ranks)
            current = e
        b.new_step()
        for kind, c, u, v in moves:
            if kind == EXCHANGE:
                b.add(u, v, c, 1, True)
                b.add(v, u, c, 1, True)
            else:
                b.add(u, v, c, 1, kind == REDUCE)
    return b.build()


def format_ranks(ranks: Sequence[int], n: int) -> str:
    if len(ranks) == n:
        return "all ranks"
    return "ranks " + ",".join(str(r) for r in ranks)


__all__ = ["Grid", "ModelState", "Move", "Phase", "REDUCE", "EXCHANGE", "COPY", "make_grid", "normalize_arrivals",
           "schedule_moves", "place", "to_schedule", "last_slot", "pair_costs"]
