"""About the memory and time of emitting a schedule in each format, before emitting it (issue 13, Scale).

``emit`` (backends/__init__.py) and ``synth --format`` check this estimate against the budget
(budget.py: ``--max-memory``, ``--max-time``) before any lowering, and refuse in one line naming the
largest size that fits. The models are upper-bound style, per transfer of the schedule, measured with
bench/bench_emit.py (direct, ring, rhd and StragglAR at 16 to 256 ranks, one loaded core):

- msccl-xml: lowering (lower.py), dependencies (deps.py), rendering and the independent check of the
  text (check.py) handle each piece of a transfer a fixed number of times: about 0.5 ms and 4 KiB per
  unit, a unit being a transfer plus 1/16 per chunk it moves (multi-chunk transfers split into pieces),
  times ``--instances``.
- mscclpp-plan: about 7 plan ops per transfer (put, signal, wait, reduce, flush ...); the symbolic
  execution that checks the plan (mscclpp/execute.py) keeps vector clocks over every actor (thread
  blocks, callers, and the proxies of port channels that need an entry: those that write LL packets,
  exec_proxies.py): about as many clocks as actors (proxies included) are alive at once (the signals in
  flight, the proxy requests not yet settled), of 2-byte entries. So about 2.4 KiB per op, 22 KiB per
  thread block and 5 bytes x A x E (A actors, E clock entries), and (90 us + 2.5 ns x E) per op
  (measured with bench/bench_emit.py up to 256 GPUs of h100-cluster). A rank needs at least two thread
  blocks per 8 peers (sending and receiving) and one per 64 ops (of its transfers: the average rank's,
  since the total counts); a schedule over several nodes 2-2.6 port channels per thread block (3
  counted).
- nccl-cuda: one grouped send/receive list per step: about 0.1 ms and 2 KiB per transfer.

The text written is smaller than the peak (``text_bytes``, for the files a family emit holds until it writes
its folder): at most 512 bytes per msccl-xml unit and 128 bytes per plan op (measured: 290-340 bytes per
transfer in XML, 610-650 in plans, for StragglAR and clusterstraggler schedules).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from collsynth import budget
from collsynth.backends.layout import nodes_of
from collsynth.budget import Work
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.estimate import size_knobs, work

XML_SECONDS_PER_UNIT = 5e-4
XML_BYTES_PER_UNIT = 4096
PLAN_OPS_PER_TRANSFER = 7
PLAN_SECONDS_PER_OP = 9e-5
PLAN_SECONDS_PER_OP_ACTOR = 2.5e-9
PLAN_BYTES_PER_OP = 2400
PLAN_BYTES_PER_TB = 22 * 1024
PLAN_BYTES_PER_ACTOR_PAIR = 5
PLAN_PORTS_PER_TB = 3
XML_TEXT_BYTES_PER_UNIT = 512
PLAN_TEXT_BYTES_PER_OP = 128
CUDA_SECONDS_PER_TRANSFER = 1e-4
CUDA_BYTES_PER_TRANSFER = 2048
ESTIMATED = ("msccl-xml", "mscclpp-plan", "nccl-cuda")


@dataclass(frozen=True)
class Shape:
    """What the estimates read of a schedule: ranks, transfers, chunk moves, the most transfers one rank
    sends plus receives, and the most peers one rank has in one direction, connected pairs, and nodes."""

    nranks: int
    transfers: int
    moves: int
    per_rank: int
    peers: int
    pairs: int
    nodes: int = 1


def shape_of(s: Any) -> Shape:
    """The Shape of a Schedule (a few numpy passes over its transfer columns)."""
    n = int(s.nranks)
    try:
        nodes = len(set(nodes_of(s, None)))
    except CollsynthError:  # a gpus_per_node the schedule records that does not fit: the emitter that reads it says so
        nodes = 1
    if not s.ntransfers:
        return Shape(n, 0, 0, 0, 0, 0, nodes)
    src, dst = s.src.astype(np.int64), s.dst.astype(np.int64)
    per = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    pair = np.unique(src * n + dst)
    peers = np.maximum(np.bincount(pair // n, minlength=n), np.bincount(pair % n, minlength=n))
    return Shape(n, int(s.ntransfers), int(s.count.sum()), int(per.max()), int(peers.max()), len(pair), nodes)


def peers_of(name: str, n: int) -> int:
    """The most peers one rank of algorithm ``name`` has in one direction: ring and multiring one (per
    ring), rhd one per round (log2 n + 1 with the non-power-of-two fold), tree four (two trees); any other n - 1."""
    if name == "ring":
        return 1
    if name == "multiring":
        return 4
    if name == "rhd":
        return max((n - 1).bit_length(), 1) + 1
    if name == "tree":
        return 4
    return n - 1


def shape_of_work(w: Work, peers: int | None = None) -> Shape:
    """The Shape of a schedule not built yet (synth.algorithms.estimate): transfers spread about evenly, at most
    ``peers`` per rank and direction (default: as many as transfers allow; upper-bound style)."""
    n = max(int(w.nranks), 2)
    per = -(-2 * int(w.transfers) // n)
    per += per // 8  # some ranks carry more than the average (a tree's inner ranks)
    p = min(n - 1, per, n - 1 if peers is None else max(int(peers), 1))
    return Shape(n, int(w.transfers), int(w.moves), per, p, min(n * p, int(w.transfers)))


def _xml_units(shape: Shape, options: Mapping[str, Any]) -> float:
    """msccl-xml's units (module docstring): a transfer plus 1/16 per chunk moved, times ``--instances``."""
    inst = options.get("instances", 1)
    inst = inst if isinstance(inst, int) and not isinstance(inst, bool) and inst >= 1 else 1
    return (shape.transfers + shape.moves / 16) * inst


def cost(fmt: str, shape: Shape, options: Mapping[str, Any] | None = None) -> tuple[float, float]:
    """About (peak bytes, seconds) of emitting a schedule of this shape in ``fmt`` (module docstring);
    (0, 0) for the formats that read folders."""
    options = options or {}
    if fmt == "msccl-xml":
        units = _xml_units(shape, options)
        return XML_BYTES_PER_UNIT * units, XML_SECONDS_PER_UNIT * units
    if fmt == "mscclpp-plan":
        n = max(shape.nranks, 1)
        ops = PLAN_OPS_PER_TRANSFER * shape.transfers
        mean = -(-2 * shape.transfers // n)  # a rank's sends plus receives, on average (the total counts)
        tbs = n * max(2 * -(-shape.peers // 8), -(-PLAN_OPS_PER_TRANSFER * mean // (2 * 64)), 1)
        ports = PLAN_PORTS_PER_TB * tbs if shape.nodes > 1 else 0  # a proxy per port channel
        actors = tbs + ports + n  # and the caller of each rank
        # clock entries: the emitter's proxies need none (one pusher, one waiter: exec_proxies.py) but those
        # that write LL packets (about half of them: all counted)
        entries = tbs + n + (ports if options.get("proto") == "LL" else 0)
        nbytes = ops * PLAN_BYTES_PER_OP + tbs * PLAN_BYTES_PER_TB + PLAN_BYTES_PER_ACTOR_PAIR * actors * entries
        return nbytes, ops * (PLAN_SECONDS_PER_OP + PLAN_SECONDS_PER_OP_ACTOR * entries)
    if fmt == "nccl-cuda":
        return CUDA_BYTES_PER_TRANSFER * shape.transfers, CUDA_SECONDS_PER_TRANSFER * shape.transfers
    return 0.0, 0.0


def text_bytes(fmt: str, shape: Shape, options: Mapping[str, Any] | None = None) -> float:
    """About the bytes of the text ``fmt`` writes for a schedule of this shape (upper-bound style; module
    docstring); 0 for the folder formats."""
    if fmt == "msccl-xml":
        return XML_TEXT_BYTES_PER_UNIT * _xml_units(shape, options or {})
    if fmt == "mscclpp-plan":
        return PLAN_TEXT_BYTES_PER_OP * PLAN_OPS_PER_TRANSFER * shape.transfers
    return 0.0


def _fits(fmt: str, shape: Shape, options: Mapping[str, Any] | None) -> bool:
    nbytes, seconds = cost(fmt, shape, options)
    return nbytes <= budget.max_memory() and seconds <= budget.max_seconds()


def _scaled(shape: Shape, t: int) -> Shape:
    """``shape`` with t transfers, the other counts scaled alike (at least what one transfer needs)."""
    f = t / max(shape.transfers, 1)
    return dataclasses.replace(shape, transfers=t, moves=max(int(shape.moves * f), t),
                               per_rank=max(int(shape.per_rank * f), min(shape.per_rank, 2)),
                               pairs=max(min(int(shape.pairs * f), t), min(shape.pairs, 1)))


def largest_transfers(fmt: str, shape: Shape, options: Mapping[str, Any] | None = None) -> int:
    """The most transfers (other counts scaled alike) whose emit fits the budget; 0 if none."""
    lo, hi = 0, max(shape.transfers, 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fits(fmt, _scaled(shape, mid), options):
            lo = mid
        else:
            hi = mid - 1
    return lo


def check_emit(fmt: str, schedule: Any, options: Mapping[str, Any] | None = None, what: str = "") -> None:
    """Refuse (CollsynthError, exit 2) emitting ``schedule`` in ``fmt`` when the estimate exceeds the memory
    or the time budget, naming the most transfers that fit."""
    if fmt not in ESTIMATED:
        return
    shape = shape_of(schedule)
    nbytes, seconds = cost(fmt, shape, options)
    if nbytes <= budget.max_memory() and seconds <= budget.max_seconds():
        return
    what = what or (f"emitting {schedule.name or 'the schedule'} as {fmt} ({shape.nranks} ranks, "
                    f"{shape.transfers} transfers)")
    fit = largest_transfers(fmt, shape, options)
    largest = f"about {fit} transfers on {shape.nranks} ranks" if fit else ""
    if nbytes > budget.max_memory():
        budget.check(nbytes, what, largest=largest)
    budget.check_seconds(seconds, what, largest=largest)


def check_synth_emit(fmt: str, name: str, n: int, collective: str = "allreduce",
                     params: Mapping[str, Any] | None = None, options: Mapping[str, Any] | None = None,
                     nodes: int = 1) -> None:
    """Before building: refuse ``synth -a name -n n --format fmt`` when building, verifying and emitting
    the schedule (synth.algorithms.estimate plus ``cost``) exceeds the budget, naming the largest n. On
    several ``nodes`` only the build is estimated here: the schedule's shape follows the topology (rings per
    rail, blocks per part) more than the build's estimate knows (clusterstraggler at 16 x 8: 2.6 times the
    transfers and 10 times the peers of the schedule built), so the emit is estimated on the built schedule
    (``check_emit``, before any lowering)."""
    if fmt not in ESTIMATED:
        return

    def job(x: int, always: bool = False) -> Work:
        w = work(name, x, collective, params, always=always)
        if nodes > 1:
            return w
        nbytes, seconds = cost(fmt, shape_of_work(w, peers_of(name, x)), options)
        return dataclasses.replace(w, search_s=w.search_s + seconds, extra_bytes=max(w.extra_bytes, int(nbytes)))

    knobs = size_knobs([params or {}])
    instances = (options or {}).get("instances", 1)
    if isinstance(instances, int) and instances > 1:
        knobs.append(f"--instances {instances}")
    budget.check_work(job, n, f"synth -a {name} -n {n} --format {fmt}", monotone=lambda x: job(x, always=True),
                      knobs=knobs)


__all__ = ["ESTIMATED", "Shape", "check_emit", "check_synth_emit", "cost", "largest_transfers", "peers_of", "shape_of",
           "shape_of_work", "text_bytes"]
