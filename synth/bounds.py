"""Proven lower bounds on AllReduce completion time, for any topology and per-rank arrival times
(alpha-beta simulator model, gamma = 0; valid for every schedule the simulator accepts, whatever
ports it declares). docs/topologies.md ("Lower bounds") lists them; the cluster ones follow the brief's clusters.md
section 4.

Notation: s bytes per rank, a_r the arrival of rank r, t0 = min a_r, alpha_min a lower bound on the
start-up cost of any route (the cheapest GPU out-link, plus the cheapest switch-to-GPU link when it goes
through a switch). A *cut* S is one GPU, or one server node (its GPUs plus the switches that only its
GPUs reach, e.g. its NVSwitch); B_out(S) / B_in(S) is the bandwidth of the links leaving / entering S.
The simulator never pushes more than a link's bandwidth through it (a step's transfers share it, later
steps wait), so at most B bytes per second cross a cut of bandwidth B.

- ``per-gpu``: any AllReduce moves at least 2(n-1) s bytes between ranks (the one-way gossip bound,
  2n-2 messages per element; Patarasuk & Yuan, JPDC 2009), so some rank receives (and some sends) at
  least 2(n-1)/n s: T >= t0 + 2(n-1)/n s / min(max_r B_in(r), max_r B_out(r)).
- ``node-cut``: the same with the N server nodes as super-ranks (traffic inside a node is free here):
  T >= t0 + 2(N-1)/N s / min(max_k B_in(k), max_k B_out(k)); on N x G GPUs with one NIC of B_net each,
  2(N-1)/N s / (G B_net) (clusters.md section 4: 5.03 ms for 16 x 8 H100 at 1 GiB).
- ``late-out`` / ``late-in``: after rank r arrives, s bytes carrying its data must leave every cut S that
  holds r, and s bytes carrying the data of a rank q outside S must enter S (StragglAR, Devraj et al.,
  arXiv 2505.23523, per GPU; clusters.md section 4 per node):
  T >= a_r + alpha_min + s / B_out(S) for r in S, and T >= a_q + alpha_min + s / B_in(S) for q not in S.
- ``late-set``: the ranks A arriving at or after a time tau (not all ranks) and the rest R, merged into
  one party, must gossip each element: one-way gossip among |A| + 1 parties takes 2|A| messages per
  element (Harary & Schwenk 1974: order the messages by their end; before the first message after which
  a party c knows everything, every other party has sent; after it, every other party receives the
  message that completes it). Every such message involves a rank of A, so it starts at tau or later,
  and it leaves a GPU of A or enters a cut X that holds A's GPUs and no other GPU (we try the switches
  whose GPU neighbours are all in A, and the switches of A's nodes, and keep the smaller B_in):
  T >= tau + alpha_min + 2|A| s / (sum of B_out(r), r in A, + B_in(X)). For one late GPU that
  is s / B_gpu, no more than ``late-out``; for a whole late node of G GPUs, whose NVLink only reaches
  each other, 2 s / (B_nv + 2 B_net): 3.90 ms on H100 nodes at 1 GiB (``late-out``: 2.68 ms).
- ``late-gossip``: the ranks arriving at or after tau lie in k of the Q parties (the server nodes, or the
  GPUs themselves); every party must learn each of the k parties' late values, element by element (our
  argument, session of 2026-12-06, after the gossip count of Harary & Schwenk). Count the messages between
  parties that carry an element's late information: the first party to know all k values has them through
  a tree of messages from the k - 1 (or k) other holders, at least k - 1 messages, all ending by then;
  each of the other Q - 1 parties is made complete by a message of its own, which ends no earlier. So
  Q + k - 2 messages per element cross party boundaries, all after tau, through the parties'
  cuts: T >= tau + alpha_min + (Q + k - 2) s / min(sum B_in, sum B_out). With k = Q it is the node-cut
  bound; it beats ``late-out`` from k = 3 late nodes arriving together (three GPUs of three nodes at 8 x 8
  H100, 1 GiB: 9/8 of 2.68 ms, 3.02 ms).
- ``latency``: on a topology with several link classes the simulator gives each rank P = ``ports`` send
  slots (the sum over the classes) and a message lasts at least alpha_min, so information spreads at most
  (1+P)-fold per alpha_min. Combined with rank r's own data (our argument, session of 2026-12-06):
  T >= a_r + s / B_out(r) + ceil(log_{1+P} n) alpha_min. Proof: every element of r's buffer leaves r in
  some message; let D_e be the earliest end of a message out of r carrying element e, and E = max_e D_e.
  The messages achieving the D_e carry all s bytes; on each out-link of r the transfers of different
  steps do not overlap (link FIFO) and a step's k transfers on it run at most B/k each, so those ending by
  E need E >= a_r + alpha_min + s / B_out(r). For the e with D_e = E, at time E only r and the receivers
  of r's messages ending at E hold e (at most P, one per slot): at most 1 + P ranks. A message ending in
  (t, t + alpha_min] started by t, so it was sent by a rank that held e at t, and each of its P slots ends
  at most one message in such a window: the holders grow at most (1+P)-fold per alpha_min, and all n
  ranks need e: T >= E + (ceil(log_{1+P} n) - 1) alpha_min. With s -> 0 and r the first rank this is the
  gossip round count t0 + ceil(log_{1+P} n) alpha_min. (With one class a schedule may declare any number
  of ports, so the bound is r's ``late-out``.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from collsynth.synth.topology import Topology


@dataclass(frozen=True)
class Bound:
    """The largest of the bounds below for one setting: ``value_s`` (completion, from time 0) and the
    name and formula of the bound that gives it; ``terms`` holds every bound computed (name -> seconds)."""

    value_s: float
    after_last_arrival_s: float  # value_s - the last arrival
    kind: str  # per-gpu | node-cut | late-out | late-in | late-set | late-gossip | latency
    formula: str  # e.g. "t0 + 2(N-1)/N s / B_node"
    numbers: str  # the formula with the values put in
    terms: dict[str, float] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, object]:
        return {"bound_s": self.value_s, "bound_after_last_arrival_s": self.after_last_arrival_s,
                "kind": self.kind, "formula": self.formula, "numbers": self.numbers, "terms": dict(self.terms)}


def min_route_alpha(topology: Topology) -> float:
    """A lower bound on the alpha of every GPU-to-GPU route: its first link leaves a GPU; it either
    reaches the destination GPU directly or goes through a switch and ends with a switch-to-GPU link."""
    n = topology.nranks
    src, dst, a = topology.link_src, topology.link_dst, topology.link_alpha
    up = src < n
    direct = up & (dst < n)
    via = up & (dst >= n)
    down = (src >= n) & (dst < n)
    best = math.inf
    if direct.any():
        best = float(a[direct].min())
    if via.any() and down.any():
        best = min(best, float(a[via].min() + a[down].min()))
    return best if math.isfinite(best) else 0.0


def switch_neighbours(topology: Topology) -> tuple[np.ndarray, np.ndarray]:
    """(switch, gpu) for every link between a switch and a GPU, in either direction."""
    n, src, dst = topology.nranks, topology.link_src, topology.link_dst
    up, down = (src < n) & (dst >= n), (dst < n) & (src >= n)
    return np.concatenate([dst[up], src[down]]), np.concatenate([src[up], dst[down]])


def node_owner(topology: Topology) -> np.ndarray:
    """The server node of every vertex (GPUs and switches): a switch belongs to a node when all its GPU
    neighbours do (e.g. the node's NVSwitch), else -1."""
    n, nv = topology.nranks, topology.nnodes
    owner = np.full(nv, -1, np.int64)
    owner[:n] = topology.node_of
    sw, gpu = switch_neighbours(topology)
    if len(sw):
        g = topology.node_of[gpu]
        lo = np.full(nv, np.iinfo(np.int64).max, np.int64)
        hi = np.full(nv, -1, np.int64)
        np.minimum.at(lo, sw, g)
        np.maximum.at(hi, sw, g)
        mine = (hi >= 0) & (lo == hi)
        mine[:n] = False
        owner[mine] = lo[mine]
    return owner


def cut_bandwidths(topology: Topology) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(gpu_out, gpu_in, node_out, node_in): bandwidth leaving / entering each GPU and each server node.

    A node's cut holds its GPUs and every switch whose GPU neighbours all belong to that node."""
    n, N = topology.nranks, topology.node_count
    src, dst, bw = topology.link_src, topology.link_dst, topology.link_bw
    gpu_out = np.bincount(src[src < n], bw[src < n], minlength=n)
    gpu_in = np.bincount(dst[dst < n], bw[dst < n], minlength=n)
    owner = node_owner(topology)
    cross = owner[src] != owner[dst]
    out_m = cross & (owner[src] >= 0)
    in_m = cross & (owner[dst] >= 0)
    node_out = np.bincount(owner[src[out_m]], bw[out_m], minlength=N)
    node_in = np.bincount(owner[dst[in_m]], bw[in_m], minlength=N)
    return gpu_out, gpu_in, node_out, node_in


def _fmt(x: float) -> str:
    if x >= 1:
        return f"{x:.4g} s"
    if x >= 1e-3:
        return f"{x * 1e3:.4g} ms"
    return f"{x * 1e6:.4g} us"


def _rate(b: float) -> str:
    return f"{b / 1e9:.4g} GB/s"


LATE_SET_THRESHOLDS = 64  # the latest distinct arrival times tried by late_set_bound (bounded work)


def late_thresholds(arrivals: np.ndarray) -> np.ndarray:
    """The thresholds tau the late-set and late-gossip bounds try: the latest LATE_SET_THRESHOLDS distinct
    arrival times above the first."""
    return np.unique(arrivals)[1:][-LATE_SET_THRESHOLDS:]


def late_set_bound(topology: Topology, size: float, arrivals: np.ndarray, amin: float,
                   gpu_out: np.ndarray) -> tuple[float, str, str] | None:
    """The ``late-set`` bound (module docstring) at its best threshold among the latest arrival times:
    (seconds, kind, "formula||numbers"), or None when every rank arrives at the first arrival time."""
    n = topology.nranks
    src, dst, bw = topology.link_src, topology.link_dst, topology.link_bw
    sw, gpu = switch_neighbours(topology)
    nv = topology.nnodes
    has_gpu = np.bincount(sw, minlength=nv) > 0
    owner = node_owner(topology)
    switch = np.arange(nv) >= n
    times = late_thresholds(arrivals)
    best: tuple[float, str, str] | None = None
    for tau in times:
        late = arrivals >= tau
        # two cuts holding A's GPUs and no other GPU; any such cut is valid, the smaller B_in wins:
        # with the switches whose GPU neighbours are all in A, and with the switches of A's nodes
        strict = np.zeros(nv, bool)
        strict[:n] = late
        strict |= has_gpu & (np.bincount(sw, (~late[gpu]).astype(np.float64), minlength=nv) == 0)
        nodes = np.zeros(topology.node_count + 1, bool)  # the last entry stands for owner -1
        nodes[topology.node_of[late]] = True
        wide = np.zeros(nv, bool)
        wide[:n] = late
        wide |= switch & nodes[owner]
        b_in = min(float(bw[~x[src] & x[dst]].sum()) for x in (strict, wide))
        k = int(late.sum())
        cap = float(gpu_out[late].sum()) + b_in
        if cap <= 0:
            continue
        v = float(tau) + amin + 2 * k * size / cap
        if best is None or v > best[0]:
            best = (v, "late-set", f"a_A + alpha + 2|A| s / (B_out(A's GPUs) + B_in(A)), |A| = {k}||"
                    f"{_fmt(float(tau))} + {_fmt(amin)} + 2*{k} * {size:.6g} B / ({_rate(cap - b_in)} + "
                    f"{_rate(b_in)})")
    return best


def late_gossip_bound(size: float, arrivals: np.ndarray, amin: float, party: np.ndarray, cap_in: np.ndarray,
                      cap_out: np.ndarray, what: str) -> tuple[float, str, str] | None:
    """The ``late-gossip`` bound (module docstring) at its best threshold among the latest arrival times,
    for the parties ``party[r]`` (every rank's node, or the ranks themselves) with the bandwidths into and
    out of each (``cap_in``, ``cap_out``): (seconds, kind, "formula||numbers"), or None when every rank
    arrives at the first arrival time."""
    Q = len(cap_in)
    cap = min(float(cap_in.sum()), float(cap_out.sum()))
    if Q < 2 or cap <= 0:
        return None
    best: tuple[float, str, str] | None = None
    for tau in late_thresholds(arrivals):
        k = len(np.unique(party[arrivals >= tau]))
        v = float(tau) + amin + (Q + k - 2) * size / cap
        if best is None or v > best[0]:
            best = (v, "late-gossip", f"tau + alpha + (Q + k - 2) s / B_all, Q = {Q} {what}s, k = {k} holding ranks "
                    f"arriving at or after tau||{_fmt(float(tau))} + {_fmt(amin)} + {Q + k - 2} * {size:.6g} B / "
                    f"{_rate(cap)}")
    return best


def allreduce_bound(topology: Topology, size: float, arrivals: Sequence[float] | np.ndarray | None = None) -> Bound:
    """The largest proven lower bound (module docstring) on the completion of an AllReduce of ``size``
    bytes per rank on ``topology`` with per-rank ``arrivals`` (seconds, default all 0)."""
    n = topology.nranks
    s = float(size)
    a = np.zeros(n) if arrivals is None else np.asarray(arrivals, np.float64)
    t0, last = float(a.min()), float(a.max())
    if t0 > 0:  # counted from the first arrival (1.7e9 s timestamps leave a microsecond no digits), given back after
        rel = allreduce_bound(topology, s, a - t0)
        return Bound(rel.value_s + t0, rel.after_last_arrival_s, rel.kind, rel.formula,
                     f"{rel.numbers}, times from the first arrival at {_fmt(t0)}",
                     {k: v + t0 for k, v in rel.terms.items()})
    amin = min_route_alpha(topology)
    gpu_out, gpu_in, node_out, node_in = cut_bandwidths(topology)
    cands: list[tuple[float, str, str]] = []
    # per-GPU (gossip) bound
    b = min(float(gpu_in.max()), float(gpu_out.max()))
    cands.append((t0 + 2 * (n - 1) / n * s / b, "per-gpu",
                  f"t0 + 2(n-1)/n s / B_gpu||{_fmt(t0)} + 2*{n - 1}/{n} * {s:.6g} B / {_rate(b)}"))
    # node cut (super-ranks)
    N = topology.node_count
    if N > 1:
        bn = min(float(node_in.max()), float(node_out.max()))
        cands.append((t0 + 2 * (N - 1) / N * s / bn, "node-cut",
                      f"t0 + 2(N-1)/N s / B_node||{_fmt(t0)} + 2*{N - 1}/{N} * {s:.6g} B / {_rate(bn)}"))
    # late bounds per GPU: out after its own arrival, in after the latest other arrival
    order = np.argsort(a)
    top, second = int(order[-1]), (int(order[-2]) if n > 1 else int(order[-1]))
    other_last = np.where(np.arange(n) == top, a[second], a[top])  # latest arrival among the others
    out_t = a + amin + s / gpu_out
    in_t = other_last + amin + s / gpu_in
    r = int(np.argmax(out_t))
    cands.append((float(out_t[r]), "late-out",
                  f"a_r + alpha + s / B_out(r), r = {r}||{_fmt(a[r])} + {_fmt(amin)} + {s:.6g} B / "
                  f"{_rate(gpu_out[r])}"))
    r = int(np.argmax(in_t))
    cands.append((float(in_t[r]), "late-in",
                  f"max other a_q + alpha + s / B_in(r), r = {r}||{_fmt(other_last[r])} + {_fmt(amin)} + "
                  f"{s:.6g} B / {_rate(gpu_in[r])}"))
    if N > 1:
        node_last = np.full(N, -np.inf)
        np.maximum.at(node_last, topology.node_of, a)
        srt = np.sort(node_last)
        others = np.where(node_last == srt[-1], srt[-2], srt[-1])  # latest arrival outside each node
        k = int(np.argmax(node_last + s / node_out))
        cands.append((float(node_last[k] + amin + s / node_out[k]), "late-out",
                      f"last arrival in node k + alpha + s / B_out(node k), k = {k}||{_fmt(node_last[k])} + "
                      f"{_fmt(amin)} + {s:.6g} B / {_rate(node_out[k])}"))
        k = int(np.argmax(others + s / node_in))
        cands.append((float(others[k] + amin + s / node_in[k]), "late-in",
                      f"last arrival outside node k + alpha + s / B_in(node k), k = {k}||{_fmt(others[k])} + "
                      f"{_fmt(amin)} + {s:.6g} B / {_rate(node_in[k])}"))
    late_set = late_set_bound(topology, s, a, amin, gpu_out)
    if late_set is not None:
        cands.append(late_set)
    gossips = [late_gossip_bound(s, a, amin, np.arange(n), gpu_in, gpu_out, "GPU")]
    if N > 1:
        gossips.append(late_gossip_bound(s, a, amin, topology.node_of, node_in, node_out, "node"))
    cands += [g for g in gossips if g is not None]
    if len(topology.classes) > 1 and n > 1:
        P = topology.ports
        rounds = math.ceil(math.log(n) / math.log(1 + P) - 1e-12)
        spread = a + s / gpu_out + rounds * amin
        r = int(np.argmax(spread))
        cands.append((float(spread[r]), "latency",
                      f"a_r + s / B_out(r) + ceil(log_(1+P) n) alpha, r = {r}, P = {P}||{_fmt(a[r])} + "
                      f"{s:.6g} B / {_rate(gpu_out[r])} + {rounds} * {_fmt(amin)}"))
    terms: dict[str, float] = {}
    for v, kind, _ in cands:
        terms[kind] = max(terms.get(kind, -math.inf), v)
    v, kind, text = max(cands, key=lambda c: c[0])
    formula, numbers = text.split("||")
    return Bound(v, v - last, kind, formula, numbers, terms)


def lower_bound(n: int, size: float, topology: Topology, arrivals: Sequence[float]) -> float:
    """Seconds from time 0 before which no AllReduce can finish (``allreduce_bound(...).value_s``)."""
    if topology.nranks != n:
        raise ValueError(f"topology has {topology.nranks} GPUs, not {n}")
    return allreduce_bound(topology, size, arrivals).value_s
