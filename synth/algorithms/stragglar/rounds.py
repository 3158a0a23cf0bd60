"""Round-optimality of StragglAR's completion collective (phase 2), decided with a MILP (pulp).

Setting (docs/stragglar.md): n GPUs, straggler S = n-1; after the ReduceScatter among the
punctual GPUs, GPU g (0..n-2) holds the punctual sum P_g of chunk g and S holds its raw chunks R_c.
Per round every GPU sends at most one chunk and receives at most one (one port, one chunk per
transfer); data received in round t can be sent from round t+1. Moves:
- reduce R_c into g_c (S -> g_c, ``a``) and/or P_c into S (g_c -> S, ``b``); both in one round is
  StragglAR's exchange X(g, c); the receiver then holds the full sum F_c;
- copy F_c from a holder to a GPU that lacks it (``y``).
Partial sums are not forwarded (the known optimal schedules need not, see stragglar.md).

Lower bound (stragglar.md, valid for every schedule, forwarding or not): n - 2 + ceil(log2 n). S sends
one chunk per round and each of its n-1 raw chunks must leave it, so the last leaves in round n-2 or
later; then at most two GPUs depend on it and holders at most double per round.

``solve_rounds(n, rounds)`` decides whether the model admits a schedule of ``rounds`` rounds:
``feasible`` (a schedule, verified as a whole AllReduce with a ring ReduceScatter in front),
``infeasible`` (proven by the solver), or ``unknown`` (time limit). Chunks are ordered by the round of
their reduction (valid: relabelling punctual GPUs with their chunks is a symmetry).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.patterns import add_ring_reducescatter
from collsynth.synth.ir import Schedule, ScheduleBuilder
from collsynth.synth.solver.model import SOLVERS, quiet_stdout, run_cbc
from collsynth.synth.verify import check

if TYPE_CHECKING:
    import pulp


def round_lower_bound(n: int) -> int:
    """n - 2 + ceil(log2 n): rounds every completion collective needs (stragglar.md)."""
    return n - 2 + math.ceil(math.log2(n))


@dataclass
class RoundsResult:
    n: int
    rounds: int
    status: str  # feasible | infeasible | unknown
    seconds: float
    moves: list[list[tuple[str, int, int, int]]] | None = None  # per round: (kind, chunk, src, dst)


def _build(n: int, R: int, staircase: bool = False) -> tuple[pulp.LpProblem, dict[str, dict[Any, pulp.LpVariable]]]:
    import pulp
    S = n - 1
    C = n - 1
    prob = pulp.LpProblem("stragglar_completion", pulp.LpMinimize)
    B = pulp.LpBinary
    a = {(c, t): pulp.LpVariable(f"a_{c}_{t}", cat=B) for c in range(C) for t in range(R)}
    b = {(c, t): pulp.LpVariable(f"b_{c}_{t}", cat=B) for c in range(C) for t in range(R)}
    z = {(c, t): pulp.LpVariable(f"z_{c}_{t}", cat=B) for c in range(C) for t in range(R)}
    y = {(c, u, v, t): pulp.LpVariable(f"y_{c}_{u}_{v}_{t}", cat=B)
         for c in range(C) for u in range(n) for v in range(n) if u != v for t in range(1, R)}
    F = {(c, v, t): pulp.LpVariable(f"F_{c}_{v}_{t}", 0, 1) for c in range(C) for v in range(n) for t in range(R)}
    prob += pulp.lpSum(z.values()) * 0  # feasibility
    y_out: dict[tuple[int, int, int], list[Any]] = {}
    y_in: dict[tuple[int, int, int], list[Any]] = {}
    send: dict[tuple[int, int], list[Any]] = {}
    recv: dict[tuple[int, int], list[Any]] = {}
    for (c, u, v, t), x in y.items():
        y_out.setdefault((c, u, t), []).append(x)
        y_in.setdefault((c, v, t), []).append(x)
        send.setdefault((u, t), []).append(x)
        recv.setdefault((v, t), []).append(x)
    for (c, t), x in a.items():
        send.setdefault((S, t), []).append(x)
        recv.setdefault((c, t), []).append(x)
    for (c, t), x in b.items():
        send.setdefault((c, t), []).append(x)
        recv.setdefault((S, t), []).append(x)
    for c in range(C):
        prob += pulp.lpSum(z[c, t] for t in range(R)) == 1
        for t in range(R):
            prob += a[c, t] <= z[c, t]
            prob += b[c, t] <= z[c, t]
            prob += z[c, t] <= a[c, t] + b[c, t]
            for v in range(n):
                prev = F[c, v, t - 1] if t else 0
                inc = list(y_in.get((c, v, t), []))
                if v == c:
                    inc.append(a[c, t])
                if v == S:
                    inc.append(b[c, t])
                prob += F[c, v, t] <= prev + pulp.lpSum(inc)
                if t:
                    prob += F[c, v, t] >= prev
                outs = y_out.get((c, v, t), [])
                if outs:
                    prob += pulp.lpSum(outs) <= prev
                ins = y_in.get((c, v, t), [])
                if ins:
                    # no copy into a holder, and a copy's destination is not read in the same round
                    reads = [b[c, t]] if v == c else [a[c, t]] if v == S else []
                    prob += pulp.lpSum(ins) + pulp.lpSum(reads) <= 1 - prev
        if c + 1 < C:
            prob += (pulp.lpSum(t * z[c, t] for t in range(R)) <= pulp.lpSum(t * z[c + 1, t] for t in range(R)))
        for v in range(n):
            prob += F[c, v, R - 1] == 1
    if staircase:  # S reduces raw chunk c into GPU c in round c (the shape of every known optimum)
        for c in range(C):
            prob += a[c, c] == 1
    for xs in send.values():
        prob += pulp.lpSum(xs) <= 1
    for xs in recv.values():
        prob += pulp.lpSum(xs) <= 1
    return prob, {"a": a, "b": b, "y": y}


def solve_rounds(n: int, rounds: int, time_limit: float = 60.0, solver: str = "cbc",
                 staircase: bool = False) -> RoundsResult:
    """Decide whether the completion collective for n GPUs fits in ``rounds`` rounds. ``staircase``
    restricts the search to S reducing chunk c into GPU c in round c: faster to find a schedule, but
    then ``infeasible`` only speaks for that restriction."""
    import pulp
    if isinstance(n, bool) or not isinstance(n, int) or n < 3:
        raise CollsynthError(f"--gpus must be an integer >= 3 for the completion collective, got {n!r}")
    if n > 16:
        raise CollsynthError(f"--gpus {n}: the round model is exact only for small n (up to 16 here); "
                             "the stragglar algorithm builds n-2+ceil(log2 n) rounds for every n")
    if solver not in SOLVERS:
        raise CollsynthError(f"unknown --solver {solver!r}: use one of {', '.join(SOLVERS)}")
    if solver == "highs" and not pulp.HiGHS(msg=False).available():
        raise CollsynthError("--solver highs needs the highspy package (pip install highspy); or use --solver cbc")
    t0 = time.monotonic()
    if rounds < n - 1:  # S alone needs n-1 sends: no solver needed
        return RoundsResult(n, rounds, "infeasible", time.monotonic() - t0)
    prob, v = _build(n, rounds, staircase)
    if solver == "cbc":
        ok, _ = run_cbc(prob, max(1.0, time_limit))  # killed at the limit (CBC's own was overshot: 27 s for 2 s)
        if ok is None:
            return RoundsResult(n, rounds, "unknown", time.monotonic() - t0)
    else:
        with quiet_stdout():
            prob.solve(pulp.HiGHS(msg=False, timeLimit=max(1.0, time_limit), threads=1))
    took = time.monotonic() - t0
    status = pulp.LpStatus.get(prob.status, "")
    if status == "Infeasible":
        return RoundsResult(n, rounds, "infeasible", took)
    if prob.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible) or status not in (
            "Optimal", "Not Solved"):
        return RoundsResult(n, rounds, "unknown", took)
    moves: list[list[tuple[str, int, int, int]]] = [[] for _ in range(rounds)]
    S = n - 1
    for (c, t), x in v["a"].items():
        if (x.value() or 0) > 0.5:
            moves[t].append(("reduce", c, S, c))
    for (c, t), x in v["b"].items():
        if (x.value() or 0) > 0.5:
            moves[t].append(("reduce", c, c, S))
    for (c, s, d, t), x in v["y"].items():
        if (x.value() or 0) > 0.5:
            moves[t].append(("copy", c, s, d))
    for m in moves:
        m.sort(key=lambda x: (x[1], x[2], x[3]))
    return RoundsResult(n, rounds, "feasible", took, moves)


def rounds_schedule(result: RoundsResult) -> Schedule:
    """The whole AllReduce: ring ReduceScatter among the punctual GPUs, then the found rounds."""

    if result.moves is None:
        raise CollsynthError(f"no schedule for n={result.n} in {result.rounds} rounds to write")
    n = result.n
    punctual = list(range(n - 1))
    b = ScheduleBuilder("allreduce", n, n - 1, name=f"solver_rounds_n{n}",
                        meta={"algorithm": "solver-rounds", "straggler": n - 1, "completion_rounds": result.rounds})
    b.begin_phase("reducescatter", punctual)
    add_ring_reducescatter(b, punctual, punctual)
    b.begin_phase("completion", list(range(n)))
    for round_moves in result.moves:
        b.new_step()
        for kind, c, s, d in round_moves:
            b.add(s, d, c, 1, kind == "reduce")
    b.end_phase()
    return b.build()


def rounds_row(n: int, time_limit: float = 60.0, solver: str = "cbc",
               check_below: bool = True) -> tuple[dict[str, Any], Schedule | None]:
    """For one n: the lower bound, whether a schedule meets it (verified as a whole AllReduce), and
    whether the MILP proves one round fewer impossible (``check_below``). Returns (row, schedule)."""

    lb = round_lower_bound(n)
    at = solve_rounds(n, lb, time_limit, solver, staircase=True)
    row: dict[str, Any] = {"gpus": n, "lower_bound": lb, "rounds": None, "status": at.status,
                           "seconds": round(at.seconds, 2)}
    sched = None
    if at.status == "feasible":
        sched = check(rounds_schedule(at))
        row.update(rounds=lb, status="optimal", verified=True,
                   completion_transfers=sched.ntransfers - (n - 2) * (n - 1))
    if check_below:
        below = solve_rounds(n, lb - 1, time_limit, solver)
        row["below_status"] = below.status  # infeasible: the MILP itself proves the bound tight here
        row["below_seconds"] = round(below.seconds, 2)
        if below.status == "feasible":  # would contradict the lower-bound proof
            row.update(rounds=lb - 1, status="beats-bound")
            sched = check(rounds_schedule(below))
    return row, sched


def rounds_table(ns: list[int], time_limit: float = 60.0, solver: str = "cbc",
                 check_below: bool = True) -> list[dict[str, Any]]:
    """``rounds_row`` for every n."""
    return [rounds_row(n, time_limit, solver, check_below)[0] for n in ns]
