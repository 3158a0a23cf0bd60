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
present rank then holds S', the sum of all present buffers. A ring cuts part g into one piece per node
and each piece crosses the ring's nodes one after the other, so ``merged_plan`` cuts the chunks k times
finer than the blocks after the arrival need (``pre_units``), enough for even pieces.

After the arrival, ``merge(wave, active)`` merges a *wave* W of late ranks (any subset) into the ranks
that hold S' (``active``); afterwards all of them hold S' + the sum of W. Part g is cut into message
blocks (``runs``); the chunks are block-major (``loc``: block j of all G parts is one contiguous row).
Per block of part g:

- case A (W in one node a whose rail-g GPU holds S'): W's members reduce the block into that GPU (the
  root; one late GPU, g != its local index);
- case B (W in one node a that holds the rail-g GPU): the other members reduce into it (the root); it
  sends W's raw sum, so each of its sends is a reduce into S' (the receiver then holds the final block);
  a node peer holding S' gets W's sum too (reduce) and spreads the final block in node a; without one
  (a whole late node) the root's partner sends the final block back;
- case C (W in several nodes): per node a collector sums W's members, each collector reduces into a
  root on rail g holding S';
- the root's node broadcasts the final block along rail g to every other node taking part
  (``broadcast_rounds``: the hypercube exchange, blocks + log2 N - 1 rounds of one message per NIC
  and direction on 2^k nodes), and every node spreads it over NVLink from the GPU that received it:
  a node whose G GPUs all take part spreads the whole row of block j once its G parts are there, by
  recursive doubling where G is a power of two, else by the mixed-radix steps (``radix_node``) or Bruck's
  AllGather (about log2 G messages per GPU instead of G - 1);
- a whole late node reduces each row by recursive halving (log2 G messages per GPU; where G is not a power
  of two the mixed-radix steps of hierarchical's node phases, ``radix_node``, or Bruck's AllGather
  transposed), its rail-g GPU sends the raw sum, gets the final block back from its broadcast partner, and
  the node spreads the row by recursive doubling (or the radix or Bruck's steps).

One late GPU in a node of G GPUs, G not a power of two (``wide_applies``; NVL72 racks as nodes), may take
the *wide* form (``_wide_row``): L reduces each block row into about sqrt(G) group leaders instead of one
root per part, the leaders scatter, and L's node gathers the row by Bruck's AllGather (synth/bruck.py) as every
other node does (``_row_done``): about log2 G NVLink messages per GPU and row instead of G - 1.
``late_gpu_plan`` builds both and keeps the faster.

Where a node's NICs together outrun a GPU's NVLink port (G B_net >= B_nv, ``bcast_applies``: the late-GPU bound is
then L's own ports, s / (B_nv + B_net)), one late GPU may take the *node-broadcast* form (``_bcast_node``): L's
node broadcasts the final rows from L by the one-port pipelined broadcast of ``broadcast_rounds`` among its G GPUs
(each row cut into ``bcast_split`` blocks of consecutive parts; L's sends reduce its buffer into the receiver's S',
every later send copies the final block), so that every GPU of the node sends and receives about one block per
round and L's port sends s once; the rail-g GPU sends its part of each row along rail g as the block reaches it,
and every other node gathers the row as before. ``late_gpu_plan`` builds it beside the others.

On 2 G nodes of G GPUs (G a power of two from 4) one late GPU may take the *fan-out* form of fanout.py: each
part's block crosses three network hops instead of the hypercube's log2 N, fanned out over a node's G NICs after an
NVLink relay, and every node still gathers its rows by recursive doubling. ``late_gpu_plan`` builds it beside the
others where it searches (its estimate is a floor: the relays' packing is not in it).

A whole late node may group its blocks into fewer NVLink *rows* (``set_blocks``; the chunks are then
row-major, part g of a row contiguous): it reduces and spreads whole rows (fewer NVLink messages) while
its NICs and the broadcast carry the blocks; the other nodes then spread each block on its own.

One late GPU is the wave of one rank (``late_form``); a late node the wave of one node. Bounds (brief's
clusters.md section 4): max(s/(B_nv + B_net), s/(G B_net)) and max(s/(G B_net), (G-1)/G s/B_nv).
After the arrival the estimate (``after_arrival_estimate``) is, for a late GPU, the NVLink front (the rail
it serves last starts after G - 1 messages), that rail's broadcast rounds and the last row's spread; for a
late node the larger of its NVLink work and its NIC path (docs/stragglar.md section 9).
The estimates and the block counts chosen from them are in cluster_cost.py.

Transfers are listed block by block and packed into steps (``multi.pack``: at most one NVLink and one
network message per GPU and direction per step, so the schedule declares ports 2); each step's phase
is the set of ranks that have taken part so far.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from collsynth.apitypes import Arrivals
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.layout import check_topology, node_grid
from collsynth.synth.algorithms.stragglar import fanout, multi, waves
from collsynth.synth.algorithms.stragglar.bcast import broadcast_rounds, copyback_cube_rounds, copyback_rounds
from collsynth.synth.algorithms.stragglar.cluster_cost import (
    MAX_CHUNKS,
    UNITS,
    after_arrival_estimate,
    bcast_estimate,
    best_bcast,
    best_fan,
    best_pipeline,
    best_rows,
    best_split,
    coarse_rows_apply,
    fan_blocks,
    late_gpu_forms,
    link_model,
    make_runs,
    radix_node,
    wide_applies,
    wide_group,
)
from collsynth.synth.algorithms.stragglar.listsched import Busy, common_fit
from collsynth.synth.algorithms.stragglar.multi import Move, pack
from collsynth.synth.algorithms.stragglar.prephase import local_spans, pre_units, present_allreduce, ring_shape
from collsynth.synth.arrivals import arrival_vector, latest_rank, sooner
from collsynth.synth.bruck import bruck_reduce_steps, bruck_steps, cyclic_runs
from collsynth.synth.composition import intra_steps
from collsynth.synth.ir import Schedule, derived_phases
from collsynth.synth.simulate import simulate
from collsynth.units import parse_size

DEFAULT_SIZE = float(2**30)
AHEAD = 2  # the wave's reductions are emitted this many blocks ahead of the broadcast (a late node: all)
BALANCED_MAX_GPUS = 256  # up to here a late node's build on N not a power of two simulates its three broadcasts


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


@dataclass
class PartPlan:
    """Who does what for part g in one ``ClusterPlan.merge`` (``_part_plan``; the fields after ``rail``
    are set by ``merge`` and its broadcast rounds)."""

    g: int
    case: str  # "A", "B" or "C" (``_part_plan``)
    root_node: int
    nodes: list[int]  # the broadcast's nodes, the root's first
    contrib: list[int]  # the nodes holding members of the wave
    in_node: list[list[int]]  # per node: its ranks in the wave or holding S'
    act_node: list[list[int]]  # per node: its ranks holding S'
    wave_node: list[list[int]]  # per node: its ranks in the wave
    rail: list[int]  # per node: its rail-g GPU
    side_holder: dict[int, int] = field(default_factory=dict)  # case B: block -> the node peer that spreads it
    rounds: list[list[tuple[int, int, int]]] = field(default_factory=list)  # (src, dst, block) per round
    first: list[int] = field(default_factory=list)  # per block: the round in which the root first sends it
    last: list[int] = field(default_factory=list)  # ... and last
    emitted: int = 0  # rounds emitted so far
    copyback: bool = False  # case B without a node peer holding S': the root gets each final block back


class ClusterPlan:
    """The moves of one cluster schedule (module docstring): ``pre`` (the AllReduce of the present ranks),
    ``merge`` (a wave of late ranks into them, as often as needed), then ``to_schedule``. Make one with
    ``new_plan``."""

    def __init__(self, grid: np.ndarray, M: int, times: np.ndarray, size: float,
                 model: tuple[float, float, float, float]) -> None:
        self.grid, self.M = grid, M
        self.times = times
        self.chunk_bytes = size / (grid.shape[1] * M)
        self.model = model
        self.est: list[float] = []
        self.busy: dict[tuple[int, int, int], Busy] = {}  # (rank, send 0 / receive 1, class) -> intervals
        self.C = grid.shape[1] * M  # chunks
        self.written = [0.0] * (grid.size * self.C)  # rank * C + chunk -> end of its last write
        self.read = [0.0] * (grid.size * self.C)  # rank * C + chunk -> end of its last read
        self._ports: dict[tuple[int, int], tuple[int, int]] = {}  # (src, dst) -> port(src, dst)
        self._node_l: list[int] = []  # node and times as lists (add_atom)
        self._times_l: list[float] = []
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
        self.runs: list[tuple[int, int]] = []  # message blocks of a part: (first, units); set_blocks
        self.rows: list[tuple[int, int]] = []  # NVLink rows: runs of whole blocks
        self.row_of: list[int] = []  # block -> its row
        self.row_blocks: list[int] = []  # row -> its number of blocks
        self.set_blocks([(k, 1) for k in range(M)])
        self._fast = ""  # merge's state: "node" where a whole late node reduces whole rows
        self._row_nodes: set[int] = set()  # nodes that spread whole rows by recursive doubling
        self._rowcnt: dict[tuple[int, int], int] = {}  # (node, block) -> parts final there
        # a whole late node's broadcast on N not a power of two: "plain" (bcast.broadcast_rounds), "balanced"
        # (bcast.copyback_rounds) or "cube" (bcast.copyback_cube_rounds); build() keeps the fastest
        self.rule = "plain"
        self.units_per_block = 1  # M units per part: this many per block of a uniform pipeline (merged_plan)
        self._deferred: list[tuple[PartPlan, int]] = []  # case-B side work: (part plan, block)
        self.allow_wide = False  # one late GPU in a node of G GPUs, G not a power of two, may gather by rows
        self.wide = False  # merge's state: it does (``_wide_row``)
        # copies back to L (_wide_row, _bcast_back) of a row whose part l L still sends raw: row -> moves
        self._back_to_l: dict[int, list[tuple[int, int, int, int, bool]]] = {}
        self._wide_bruck: dict[int, tuple[list[int], list[int], list[int], int]] = {}  # block -> _bruck's arguments
        self._sim: tuple[tuple[Any, ...], Any] | None = None  # ``simulated``: (arguments, result)
        self.pre_end = 0.0  # when ``pre`` (the AllReduce before the arrival) ends in the list-scheduling model
        self._own_part = 0  # merge's state: the part of the first late GPU (``_root_spreads`` when wide)
        self.bcast_split = 0  # one late GPU: its node broadcasts each final row cut into this many blocks (_bcast_node)
        self.bcast = False  # merge's state: it does
        self.fan = 0  # one late GPU on 2 G nodes: the fan-out form (fanout.py) with this multiplier, not ``merge``
        self.fan_rows: list[int] = []  # ... its rows' first chunks, then C (its parts are uneven: rows differ)

    def add(self, src: int, dst: int, chunk: int, count: int, reduce: bool) -> None:
        """Append one move and its start in a list-scheduling model (one NVLink and one NIC port per GPU
        and direction, data dependencies per location): the order the moves are packed in."""
        self.add_atom([(int(src), int(dst), int(chunk), int(count), bool(reduce))])

    def add_atom(self, moves: list[Move]) -> None:
        """Append moves that share a step (one move, or a two-way exchange: two reduces of one location
        between two ranks, each landing via scratch) and their common start in the list-scheduling model
        (one NVLink and one NIC port per GPU and direction, data dependencies per location)."""
        self.atoms.append(moves)
        a_nv, b_nv, a_net, b_net = self.model
        start = 0.0
        ports = []
        dur = 0.0
        C, w, rd = self.C, self.written, self.read
        if len(self._node_l) != len(self.node):  # plain lists of the per-rank arrays (numpy scalars are slow)
            self._node_l, self._times_l = self.node.tolist(), [float(x) for x in self.times]
        node, times = self._node_l, self._times_l
        for src, dst, chunk, count, _ in moves:
            cs, cr = self.port(src, dst)
            net = node[src] != node[dst]
            dur = max(dur, (a_net if net else a_nv) + count * self.chunk_bytes / (b_net if net else b_nv))
            start = max(start, times[src], times[dst])
            ls, ld = src * C + chunk, dst * C + chunk
            if count == 1:
                start = max(start, w[ls], w[ld], rd[ld])
            else:
                start = max(start, max(w[ls:ls + count]), max(w[ld:ld + count]), max(rd[ld:ld + count]))
            ports += [self.busy.setdefault((src, 0, cs), Busy()), self.busy.setdefault((dst, 1, cr), Busy())]
        t = common_fit(ports, start, dur)
        end = t + dur
        for q in ports:
            q.take(t, end)
        for src, dst, chunk, count, _ in moves:
            ls, ld = src * C + chunk, dst * C + chunk
            w[ld:ld + count] = [end] * count
            rd[ls:ls + count] = [x if x > end else end for x in rd[ls:ls + count]]
        self.est.append(t)

    def busy_end(self) -> float:
        """When the last move listed so far ends in the list-scheduling model (0 before any)."""
        return max((q.last_end() for q in self.busy.values()), default=0.0)

    def simulated(self, size: float, topology: Any, times: np.ndarray) -> Any:
        """The simulator's result for the plan's schedule (``probe``), remembered for the same arguments: the
        form choice (``late_gpu_plan``), ``fit_delay`` and ``fastest`` ask for the same plan's."""
        key = (float(size), id(topology), np.asarray(times, np.float64).tobytes(), len(self.atoms))
        if self._sim is None or self._sim[0] != key:
            self._sim = (key, simulate(self.to_schedule("probe", {}), size, topology, times))
        return self._sim[1]

    def ordered(self) -> list[list[Move]]:
        """The moves by modelled start (generation order on ties)."""
        order = sorted(range(len(self.atoms)), key=lambda i: (self.est[i], i))
        return [self.atoms[i] for i in order]

    def to_schedule(self, name: str, meta: dict[str, object], ports: int | None = 2) -> Schedule:
        """The moves by modelled start, packed into steps (``multi.pack``; ports 2: one NVLink and one
        network message per GPU and direction per step; None: one per link class the moves use, 1 where they
        are all of one class, as on a grid of one-GPU nodes in one NVLink domain, 2 on a row of nodes of unequal
        size); phases from the arrivals."""
        n = self.grid.size
        atoms = self.ordered()
        steps = pack(atoms, self.port, self.times)
        if ports is None:
            used = {c for a in atoms for m in a for c in self.port(m[0], m[1])}
            ports = max(1, len(used))
        mv = np.array([x for a in atoms for x in a], np.int64).reshape(-1, 5)
        nsteps = int(steps.max()) + 1 if len(steps) else 0
        phases = derived_phases(n, steps, mv[:, 0], mv[:, 1], nsteps)
        return Schedule.from_arrays("allreduce", n, self.G * self.M, step=steps, src=mv[:, 0], dst=mv[:, 1],
                                    chunk=mv[:, 2], count=mv[:, 3], reduce=mv[:, 4].astype(bool), nsteps=nsteps,
                                    phases=phases, ports=ports, name=name, meta=meta)

    def port(self, src: int, dst: int) -> tuple[int, int]:
        """(send, receive) port class: the topology's (``transfer_class``: first and last hop) where it has
        link classes, else 0 NVLink, 1 network (a cross-rail message leaves over NVLink: PXN)."""
        if self.classes is not None:
            got = self._ports.get((src, dst))
            if got is None:
                cs, cr = self.classes(src, dst)
                ids = self.class_ids
                got = self._ports[src, dst] = (ids.setdefault(cs, len(ids)), ids.setdefault(cr, len(ids)))
            return got
        if self.node[src] == self.node[dst]:
            return 0, 0
        return (1 if self.local[src] == self.local[dst] else 0), 1

    # ------------------------------------------------------------------ before the arrival
    def pre(self, absent: set[int]) -> None:
        """AllReduce of the present ranks' buffers: the pipelined hierarchical one of prephase.py. Where
        ``local_spans`` offers more than one in-node round count and the plan has up to BALANCED_MAX_GPUS GPUs
        (above, the build time: 14 x 72 GPUs, one GPU late, 20 s more) each is built in the list-scheduling
        model and the one that ends first kept (ties to the default); ``pre_end`` is when it ends."""
        hold = set(range(self.grid.size)) - absent
        T, m = ring_shape(self.grid, hold)
        spans = local_spans(T, m, self.chunk_bytes * self.C, self.G, self.model)
        if len(spans) == 1 or self.atoms or self.grid.size > BALANCED_MAX_GPUS:
            present_allreduce(self.grid, hold, self.M, self.add, spans[0])
            self.pre_end = self.busy_end()
            return
        best: ClusterPlan | None = None
        for span in spans:
            trial = ClusterPlan(self.grid, self.M, self.times, self.chunk_bytes * self.C, self.model)
            trial.classes, trial.class_ids = self.classes, dict(self.class_ids)
            present_allreduce(self.grid, hold, self.M, trial.add, span)
            trial.pre_end = trial.busy_end()
            if best is None or sooner(trial.pre_end, best.pre_end, float(self.times.min()), 1e-9):
                best = trial
        assert best is not None
        for key in ("atoms", "est", "busy", "written", "read", "class_ids", "_ports", "pre_end"):
            setattr(self, key, getattr(best, key))  # the plan was empty: it takes the faster trial's state

    # ------------------------------------------------------------------ after the arrival
    def loc(self, g: int, j: int, parts: int = 1) -> tuple[int, int]:
        """(first chunk, count) of block j of parts g..g+parts-1 (parts > 1: block j must be a whole
        row). The chunks are row-major: row r (units [F, F + W) of every part) is one contiguous range,
        part g at offset g W in it, so an NVLink message can carry a row of several parts; without
        ``rows`` every block is its own row."""
        f, w = self.runs[j]
        F, W = self.rows[self.row_of[j]]
        return self.G * F + g * W + (f - F), parts * w

    def rowloc(self, g: int, r: int, parts: int = 1) -> tuple[int, int]:
        """(first chunk, count) of row r of parts g..g+parts-1 (``loc``)."""
        F, W = self.rows[r]
        return self.G * F + g * W, parts * W

    def set_blocks(self, runs: list[tuple[int, int]], rows: list[tuple[int, int]] | None = None) -> None:
        """The message blocks of a part (``runs``: (first unit, units), in order, covering 0..M-1) and
        the NVLink rows they group into (each a run of whole blocks; default: one row per block)."""
        self.runs = list(runs)
        self.rows = list(rows) if rows is not None else list(self.runs)
        self.row_of = []
        r = 0
        for f, w in self.runs:
            while r < len(self.rows) and f >= self.rows[r][0] + self.rows[r][1]:
                r += 1
            if r == len(self.rows) or f < self.rows[r][0] or f + w > self.rows[r][0] + self.rows[r][1]:
                raise CollsynthError(f"clusterstraggler: block {(f, w)} does not lie in one row of {self.rows}")
            self.row_of.append(r)
        self.row_blocks = [self.row_of.count(r) for r in range(len(self.rows))]

    def merge(self, wave: set[int], active: set[int]) -> None:
        """Merge the wave W (ranks holding their own buffer) into ``active`` (ranks holding S', the sum of
        the buffers merged so far): afterwards every rank of W and ``active`` holds S' + sum of W; other
        ranks are not touched. Per message block of part g (module docstring, "merge a wave"): the wave's
        data reduced in its node, one reduce into a root holding S', a pipelined broadcast of the final
        block along rail g (``broadcast_rounds``), an NVLink spread in every node."""
        N, G, grid = self.N, self.G, self.grid
        wave = {int(r) for r in wave}
        active = {int(r) for r in active} - wave
        if not wave:
            return
        if not active:
            raise CollsynthError("clusterstraggler: a wave can merge only into ranks that hold a sum")
        both = active | wave
        in_node = [[int(x) for x in grid[b] if int(x) in both] for b in range(N)]
        act_node = [[int(x) for x in grid[b] if int(x) in active] for b in range(N)]
        wave_node = [[int(x) for x in grid[b] if int(x) in wave] for b in range(N)]
        contrib = [b for b in range(N) if wave_node[b]]
        nb = len(self.runs)
        full = [len(in_node[b]) == G for b in range(N)]  # rows spread by recursive doubling or Bruck's
        # a whole late node reduces whole rows (one late GPU: reducing per part into each root and star
        # spreads in its node measured faster than rows there)
        fast = "node" if len(contrib) == 1 and full[contrib[0]] and len(wave_node[contrib[0]]) == G else ""
        self._fast = fast
        # one late GPU in a node of G GPUs, G not a power of two: rows in its node too (``_wide_row``)
        self.bcast = self.bcast_split > 0 and len(wave) == 1 and full[contrib[0]]
        self.wide = self.allow_wide and wide_applies(G) and len(wave) == 1 and full[contrib[0]] and not self.bcast
        self._own_part = int(self.local[min(wave)])  # the late GPU's part (``_root_spreads`` when wide)
        self._rowcnt = {}
        plans = [self._part_plan(g, contrib, in_node, act_node, wave_node, active) for g in range(G)]
        roots = {p.root_node for p in plans}
        # nodes that spread whole rows: full ones that are no part's root, and the wave's node when fast
        coarse = len(self.rows) < len(self.runs)  # other nodes spread per block (a row is not one block)
        self._row_nodes = ({b for b in range(N) if full[b] and b not in roots and not coarse}
                           | ({contrib[0]} if fast else set()))
        cache: dict[int, list[list[tuple[int, int, int]]]] = {}
        for p in plans:
            key = len(p.nodes)
            if key not in cache:
                rule = self.rule if fast and key & (key - 1) else "plain"
                cache[key] = (copyback_rounds(key, nb) if rule == "balanced" else
                              copyback_cube_rounds(key, nb) if rule == "cube" else broadcast_rounds(key, nb))
            p.rounds = cache[key]
            first = [-1] * nb  # the round in which the root first sends block j
            last = [-1] * nb  # ... and last
            for r, moves in enumerate(p.rounds):
                for s_, _, j in moves:
                    if s_ == 0:
                        last[j] = r
                        if first[j] < 0:
                            first[j] = r
            p.first, p.last = first, last
            p.emitted = 0
            p.copyback = p.case == "B" and not act_node[p.root_node]
        if coarse and not fast:
            raise CollsynthError("clusterstraggler: rows of several blocks need a whole late node")
        if self.bcast and len(self.rows) != nb:
            raise CollsynthError("clusterstraggler: the node-broadcast form sends one block per row")
        ahead = nb if fast or self.bcast else AHEAD
        if fast:  # a whole late node reduces its rows first
            for r in range(len(self.rows)):
                self._gather_row(plans, r)
        if self.bcast:  # L's node gets every final row first
            self._bcast_node(plans[0])
        for j in range(0 if fast else min(ahead, nb)):
            self._gather_block(plans, j)
        for j in range(nb):
            if j + ahead < nb:
                self._gather_block(plans, j + ahead)
            final = j + 1 == nb
            upto = [len(p.rounds) if final else p.first[j] + 1 for p in plans]
            lo = min(p.emitted for p in plans)
            for r in range(lo, max(upto)):
                for g, p in enumerate(plans):
                    if p.emitted <= r < upto[g]:
                        self._round(p, r)
            for g, p in enumerate(plans):
                p.emitted = max(p.emitted, upto[g])
            self._root_spreads(plans, j)
        self._side_work()

    def _side_work(self) -> None:
        """Case B with a node peer holding S' (``_gather``), after every other move of the merge: per block,
        the wave's sum reduced into that peer, its spread in the wave's node, the root's copy back. Emitted
        last, so that in the list-scheduling model they take the wave's NVLink port only where its
        reductions into the other parts' roots leave it free (one late GPU at 16 x 8, 1 GiB: its NVLink
        port sends 8 messages per block row, about one NIC block time; the rails the roots serve no longer
        wait for it: 3.624 -> 3.606 ms after the arrival). ``_wide_row``: its copies back to L not yet
        listed, then node a's AllGathers in row order (listed last, they take the peers' ports where L's
        reductions, the scatters and the copies back leave them free: 2 x 72, 8 blocks, 2.18 -> 2.15 ms)."""
        for k in sorted(self._back_to_l):
            for mv in self._back_to_l[k]:
                self.add(*mv)
        self._back_to_l = {}
        for j in sorted(self._wide_bruck):
            self._bruck(*self._wide_bruck[j])
        self._wide_bruck = {}
        for p, j in self._deferred:
            root = self._holder(p, 0, j)
            peer = p.side_holder[j]
            c, w = self.loc(p.g, j)
            self.add(root, peer, c, w, True)
            self._spread(p, 0, j, skip=root)
            self.add(peer, root, c, w, False)
        self._deferred = []

    def _gather_block(self, plans: list[PartPlan], j: int) -> None:
        """Block j of the wave into the roots (``_gather`` per part, or a whole row at once) and the
        spreads that can follow at once."""
        if self._fast:
            self._gather_row(plans, j)
        elif self.bcast:  # (_bcast_node listed all of it)
            return
        elif self.wide:
            self._wide_row(plans[0], j)
        else:  # the roots first, the node peer that only spreads in the wave's node (case B) last
            for p in sorted(plans, key=lambda p: (p.case == "B", p.g)):
                self._gather(p, j)

    def _root_spreads(self, plans: list[PartPlan], j: int) -> None:
        """The star spreads of block j in the root's node once the root holds it (not fast)."""
        if self.wide or self.bcast:  # the copies back to L of the rows whose part l L has sent raw (_back_to_l)
            own = plans[self._own_part]
            for k in [k for k in self._back_to_l if own.last[k] < own.emitted]:
                for mv in self._back_to_l.pop(k):
                    self.add(*mv)
            return
        if self._fast:
            return
        for p in plans:
            if p.case != "B":  # case B: the peer's spread is side work (_side_work)
                self._spread(p, 0, j)

    def _gather_row(self, plans: list[PartPlan], j: int) -> None:
        """A whole late node: a recursive-halving ReduceScatter of its row j (``rows``; Thakur,
        Rabenseifner & Gropp, IJHPCA 2005), or Bruck's AllGather transposed where G is not a power of two
        (synth/bruck.py): GPU g ends with part g of the node's sum."""
        G = self.G
        row = [int(x) for x in self.grid[plans[0].contrib[0]]]
        if radix_node(G):
            self._radix(row, j, 0)
            return
        if G & (G - 1):
            self._bruck(row, list(range(G)), [1] * G, j, reduce=True)
            return
        b = G // 2
        while b >= 1:
            for h in range(G):
                q = h ^ b
                self.add(row[h], row[q], *self.rowloc((q // b) * b, j, b), True)
            b //= 2

    def _row_done(self, node: int, j: int, parts: int) -> None:
        """``parts`` more parts of block j are final in ``node``; when all blocks of all G parts of its row
        are, the node spreads the row by recursive doubling."""
        r = self.row_of[j]
        key = (node, r)
        self._rowcnt[key] = self._rowcnt.get(key, 0) + parts
        if self._rowcnt[key] < self.G * self.row_blocks[r]:
            return
        row = [int(x) for x in self.grid[node]]
        if radix_node(self.G):
            self._radix(row, r, 1)
            return
        if self.G & (self.G - 1):
            self._bruck(row, list(range(self.G)), [1] * self.G, r)
            return
        b = 1
        while b < self.G:  # recursive doubling: GPU h sends the aligned b parts it holds to h xor b
            for h in range(self.G):
                self.add(row[h], row[h ^ b], *self.rowloc((h // b) * b, r, b), False)
            b *= 2

    def _radix(self, row: list[int], r: int, phase: int) -> None:
        """The ReduceScatter (``phase`` 0) or AllGather (1) of row r among a node's GPUs ``row`` by the mixed-radix
        steps of hierarchical's node phases (composition.intra_steps; ``radix_node``)."""
        for dst, blk, runs, _ in intra_steps(self.G, "radix")[phase]:
            for h in range(self.G):
                self.add(row[h], row[int(dst[h])], *self.rowloc(int(blk[h]), r, int(runs[h])), phase == 0)

    def _bruck(self, ranks: list[int], starts: list[int], lens: list[int], r: int, reduce: bool = False) -> None:
        """Bruck's AllGather (synth/bruck.py) of row r among ``ranks``, rank i holding the final parts starts[i] ..
        starts[i] + lens[i] - 1 (mod G; consecutive: each rank's run starts where the previous one's ends): about
        log2 of the ranks messages per GPU, two where a run of parts passes part G - 1. ``reduce``: its
        transpose, the ReduceScatter that leaves rank i the sum of its parts."""
        R, G = len(ranks), self.G
        steps = bruck_reduce_steps if reduce else bruck_steps
        for step in steps(R, mirrored=r % 2 == 1):  # the two-message ranges fall on other ranks
            for i, d, f, c in step:
                for g, w in cyclic_runs(starts[f], sum(lens[(f + k) % R] for k in range(c)), G):
                    self.add(ranks[i], ranks[d], *self.rowloc(g, r, w), reduce)

    def _bcast_node(self, p: PartPlan) -> None:
        """The node-broadcast form (module docstring): L's node gets every final row by the pipelined broadcast of
        ``broadcast_rounds`` among its G GPUs rooted at L (Bar-Noy & Kipnis's one-port optimum, blocks + ceil(log2
        G) - 1 rounds: the hypercube exchange or Traeff's circulant broadcast). Row r is cut into about
        ``bcast_split`` blocks of consecutive parts (in proportion to its width, so the blocks are about
        equal); L's sends reduce its buffer into the receiver's S' (which then holds the final block), every
        later send copies the final block over S'. L gets the final blocks back in order, each from a peer that
        holds it and sends nothing else that round (the one whose broadcast partner would be L), else after the
        rounds; a block holding L's own part l only after L's raw sends of that row along rail l
        (``_back_to_l``). Two GB200 NVL72 racks as nodes, 1 GiB: 2.114 -> 1.810 ms after the arrival."""
        a = p.contrib[0]
        L = p.wave_node[a][0]
        G, own = self.G, int(self.local[L])
        ranks = [L] + [int(self.grid[a, (own + i) % G]) for i in range(1, G)]
        wmax = max(w for _, w in self.rows)
        blocks: list[tuple[int, int, int]] = []  # (row, first part, parts)
        for r, (_, w) in enumerate(self.rows):
            k = max(1, min(G, round(self.bcast_split * w / wmax)))
            edges = [G * i // k for i in range(k + 1)]
            blocks += [(r, edges[i], edges[i + 1] - edges[i]) for i in range(k) if edges[i + 1] > edges[i]]
        held: list[list[int]] = [[] for _ in blocks]  # per block: the broadcast's nodes that hold it, in order
        lacks = list(range(len(blocks)))  # the blocks L has not got back, in order
        for rnd in broadcast_rounds(G, len(blocks)):
            sending = {s_ for s_, _, _ in rnd}
            for s_, d_, b in rnd:
                r, g, w = blocks[b]
                self.add(ranks[s_], ranks[d_], *self.rowloc(g, r, w), s_ == 0)
            for i, b in enumerate(lacks):
                free = [x for x in held[b] if x not in sending]
                if free:
                    self._bcast_back(blocks[b], ranks[free[0]], L, own)
                    del lacks[i]
                    break
            for _, d_, b in rnd:
                held[b].append(d_)
        for i, b in enumerate(lacks):
            self._bcast_back(blocks[b], ranks[held[b][i % len(held[b])]], L, own)

    def _bcast_back(self, block: tuple[int, int, int], src: int, L: int, own: int) -> None:
        """The final ``block`` (row, first part, parts) copied from ``src`` back to L; deferred (``_back_to_l``)
        where it holds L's own part ``own``, which L still sends raw along its rail."""
        r, g, w = block
        mv = (src, L, *self.rowloc(g, r, w), False)
        if g <= own < g + w:
            self._back_to_l.setdefault(r, []).append(mv)
        else:
            self.add(*mv)

    def _wide_row(self, p: PartPlan, j: int) -> None:
        """Block row j of one late GPU L in node a of G GPUs, G not a power of two (two GB200 NVL72 racks as
        nodes, 1 GiB: 2.652 -> 2.114 ms after the arrival; docs/stragglar.md section 9, "Large NVLink domains as
        nodes"). L's G - 1 node peers, in part order from L's local index l + 1, each hold part l + 1 + i (the
        last, l - 1, part l too); in groups of about sqrt(G) consecutive peers (shifted by j, so that the leaders
        change from row to row) L reduces the group's parts into its leader (one message per group instead
        of one per part), the leader copies each member its part and L the group's final parts, and the peers
        gather the row by Bruck's AllGather. Every peer then holds its part's final block for the broadcast
        along its rail; L sends its own part raw on its NIC (case B) as before."""
        a = p.contrib[0]
        L = p.wave_node[a][0]
        G, own, r = self.G, int(self.local[L]), self.row_of[j]
        row = [int(x) for x in self.grid[a]]
        R = G - 1
        starts = [(own + 1 + i) % G for i in range(R)]
        lens = [1] * (R - 1) + [2]
        ranks = [row[g] for g in starts]
        size = wide_group(R)
        groups = [[(j + t + u) % R for u in range(min(size, R - t))] for t in range(0, R, size)]
        spans = [[self.rowloc(g, r, w) for g, w in cyclic_runs(starts[grp[0]], sum(lens[i] for i in grp), G)]
                 for grp in groups]  # each group's parts: (first chunk, count), two where they pass part G - 1
        for grp, span in zip(groups, spans):  # L's reductions first: its NVLink port sets the pace of the row
            for c, w in span:
                self.add(L, ranks[grp[0]], c, w, True)
        for grp in groups:
            for i in grp[1:]:
                for g, w in cyclic_runs(starts[i], lens[i], G):
                    self.add(ranks[grp[0]], ranks[i], *self.rowloc(g, r, w), False)
        for grp, span in zip(groups, spans):  # the group holding part l after L's last raw send of it
            back = [(ranks[grp[0]], L, c, w, False) for c, w in span]
            if R - 1 in grp:
                self._back_to_l[j] = back
            else:
                for mv in back:
                    self.add(*mv)
        self._wide_bruck[j] = (ranks, starts, lens, r)

    def _round(self, p: PartPlan, r: int) -> None:
        """The moves of broadcast round r of part g, and the spreads they complete."""
        raw = p.case == "B"
        for s_, d_, j in p.rounds[r]:
            src, dst = self._holder(p, s_, j), self._holder(p, d_, j)
            c, w = self.loc(p.g, j)
            if raw and s_ == 0 and p.copyback and r == p.first[j]:
                # the root's first send of block j: a two-way exchange (its partner's S' comes back in
                # the same step; the partner sends nothing else to the root), both then hold the final
                self.add_atom([(src, dst, c, w, True), (dst, src, c, w, True)])
                self._arrived(p, d_, j)
                self._arrived(p, 0, j)
                continue
            self.add(src, dst, c, w, raw and s_ == 0 and not p.copyback)  # case B: the root's raw sum
            self._arrived(p, d_, j)

    def _arrived(self, p: PartPlan, i: int, j: int) -> None:
        """Block j of part g is final at the broadcast's node i."""
        b = p.nodes[i]
        if b in self._row_nodes:
            self._row_done(b, j, 1)
        else:
            self._spread(p, i, j)

    def _part_plan(self, g: int, contrib: list[int], in_node: list[list[int]], act_node: list[list[int]],
                   wave_node: list[list[int]], active: set[int]) -> PartPlan:
        """Who does what for part g (module docstring, "merge a wave"): case A, one node holds the whole
        wave and its rail-g GPU holds S' (the root, it reduces the wave); case B, one node holds the wave
        and its rail-g GPU is in it (the root, it collects the wave's sum and sends it raw: every send
        from the root is a reduce into S'; a node peer holding S' reduces a copy and spreads it, or
        without one the root gets each final block back); case C, otherwise (the wave in several
        nodes): per node a collector, each sends its sum to a root on rail g holding S'."""
        N, grid = self.N, self.grid
        rail = [int(grid[b, g]) for b in range(N)]
        b0 = contrib[0]
        if len(contrib) == 1 and rail[b0] in active:
            case, root_node = "A", b0
        elif len(contrib) == 1 and rail[b0] in wave_node[b0]:
            case, root_node = "B", b0
        else:
            cands = [(b0 + i) % N for i in range(N)]
            cands = [b for b in cands if act_node[b]]
            with_rail = [b for b in cands if rail[b] in active]
            case, root_node = "C", (with_rail[0] if with_rail else cands[0])
        nodes = [root_node] + [(root_node + i) % N for i in range(1, N) if in_node[(root_node + i) % N]]
        return PartPlan(g, case, root_node, nodes, contrib, in_node, act_node, wave_node, rail)

    def _rot(self, ranks: list[int], k: int) -> int:
        return ranks[k % len(ranks)]

    def _holder(self, p: PartPlan, i: int, j: int) -> int:
        """The rank of the broadcast's node i that holds part g's block j: the rail-g GPU where it takes
        part (the root: case A and B; case C where it holds S'), else a node peer in turn (PXN routes)."""
        b = p.nodes[i]
        r = p.rail[b]
        if i == 0 and p.case == "C":
            return r if r in p.act_node[b] else self._rot(p.act_node[b], j)
        return r if r in p.in_node[b] else self._rot(p.in_node[b], j + p.g)

    def _gather(self, p: PartPlan, j: int) -> None:
        """The wave's block j of part g: NVLink reduces inside each contributing node into the root (case
        A, B) or a collector, which reduces it into the root (case C); case B with a node peer holding
        S': the root's sum reduced into it too."""
        rail, act_node, wave_node = p.rail, p.act_node, p.wave_node
        c, w = self.loc(p.g, j)
        root = self._holder(p, 0, j)
        for b in p.contrib:
            members = wave_node[b]
            t = root if b == p.root_node else (rail[b] if rail[b] in members else self._rot(members, j))
            for x in members:
                if x != t:
                    self.add(x, t, c, w, True)
            if p.case == "B" and act_node[b]:  # the side work: _side_work, after the merge's other moves
                p.side_holder[j] = self._rot(act_node[b], j + 1)
                self._deferred.append((p, j))
            if t != root:
                self.add(t, root, c, w, True)

    def _spread(self, p: PartPlan, i: int, j: int, skip: int = -1) -> None:
        """The NVLink spread of part g's block j in the broadcast's node i from the rank that holds it to
        every other rank of the node that takes part (but ``skip``), one message each."""
        c, w = self.loc(p.g, j)
        b = p.nodes[i]
        h = p.side_holder[j] if i == 0 and p.side_holder else self._holder(p, i, j)
        for x in p.in_node[b]:
            if x != h and x != skip:
                self.add(h, x, c, w, False)


def build(n: int, collective: str = "allreduce", arrivals: Arrivals = None, size: int | float | str | None = None,
          topology: Any = None, pipeline: int | str = "auto") -> Schedule:
    """Late-GPU or late-node AllReduce on a cluster topology (module docstring); the form follows the
    arrivals (``late_form``). ``pipeline`` is M, the chunks per part (``auto``: the model's best for
    ``size``)."""
    if collective != "allreduce":
        raise CollsynthError(f"clusterstraggler builds allreduce only, not {collective!r}")
    check_topology(topology, n, "clusterstraggler")
    grid = node_grid(topology, n)
    N, G = grid.shape
    if N < 2 or G < 2:  # one NVLink domain (or no topology): the late ranks' flat form
        return multi.build(n, collective, arrivals, "auto", size, None, None, topology)
    times = arrival_vector(arrivals, n)
    form, late = late_form(grid, times)
    if form == "gpu" and int(np.count_nonzero(times > times.min())) >= 2:  # several late ranks (waves.py)
        return waves.build(n, arrivals, size, topology, pipeline)
    s_bytes = DEFAULT_SIZE if size is None else float(parse_size(size) if isinstance(size, str) else size)
    model = link_model(topology, grid)
    if pipeline == "auto":
        M, runs, rows = best_pipeline(form, N, G, s_bytes, model)
    elif (isinstance(pipeline, bool) or not isinstance(pipeline, (int, np.integer))
          or not 1 <= pipeline <= MAX_CHUNKS // G):
        raise CollsynthError(f"--pipeline for clusterstraggler must be auto or an integer in 1..{MAX_CHUNKS // G} "
                             f"(blocks per part), got {pipeline!r}")
    else:
        M = int(pipeline)
        runs = make_runs(M, 1, M)
        rows = best_rows(N, G, M, s_bytes, model) if form == "node" and coarse_rows_apply(N, G) else runs
    if form == "gpu":
        plan, est = late_gpu_plan(topology, n, times, s_bytes, late[0], None if pipeline == "auto" else M,
                                  n <= BALANCED_MAX_GPUS)
        if pipeline == "auto" and n <= BALANCED_MAX_GPUS:
            plan = fit_delay(plan, topology, n, times, s_bytes, late, est)
    elif pipeline == "auto" and n <= BALANCED_MAX_GPUS:
        plan = late_node_plan(topology, n, times, s_bytes, M, runs, rows, late, grid)
    else:
        plan = merged_plan(topology, n, times, s_bytes, M, runs, rows, late)
    return plan_schedule(plan, form, late, topology, s_bytes)


def late_gpu_plan(topology: Any, n: int, times: np.ndarray, size: float, L: int, pipeline: int | None = None,
                  search: bool = True) -> tuple[ClusterPlan, float]:
    """One late GPU L (``merged_plan``) and its after-arrival estimate: the form of roots and star spreads and,
    where they apply (``late_gpu_forms``), the wide form (``ClusterPlan._wide_row``), the node-broadcast form and,
    with ``search`` only, the fan-out form (fanout.py), each with its best block count or ``pipeline`` blocks per
    part; with ``search`` (waves.searched) the fastest in the simulator, else the one of the smallest estimate."""
    grid = node_grid(topology, n)
    N, G = grid.shape
    model = link_model(topology, grid)
    cands = []
    forms = [f for f in late_gpu_forms(N, G, model) if search or f != "fan"]  # fan: its estimate is a floor
    for form in [f for f in forms if f not in ("bcast", "fan")]:
        if pipeline is None:
            M, runs, rows = best_pipeline(form, N, G, size, model)
        else:
            M, runs, rows = pipeline, make_runs(pipeline, 1, pipeline), make_runs(pipeline, 1, pipeline)
        cands.append((after_arrival_estimate(form, N, G, M, runs, size, model, rows), form, M, runs, rows, 0))
    if "bcast" in forms:
        M, k = (best_bcast(N, G, size, model) if pipeline is None
                else (pipeline, best_split(N, G, pipeline, size, model)))
        runs = make_runs(M, 1, M)
        cands.append((bcast_estimate(N, G, [size / M] * M, k, model), "bcast", M, runs, runs, k))
    if "fan" in forms:
        M = best_fan(G, size, model) if pipeline is None else pipeline
        units, runs = fan_blocks(G, M)
        est = fanout.estimate(G, runs, size, model)
        cands += [(est, "fan", units, runs, runs, mult) for mult in fanout.multipliers(G)]
    if not search:
        cands = [min(cands, key=lambda c: c[0])]
    best: tuple[float, ClusterPlan, float] | None = None
    fan_done = False
    for est, form, M, runs, rows, k in cands:
        if form == "fan" and fan_done:
            continue
        plan = merged_plan(topology, n, times, size, M, runs, rows, [L], wide=form == "wide",
                           bcast=k if form == "bcast" else 0, fan=k if form == "fan" else 0)
        if len(cands) == 1:
            return plan, est
        t = plan.simulated(size, topology, times).completion_s
        # the fan-out multipliers in order until one packs within FAN_TIE of the estimate
        fan_done = form == "fan" and t - float(times.max()) <= est * (1 + fanout.FAN_TIE)
        if best is None or sooner(t, best[0], float(times.max()), 1e-9):
            best = (t, plan, est)
    assert best is not None
    return best[1], best[2]


def plan_schedule(plan: ClusterPlan, form: str, late: list[int], topology: Any, size: float,
                  extra: dict[str, object] | None = None) -> Schedule:
    """The schedule of a merged ``plan`` of the late-GPU or late-node ``form`` for the ``late`` ranks, its meta
    (the form, late ranks, shape, block counts, the after-arrival estimate, the topology's spec so that
    `collsynth verify FILE` enforces its per-class ports again) and ``extra`` meta. Form "domain" is the
    late-node form on a grid of one-GPU nodes in one NVLink domain (domain.py): no nodes in its meta (the
    backends then place every peer in one node) and one port per GPU, direction and link class."""
    N, G = plan.N, plan.G
    est = (fanout.estimate(G, plan.runs, size, plan.model) if plan.fan else
           bcast_estimate(N, G, [size * w / plan.M for _, w in plan.rows], plan.bcast_split, plan.model)
           if plan.bcast else
           after_arrival_estimate("node" if form == "domain" else "wide" if plan.wide else form, N, G, plan.M,
                                  plan.runs, size, plan.model, plan.rows))
    shape: dict[str, object] = {} if form == "domain" else {"nodes": N, "gpus_per_node": G}
    meta: dict[str, object] = {"algorithm": "clusterstraggler", "form": form, "late": late, **shape,
                               "pipeline": plan.M // plan.units_per_block,
                               "units_per_block": plan.units_per_block, "messages_per_part": len(plan.runs),
                               "nvlink_rows": len(plan.rows), "wide": plan.wide,
                               "node_bcast": plan.bcast_split if plan.bcast else 0, "fan": plan.fan,
                               "topology_name": topology.name,
                               "after_arrival_estimate_s": est, "pre_end_s": plan.pre_end, **(extra or {})}
    spec = getattr(topology, "spec", None)
    if spec is not None:
        meta["topology"] = spec
    who = f"node{int(plan.node[late[0]])}" if form == "node" else f"l{late[0]}"
    return plan.to_schedule(f"clusterstraggler_{form}_n{plan.grid.size}_{who}", meta, None if form == "domain" else 2)


def auto_pipeline(n: int, topology: Any, form: str, size: int | float | str | None = None) -> int:
    """The M (blocks per part) that ``pipeline="auto"`` builds the ``form`` ("gpu" or "node") with on
    ``topology`` for ``size`` bytes (``best_pipeline``); an explicit M builds the same schedule and keeps the
    late form (choose.py returns it as is)."""
    grid = node_grid(topology, n)
    N, G = grid.shape
    s_bytes = DEFAULT_SIZE if size is None else float(parse_size(size) if isinstance(size, str) else size)
    return best_pipeline(form, N, G, s_bytes, link_model(topology, grid))[0]


SPILL = 0.02  # a late GPU's simulated time this far above its estimate: the work before the arrival spilled past it
SPILL_TRIES = 3  # ... then this many smaller block counts of UNITS are built and simulated (fit_delay)


def merged_plan(topology: Any, n: int, times: np.ndarray, size: float, M: int, runs: list[tuple[int, int]],
                rows: list[tuple[int, int]], late: list[int], rule: str = "plain",
                grid: np.ndarray | None = None, wide: bool = False, bcast: int = 0, fan: int = 0) -> ClusterPlan:
    """``new_plan`` with the present ranks' AllReduce (``pre``) and the late ranks merged (``merge``), the
    late node's broadcast by ``rule``; M units per part cut ``pre_units`` times finer (the blocks ``runs``
    and NVLink ``rows`` keep their bytes). ``grid``: the nodes (default ``node_grid`` of the topology);
    ``wide``: one late GPU's node gathers its rows by Bruck's AllGather where ``wide_applies``; ``bcast``: it
    broadcasts them cut into this many blocks (``ClusterPlan._bcast_node``; one row per block); ``fan``: one late GPU
    on 2 G nodes takes the fan-out form with this multiplier (fanout.py; uniform ``runs``, one row per block)."""
    grid = node_grid(topology, n) if grid is None else grid
    k = pre_units(grid, set(late), M, MAX_CHUNKS)
    plan = new_plan(topology, n, times, size, k * M, [(k * f, k * w) for f, w in runs],
                    [(k * f, k * w) for f, w in rows], grid)
    plan.units_per_block = k
    plan.rule = rule
    plan.allow_wide = wide
    plan.bcast_split = bcast
    plan.pre(set(late))
    if fan:
        plan.fan = fan
        plan.units_per_block = plan.runs[0][1]
        fanout.merge(plan, late[0], fan)
    else:
        plan.merge(set(late), set(range(n)) - set(late))
    return plan


def spilled(after_arrival_s: float, estimate_s: float) -> bool:
    """Whether a late-GPU form's simulated time after the arrival exceeds its estimate by more than SPILL: the
    AllReduce before the arrival did not fit the delay (``fit_delay``; choose.py's funnel beyond
    waves.searched)."""
    return after_arrival_s > estimate_s * (1 + SPILL)


def fit_delay(plan: ClusterPlan, topology: Any, n: int, times: np.ndarray, size: float, late: list[int],
              estimate: float) -> ClusterPlan:
    """A late GPU's plan whose simulated time after the arrival exceeds the estimate (which assumes the work
    before the arrival is done by then) by more than SPILL: the present ranks' AllReduce did not fit the
    delay. Its alpha terms grow with the block count, so up to SPILL_TRIES smaller counts of UNITS are built
    and the fastest plan in the simulator is kept (ties keep the earlier). Issue 15 point 1: "choose by the
    model and the expected delay" (h100-cluster 32 x 8, 1 GiB, rank 5 late by 10 ms: 32 blocks 4.222 ms
    after the arrival, 28 blocks 3.699 ms)."""
    res = plan.simulated(size, topology, times)
    if not spilled(res.after_last_arrival_s, estimate):
        return plan
    fewer = sorted((u for u in UNITS if u < plan.M // plan.units_per_block), reverse=True)[:SPILL_TRIES]
    blocks = [fan_blocks(plan.G, m) if plan.fan else (m, make_runs(m, 1, m)) for m in fewer]
    return fastest(plan, [partial(merged_plan, topology, n, times, size, m, runs, runs, late, wide=plan.allow_wide,
                                  bcast=plan.bcast_split, fan=plan.fan) for m, runs in blocks],
                   size, topology, times)


def late_node_plan(topology: Any, n: int, times: np.ndarray, size: float, M: int, runs: list[tuple[int, int]],
                   rows: list[tuple[int, int]], late: list[int], grid: np.ndarray | None = None) -> ClusterPlan:
    """``merged_plan`` of a late node (domain.py: a late GPU on a grid of one-GPU nodes); on a node count that
    is not a power of two the three broadcasts of its exchange with its partners, plain, "balanced" and
    "cube", the fastest in the simulator (none wins always)."""
    plan = merged_plan(topology, n, times, size, M, runs, rows, late, grid=grid)
    N = (node_grid(topology, n) if grid is None else grid).shape[0]
    if N & (N - 1):
        plan = fastest(plan, [partial(merged_plan, topology, n, times, size, M, runs, rows, late, rule, grid)
                              for rule in ("balanced", "cube")], size, topology, times)
    return plan


def fastest(plan: ClusterPlan, alternatives: list[Callable[[], ClusterPlan]], size: float, topology: Any,
            times: np.ndarray) -> ClusterPlan:
    """The plan of ``plan`` and the ``alternatives`` (built one at a time) that completes first in the
    simulator (``ClusterPlan.simulated``: a plan already simulated is not simulated again); ties keep the
    earlier."""
    best = plan.simulated(size, topology, times).completion_s
    for build_alt in alternatives:
        alt = build_alt()
        t_alt = alt.simulated(size, topology, times).completion_s
        if sooner(t_alt, best, float(np.max(times)), 1e-9):
            plan, best = alt, t_alt
    return plan


def new_plan(topology: Any, n: int, times: np.ndarray, size: float, M: int,
             runs: list[tuple[int, int]] | None = None, rows: list[tuple[int, int]] | None = None,
             grid: np.ndarray | None = None) -> ClusterPlan:
    """An empty ClusterPlan for ``topology``'s nodes (``node_grid``: at least 2 nodes of at least 2 GPUs;
    or ``grid``, e.g. one-GPU nodes in one NVLink domain), the arrivals ``times`` (seconds per rank), ``size``
    bytes per rank, parts of M units, message blocks ``runs`` ((first unit, units), default one per unit)
    and NVLink ``rows`` (runs of whole blocks; default one per block, ``ClusterPlan.set_blocks``)."""
    grid = node_grid(topology, n) if grid is None else grid
    plan = ClusterPlan(grid, M, np.asarray(times, np.float64), float(size), link_model(topology, grid))
    plan.set_blocks(runs if runs is not None else make_runs(M, 1, M), rows)
    if len(getattr(topology, "classes", ())) > 1:
        plan.classes = topology.transfer_class
    return plan
