"""Timing view of an MSCCL program: which step of a collsynth Schedule each transfer belongs to.

Every transfer (a send paired through its FIFO with a receive) gets a level, the smallest one that
respects the thread blocks' program order and dependencies under the Schedule IR's step semantics:

- after a receiving transmission, anything later in its thread block (or waiting on it) is at least
  one step later (the data arrives at the end of the step);
- after a send, a later send is one step later (one send port per step) but a later receive may share
  the step (full duplex: the two-way exchange of StragglAR is one step);
- local copies and reductions take no step of their own;
- a fused receive-and-send forwards in the step after it receives.

The send and the receive of one transfer share its level (a transfer is one step of the IR). That
model can be infeasible for programs that rely on eager sends (a positive cycle); those are timed
with sends that do not wait for their receiver instead. The smallest levels are found by a longest-
path pass over the strongly connected components of the constraint graph.

``xml_to_schedule`` turns the levels into a Schedule the simulator can time; ``waiting_on_rank``
gives every transmission that (transitively) waits for a given rank, to prove that StragglAR's
punctual ranks run phase 1 without the straggler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from collsynth.backends.msccl.execute import ExecResult
from collsynth.backends.msccl.model import Program
from collsynth.errors import CollsynthError
from collsynth.synth.ir import COLLECTIVES, Phase, Schedule, derived_phases

SEND, RECV, LOCAL = 0, 1, 2
# weight of "X after P" from P's part kind to X's part kind
LEVEL_WEIGHT = {(RECV, SEND): 1, (RECV, RECV): 1, (RECV, LOCAL): 1,
                (SEND, SEND): 1, (SEND, RECV): 0, (SEND, LOCAL): 0,
                (LOCAL, SEND): 0, (LOCAL, RECV): 0, (LOCAL, LOCAL): 0}


@dataclass
class Levels:
    """Level of every transfer (keyed by its sending transmission) and of every transmission."""

    model: str  # "sync" (send and receive share the step) or "async" (eager sends)
    transfer: dict[tuple[int, int], int]  # sending tx -> level
    tx_parts: dict[tuple[int, int], list[tuple[int, int]]]  # tx -> [(kind, node)]
    node_level: np.ndarray

    def level_of(self, tx: tuple[int, int]) -> int:
        """The step a transmission runs in (its receive part, or its only part)."""
        parts = self.tx_parts[tx]
        return int(min(self.node_level[n] for _, n in parts))


def _parts(prog: Program, res: ExecResult, sync: bool) -> tuple[dict, int, list, dict]:
    tbs = prog.all_tbs()
    node_of_send: dict[tuple[int, int], int] = {}
    parts: dict[tuple[int, int], list[tuple[int, int]]] = {}
    nn = 0
    start_node: dict[tuple[int, int], int] = {}
    for t, tb in enumerate(tbs):
        for j, tx in enumerate(tb.txs):
            k = tx.kind
            if k.send:
                node_of_send[(t, j)] = nn
                nn += 1
                if not sync:
                    start_node[(t, j)] = nn
                    nn += 1
            elif not k.recv:
                parts[(t, j)] = [(LOCAL, nn)]
                nn += 1
    edges: list[tuple[int, int, int]] = []
    for t, tb in enumerate(tbs):
        for j, tx in enumerate(tb.txs):
            k = tx.kind
            p: list[tuple[int, int]] = []
            if k.recv:
                p.append((RECV, node_of_send[res.recv_from[(t, j)]]))
            if k.send:
                p.append((SEND, node_of_send[(t, j)] if sync else start_node[(t, j)]))
                if not sync:
                    edges.append((start_node[(t, j)], node_of_send[(t, j)], 0))
            if not k.recv and not k.send:
                continue
            parts[(t, j)] = p
            if k.recv and k.send:
                edges.append((p[0][1], p[1][1], 1))  # a fused tx forwards in the next step
    return parts, nn, edges, node_of_send


def _constraints(prog: Program, res: ExecResult, parts: dict, edges: list) -> None:
    tbs = prog.all_tbs()
    for t, tb in enumerate(tbs):
        for j in range(len(tb.txs)):
            preds = list(res.dep_on.get((t, j), ()))
            if j > 0:
                preds.append((t, j - 1))
            mine = parts[(t, j)]
            for pr in preds:
                for pk, pn in parts[pr]:
                    for xk, xn in mine:
                        if xk == SEND and len(mine) == 2:
                            continue  # a fused tx's send part follows its receive part (edge added already)
                        edges.append((pn, xn, LEVEL_WEIGHT[(pk, xk)]))


def longest_levels(nn: int, edges: list[tuple[int, int, int]]) -> np.ndarray | None:
    """Smallest levels >= 0 meeting every edge; None if a cycle has positive weight."""
    succ: list[list[tuple[int, int]]] = [[] for _ in range(nn)]
    for u, v, w in edges:
        succ[u].append((v, w))
    comp = _tarjan(nn, succ)
    ncomp = max(comp) + 1 if nn else 0
    # Tarjan numbers components in reverse topological order
    members: list[list[int]] = [[] for _ in range(ncomp)]
    for v in range(nn):
        members[comp[v]].append(v)
    level = np.zeros(nn, np.int64)
    clevel = [0] * ncomp
    for c in range(ncomp - 1, -1, -1):
        lv = clevel[c]
        for v in members[c]:
            for x, w in succ[v]:
                cx = comp[x]
                if cx == c:
                    if w > 0:
                        return None
                elif lv + w > clevel[cx]:
                    clevel[cx] = lv + w
        for v in members[c]:
            level[v] = lv
    return level


def _tarjan(nn: int, succ: list[list[tuple[int, int]]]) -> list[int]:
    index = [-1] * nn
    low = [0] * nn
    onstack = [False] * nn
    comp = [-1] * nn
    stack: list[int] = []
    counter = 0
    ncomp = 0
    for root in range(nn):
        if index[root] >= 0:
            continue
        work = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        onstack[root] = True
        while work:
            v, i = work[-1]
            sv = succ[v]
            if i < len(sv):
                work[-1] = (v, i + 1)
                x = sv[i][0]
                if index[x] < 0:
                    index[x] = low[x] = counter
                    counter += 1
                    stack.append(x)
                    onstack[x] = True
                    work.append((x, 0))
                elif onstack[x] and index[x] < low[v]:
                    low[v] = index[x]
                continue
            work.pop()
            if work:
                u = work[-1][0]
                if low[v] < low[u]:
                    low[u] = low[v]
            if low[v] == index[v]:
                while True:
                    x = stack.pop()
                    onstack[x] = False
                    comp[x] = ncomp
                    if x == v:
                        break
                ncomp += 1
    return comp


def compute_levels(prog: Program, res: ExecResult) -> Levels:
    """Levels of every transfer; the synchronous model when feasible, else eager sends."""
    for sync in (True, False):
        parts, nn, edges, node_of_send = _parts(prog, res, sync)
        _constraints(prog, res, parts, edges)
        level = longest_levels(nn, edges)
        if level is not None:
            transfer = {tx: int(level[n]) for tx, n in node_of_send.items()}
            return Levels("sync" if sync else "async", transfer, parts, level)
    raise CollsynthError("cannot order the program's transfers in steps (a cycle of waits)")  # pragma: no cover


def xml_to_schedule_from(prog: Program, res: ExecResult, name: str = "", source: str = "") -> object:
    """A collsynth Schedule with the program's transfers at their levels (see module docstring)."""

    a = prog.algo
    if a.collective not in COLLECTIVES:
        raise CollsynthError(f"{source or a.name}: an MSCCL {a.coll} program cannot become a collsynth schedule "
                             f"(the schedule IR covers {', '.join(COLLECTIVES)})")
    lv = compute_levels(prog, res)
    tbs = prog.all_tbs()
    recv_of = {snd: rcv for rcv, snd in res.recv_from.items()}
    rows = []
    N = a.nchunksperloop
    for snd, level in lv.transfer.items():
        t, j = snd
        tb = tbs[t]
        tx = tb.txs[j]
        rcv = recv_of[snd]
        rtx = tbs[rcv[0]].txs[rcv[1]]
        reduce = rtx.kind.reduce or rcv in res.reduced_into
        label = res.labels_sent.get(snd)
        chunk = 0 if label is None else min(max(int(label), 0), max(N - tx.cnt, 0))
        rows.append((level, tb.gpu, tbs[rcv[0]].gpu, chunk, tx.cnt, reduce))
    rows.sort()
    used = sorted({r[0] for r in rows})
    renum = {lvl: i for i, lvl in enumerate(used)}
    cols = np.array([(renum[r[0]], r[1], r[2], r[3], r[4], int(r[5])) for r in rows], np.int64).reshape(-1, 6)
    nsteps = len(used)
    phases = _phases_from_comment(a, cols, nsteps)
    if phases is None:
        phases = derived_phases(a.ngpus, cols[:, 0], cols[:, 1], cols[:, 2], nsteps)
    ports = 1
    if len(cols):
        for col in (1, 2):
            ports = max(ports, int(np.unique(cols[:, 0] * a.ngpus + cols[:, col], return_counts=True)[1].max()))
    meta = {"source": source, "format": "msccl-xml", "dialect": a.dialect, "proto": a.proto,
            "timing_model": lv.model, "nchannels": a.nchannels}
    return Schedule.from_arrays(a.collective, a.ngpus, N, step=cols[:, 0], src=cols[:, 1], dst=cols[:, 2],
                                chunk=cols[:, 3], count=cols[:, 4], reduce=cols[:, 5].astype(bool), nsteps=nsteps,
                                phases=tuple(phases), ports=ports, name=name or (a.name or ""), meta=meta)


def _phases_from_comment(a: Any, cols: np.ndarray, nsteps: int) -> tuple | None:
    """Phases written by collsynth's emitter (``<!-- collsynth phases: ... -->``), if present and
    consistent with the program (a phase must wait for every rank that takes part in it)."""

    text = next((c for c in a.comments if c.startswith("collsynth phases:")), None)
    if text is None:
        return None
    body = text[len("collsynth phases:"):].strip()
    if body == "none":
        return ()
    out = []
    try:
        for part in body.split(";"):
            name, start, stop, who = part.split()
            if who == "all":
                ranks = tuple(range(a.ngpus))
            else:
                ranks = tuple(sorted({r for rg in who.split(",") for r in
                                      range(int(rg.split("-")[0]), int(rg.split("-")[-1]) + 1)}))
            out.append(Phase(name, int(start), int(stop), ranks))
    except ValueError:
        return None
    for ph in out:
        if not 0 <= ph.start <= ph.stop <= nsteps:
            return None
        sel = cols[(cols[:, 0] >= ph.start) & (cols[:, 0] < ph.stop)]
        if not set(sel[:, 1].tolist()) | set(sel[:, 2].tolist()) <= set(ph.waits_for):
            return None
    return tuple(out)


def waiting_on_rank(prog: Program, res: ExecResult, rank: int) -> set[tuple[int, int]]:
    """Every transmission of another rank that cannot start before some transmission of ``rank``
    (through program order, dependencies, or FIFOs, transitively)."""
    tbs = prog.all_tbs()
    succ: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for rcv, snd in res.recv_from.items():
        succ.setdefault(snd, []).append(rcv)
    for waiter, pubs in res.dep_on.items():
        for p in pubs:
            succ.setdefault(p, []).append(waiter)
    seen: set[tuple[int, int]] = set()
    work = [(t, 0) for t, tb in enumerate(tbs) if tb.gpu == rank and tb.txs]
    seen.update(work)
    while work:
        t, j = work.pop()
        nxt = list(succ.get((t, j), ()))
        if j + 1 < len(tbs[t].txs):
            nxt.append((t, j + 1))
        for x in nxt:
            if x not in seen:
                seen.add(x)
                work.append(x)
    return {x for x in seen if tbs[x[0]].gpu != rank}
