"""Several late ranks on a cluster (issue 15, point 3): merge them in waves as they arrive, on the rails.

Our construction (docs/stragglar.md section 10; the bounds are the brief's clusters.md section 4). N nodes
of G GPUs (synth/algorithms/layout.py ``node_grid``; GPU r of node b with local index g is grid[b, g], and
the GPUs with local index g form rail g); s bytes per rank; the buffer is G parts of M units (part g is
units [g M, (g+1) M)). The ranks that arrive first are *punctual*, the others *late*, taken in arrival order.

1. ``pre``: the punctual ranks AllReduce, pipelined by pieces: in every node a ReduceScatter of part g
   into its owner (local g, or punctual GPUs of the node piece by piece), a ring AllReduce of part g along
   rail g among the nodes whose rail-g GPU is punctual (P pieces per part, Patarasuk & Yuan), an AllGather
   in every node; a node whose rail-g GPU is late sends each piece of its part g over the piece holder's
   own rail into a spent copy at the ring node where the piece ends (then NVLink) and gets the final
   piece back the same way. Each piece moves on as soon as it is ready (the list-scheduling model below).
2. Rail passes. Each part is walked unit run by unit run, again and again, until every late rank is in
   every unit. A run of units that already holds the sum over the punctual ranks and the first q late
   ranks (its *holders* are those ranks) takes in the *wave* W: every late rank not yet in it that has
   arrived by the time the rail can start the run in the model (at least the next one, waited for). So a
   rank that arrives in the middle of a pass joins the rest of that pass, and the next pass covers the
   units it missed: after the last arrival about one pass remains, the late-GPU form's work.
   For a run (part g) and its wave W:
   - in every node b with wave members W_b, they sum their units over NVLink into a collector x_b (late
     ranks of one node combine for free): the node's rail-g GPU, a wave member or a holder (then the first
     member's units replace the holder's copy of the state: the node's other holders keep it, and the
     final sum overwrites it), else a wave member; a holder always keeps the state somewhere;
   - the collectors of the contributing nodes form a chain along rail g (the shortest arc of the ring of
     nodes, so the next node holds the state; direction alternating per run) that adds up the wave's
     delta (a middle collector receives twice: the partial sum and later the final one); the last one
     reduces the delta into a holder (its own node's, over NVLink; when it sits on rail g and the next
     node holds the state also raw over its NIC into that node's rail-g GPU, so two nodes have the final
     sum at once), or, in a node without holders, into the next node's holder;
   - the final sum travels to every other node that has holders or wave members: a pipelined chain
     along the rail, or two alternating in-order binary trees over those nodes (every node is interior in
     about one tree: it sends about once per unit; depth log2 N instead of N);
   - every node spreads it over NVLink from the GPU that received it to its other holders and wave members.

``build`` ("auto") simulates a few choices (cutoff, M, chain or trees, each also retimed) and the funnel
form (funnel.py: reduce toward the last rank's node, then broadcast; FUNNEL_CHOICES) and returns the
fastest, or the fastest synchronous schedule (synth/algorithms/synchronous.py; form "synchronous") when
that is faster still.

Moves are placed by a list-scheduling model (listsched.Timeline: one message per port and link class at
a time, data dependencies per (rank, unit)), ordered by modelled start and packed into steps (multi.pack:
one NVLink and one network message per GPU and direction per step; ports 2); each step's phase is the
set of ranks that have taken part so far (ir.derived_phases), so nothing waits for a rank it does not need.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from typing import Any, NamedTuple

import numpy as np

from collsynth.apitypes import Arrivals
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms import synchronous
from collsynth.synth.algorithms.layout import node_grid
from collsynth.synth.algorithms.stragglar import funnel
from collsynth.synth.algorithms.stragglar.listsched import Timeline
from collsynth.synth.algorithms.stragglar.multi import retime, timeline_schedule
from collsynth.synth.algorithms.stragglar.prephase import present_allreduce
from collsynth.synth.arrivals import arrival_vector, sooner
from collsynth.synth.ir import Schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.trees import inorder_edges
from collsynth.units import parse_size
from collsynth.workers import imap_ordered, map_ordered

DEFAULT_SIZE = float(2**30)
MAX_CHUNKS = 4096
class Choice(NamedTuple):
    """One funnel candidate that auto simulates (funnel.construct's options; ``leaves`` and ``settled`` in
    units of T = s/(G B_net), funnel.rail_time; ``pxn_first`` applies without ``pxn``). The defaults are
    the common values; chosen on random vectors: bench/bench_random_arrivals.py,
    bench/screen_random_arrivals.py, docs/stragglar.md section 11."""
    M: int
    trees: bool = False
    pxn: bool = False
    tail: bool = True
    spread: bool = True
    leaves: float = 0.0
    rows: int = 3
    inline: bool = True
    mute: bool = True
    early: bool = True
    relay: bool = True
    ahead: int = -1  # -1: the broadcast listed after the whole funnel
    first: bool = False
    rotate: int = 1
    pxn_first: int = 2
    settled: float = 1.0
    backnow: bool = False
    reduce_trees: bool = False


FUNNEL_CHOICES: tuple[Choice, ...] = (
    Choice(20),
    Choice(24, ahead=3, first=True),
    Choice(22, pxn=True, leaves=1.5),
    Choice(24),
    Choice(22, rows=2, ahead=3, first=True),
    Choice(26, ahead=3, first=True),
    Choice(22, ahead=3, first=True),
    Choice(20, ahead=3, first=True),
    Choice(24, tail=False, rotate=2),
    Choice(24, rotate=2),
    Choice(22, ahead=3, first=True, pxn_first=1),
    Choice(22, ahead=3, first=True, pxn_first=3),
    Choice(22, pxn=True, leaves=1.5, backnow=True))
# from TREE_NODES nodes on also these (the fully punctual nodes reduce by two binary trees instead of heading
# each rail's chain: funnel.construct's reduce_trees); where ``searched`` says no only the first is built
SCALE_CHOICES: tuple[Choice, ...] = (Choice(24, reduce_trees=True), Choice(28, reduce_trees=True))
TREE_NODES = 16


def funnel_candidate(n: int, arrivals: Arrivals, size: float, topology: Any, choice: Choice,
                     T: float) -> Schedule:
    """The funnel schedule (funnel.construct) of one of FUNNEL_CHOICES; T: funnel.rail_time, the unit of its
    leaf and settled windows."""
    c = choice
    return funnel.construct(n, arrivals, size, topology, c.M, trees=c.trees, pxn=c.pxn, tail=c.tail,
                            spread=c.spread, leaves=c.leaves * T, rows=c.rows, inline=c.inline, mute=c.mute,
                            early=c.early, relay=c.relay, ahead=c.ahead, first=c.first, rotate=c.rotate,
                            pxn_first=min(c.pxn_first, c.M), settled=c.settled * T,
                            backnow=c.backnow, reduce_trees=c.reduce_trees)


def funnel_choices(n: int, nodes: int) -> tuple[Choice, ...]:
    """The funnel candidates simulated for n GPUs in ``nodes`` nodes: FUNNEL_CHOICES, and SCALE_CHOICES from
    TREE_NODES nodes on; where ``searched`` says no, SCALE_CHOICES[0] alone."""
    if not searched(n, n // max(nodes, 1)):
        return SCALE_CHOICES[:1]
    return (*FUNNEL_CHOICES, *(SCALE_CHOICES if nodes >= TREE_NODES else ()))


def funnel_calls(n: int, arrivals: Arrivals, size: float, topology: Any,
                 times: np.ndarray) -> list[tuple[str, tuple[Any, ...]]]:
    """The funnel candidates of ``funnel_choices`` as calls of ``candidate_run``, in their order (``build``
    and choose.py fold them after their other candidates; ties keep the earlier)."""
    T = funnel.rail_time(topology, n, size)
    return [("funnel", (n, arrivals, size, topology, c, T, times))
            for c in funnel_choices(n, node_grid(topology, n).shape[0])]


def keep_fastest(s: Schedule, t: float, results: Iterable[tuple[float, Schedule]],
                 since: float = 0.0) -> tuple[Schedule, float]:
    """The first of ``s`` (completing at ``t``) and the (completion, schedule) ``results``, in order, that
    no later one beats by more than a relative 1e-12 after ``since``, the last arrival (``sooner``)."""
    for t_f, f in results:
        if sooner(t_f, t, since):
            s, t = f, t_f
    return s, t


def candidate_run(call: tuple[str, tuple[Any, ...]]) -> list[tuple[float, Schedule]]:
    """One candidate of ``build`` (run in this process or a worker's): ("funnel", (n, arrivals, size,
    topology, choice, T, times)) -> [(completion, the funnel schedule)]; ("waves", (n, arrivals, size,
    topology, M, tree, cutoff, times)) -> the waves schedule and its retimed copy, each with its
    completion; ("sync", (n, topology, size, times)) -> [(completion, the fastest synchronous schedule
    as clusterstraggler's form "synchronous")]."""
    kind, args = call
    if kind == "funnel":
        n, arrivals, size, topology, choice, T, times = args
        f = funnel_candidate(n, arrivals, size, topology, choice, T)
        return [(simulate(f, size, topology, times).completion_s, f)]
    if kind == "waves":
        n, arrivals, size, topology, M, tree, cutoff, times = args
        s = construct(n, arrivals, size, topology, M, 1, tree, cutoff)
        s = s.replace(meta={**s.meta, "cutoff_s": float(times.min()) if cutoff is None else cutoff})
        sim = simulate(s, size, topology, times)
        assert sim.start_s is not None
        again = retime(s, sim.start_s)  # the moves reordered by their simulated start, repacked
        again = again.replace(meta={**again.meta, "retimed": True})
        return [(sim.completion_s, s), (simulate(again, size, topology, times).completion_s, again)]
    if kind == "sync":
        n, topology, size, times = args
        sync = synchronous.fastest(n, topology, size, times)
        return [(sync.completion_s, sync.as_form("clusterstraggler", times))]
    raise ValueError(f"candidate_run: unknown kind {kind!r}")


SEARCH_MAX_GPUS = 256  # up to this many GPUs "auto" simulates several (M, broadcast) choices and keeps the best ...
SEARCH_MAX_SPREAD = 8 * SEARCH_MAX_GPUS  # ... and up to this many GPUs times GPUs per node (``searched``)


def searched(n: int, gpus_per_node: int) -> bool:
    """Whether "auto" searches, simulating several choices and keeping the fastest, on n GPUs in nodes of
    ``gpus_per_node`` G: up to SEARCH_MAX_GPUS GPUs and SEARCH_MAX_SPREAD n G. A candidate's moves grow as
    n G (every node spreads each block of every part to its G - 1 peers): two GB200 NVL72 racks on a rail
    fabric (144 GPUs, G = 72), one GPU 50 ms late, 1 GiB, took 97.6 s for its 13 funnel candidates, the
    late-GPU form winning; without the search 10.5 s, the same time after the arrival (2.663 ms at 5 ms
    late, 2.652 at 50). Nodes of at most 8 GPUs: up to SEARCH_MAX_GPUS GPUs, as before."""
    return n <= SEARCH_MAX_GPUS and n * gpus_per_node <= SEARCH_MAX_SPREAD


def searched_on(topology: Any, n: int) -> bool:
    """``searched`` for n GPUs in the nodes of ``topology`` (layout.node_grid)."""
    return searched(n, node_grid(topology, n).shape[1])


class _Waves:
    """One schedule under construction (module docstring)."""

    def __init__(self, grid: np.ndarray, times: np.ndarray, M: int, size: float, topology: Any,
                 tree: bool, cutoff: float | None = None) -> None:
        self.grid, self.M, self.times, self.tree = grid, M, times, tree
        self.N, self.G = grid.shape
        n = grid.size
        self.tl = Timeline(topology, self.G * M, times, size / (self.G * M))
        node = np.repeat(np.arange(self.N), self.G)
        ranks = grid.reshape(-1)
        same_node = np.repeat(grid, self.G, axis=0).reshape(-1)
        same_rail = np.repeat(grid.T, self.N, axis=0).reshape(-1)
        self.tl.prime(np.concatenate([np.repeat(ranks, self.G), np.repeat(grid.T.reshape(-1), self.N)]),
                      np.concatenate([same_node, same_rail]))
        self.node_of = np.empty(n, np.int64)
        self.node_of[ranks] = node
        t0 = float(times.min()) if cutoff is None else max(float(times.min()), cutoff)
        self.punctual = [r for r in range(n) if times[r] <= t0]  # the AllReduce before the passes waits for them
        self.late = sorted((r for r in range(n) if times[r] > t0), key=lambda r: (float(times[r]), r))
        self.passes = 0

    # ------------------------------------------------------------------ before the first late rank
    def pre(self) -> None:
        """Pipelined hierarchical AllReduce of the punctual ranks (module docstring, 1; prephase.py)."""
        present_allreduce(self.grid, set(self.punctual), self.M, self.tl.add)

    # ------------------------------------------------------------------ the late ranks
    def merge(self, run: int) -> None:
        """Rail passes until every late rank is in every unit (module docstring, 2); ``run`` units per run."""
        G, M, L = self.G, self.M, len(self.late)
        if not L:
            return
        q = [[0] * M for _ in range(G)]  # late ranks (in arrival order) already in each unit
        cursor = [0] * G
        count = [0] * G
        pipe = [0.0] * G  # when rail g can start its next run (the model)
        arr = [float(self.times[r]) for r in self.late]
        touched = [[0] * M for _ in range(G)]
        while True:
            busy = False
            for g in range(G):
                qs = q[g]
                u = cursor[g]
                for _ in range(M):
                    if qs[u] < L:
                        break
                    u = (u + 1) % M
                else:
                    continue
                busy = True
                w = 1
                while w < run and u + w < M and qs[u + w] == qs[u]:
                    w += 1
                q0 = qs[u]
                t_dec = max(pipe[g], self._ready(g, u, q0))
                q1 = q0 + 1  # the wave: late ranks arrived by t_dec (at least the next one)
                while q1 < L and (arr[q1] <= t_dec or arr[q1] <= arr[q0]):
                    q1 += 1
                pipe[g] = self._run(g, u, w, q0, q1, count[g])
                for x in range(u, u + w):
                    qs[x] = q1
                    touched[g][x] += 1
                cursor[g] = (u + w) % M
                count[g] += 1
            if not busy:
                break
        self.passes = max(max(t) for t in touched)

    def _holders(self, q: int) -> list[list[int]]:
        hold: list[list[int]] = [[] for _ in range(self.N)]
        for r in sorted(self.punctual + self.late[:q]):
            hold[int(self.node_of[r])].append(r)
        return hold

    def _ready(self, g: int, u: int, q: int) -> float:
        """When unit u of part g holds its state at the holders on rail g (the model)."""
        c = g * self.M + u
        hold = self._holders(q)
        t = 0.0
        for b in range(self.N):
            if hold[b]:
                hub = int(self.grid[b, g]) if int(self.grid[b, g]) in hold[b] else hold[b][0]
                t = max(t, self.tl.ready(hub, c))
        return t

    def _run(self, g: int, f: int, w: int, q0: int, q1: int, k: int) -> float:
        """Merge late ranks q0..q1-1 into units f..f+w-1 of part g; returns when rail g is free again."""
        tl, grid, N = self.tl, self.grid, self.N
        c = g * self.M + f
        hold = self._holders(q0)
        wave: list[list[int]] = [[] for _ in range(N)]
        for r in self.late[q0:q1]:
            wave[int(self.node_of[r])].append(r)
        active = [b for b in range(N) if hold[b] or wave[b]]
        rail = [int(grid[b, g]) for b in range(N)]
        i0 = len(tl.moves)
        # collectors: the rail-g GPU of a contributing node if it is a wave member or a holder (a holder's
        # copy of the state is not needed there: its node's other holders keep it, and the final sum
        # overwrites it), else a wave member
        x: dict[int, int] = {}
        for b in active:
            if wave[b]:
                x[b] = rail[b] if rail[b] in wave[b] or rail[b] in hold[b] else wave[b][k % len(wave[b])]
        keep = {b: [y for y in hold[b] if y != x.get(b)] for b in active}  # holders that keep the state
        if not any(keep.values()):  # the state must survive somewhere: one collector stays a wave member
            b = next(b for b in x if hold[b])
            x[b] = wave[b][0]
            keep[b] = hold[b]
        for b, xb in x.items():
            if xb in hold[b]:
                tl.add(wave[b][0], xb, c, w, False)  # the first member's units replace the state there
            for y in wave[b]:  # the wave's members in a node combine over NVLink
                if y != xb and not (xb in hold[b] and y == wave[b][0]):
                    tl.add(y, xb, c, w, True)

        def hub(b: int) -> int:
            return rail[b] if rail[b] in keep[b] else keep[b][(g + k) % len(keep[b])]

        d = 1 if k % 2 == 0 else -1
        pos = {b: (d * b) % N for b in active}
        contrib = sorted(x, key=lambda b: pos[b])
        if len(contrib) > 1:  # start after the largest gap: the shortest arc, so the next node has the state
            gaps = [(pos[contrib[(i + 1) % len(contrib)]] - pos[contrib[i]]) % N for i in range(len(contrib))]
            i = int(np.argmax(gaps))
            contrib = contrib[i + 1:] + contrib[:i + 1]
        for a, b in zip(contrib, contrib[1:]):  # the wave's sum along the rail
            tl.add(x[a], x[b], c, w, True)
        last = contrib[-1]
        seq = [b for b in ((last + d * h) % N for h in range(1, N)) if b in pos]
        final: dict[int, int] = {}
        nxt = next((i for i, b in enumerate(seq) if keep[b]), None)
        if keep[last] and x[last] == rail[last] and seq and seq[0] not in x and rail[seq[0]] in keep[seq[0]]:
            nb = seq[0]  # the wave's sum raw over the NIC into the next node's state, and into its own node's
            tl.add(x[last], hub(nb), c, w, True)
            tl.add(x[last], hub(last), c, w, True)
            final[last], final[nb] = hub(last), hub(nb)
            src, rest = hub(nb), seq[1:]
        elif keep[last]:
            tl.add(x[last], hub(last), c, w, True)
            final[last] = hub(last)
            src, rest = hub(last), seq
            if x[last] == rail[last] != hub(last):  # the final sum back to the rail GPU, which sends it on
                tl.add(hub(last), x[last], c, w, False)
                src = x[last]
        else:
            assert nxt is not None  # the punctual ranks keep the state somewhere
            nb = seq[nxt]
            tl.add(x[last], hub(nb), c, w, True)
            final[nb] = hub(nb)
            src, rest = hub(nb), seq[nxt + 1:] + [last] + seq[:nxt]
        recv = [x[b] if b in x and x[b] == rail[b] else (hub(b) if keep[b] else x[b]) for b in rest]
        if self.tree and len(rest) > 2:
            for p, ch in inorder_edges(len(rest), k % 2 == 1):
                tl.add(src if p < 0 else recv[p], recv[ch], c, w, False)
        else:
            prev = src
            for r in recv:
                tl.add(prev, r, c, w, False)
                prev = r
        final.update(zip(rest, recv))
        for b in active:  # spread over NVLink
            fb = final[b]
            for y in hold[b] + wave[b]:
                if y != fb and not (y == src and b == last):
                    tl.add(fb, y, c, w, False)
        nodes = self.node_of
        ends = [tl.end[i] for i in range(i0, len(tl.moves))
                if nodes[tl.moves[i][0]] != nodes[tl.moves[i][1]]]
        return min(ends) if ends else tl.end[-1]

    def schedule(self, n: int, meta: dict[str, object], name: str) -> Schedule:
        return timeline_schedule(self.tl, n, self.G * self.M, self.times, meta, name)


def construct(n: int, arrivals: Arrivals, size: float, topology: Any, M: int, run: int = 1,
              tree: bool = True, cutoff: float | None = None) -> Schedule:
    """One schedule for a given M (units per part), ``run`` (units per message), broadcast (tree or chain)
    and ``cutoff``: the late ranks arriving by then count as punctual (the first AllReduce waits for them)."""
    grid = node_grid(topology, n)
    times = arrival_vector(arrivals, n)
    plan = _Waves(grid, times, M, size, topology, tree, cutoff)
    plan.pre()
    plan.merge(run)
    meta: dict[str, object] = {"algorithm": "clusterstraggler", "form": "waves",
                               "late": [[r, float(times[r])] for r in plan.late], "punctual": len(plan.punctual),
                               "nodes": int(grid.shape[0]), "gpus_per_node": int(grid.shape[1]), "pipeline": M,
                               "broadcast": "two-tree" if tree else "chain", "passes": plan.passes,
                               "topology_name": topology.name}
    spec = getattr(topology, "spec", None)
    if spec is not None:
        meta["topology"] = spec
    return plan.schedule(n, meta, f"clusterstraggler_waves_n{n}_l{len(plan.late)}")


def build(n: int, arrivals: Arrivals = None, size: int | float | str | None = None, topology: Any = None,
          pipeline: int | str = "auto") -> Schedule:
    """Waves of late ranks on a cluster topology (module docstring). ``pipeline`` is M (units per part) or
    "auto". Where ``searched`` (up to SEARCH_MAX_GPUS GPUs in nodes of up to 8) the fastest simulated of:
    every cutoff (no late rank absorbed into the first AllReduce, or all up to one arrival time) with M = 32
    and chains, then at the best cutoff M = 16 with chains and with two trees, each also retimed
    (multi.retime: its moves reordered by their simulated start), the funnel form (funnel.py) for each of
    FUNNEL_CHOICES, and the fastest synchronous schedule (synchronous.fastest; form "synchronous") when it is
    faster still (from TREE_NODES nodes on also the funnel of each of SCALE_CHOICES); elsewhere the funnel
    of SCALE_CHOICES[0] alone (nodes of one GPU: the waves with M = 16, chains, nothing absorbed)."""
    grid = node_grid(topology, n)
    N, G = grid.shape
    if N < 2:
        raise CollsynthError("the waves form of clusterstraggler needs a topology with at least 2 nodes")
    s_bytes = DEFAULT_SIZE if size is None else float(parse_size(size) if isinstance(size, str) else size)
    if pipeline != "auto":
        if isinstance(pipeline, bool) or not isinstance(pipeline, (int, np.integer)) or pipeline < 1 \
                or G * int(pipeline) > MAX_CHUNKS:
            raise CollsynthError(f"--pipeline for clusterstraggler must be auto or an integer from 1 to "
                                 f"{MAX_CHUNKS // G}, got {pipeline!r}")
        return construct(n, arrivals, s_bytes, topology, int(pipeline), tree=False)
    if not searched(n, G):  # the funnel reducing by trees: the waves' passes are chains along the rails
        if G < 2:
            return construct(n, arrivals, s_bytes, topology, 16, tree=False)
        return funnel_candidate(n, arrivals, s_bytes, topology, funnel_choices(n, N)[0],
                                funnel.rail_time(topology, n, s_bytes))
    times = arrival_vector(arrivals, n)
    late = sorted(set(float(t) for t in times if t > times.min()))
    cuts = [("waves", (n, arrivals, s_bytes, topology, 32, False, cut, times)) for cut in [None, *late]]
    later = funnel_calls(n, arrivals, s_bytes, topology, times) if G >= 2 else []
    later.append(("sync", (n, topology, s_bytes, times)))  # when waiting for everyone is faster
    # the cutoffs first (the next two candidates take the best one's); the rest, independent, meanwhile
    results = imap_ordered(candidate_run, cuts + later)
    cands = chain.from_iterable(next(results) for _ in cuts)  # each cutoff's schedule and its retimed copy
    best_t, best_s = next(cands)
    last = float(times.max())
    best_s, best_t = keep_fastest(best_s, best_t, cands, last)
    cut = float(best_s.meta["cutoff_s"])  # type: ignore[arg-type]
    more = map_ordered(candidate_run, [("waves", (n, arrivals, s_bytes, topology, 16, tree, cut, times))
                                       for tree in (False, True)])
    best_s, best_t = keep_fastest(best_s, best_t, chain.from_iterable(more), last)
    # reduce toward the last rank's node (funnel.py)
    best_s, best_t = keep_fastest(best_s, best_t, (next(results)[0] for _ in later[:-1]), last)
    (t_sync, sync), = next(results)
    return sync if sooner(t_sync, best_t, last) else best_s
