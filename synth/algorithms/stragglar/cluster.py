"""Straggler-aware AllReduce on clusters (issue 15, points 1 and 2): a late GPU or a late node.

Our construction, following the bounds of the brief's clusters.md section 4 (docs/cluster-algorithms.md;
N nodes of G GPUs, s bytes per rank, B_nv the NVLink port and B_net the NIC of a GPU). The nodes come from the topology
(``node_of``/``local_index``, synth/algorithms/layout.py ``node_grid``); GPU r of node b with local
index g is grid[b, g], and the GPUs with local index g form rail g. The buffer is G parts (part g is
chunks [g M, (g+1) M), M pipeline chunks per part).

Before the late rank(s) arrive, the present ranks AllReduce their buffers (``pre``): in every node a
ReduceScatter of the G parts (part g to local g, or to a proxy in the node when local g is absent),
a ring AllReduce of part g among the part-g owners of the nodes (rail g; a proxy reaches the rail
through NVLink and the absent GPU's NIC, NCCL's PXN route), and an AllGather in every node. Every
present rank then holds S', the sum of all present buffers.

One late GPU L (node a, local l), after it arrives, for each chunk of part g:

- g != l: L reduces the chunk into its node peer of local g (NVLink), which now holds the final sum;
  g == l: L reduces it into a node peer (a different one per chunk) over NVLink and sends it raw over
  its own NIC to the next node on rail l, which adds it to S';
- the final chunk travels along rail g through the other nodes as a pipelined chain of copies (even
  chunks in one direction around the nodes, odd chunks in the other);
- every node spreads it over NVLink from its rail-g GPU (in node a from the peer that holds it, L
  included), so each GPU overwrites its S' chunk with the final one.

L sends s over NVLink and NIC together and receives (G-1)/G s; every other node receives s/G per NIC.
After the arrival this takes about (M + N - 2)(alpha_net + s/(G M B_net)) plus the NVLink spread, close
to the bound max(s/(B_nv + B_net), s/(G B_net)).

One late node a (all G GPUs), after it arrives, for each chunk of part g: the node's GPUs reduce it
into local g (NVLink), which sends it along rail g to the next node (reduce: S' plus the node's sum)
and the chain of copies continues through the other nodes and back to local g of node a; every node
spreads it from its rail-g GPU. Bound: max(s/(G B_net), (G-1)/G s/B_nv).

Transfers are listed chunk by chunk and packed into steps (``multi.pack``: at most one NVLink and one
network message per GPU and direction per step, so the schedule declares ports 2); each step's phase
is the set of ranks that have taken part so far.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

import numpy as np

from collsynth.apitypes import Arrivals
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.layout import node_grid, pair_model
from collsynth.synth.algorithms.stragglar import multi
from collsynth.synth.algorithms.stragglar.multi import Move, pack
from collsynth.synth.arrivals import arrival_vector, latest_rank
from collsynth.synth.ir import Schedule, derived_phases
from collsynth.units import parse_size

DEFAULT_SIZE = float(2**30)
MAX_CHUNKS = 4096


def late_form(grid: np.ndarray, times: np.ndarray) -> tuple[str, list[int]]:
    """("gpu", [L]) or ("node", ranks of the late node) from the arrivals: a whole node late (its GPUs
    the last to arrive and nobody else late) is the node form; otherwise the GPU form for the latest
    rank (other late ranks are waited for before it). Without a late rank: the GPU form for rank n-1."""
    n = times.size
    t0 = float(times.min())
    late = {r for r in range(n) if times[r] > t0}
    for b in range(grid.shape[0]):
        members = set(int(x) for x in grid[b])
        if late == members and grid.shape[0] > 1:
            return "node", sorted(members)
    return "gpu", [latest_rank(times, n)]


class _Busy:
    """Busy intervals of one port in the list-scheduling model (sorted, disjoint)."""

    def __init__(self) -> None:
        self.lo: list[float] = []
        self.hi: list[float] = []

    def fit(self, t: float, dur: float) -> float:
        """The earliest start >= t of a free gap of length dur."""
        i = bisect.bisect_right(self.hi, t)
        while i < len(self.lo):
            if t + dur <= self.lo[i] * (1 + 1e-12):
                return t
            t = max(t, self.hi[i])
            i += 1
        return t

    def take(self, start: float, end: float) -> None:
        i = bisect.bisect_left(self.lo, start)
        self.lo.insert(i, start)
        self.hi.insert(i, end)


class _Plan:
    """The atoms of one schedule in order (see the module docstring)."""

    def __init__(self, grid: np.ndarray, M: int, times: np.ndarray, size: float,
                 model: tuple[float, float, float, float]) -> None:
        self.grid, self.M = grid, M
        self.times = times
        self.chunk_bytes = size / (grid.shape[1] * M)
        self.model = model
        self.est: list[float] = []
        self.busy: dict[tuple[int, int, int], _Busy] = {}  # (rank, send 0 / receive 1, class) -> intervals
        self.written: dict[tuple[int, int], float] = {}  # (rank, chunk) -> end of its last write
        self.read: dict[tuple[int, int], float] = {}  # (rank, chunk) -> end of its last read
        self.N, self.G = grid.shape
        self.node = np.empty(grid.size, np.int64)
        self.local = np.empty(grid.size, np.int64)
        for b in range(self.N):
            for g in range(self.G):
                self.node[grid[b, g]] = b
                self.local[grid[b, g]] = g
        self.atoms: list[list[Move]] = []
        self.classes: Any = None  # topology.transfer_class where the topology has link classes
        self.class_ids: dict[str, int] = {}
        self.runs: list[tuple[int, int]] = [(k, 1) for k in range(M)]

    def add(self, src: int, dst: int, chunk: int, count: int, reduce: bool) -> None:
        """Append one move and its start in a list-scheduling model (one NVLink and one NIC port per GPU
        and direction, data dependencies per location): the order the moves are packed in."""
        src, dst, chunk, count = int(src), int(dst), int(chunk), int(count)
        self.atoms.append([(src, dst, chunk, count, reduce)])
        cs, cr = self.port(src, dst)
        a_nv, b_nv, a_net, b_net = self.model
        net = cs == 1 or cr == 1
        dur = (a_net if net else a_nv) + count * self.chunk_bytes / (b_net if net else b_nv)
        start = max(float(self.times[src]), float(self.times[dst]))
        cells = range(chunk, chunk + count)
        for c in cells:
            start = max(start, self.written.get((src, c), 0.0), self.written.get((dst, c), 0.0),
                        self.read.get((dst, c), 0.0))
        ps = self.busy.setdefault((src, 0, cs), _Busy())
        pr = self.busy.setdefault((dst, 1, cr), _Busy())
        while True:  # the earliest time both ports have a gap of dur
            t1 = ps.fit(start, dur)
            t2 = pr.fit(t1, dur)
            if t2 == t1:
                break
            start = t2
        start = t1
        end = start + dur
        ps.take(start, end)
        pr.take(start, end)
        for c in cells:
            self.written[dst, c] = end
            self.read[src, c] = max(self.read.get((src, c), 0.0), end)
        self.est.append(start)

    def ordered(self) -> list[list[Move]]:
        """The moves by modelled start (generation order on ties)."""
        order = sorted(range(len(self.atoms)), key=lambda i: (self.est[i], i))
        return [self.atoms[i] for i in order]

    def port(self, src: int, dst: int) -> tuple[int, int]:
        """(send, receive) port class: the topology's (``transfer_class``: first and last hop) where it has
        link classes, else 0 NVLink, 1 network (a cross-rail message leaves over NVLink: PXN)."""
        if self.classes is not None:
            cs, cr = self.classes(src, dst)
            ids = self.class_ids
            return ids.setdefault(cs, len(ids)), ids.setdefault(cr, len(ids))
        if self.node[src] == self.node[dst]:
            return 0, 0
        return (1 if self.local[src] == self.local[dst] else 0), 1

    # ------------------------------------------------------------------ before the arrival
    def pre(self, absent: set[int]) -> None:
        """AllReduce of the present ranks' buffers (module docstring)."""
        N, G, M, grid = self.N, self.G, self.M, self.grid
        nodes = [b for b in range(N) if any(int(x) not in absent for x in grid[b])]
        owner = {}
        for b in nodes:
            present = [g for g in range(G) if int(grid[b, g]) not in absent]
            for g in range(G):
                owner[b, g] = int(grid[b, g]) if g in present else int(grid[b, present[g % len(present)]])
        for t in range(1, G):  # ReduceScatter of the parts in every node
            for b in nodes:
                for i in range(G):
                    src = int(grid[b, i])
                    g = (i + t) % G
                    if src not in absent and owner[b, g] != src:
                        self.add(src, owner[b, g], g * M, M, True)
        P = len(nodes)
        if P > 1:  # ring AllReduce of part g along rail g (Patarasuk & Yuan)
            edges = [[g * M + (M * j) // P for j in range(P + 1)] for g in range(G)]
            for rs in (True, False):
                for t in range(P - 1):
                    for g in range(G):
                        for i in range(P):
                            j = (i - t - 1) % P if rs else (i - t) % P
                            lo, hi = edges[g][j], edges[g][j + 1]
                            if hi > lo:
                                self.add(owner[nodes[i], g], owner[nodes[(i + 1) % P], g], lo, hi - lo, rs)
        for t in range(1, G):  # AllGather of the parts in every node
            for b in nodes:
                for i in range(G):
                    dst = int(grid[b, i])
                    g = (i - t) % G
                    if dst not in absent and owner[b, g] != dst:
                        self.add(owner[b, g], dst, g * M, M, False)

    # ------------------------------------------------------------------ after the arrival
    def _chain(self, start: int, g: int, k: int, first_reduce: bool, src: int, back_to: int | None,
               w: int = 1) -> None:
        """Chunk (g, k) from ``src`` (in node ``start``) along rail g through the other nodes (direction by
        the parity of k), the first hop reducing when ``first_reduce``; optionally back to ``back_to``;
        then every node spreads it from its rail-g GPU."""
        N, grid = self.N, self.grid
        c = g * self.M + self.runs[k][0]
        step = 1 if k % 2 == 0 else -1
        order = [(start + step * h) % N for h in range(1, N)]
        prev = src
        for h, b in enumerate(order):
            dst = int(grid[b, g])
            self.add(prev, dst, c, w, first_reduce and h == 0)
            prev = dst
        if back_to is not None:
            self.add(prev, back_to, c, w, False)
        for b in order:
            hub = int(grid[b, g])
            for x in grid[b]:
                if int(x) != hub:
                    self.add(hub, int(x), c, w, False)

    def late_gpu(self, L: int) -> None:
        a, rail = int(self.node[L]), int(self.local[L])
        peers = [int(x) for x in self.grid[a] if int(x) != L]
        for k, (first, w) in enumerate(self.runs):
            for g in range(self.G):
                c = g * self.M + first
                if g != rail:
                    hub = int(self.grid[a, g])
                    self.add(L, hub, c, w, True)
                    self._chain(a, g, k, False, hub, None, w)
                else:
                    hub = peers[k % len(peers)]
                    self.add(L, hub, c, w, True)
                    self._chain(a, g, k, True, L, None, w)
                for x in [L, *peers]:
                    if x != hub:
                        self.add(hub, x, c, w, False)

    def late_node(self, a: int) -> None:
        G = self.G
        for k, (first, w) in enumerate(self.runs):
            for g in range(G):
                c = g * self.M + first
                hub = int(self.grid[a, g])
                for i in range(1, G):
                    self.add(int(self.grid[a, (g + i) % G]), hub, c, w, True)
                if self.N > 1:
                    self._chain(a, g, k, True, hub, hub, w)
                for x in self.grid[a]:
                    if int(x) != hub:
                        self.add(hub, int(x), c, w, False)


def make_runs(M: int, run: int, tail: int) -> list[tuple[int, int]]:
    """Messages over a part's M units: runs of ``run`` units, then the last ``tail`` units one by one (a
    chain's drain costs its last message times the hops, so the last messages are small)."""
    tail = min(M, tail)
    bulk = M - tail
    out = [(f, min(run, bulk - f)) for f in range(0, bulk, run)]
    return out + [(f, 1) for f in range(bulk, M)]


def _model(topology: Any, grid: np.ndarray) -> tuple[float, float, float, float]:
    N, G = grid.shape
    a_nv, b_nv = pair_model(topology, int(grid[0, 0]), int(grid[0, 1])) if G > 1 else (0.0, math.inf)
    a_net, b_net = pair_model(topology, int(grid[0, 0]), int(grid[1, 0]))
    return a_nv, b_nv, a_net, b_net


def after_arrival_estimate(form: str, N: int, G: int, M: int, runs: list[tuple[int, int]], size: float,
                           model: tuple[float, ...]) -> float:
    """Alpha-beta estimate of the time after the arrival: every message of a rail chain in turn at its
    NIC (or the NVLink spread of it, if slower), plus the drain, the chain's other hops at its largest
    message (the longest path through a pipelined chain), plus the NVLink steps at either end."""
    a_nv, b_nv, a_net, b_net = model
    unit = size / (G * M)

    def hop(w: int) -> float:
        return max(a_net + w * unit / b_net, (G - 1) * (a_nv + w * unit / b_nv))

    drain = N - 2 + (1 if form == "node" else 0)
    big = max(w for _, w in runs)
    nv = (G - 1) * (a_nv + big * unit / b_nv)
    return sum(hop(w) for _, w in runs) + drain * hop(big) + 2 * nv


UNITS = (16, 24, 32, 48, 64, 96, 128, 192, 256)  # candidate pipeline chunks per part (at least the node count)


def best_pipeline(form: str, N: int, G: int, size: float,
                  model: tuple[float, ...]) -> tuple[int, list[tuple[int, int]]]:
    """(M, runs): the M of UNITS (or N) with the least estimate, one message per chunk."""
    cands = [m for m in UNITS if m >= N and G * m <= MAX_CHUNKS] or [N]
    M = min(cands, key=lambda m: (after_arrival_estimate(form, N, G, m, make_runs(m, 1, m), size, model), m))
    return M, make_runs(M, 1, M)


def build(n: int, collective: str = "allreduce", arrivals: Arrivals = None, size: int | float | str | None = None,
          topology: Any = None, pipeline: int | str = "auto") -> Schedule:
    """Late-GPU or late-node AllReduce on a cluster topology (module docstring); the form follows the
    arrivals (``late_form``). ``pipeline`` is M, the chunks per part (``auto``: the model's best for
    ``size``)."""
    if collective != "allreduce":
        raise CollsynthError(f"clusterstraggler builds allreduce only, not {collective!r}")
    if topology is not None and getattr(topology, "nranks", None) != n:
        raise CollsynthError(f"clusterstraggler: topology {getattr(topology, 'name', topology)!r} has "
                             f"{getattr(topology, 'nranks', '?')} GPUs, not {n}: give a matching topology")
    grid = node_grid(topology, n)
    N, G = grid.shape
    if N < 2 or G < 2:  # one NVLink domain (or no topology): the late ranks' flat form
        return multi.build(n, collective, arrivals, "auto", size, None, None, topology)
    times = arrival_vector(arrivals, n)
    form, late = late_form(grid, times)
    s_bytes = DEFAULT_SIZE if size is None else float(parse_size(size) if isinstance(size, str) else size)
    model = _model(topology, grid)
    if pipeline == "auto":
        M, runs = best_pipeline(form, N, G, s_bytes, model)
    elif isinstance(pipeline, bool) or not isinstance(pipeline, (int, np.integer)) or not pipeline >= N:
        raise CollsynthError(f"--pipeline for clusterstraggler must be auto or an integer >= {N} (the nodes), "
                             f"got {pipeline!r}")
    else:
        M = int(pipeline)
        runs = make_runs(M, 1, M)
    plan = _Plan(grid, M, times, s_bytes, model)
    plan.runs = runs
    if len(getattr(topology, "classes", ())) > 1:
        plan.classes = topology.transfer_class
    if form == "gpu":
        plan.pre({late[0]})
        plan.late_gpu(late[0])
    else:
        node = int(plan.node[late[0]])
        plan.pre(set(late))
        plan.late_node(node)
    atoms = plan.ordered()
    steps = pack(atoms, plan.port, times)
    mv = np.array([x for a in atoms for x in a], np.int64).reshape(-1, 5)
    nsteps = int(steps.max()) + 1 if len(steps) else 0
    phases = derived_phases(n, steps, mv[:, 0], mv[:, 1], nsteps)
    est = after_arrival_estimate(form, N, G, M, runs, s_bytes, model)
    meta: dict[str, object] = {"algorithm": "clusterstraggler", "form": form, "late": late, "nodes": N,
                               "gpus_per_node": G, "pipeline": M, "messages_per_part": len(runs),
                               "topology_name": topology.name,
                               "after_arrival_estimate_s": est}
    spec = getattr(topology, "spec", None)
    if spec is not None:  # `collsynth verify FILE` enforces the per-class ports again
        meta["topology"] = spec
    name = f"clusterstraggler_{form}_n{n}_l{late[0]}" if form == "gpu" else f"clusterstraggler_node_n{n}_" \
        f"node{int(plan.node[late[0]])}"
    return Schedule.from_arrays("allreduce", n, G * M, step=steps, src=mv[:, 0], dst=mv[:, 1], chunk=mv[:, 2],
                                count=mv[:, 3], reduce=mv[:, 4].astype(bool), nsteps=nsteps, phases=phases,
                                ports=2, name=name, meta=meta)
