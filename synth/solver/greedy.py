"""Greedy list scheduler inside the solver's model class: the MILP's own warm start.

A generalisation of StragglAR (Devraj et al., arXiv 2505.23523) to any arrival vector and topology:
chunk c is owned by an early rank (owners cycle through the ranks in arrival order) and reduced along a
shortest-path in-tree toward its owner; a rank forwards its partial sum once every child has delivered
its own. When only the owner and one other rank still hold partial sums they swap them (StragglAR's
exchange) and both hold the full sum; full sums then spread by copies. Each slot takes a maximum-weight
matching of senders to receivers (exchanges first, then reductions, then copies under one of a few
priority rules); ``greedy_schedules`` runs every rule and keeps the placements that finish.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from collsynth.synth.solver.grid import COPY, EXCHANGE, REDUCE, Grid, ModelState, Move

if TYPE_CHECKING:
    pass


def owners_by_arrival(grid: Grid, policy: str = "all") -> list[int]:
    """Chunk c's owner: ranks in (arrival, rank) order, cycled. ``policy`` picks the ranks cycled
    through: ``all``, ``first`` (those arriving first) or ``early`` (all but the last arrivals)."""
    order = sorted(range(grid.n), key=lambda r: (grid.arrivals[r], r))
    if policy == "first":
        order = [r for r in order if grid.arrivals[r] == grid.arrivals[order[0]]]
    elif policy == "early":
        order = [r for r in order if grid.arrivals[r] < grid.arrivals[order[-1]]] or order
    return [order[c % len(order)] for c in range(grid.nchunks)]


OWNER_POLICIES = ("all", "first", "early")


def in_trees(grid: Grid, owners: Sequence[int]) -> list[list[int]]:
    """parent[c][v]: next hop from v toward owners[c] along a BFS tree of the pair graph (-1 at the root)."""
    import networkx as nx
    g = nx.DiGraph()
    g.add_nodes_from(range(grid.n))
    g.add_edges_from(grid.pairs)
    trees = []
    cache: dict[int, list[int]] = {}
    for root in owners:
        if root not in cache:
            dist = nx.single_source_shortest_path_length(g.reverse(copy=False), root)
            parent = [-1] * grid.n
            for v in range(grid.n):
                if v != root:
                    parent[v] = min(w for w in g.successors(v) if dist.get(w, 1 << 30) == dist[v] - 1)
            cache[root] = parent
        trees.append(cache[root])
    return trees


CopyRule = Callable[[int, int, ModelState, list[int]], float]


def _oldest(c: int, v: int, state: ModelState, born: list[int]) -> float:
    return 1000.0 - born[c] * 10 - c * 0.01


def _rarest(c: int, v: int, state: ModelState, born: list[int]) -> float:
    return 1000.0 - float(state.full[c].sum()) * 10 - born[c] * 0.1


def _neediest(c: int, v: int, state: ModelState, born: list[int]) -> float:
    missing = float((~state.full[:, v]).sum())
    return 1000.0 - born[c] * 10 + missing


COPY_RULES: dict[str, CopyRule] = {"oldest": _oldest, "rarest": _rarest, "neediest": _neediest}


def greedy(grid: Grid, rule: CopyRule, owners: Sequence[int] | None = None) -> list[tuple[int, list[Move]]] | None:
    """Slot-by-slot schedule, or None when it does not finish within the grid."""
    import networkx as nx
    owners = list(owners) if owners is not None else owners_by_arrival(grid)
    parent = in_trees(grid, owners)
    n, C = grid.n, grid.nchunks
    state = ModelState(grid)
    pending = [[sum(1 for v in range(n) if parent[c][v] == u) for u in range(n)] for c in range(C)]
    born = [1 << 20] * C
    allowed = set(grid.pairs)
    placed: list[tuple[int, list[Move]]] = []
    for slot in range(grid.nslots):
        here = set(grid.present(slot))
        moves: list[Move] = []
        busy_s: dict[int, int] = {}
        busy_r: dict[int, int] = {}
        free = lambda r, d: d.get(r, 0) < grid.ports  # noqa: E731
        # 1. exchanges between the last two live ranks of a chunk
        for c in sorted(range(C), key=lambda c: (born[c], c)):
            if state.dead[c] != n - 2:
                continue
            u, v = (int(x) for x in state.live[c].nonzero()[0])
            if (u in here and v in here and (u, v) in allowed and (v, u) in allowed
                    and all(free(x, busy_s) and free(x, busy_r) for x in (u, v))):
                cand = moves + [(EXCHANGE, c, u, v)]
                if state.check(slot, cand) is None:
                    moves = cand
                    for x in (u, v):
                        busy_s[x] = busy_s.get(x, 0) + 1
                        busy_r[x] = busy_r.get(x, 0) + 1
        # 2. matching of the remaining ports over reductions and copies
        best: dict[tuple[int, int], tuple[float, Move]] = {}

        def offer(w: float, m: Move) -> None:
            key = (m[2], m[3])
            if key not in best or best[key][0] < w:
                best[key] = (w, m)

        exch = {m[1] for m in moves}
        for c in range(C):
            if c in exch:
                continue
            for u in range(n):
                p = parent[c][u]
                if p < 0 or not state.live[c, u] or pending[c][u] or u not in here or p not in here:
                    continue
                if not state.live[c, p]:
                    continue
                final = state.dead[c] == n - 2
                score = 1e6 + (1e5 if final else 0) + grid.arrivals[u] * 1e3 / max(grid.tau, 1e-12) - c
                offer(score, (REDUCE, c, u, p))
            holders = [int(x) for x in state.full[c].nonzero()[0]]
            if holders:
                for v in range(n):
                    if state.full[c, v] or v not in here:
                        continue
                    for u in holders:
                        if u in here and (u, v) in allowed:
                            offer(rule(c, v, state, born), (COPY, c, u, v))
        g = nx.Graph()
        for (u, v), (w, m) in best.items():
            if free(u, busy_s) and free(v, busy_r):
                g.add_edge(("s", u), ("r", v), weight=w, move=m)
        chosen = nx.max_weight_matching(g) if grid.ports == 1 else []
        extra = [g.edges[a, b]["move"] for a, b in chosen]
        if grid.ports > 1:
            extra = [m for _, m in sorted(best.values(), key=lambda x: (-x[0], x[1]))]
        for m in sorted(extra, key=lambda m: (m[1], m[2], m[3])):
            cand = moves + [m]
            if state.check(slot, cand) is None:
                moves = cand
        if not moves:
            continue
        moves.sort(key=lambda m: (m[1], m[2], m[3], m[0]))
        for kind, c, _u, v in moves:
            if kind == REDUCE:
                pending[c][v] -= 1
        state.apply(slot, moves)
        for c in range(C):
            if born[c] > slot and state.full[c].any():
                born[c] = slot
        placed.append((slot, moves))
        if state.done():
            return placed
    return None


def greedy_schedules(grid: Grid) -> dict[str, list[tuple[int, list[Move]]]]:
    """Every (owner policy, copy rule) placement that finishes in the grid, by name; owner policies
    that give the same owners run once."""
    out = {}
    seen = set()
    for policy in OWNER_POLICIES:
        owners = tuple(owners_by_arrival(grid, policy))
        if owners in seen:
            continue
        seen.add(owners)
        for name, rule in COPY_RULES.items():
            placed = greedy(grid, rule, owners)
            if placed is not None:
                out[name if policy == "all" else f"{name}-{policy}"] = placed
    return out
