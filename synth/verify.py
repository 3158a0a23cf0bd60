"""Symbolic, exact verification of a Schedule.

Every (rank, chunk) location holds the set of ranks whose contribution it contains, as a numpy bit
set (one uint64 word per 64 ranks), plus a "tainted" flag for a value that is wrong whatever the data:
a contribution added twice (double counted) or data that was never defined (AllGather outputs before
they are written). Steps are applied with the IR's semantics (synth/ir.py): all reads first, then
copies overwrite and reduces accumulate. Checks, reported as the first violation found:

- ranges: ranks in 0..n-1, src != dst, chunk runs inside 0..nchunks-1, count >= 1;
- ports: per step a rank sends at most p and receives at most p messages (p = schedule.ports unless
  given); with a topology (given, or recorded in the schedule's meta["topology"] as a spec, see
  synth.topology.topology_from_spec) also per link class: at most class_ports[c] sends whose first hop
  has class c and as many receives whose last hop has class c (docs/topologies.md);
- hazards: a copy's destination must be neither read nor written by another transfer of the same
  step; otherwise that location, and what the reader delivers, is garbage (a race);
- the collective's postcondition: AllReduce, every location holds every contribution exactly once;
  ReduceScatter, each chunk's owner does; AllGather, every rank holds every owner's chunk. A double
  count, race or undefined value is reported with the step and transfer that produced it when it reaches
  a location the postcondition reads (one that is overwritten later is harmless, as in a real run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collsynth import budget, progress
from collsynth.errors import CollsynthError
from collsynth.synth.composition import verify_composed
from collsynth.synth.ir import Schedule, as_schedule
from collsynth.synth.topology import Topology, topology_for, topology_from_spec
from collsynth.units import int_count

_UNDEF, _DOUBLE, _RACE = 0, 1, 2
FLAT_BYTES = 256 * 2**20  # above this, a composed schedule is verified by composition (method="auto")
LARGE_SCHEDULE = 500_000  # transfers from which verifying takes about a second (a progress line is shown)


@dataclass(frozen=True)
class Violation:
    kind: str  # range | ports | hazard | phase | missing | double-count | undefined | extra | composition
    step: int | None
    index: int | None  # transfer index into the schedule's columns
    message: str


@dataclass(frozen=True)
class VerifyReport:
    ok: bool
    message: str
    violation: Violation | None = None
    stats: dict[str, Any] = field(default_factory=dict)


class VerificationError(CollsynthError):
    """A schedule that does not compute its collective; ``report`` says where it breaks."""

    def __init__(self, report: VerifyReport, source: str | None = None) -> None:
        super().__init__(report.message if source is None else
                         f"{source} does not verify ({report.message}); fix the schedule first")
        self.report = report


def _describe(s: Schedule, i: int) -> str:
    op = "reduce" if s.reduce[i] else "copy"
    c, n = int(s.chunk[i]), int(s.count[i])
    chunks = f"chunk {c}" if n == 1 else f"chunks {c}..{c + n - 1}"
    return f"step {int(s.step[i])}, transfer #{i} ({int(s.src[i])}->{int(s.dst[i])} {chunks} {op})"


def _fail(kind: str, s: Schedule, i: int | None, what: str) -> VerifyReport:
    where = _describe(s, i) if i is not None else ""
    msg = f"{where}: {what}" if where else what
    step = int(s.step[i]) if i is not None else None
    return VerifyReport(False, f"FAIL {msg}", Violation(kind, step, i, msg))


def _check_ranges(s: Schedule) -> VerifyReport | None:
    n, C = s.nranks, s.nchunks
    bad = ((s.src < 0) | (s.src >= n) | (s.dst < 0) | (s.dst >= n) | (s.src == s.dst)
           | (s.count < 1) | (s.chunk < 0) | (s.chunk + s.count > C))
    if bad.any():
        i = int(np.argmax(bad))
        src, dst, c, k = int(s.src[i]), int(s.dst[i]), int(s.chunk[i]), int(s.count[i])
        if not (0 <= src < n and 0 <= dst < n):
            what = f"rank out of range (ranks are 0..{n - 1})"
        elif src == dst:
            what = "a rank sends to itself"
        elif k < 1:
            what = f"count {k} (must be >= 1)"
        else:
            what = f"chunk run {c}..{c + k - 1} outside 0..{C - 1}"
        return _fail("range", s, i, what)
    for ph in s.phases:
        if any(not 0 <= r < n for r in ph.waits_for):
            return VerifyReport(False, f"FAIL phase {ph.name!r} waits for a rank outside 0..{n - 1}",
                                Violation("phase", None, None, f"phase {ph.name!r} names an unknown rank"))
    return None


def _check_ports(s: Schedule, p: int) -> VerifyReport | None:
    """First transfer (in step order) that exceeds p sends or p receives for its rank in its step."""
    for col, what in ((s.src, "sends"), (s.dst, "receives")):
        key = s.step * s.nranks + col
        counts = np.bincount(key, minlength=s.nsteps * s.nranks)
        over = counts[key] > p
        if over.any():
            # the (p+1)-th message of the first overloaded (step, rank)
            first = int(np.argmax(over))
            same = np.flatnonzero(key == key[first])
            i = int(same[p])
            r = int(col[i])
            return _fail("ports", s, i, f"rank {r} {what} {int(counts[key[first]])} messages in one step "
                                        f"(port limit {p})")
    return None


def _check_class_ports(s: Schedule, topo: Topology) -> VerifyReport | None:
    """First transfer (in step order) beyond its rank's port limit of the link class it uses: the class of
    the route's first hop for the sender, of its last hop for the receiver (Topology.route_classes)."""
    if topo.nranks != s.nranks:
        raise CollsynthError(f"topology {topo.name!r} has {topo.nranks} GPUs but the schedule has {s.nranks} "
                             f"ranks: use a topology with {s.nranks} GPUs")
    if not s.ntransfers:
        return None
    K = len(topo.classes)
    cap = np.array([topo.class_ports[c] for c in topo.classes], np.int64)
    first, last = topo.route_classes(s.src, s.dst)
    best: tuple[int, int, str, int, int] | None = None  # (transfer, rank, what, count, class)
    for col, cls, what in ((s.src, first, "sends"), (s.dst, last, "receives")):
        key = (s.step * s.nranks + col) * K + cls
        counts = np.bincount(key, minlength=s.nsteps * s.nranks * K)
        over = counts[key] > cap[cls]
        if over.any():
            j = int(np.argmax(over))
            c = int(cls[j])
            i = int(np.flatnonzero(key == key[j])[cap[c]])  # the (limit+1)-th message of that port
            if best is None or i < best[0]:
                best = (i, int(col[i]), what, int(counts[key[j]]), c)
    if best is None:
        return None
    i, r, what, k, c = best
    name = topo.classes[c]
    return _fail("ports", s, i, f"rank {r} {what} {k} messages through its {name} port in one step "
                                f"({name} port limit {int(cap[c])} on topology {topo.name})")


def class_port_violation(s: Schedule, topology: Topology) -> str | None:
    """The first per-class port violation of ``s`` on ``topology`` (a message), or None when it fits."""
    bad = _check_ranges(s) or _check_class_ports(s, topology)
    return None if bad is None else bad.message


def ports_travel(topology: Topology) -> bool:
    """Whether a schedule built for ``topology`` records it (synth.registry), so that verifying the schedule
    enforces its per-class ports: a topology of several nodes or several link classes."""
    return topology.node_count > 1 or len(topology.classes) > 1


def record_topology(s: Schedule, topology: Topology) -> Schedule:
    """Record ``topology`` (its spec) in ``s.meta["topology"]`` so that verifying ``s`` later, e.g.
    `collsynth verify FILE`, enforces the topology's per-class ports again; returns ``s``."""
    if topology.spec is None:
        raise CollsynthError(f"topology {topology.name!r} has no spec to record; build it with make_topology "
                             f"or cluster_topology")
    s.meta["topology"] = topology.spec
    return s


def schedule_topology(s: Schedule, alpha: Any = None, bandwidth: Any = None) -> Topology | None:
    """The topology a schedule records in meta["topology"] (a spec), or None; ``alpha`` and ``bandwidth``
    override its recorded values (topology_from_spec)."""
    spec = s.meta.get("topology")
    if spec is None:
        return None
    where = f"schedule {s.name or s.collective}: its meta \"topology\""
    if not isinstance(spec, dict):
        raise CollsynthError(f"{where} must be a topology spec object")
    try:
        topology = topology_from_spec(spec, alpha, bandwidth)
    except CollsynthError as e:  # the spec's fields read like options ("--alpha ..."): say where they came from
        raise CollsynthError(f"{where} cannot be rebuilt ({e}): fix it or delete it") from None
    if topology.nranks != s.nranks:
        raise CollsynthError(f"{where} has {topology.nranks} GPUs but the schedule has {s.nranks} ranks: fix it or "
                             "delete it")
    return topology


def _races(ustep: np.ndarray, rd: np.ndarray, wr: np.ndarray, red: np.ndarray, uidx: np.ndarray,
           nloc: int) -> tuple[np.ndarray, np.ndarray]:
    """Copy units whose destination another unit of the same step reads or writes, and the transfer
    to blame for each (the copy itself)."""
    copy = ~red
    racy = np.zeros(len(rd), np.bool_)
    if not copy.any():
        return racy, uidx
    wkey = ustep * nloc + wr
    rkey = ustep * nloc + rd
    ws = np.sort(wkey)
    ck = wkey[copy]
    nwrites = np.searchsorted(ws, ck, side="right") - np.searchsorted(ws, ck, side="left")
    rs = np.sort(rkey)
    pos = np.minimum(np.searchsorted(rs, ck), len(rs) - 1)
    clash = (nwrites > 1) | (rs[pos] == ck)
    racy[np.flatnonzero(copy)[clash]] = True
    return racy, uidx


def _reduce_rounds(w: np.ndarray) -> list[np.ndarray]:
    """Split reduce units into rounds with distinct destinations (sequential accumulation): round k holds
    the k-th unit (in order) of every destination, sorted by destination. One sort for all rounds (a
    round-by-round np.unique cost O(m log m) per round: seconds for direct on 1000 ranks)."""
    m = len(w)
    if m == 0:
        return []
    order = np.argsort(w, kind="stable")
    ws = w[order]
    new = np.ones(m, np.bool_)
    new[1:] = ws[1:] != ws[:-1]
    first = np.flatnonzero(new)
    occ = np.empty(m, np.int64)
    occ[order] = np.arange(m) - np.repeat(first, np.diff(np.append(first, m)))
    by_round = np.lexsort((w, occ))  # by occurrence, then destination
    counts = np.bincount(occ)
    return np.split(by_round, np.cumsum(counts)[:-1])


def verify(schedule: Schedule, ports: int | None = None, *, method: str = "auto",
           topology: Topology | str | None = None) -> VerifyReport:
    """Prove ``schedule`` computes its collective, or return the first violation.

    ``topology`` (default: the one recorded in the schedule's meta, if any) adds the per-class port
    limits (docs/topologies.md).

    ``method``: "flat" (the bit-set execution above), "composed" (a composed schedule: synth.composition,
    docs/cluster-algorithms.md; flat when the schedule is not exactly its recorded composition) or
    "auto" (composed when the flat bit sets would exceed FLAT_BYTES)."""
    s = as_schedule(schedule, "verify")
    if method not in ("auto", "flat", "composed"):
        raise CollsynthError(f"verify method {method!r}: use auto, flat or composed")
    if ports is not None:
        ports = int_count(ports, 1, "ports (send and receive slots per rank and step)")
    topo = schedule_topology(s) if topology is None else topology_for(topology, s.nranks)
    if topo is not None:
        bad = _check_ranges(s) or _check_class_ports(s, topo)
        if bad:
            return bad
        report = _verify(s, ports, method)
        if not report.ok:
            return report
        per = ", ".join(f"{c} {k}" for c, k in topo.class_ports.items())
        return VerifyReport(True, f"{report.message}; per link class ({per}) on topology {topo.name}", None,
                            {**report.stats, "topology": topo.name, "class_ports": dict(topo.class_ports)})
    return _verify(s, ports, method)


def _verify(s: Schedule, ports: int | None, method: str) -> VerifyReport:
    """verify without the per-class port check."""
    p = s.ports if ports is None else ports
    if method == "composed" or (method == "auto" and flat_bytes(s) > FLAT_BYTES and "composition" in s.meta):
        done = _verify_composed(s, p)
        if done is not None:
            return done
    if s.ntransfers >= LARGE_SCHEDULE:
        progress.note(f"verifying {s.name or s.collective}: {s.ntransfers} transfers")
    moved = int(np.clip(s.count, 0, None).sum()) if s.ntransfers else 0
    what = (f"verifying {s.name or s.collective} ({s.nranks} ranks, {s.nchunks} chunks, {s.nsteps} steps, "
            f"{moved} chunk moves)")
    budget.check(budget.verify_bytes(s.nranks, s.nchunks, s.nsteps, s.ntransfers, moved), what)
    budget.check_seconds(budget.Work(s.nranks, s.nchunks, s.nsteps, s.ntransfers, moved).seconds(), what)
    bad = _check_ranges(s)
    if bad:
        return bad
    n, C = s.nranks, s.nchunks
    W = (n + 63) // 64
    # expand chunk runs into unit rows
    cnt = s.count
    uidx, uchunk = s.units()
    uread = s.src[uidx] * C + uchunk
    uwrite = s.dst[uidx] * C + uchunk
    ured = s.reduce[uidx]
    ubounds = np.concatenate([[0], np.cumsum(cnt)])[s.step_bounds]

    bits = np.zeros((n * C, W), np.uint64)
    taint = np.zeros(n * C, np.bool_)
    origin = np.full(n * C, -1, np.int64)  # transfer that made the location tainted (-1: initial)
    why = np.zeros(n * C, np.int8)  # _UNDEF, _DOUBLE or _RACE
    ranks = np.arange(n)
    rank_word, rank_bit = ranks >> 6, np.left_shift(np.uint64(1), (ranks & 63).astype(np.uint64))
    if s.collective == "allgather":
        owner = np.asarray(s.owner, np.int64)
        owned = owner * C + np.arange(C)
        taint[:] = True
        taint[owned] = False
        bits[owned, rank_word[owner]] = rank_bit[owner]
    else:
        rows = np.arange(n * C)
        r_of = rows // C
        bits[rows, rank_word[r_of]] = rank_bit[r_of]

    bad = _check_ports(s, p)
    if bad:
        return bad
    racy_unit, racy_by_unit = _races(s.step[uidx], uread, uwrite, ured, uidx, n * C)
    step_has_race = np.zeros(s.nsteps, np.bool_)
    step_has_race[s.step[uidx][racy_unit]] = True
    # steps where two reduces land in one location need sequential accumulation
    rkey = s.step[uidx][ured] * (n * C) + uwrite[ured]
    rk_sorted = np.sort(rkey)
    dup_steps: np.ndarray | list[int] = []
    if len(rkey) > 1:
        dup_steps = np.unique(rk_sorted[1:][np.diff(rk_sorted) == 0] // (n * C))
    step_multi_reduce = np.zeros(s.nsteps, np.bool_)
    step_multi_reduce[np.asarray(dup_steps, np.int64)] = True
    any_taint = bool(taint.any())

    for k in range(s.nsteps):
        ulo, uhi = int(ubounds[k]), int(ubounds[k + 1])
        if ulo == uhi:
            continue
        rd, wr, red, ui = uread[ulo:uhi], uwrite[ulo:uhi], ured[ulo:uhi], uidx[ulo:uhi]
        sb = bits[rd]
        racy = None
        if step_has_race[k]:
            hit_units = racy_unit[ulo:uhi]
            racy = wr[hit_units]
            racy_by = racy_by_unit[ulo:uhi][hit_units]
            st, so, sk = taint[rd], origin[rd], why[rd]
            reads_racy = np.isin(rd, racy)
            order = np.argsort(racy)
            pos = order[np.searchsorted(racy[order], rd[reads_racy])]
            fresh = ~st[reads_racy]
            idx = np.flatnonzero(reads_racy)[fresh]
            so[idx] = racy_by[pos[fresh]]
            sk[idx] = _RACE
            st[reads_racy] = True
            any_taint = True
        elif any_taint:
            st, so, sk = taint[rd], origin[rd], why[rd]
        else:
            st = None
        copy = ~red
        if copy.any():
            cw = wr[copy]
            bits[cw] = sb[copy]
            if st is not None:
                taint[cw], origin[cw], why[cw] = st[copy], so[copy], sk[copy]
        if red.any():
            rw, rsb, rui = wr[red], sb[red], ui[red]
            if st is not None:
                rst, rso, rsk = st[red], so[red], sk[red]
            groups = _reduce_rounds(rw) if step_multi_reduce[k] else [slice(None)]
            for sel in groups:
                w = rw[sel]
                overlap = (bits[w] & rsb[sel]).any(axis=1)
                if st is None and not overlap.any():
                    bits[w] |= rsb[sel]
                    continue
                if st is None:
                    rst, rso, rsk = (np.zeros(len(rw), np.bool_), np.full(len(rw), -1, np.int64),
                                     np.zeros(len(rw), np.int8))
                    st = True  # source flags now exist for this step
                was = taint[w]
                origin[w] = np.where(was, origin[w], np.where(rst[sel], rso[sel], np.where(overlap, rui[sel], -1)))
                why[w] = np.where(was, why[w], np.where(rst[sel], rsk[sel], np.where(overlap, _DOUBLE, _UNDEF)))
                taint[w] = was | rst[sel] | overlap
                bits[w] |= rsb[sel]
                any_taint = True
        if racy is not None:
            fresh = ~taint[racy]
            origin[racy[fresh]] = racy_by[fresh]
            why[racy[fresh]] = _RACE
            taint[racy] = True

    # postcondition
    if s.collective == "allgather":
        owner = np.asarray(s.owner, np.int64)
        want = np.zeros((n * C, W), np.uint64)
        locs = np.arange(n * C)
        ow = owner[locs % C]
        want[locs, rank_word[ow]] = rank_bit[ow]
        check_locs = locs
    else:
        full = np.zeros(W, np.uint64)
        for r in range(n):
            full[r >> 6] |= np.uint64(1) << np.uint64(r & 63)
        if s.collective == "allreduce":
            check_locs = np.arange(n * C)
        else:
            check_locs = np.asarray(s.owner, np.int64) * C + np.arange(C)
        want = np.broadcast_to(full, (len(check_locs), W))
        if s.collective == "allreduce":
            want = np.broadcast_to(full, (n * C, W))
    got = bits if s.collective == "allreduce" else bits[check_locs]
    exp = want if len(want) == len(check_locs) else want[check_locs]
    wrong = taint[check_locs] | (got != exp).any(axis=1)
    if wrong.any():
        j = int(np.argmax(wrong))
        loc = int(check_locs[j])
        r, c = loc // C, loc % C
        where = f"rank {r} chunk {c}"
        if taint[loc]:
            o = int(origin[loc])
            if o < 0:
                return VerifyReport(False, f"FAIL {where}: holds undefined data (never written)",
                                    Violation("undefined", None, None, f"{where} never written"))
            if why[loc] == _RACE:
                return _fail("hazard", s, o, f"copies into a location that another transfer of the same step "
                                             f"also reads or writes (a race); the garbage reaches {where}")
            return _fail("double-count", s, o, f"adds a contribution the destination already holds "
                                               f"(double counted); it reaches {where}")
        have = _members(got[j], n)
        need = _members(exp[j], n)
        missing, extra = sorted(set(need) - set(have)), sorted(set(have) - set(need))
        if missing:
            return VerifyReport(False, f"FAIL {where}: missing contributions of ranks {_short(missing)} "
                                       f"at the end", Violation("missing", None, None, where))
        return VerifyReport(False, f"FAIL {where}: holds contributions of ranks {_short(extra)} it "
                                   f"should not", Violation("extra", None, None, where))
    stats = {"collective": s.collective, "ranks": n, "chunks": C, "steps": s.nsteps,
             "transfers": s.ntransfers, "ports": p}
    return VerifyReport(True, f"OK {s.collective} on {n} ranks: {s.nsteps} steps, {s.ntransfers} transfers, "
                              f"{C} chunks; every contribution exactly once, at most {p} message(s) per "
                              f"rank per step", None, stats)


def flat_bytes(s: Schedule) -> int:
    """Memory of the flat verifier's bit sets for ``s`` (``flat_table_bytes``)."""
    return flat_table_bytes(s.nranks, s.nchunks)


def flat_table_bytes(nranks: int, nchunks: int) -> int:
    """Memory of the flat verifier's bit sets: one bit per rank for every (rank, chunk); above FLAT_BYTES a
    composed schedule is verified by composition (the work estimate asks before building)."""
    return nranks * nchunks * ((nranks + 63) // 64) * 8


def _verify_composed(s: Schedule, p: int) -> VerifyReport | None:
    """Verification by composition (synth.composition), None when ``s`` is not exactly its composition."""
    bad = _check_ranges(s) or _check_ports(s, p)
    if bad:
        return bad

    def flat(part: Schedule) -> tuple[bool, str]:
        r = _verify(part, None, "flat")
        return r.ok, r.message

    got = verify_composed(s, flat)
    if got is None:
        return None
    ok, msg = got
    if not ok:
        return VerifyReport(False, msg, Violation("composition", None, None, msg))
    stats = {"collective": s.collective, "ranks": s.nranks, "chunks": s.nchunks, "steps": s.nsteps,
             "transfers": s.ntransfers, "ports": p, "method": "composed"}
    return VerifyReport(True, f"OK {s.collective} on {s.nranks} ranks: {s.nsteps} steps, {s.ntransfers} transfers, "
                              f"{s.nchunks} chunks; every contribution exactly once ({msg}), at most {p} message(s) "
                              f"per rank per step", None, stats)


def _members(row: np.ndarray, n: int) -> list[int]:
    return [r for r in range(n) if (int(row[r >> 6]) >> (r & 63)) & 1]


def _short(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (f", ... ({len(ranks)} in all)" if len(ranks) > 8 else "")


def check(schedule: Schedule, ports: int | None = None, *, source: str | None = None,
          topology: Topology | str | None = None) -> Schedule:
    """Return ``schedule`` if it verifies, else raise VerificationError (a CollsynthError); with
    ``source`` (a file name) the message starts "SOURCE does not verify". ``topology`` as in verify."""
    report = verify(schedule, ports, topology=topology)
    if not report.ok:
        raise VerificationError(report, source)
    return schedule
