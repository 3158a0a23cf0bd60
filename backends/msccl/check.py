"""Check any MSCCL XML file (ours or third-party) the way the runtime would run it.

Order of checks, the first problem wins:

1. unreadable, refused at load or misread (tokenizer, attributes, ids, peers, limits the parser enforces,
   nchannels outside 1..32, a chan >= nchannels, step numbers that are not 0,1,2,... or differ from the
   kernel's counter): ``XmlFormatError`` (the CLI exits 2);
2. static problems the parser lets through but that hang or corrupt data (docs/msccl-xml.md 2.3-2.4):
   a dependency on a step that never publishes, depid > 127, offsets past the end of a buffer, too many
   thread blocks, two thread blocks sharing a FIFO, send/receive counts that differ on a connection, a
   transfer with cnt=0 (loaded, but the kernel moves nothing);
3. symbolic execution in every call mode the file declares (``execute.py``): deadlock, FIFO mismatch,
   races, writes to the read-only input of an out-of-place call;
4. the collective's postcondition (allreduce, reducescatter, allgather, alltoall): every output chunk
   holds exactly the contributions it should, with no double counting.

Problems of kinds 2-4 give a report with ``ok=False`` (the CLI exits 1). Messages name gpu, tb and step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from collsynth.backends.msccl.execute import ExecFailure, ExecResult, execute, logical_sizes
from collsynth.backends.msccl.load import resolve
from collsynth.backends.msccl.model import (
    MAX_DEPID,
    MAX_INT16,
    MAX_TBS,
    Program,
    XAlgo,
    XmlFormatError,
    size_multiplier,
    where,
)
from collsynth.backends.msccl.parse import parse_xml_text, read_xml_file


@dataclass(frozen=True)
class XmlReport:
    """Outcome of checking one file: ``message`` is one line ("OK ..." or the first problem)."""

    ok: bool
    message: str
    kind: str | None = None  # None when ok; dependency | limit | bounds | fifo | deadlock | race | ...
    gpu: int | None = None
    tb: int | None = None
    step: int | None = None
    stats: dict[str, Any] = field(default_factory=dict)


class _Problem(Exception):
    def __init__(self, kind: str, message: str, gpu: int | None = None, tb: int | None = None,
                 step: int | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.gpu, self.tb, self.step = kind, message, gpu, tb, step


def _static(prog: Program) -> None:
    a = prog.algo
    n, N = a.ngpus, a.nchunksperloop
    if not a.modes():
        raise _Problem("limit", "inplace=0 and outofplace=0: the runtime never selects this algorithm")
    if N % size_multiplier(a.coll, n):
        raise _Problem("limit", f"nchunksperloop={N} is not a multiple of ngpus={n}, which {a.collective} needs")
    maxtb = MAX_TBS[a.dialect]
    send_fifo: dict[tuple[int, int, int], tuple[int, int]] = {}
    recv_fifo: dict[tuple[int, int, int], tuple[int, int]] = {}
    for g, tbs in enumerate(prog.tbs):
        gpu = next(x for x in a.gpus if x.id == g)
        if len(tbs) > maxtb:
            raise _Problem("limit", f"{where(g)}: {len(tbs)} thread blocks; the {a.dialect} runtime allows at most "
                                    f"{maxtb} (RCCL's limit, and all must be co-resident)", g)
        sizes = logical_sizes(a, gpu)
        published: dict[int, int] = {}
        for tb in tbs:
            last = max((tx.counter for tx in tb.txs if tx.hasdep), default=-1)
            published[tb.id] = last
        for tb in tbs:
            for peer, table, what in ((tb.send, send_fifo, "send"), (tb.recv, recv_fifo, "recv")):
                if peer < 0:
                    continue
                key = (g, peer, tb.chan)
                if key in table:
                    raise _Problem("fifo", f"{where(g, tb.id, line=tb.line)}: thread blocks {table[key][1]} and "
                                           f"{tb.id} both have {what}={peer} on channel {tb.chan}; they would share "
                                           f"one FIFO (use another channel)", g, tb.id)
                table[key] = (0, tb.id)
            for tx in tb.txs:
                at = where(g, tb.id, tx.s, tx.line)
                for (bid, val), _line in zip(tx.deps, tx.dep_lines or [tx.line] * len(tx.deps)):
                    if bid > MAX_DEPID:
                        raise _Problem("limit", f"{at}: depid={bid} exceeds {MAX_DEPID} (stored as int8)",
                                       g, tb.id, tx.s)
                    if val > MAX_INT16:
                        raise _Problem("limit", f"{at}: deps={val} exceeds {MAX_INT16}", g, tb.id, tx.s)
                    if bid not in published:
                        raise _Problem("dependency", f"{at}: depends on tb {bid}, which gpu {g} does not have",
                                       g, tb.id, tx.s)
                    if published[bid] < val:
                        raise _Problem("dependency", f"{at}: depends on tb {bid} step {val}, which never publishes "
                                                     f"it (no step >= {val} of tb {bid} has hasdep=1): it would "
                                                     f"hang", g, tb.id, tx.s)
                if tx.cnt < 1:  # loaded (the parser takes 0..71), but the kernel's copy loop never runs
                    raise _Problem("limit", f"{at}: cnt=0 on a {tx.type!r} step moves nothing: the runtime loads it "
                                            f"but skips the transfer; give cnt 1..71, or make it a nop",
                                   g, tb.id, tx.s)
                kind = tx.kind
                uses = []
                if kind.reads_src or tx.type == "re":
                    uses += [(tx.srcbuf, off, "srcoff") for off in (tx.srcoff, *tx.extra_srcs)]
                if kind.writes_dst:
                    uses.append((tx.dstbuf, tx.dstoff, "dstoff"))
                for buf, off, fld in uses:
                    if off > MAX_INT16:
                        raise _Problem("limit", f"{at}: {fld}={off} exceeds {MAX_INT16}", g, tb.id, tx.s)
                    if off < 0 or off + tx.cnt > sizes[buf]:
                        raise _Problem("bounds", f"{at}: {fld}={off} cnt={tx.cnt} runs past buffer '{buf}' "
                                                 f"({sizes[buf]} chunks for {a.collective} with nchunksperloop={N})",
                                       g, tb.id, tx.s)
    _fifo_counts(prog)


def _fifo_counts(prog: Program) -> None:
    sends: dict[tuple[int, int, int], list[Any]] = {}
    recvs: dict[tuple[int, int, int], list[Any]] = {}
    for tb in prog.all_tbs():
        for tx in tb.txs:
            if tx.kind.send:
                sends.setdefault((tb.gpu, tb.send, tb.chan), [tb, 0])[1] += 1
            if tx.kind.recv:
                recvs.setdefault((tb.recv, tb.gpu, tb.chan), [tb, 0])[1] += 1
    for key in sorted(set(sends) | set(recvs)):
        a, b, ch = key
        ns = sends.get(key, [None, 0])
        nr = recvs.get(key, [None, 0])
        if ns[1] != nr[1]:
            side = ns[0] if ns[0] is not None else nr[0]
            raise _Problem("fifo", f"FIFO mismatch on channel {ch}: gpu {a} sends {ns[1]} time(s) to gpu {b} but gpu "
                                   f"{b} receives {nr[1]} time(s) from gpu {a} (thread block "
                                   f"{side.gpu}:{side.id})", side.gpu, side.id)


def _postcondition(prog: Program, res: ExecResult) -> None:
    a = prog.algo
    coll, n, N = a.collective, a.ngpus, a.nchunksperloop
    if coll not in ("allreduce", "allgather", "reducescatter", "alltoall"):
        return
    m = N // n
    everyone = (1 << n) - 1
    mode = "in-place" if res.mode == "inplace" else "out-of-place"
    for g in range(n):
        pb, base = res.layout[g]["o"]
        buf = res.memory[g][pb]
        if coll == "allreduce":
            want = [(everyone, c) for c in range(N)]
        elif coll == "allgather":
            want = [(1 << (c // m), c) for c in range(N)]
        elif coll == "reducescatter":
            want = [(everyone, g * m + k) for k in range(m)]
        else:
            want = [(1 << (c // m), g * m + c % m) for c in range(N)]
        for k, (mask, label) in enumerate(want):
            v = buf[base + k]
            at = f"gpu {g} output chunk {k} ({mode} call)"
            if v[2] is not None:
                raise _Problem("postcondition", f"{at}: wrong data: {v[2]}", g)
            if v[0] is None:
                raise _Problem("postcondition", f"{at}: never written (holds undefined data)", g)
            if v[1] != label:
                raise _Problem("postcondition", f"{at}: holds chunk {v[1]}, expected chunk {label}", g)
            if v[0] != mask:
                missing = [r for r in range(n) if (mask & ~v[0]) >> r & 1]
                extra = [r for r in range(n) if (v[0] & ~mask) >> r & 1]
                what = (f"misses the contribution of rank(s) {', '.join(map(str, missing[:8]))}" if missing
                        else f"holds the contribution of rank(s) {', '.join(map(str, extra[:8]))} it should not")
                raise _Problem("postcondition", f"{at}: {what}", g)


def _stats(prog: Program, results: list[ExecResult]) -> dict[str, Any]:
    a = prog.algo
    tbs = prog.all_tbs()
    return {"dialect": a.dialect, "collective": a.collective, "coll": a.coll, "proto": a.proto,
            "ngpus": a.ngpus, "nchunksperloop": a.nchunksperloop, "nchannels": a.nchannels,
            "thread_blocks": len(tbs), "max_thread_blocks_per_gpu": max((len(g) for g in prog.tbs), default=0),
            "xml_steps": sum(tb.nsteps for tb in tbs), "max_steps_per_tb": max((tb.nsteps for tb in tbs), default=0),
            "transmissions": sum(len(tb.txs) for tb in tbs), "modes": list(a.modes()),
            "max_fifo_depth": max((r.max_fifo for r in results), default=0)}


def check_program(prog: Program) -> tuple[XmlReport, list[ExecResult]]:
    """Check a resolved program; returns the report and the execution of each call mode."""
    a = prog.algo
    results: list[ExecResult] = []
    try:
        _static(prog)
        for i, mode in enumerate(a.modes()):
            res = execute(prog, mode, races=(i == 0))  # races in place imply races out of place
            _postcondition(prog, res)
            results.append(res)
    except (_Problem, ExecFailure) as p:
        return XmlReport(False, f"FAIL {p.message}", p.kind, p.gpu, p.tb, p.step), results
    st = _stats(prog, results)
    modes = " and ".join("in-place" if m == "inplace" else "out-of-place" for m in a.modes())
    post = {"allreduce": "every output chunk holds every contribution exactly once",
            "reducescatter": "each rank's output holds its chunks with every contribution exactly once",
            "allgather": "every rank's output holds every rank's input",
            "alltoall": "every rank's output holds the blocks addressed to it"}.get(
        a.collective, f"no postcondition known for {a.coll}")
    msg = (f"OK {a.collective} on {a.ngpus} GPUs ({a.dialect} dialect, proto {a.proto}): {st['xml_steps']} steps in "
           f"{st['thread_blocks']} thread blocks on {a.nchannels} channel(s); {modes} calls: no deadlock, FIFO "
           f"mismatch or race; {post}")
    return XmlReport(True, msg, None, stats=st), results


def load_program(path: str) -> Program:
    """Read, validate (XmlFormatError when unreadable) and resolve a file."""
    return resolve(read_xml_file(path), path)


def check_xml_text(text: str, source: str = "<xml>") -> XmlReport:
    """Check XML text; raises XmlFormatError when unreadable."""
    return check_program(resolve(parse_xml_text(text, source), source))[0]


def check_xml_file(path: str) -> XmlReport:
    """Check a file: XmlFormatError (exit 2) when unreadable, else a report (ok False -> exit 1)."""
    return check_program(load_program(path))[0]


__all__ = ["XmlReport", "XmlFormatError", "check_program", "check_xml_file", "check_xml_text", "load_program",
           "XAlgo"]
