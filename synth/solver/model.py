"""The time-expanded MILP (pulp) over the solver's grid and model class (synth/solver/grid.py).

Variables, per chunk c and slot t (only for pairs whose two ranks have arrived):
- ``r[c,u,v,t]`` one-way reduce (u forwards its partial sum to v), every slot;
- ``e[c,{u,v},t]`` exchange (both send, both add) and ``y[c,u,v,t]`` copy of the full sum, final
  slots only (no chunk can be complete before the last arrival);
- ``F[c,v,t]`` v holds the full sum after t, ``G[c,v,t]`` v completes a chunk by a one-way reduce,
  ``q[t]`` the collective is not finished after final slot t (binary, non-increasing).

Constraints (S = cumulative reduce sends, D = sum of S = ranks that have forwarded c):
- each rank forwards each chunk at most once; it takes a one-way reduce only while it has not
  forwarded: recv_r(c,u,t) + S(c,u,t) <= 1 (this also makes one reduce write per location);
- exchange only between the last two live ranks: (n-2) sum_e(c,t) <= D(c,t-1);
- completion by reduce: K(c,t) binary with (n-1) K <= D(c,t); G <= recv_r(c,v,t), G <= K;
  F(t) <= F(t-1) + copies in + G + e,
  F non-decreasing;
- copies: sum_v y(c,u,v,t) <= p F(c,u,t-1) (the LP sees the doubling), sum_u y(c,u,v,t) <= 1 - F(c,v,t-1);
- ports: per rank and slot at most p sends and p receives, times q(t-1) after the last arrival (nothing
  moves once done); links shared by several pairs carry one transfer per slot;
- every rank sends and receives at least one transfer of every chunk (valid: non-roots forward, the
  root copies out; non-roots receive the sum, the root receives a reduce), so the LP sees
  "rank i must move C chunks after it arrives";
- every chunk takes exactly 2n-2 transfers (n-1 forwards + n-1 copies, or an exchange + n-2 of each),
  and per slot at most p*n transfers move in all (times q(t-1));
- q(t) >= 1 - F(c,v,t); everything complete in the last slot; sum q >= slot_lower_bound - 1;
- symmetry: chunks ordered by total full-holder-slots; on a uniform complete pair graph, ranks that
  arrive together ordered by the same measure (both orders can be met at once: each is invariant
  under the other relabelling).
Objective: minimise sum_t q(t) = final slots before completion.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from collsynth.errors import CollsynthError
from collsynth.synth.solver.grid import COPY, EXCHANGE, REDUCE, Grid, ModelState, Move

if TYPE_CHECKING:
    import pulp


@dataclass
class Model:
    grid: Grid
    prob: pulp.LpProblem
    r: dict[tuple[int, int, int, int], pulp.LpVariable]
    e: dict[tuple[int, int, int, int], pulp.LpVariable]
    y: dict[tuple[int, int, int, int], pulp.LpVariable]
    F: dict[tuple[int, int, int], pulp.LpVariable]
    G: dict[tuple[int, int, int], pulp.LpVariable]
    K: dict[tuple[int, int], pulp.LpVariable]
    q: dict[int, pulp.LpVariable]
    S: dict[tuple[int, int, int], Any]
    D: dict[tuple[int, int], Any]
    nbinaries: int = 0
    stats: dict[str, int] = field(default_factory=dict)


def estimate_binaries(grid: Grid) -> int:
    """Binary variable count of the model for ``grid`` (cheap; used to refuse oversized models)."""
    total: float = 0
    for t in range(grid.nslots):
        k = len(grid.slot_pairs(t))
        total += grid.nchunks * (k if t < grid.first_final else 2.5 * k) + (t >= grid.first_final)
    return int(total)


def build_model(grid: Grid, slot_bound: bool = True) -> Model:
    """The MILP for ``grid`` (see the module docstring); ``slot_bound`` adds the cut sum q >= LB - 1."""
    import pulp
    n, C, p = grid.n, grid.nchunks, grid.ports
    T, t0 = grid.nslots, grid.first_final
    prob = pulp.LpProblem("collsynth_allreduce", pulp.LpMinimize)
    B = pulp.LpBinary
    r: dict[tuple[int, int, int, int], pulp.LpVariable] = {}
    e: dict[tuple[int, int, int, int], pulp.LpVariable] = {}
    y: dict[tuple[int, int, int, int], pulp.LpVariable] = {}
    F: dict[tuple[int, int, int], pulp.LpVariable] = {}
    G: dict[tuple[int, int, int], pulp.LpVariable] = {}
    K: dict[tuple[int, int], pulp.LpVariable] = {}  # chunk c has at most one live rank after t
    S: dict[tuple[int, int, int], Any] = {}  # cumulative forwards of c by u up to t (0..1)
    D: dict[tuple[int, int], Any] = {}  # ranks that have forwarded c up to t
    q = {t: pulp.LpVariable(f"q_{t}", cat=B) for t in range(t0, T)}
    slot_pairs = [[grid.pairs[i] for i in grid.slot_pairs(t)] for t in range(T)]
    pairset = set(grid.pairs)
    for t in range(T):
        for (u, v) in slot_pairs[t]:
            for c in range(C):
                r[c, u, v, t] = pulp.LpVariable(f"r_{c}_{u}_{v}_{t}", cat=B)
                if t >= t0:
                    y[c, u, v, t] = pulp.LpVariable(f"y_{c}_{u}_{v}_{t}", cat=B)
                    if u < v and (v, u) in pairset:
                        e[c, u, v, t] = pulp.LpVariable(f"e_{c}_{u}_{v}_{t}", cat=B)
        if t >= t0:
            here = grid.present(t)
            for c in range(C):
                K[c, t] = pulp.LpVariable(f"K_{c}_{t}", cat=B)
                for v in here:
                    F[c, v, t] = pulp.LpVariable(f"F_{c}_{v}_{t}", 0, 1)
                    G[c, v, t] = pulp.LpVariable(f"G_{c}_{v}_{t}", 0, 1)
    # incidence lists
    send: dict[tuple[int, int, int], list[Any]] = {}  # (c,u,t) -> reduce/exchange sends of u
    recv_r: dict[tuple[int, int, int], list[Any]] = {}
    recv_y: dict[tuple[int, int, int], list[Any]] = {}
    send_y: dict[tuple[int, int, int], list[Any]] = {}
    exch: dict[tuple[int, int, int], list[Any]] = {}  # (c,u,t) -> exchanges with u
    port_s: dict[tuple[int, int], list[Any]] = {}
    port_r: dict[tuple[int, int], list[Any]] = {}
    ex_ct: dict[tuple[int, int], list[Any]] = {}
    on_pair: dict[tuple[int, int, int], list[Any]] = {}  # (u,v,t) -> transfers over the directed pair
    for (_c, u, v, t), x in list(r.items()) + list(y.items()):
        on_pair.setdefault((u, v, t), []).append(x)
    for (c, u, v, t), x in e.items():
        ex_ct.setdefault((c, t), []).append(x)
        on_pair.setdefault((u, v, t), []).append(x)
        on_pair.setdefault((v, u, t), []).append(x)
    for (c, u, v, t), x in r.items():
        send.setdefault((c, u, t), []).append(x)
        recv_r.setdefault((c, v, t), []).append(x)
        port_s.setdefault((u, t), []).append(x)
        port_r.setdefault((v, t), []).append(x)
    for (c, u, v, t), x in e.items():
        for a in (u, v):
            send.setdefault((c, a, t), []).append(x)
            exch.setdefault((c, a, t), []).append(x)
            port_s.setdefault((a, t), []).append(x)
            port_r.setdefault((a, t), []).append(x)
    for (c, u, v, t), x in y.items():
        send_y.setdefault((c, u, t), []).append(x)
        recv_y.setdefault((c, v, t), []).append(x)
        port_s.setdefault((u, t), []).append(x)
        port_r.setdefault((v, t), []).append(x)
    prob += pulp.lpSum(q.values())
    for c in range(C):
        for t in range(T):
            for u in range(n):
                sends = send.get((c, u, t), [])
                prev_s = S.get((c, u, t - 1))
                if not sends:
                    S[c, u, t] = prev_s if prev_s is not None else 0
                    continue
                S[c, u, t] = pulp.LpVariable(f"S_{c}_{u}_{t}", 0, 1)
                prob += S[c, u, t] == (prev_s if prev_s is not None else 0) + pulp.lpSum(sends)
            for u in grid.present(t):
                rr = recv_r.get((c, u, t), [])
                if rr:
                    prob += pulp.lpSum(rr) + S[c, u, t] <= 1
            moved = [x for u in range(n) for x in send.get((c, u, t), [])]
            prev_d = D.get((c, t - 1), 0)
            if moved:
                D[c, t] = pulp.LpVariable(f"D_{c}_{t}", 0, n)
                prob += D[c, t] == prev_d + pulp.lpSum(moved)
            else:
                D[c, t] = prev_d
            ex_t = ex_ct.get((c, t), [])
            if ex_t:
                prob += (n - 2) * pulp.lpSum(ex_t) - prev_d <= 0
            if t >= t0:
                prob += (n - 1) * K[c, t] - D[c, t] <= 0
                for v in grid.present(t):
                    rr = recv_r.get((c, v, t), [])
                    prob += G[c, v, t] <= pulp.lpSum(rr)
                    prob += G[c, v, t] <= K[c, t]
                    prev = F.get((c, v, t - 1))
                    inc = recv_y.get((c, v, t), []) + exch.get((c, v, t), []) + [G[c, v, t]]
                    prob += F[c, v, t] <= (prev if prev is not None else 0) + pulp.lpSum(inc)
                    if prev is not None:
                        prob += F[c, v, t] >= prev
                    ys = send_y.get((c, v, t), [])
                    if ys:
                        prob += pulp.lpSum(ys) <= (p * prev if prev is not None else 0)
                    yr = recv_y.get((c, v, t), [])
                    if yr:
                        prob += pulp.lpSum(yr) <= 1 - (prev if prev is not None else 0)
                    prob += q[t] >= 1 - F[c, v, t]
        for u in range(n):
            outs = [x for t in range(T) for x in send.get((c, u, t), []) + send_y.get((c, u, t), [])]
            ins = [x for t in range(T) for x in recv_r.get((c, u, t), []) + recv_y.get((c, u, t), [])
                   + exch.get((c, u, t), [])]
            prob += pulp.lpSum(outs) >= 1
            prob += pulp.lpSum(ins) >= 1
        if t0 < T:
            for v in range(n):
                prob += F[c, v, T - 1] == 1
        # every chunk takes exactly 2n-2 transfers: n-1 forwards and n-1 copies, or an exchange (2),
        # n-2 forwards and n-2 copies
        total = [x for (cc, *_), x in r.items() if cc == c] + [x for (cc, *_), x in y.items() if cc == c]
        prob += pulp.lpSum(total) + 2 * pulp.lpSum(x for (cc, *_), x in e.items() if cc == c) == 2 * n - 2
    for t in range(t0, T):
        everything = [x for u in grid.present(t) for x in port_s.get((u, t), [])]
        if everything and t > t0:
            prob += pulp.lpSum(everything) <= p * len(grid.present(t)) * q[t - 1]
    lb = slot_lower_bound(grid)
    if slot_bound and t0 < T and lb > 1:
        prob += pulp.lpSum(q.values()) >= lb - 1
    for group in interchangeable_ranks(grid):
        for a, b in zip(group, group[1:]):
            prob += (pulp.lpSum(x for (c, v, t), x in F.items() if v == a)
                     >= pulp.lpSum(x for (c, v, t), x in F.items() if v == b))
    for t in range(T):
        cap: Any = p if t <= t0 else p * q[t - 1]
        for u in grid.present(t):
            if port_s.get((u, t)):
                prob += pulp.lpSum(port_s[(u, t)]) <= cap
            if port_r.get((u, t)):
                prob += pulp.lpSum(port_r[(u, t)]) <= cap
        for shared in grid.shared_links:
            xs = [x for i in shared for x in on_pair.get((*grid.pairs[i], t), [])]
            if len(xs) > 1:
                prob += pulp.lpSum(xs) <= 1
    for t in range(t0, T - 1):
        prob += q[t] >= q[t + 1]
    for c in range(C - 1):
        prob += (pulp.lpSum(x for (cc, v, t), x in F.items() if cc == c)
                 >= pulp.lpSum(x for (cc, v, t), x in F.items() if cc == c + 1))
    nb = len(r) + len(e) + len(y) + len(q) + len(K)
    return Model(grid, prob, r, e, y, F, G, K, q, S, D, nb, {"binaries": nb, "constraints": len(prob.constraints)})


def slot_lower_bound(grid: Grid) -> int:
    """Final slots every schedule of the model class needs (valid for any grid).

    A rank that arrives last must forward or exchange every chunk (C transfers, p per slot), so its last
    contribution leaves in final slot ceil(C/p)-1 or later; then at most 2 ranks depend on it and holders
    grow (1+p)-fold per slot. Everyone arriving together also needs C(2n-2) transfers at n*p per slot.
    """
    n, C, p = grid.n, grid.nchunks, grid.ports
    if n < 2:
        return 0
    spread = 0
    holders = 2
    while holders < n:
        holders *= 1 + p
        spread += 1
    lb = -(-C // p) + spread
    if len(grid.epoch_time) == 1:
        lb = max(lb, -(-C * (2 * n - 2) // (n * p)))
    return lb


def interchangeable_ranks(grid: Grid) -> list[list[int]]:
    """Groups of ranks that a relabelling may permute: same arrival on a uniform complete pair graph."""
    n = grid.n
    if len(grid.pairs) != n * (n - 1) or grid.shared_links:
        return []
    groups: dict[float, list[int]] = {}
    for r in range(n):
        groups.setdefault(grid.arrivals[r], []).append(r)
    return [g for _, g in sorted(groups.items()) if len(g) > 1]


def chunk_order(grid: Grid, placed: Sequence[tuple[int, Sequence[Move]]]) -> list[int]:
    """A relabelling of a placement's chunks that satisfies the symmetry-breaking order."""
    state = ModelState(grid)
    score = [0] * grid.nchunks
    by_slot = dict((s, m) for s, m in placed)
    for t in range(grid.nslots):
        if t in by_slot:
            state.apply(t, by_slot[t])
        for c in range(grid.nchunks):
            score[c] += int(state.full[c].sum())
    order = sorted(range(grid.nchunks), key=lambda c: (-score[c], c))
    new = [0] * grid.nchunks
    for i, c in enumerate(order):
        new[c] = i
    return new


def rank_order(grid: Grid, placed: Sequence[tuple[int, Sequence[Move]]]) -> list[int]:
    """A relabelling of interchangeable ranks that satisfies the rank symmetry-breaking order."""
    state = ModelState(grid)
    score = [0] * grid.n
    by_slot = dict((s, m) for s, m in placed)
    for t in range(grid.nslots):
        if t in by_slot:
            state.apply(t, by_slot[t])
        if t >= grid.first_final:
            for v in range(grid.n):
                score[v] += int(state.full[:, v].sum())
    new = list(range(grid.n))
    for group in interchangeable_ranks(grid):
        for slot_rank, r in zip(group, sorted(group, key=lambda r: (-score[r], r))):
            new[r] = slot_rank
    return new


def relabel_ranks(placed: Sequence[tuple[int, Sequence[Move]]], new: Sequence[int]) -> list[tuple[int, list[Move]]]:
    out = []
    for s, ms in placed:
        moved = []
        for k, c, u, v in ms:
            a, b = new[u], new[v]
            if k == EXCHANGE and a > b:
                a, b = b, a
            moved.append((k, c, a, b))
        out.append((s, sorted(moved, key=lambda m: (m[1], m[2], m[3], m[0]))))
    return out


def symmetric_start(grid: Grid, placed: Sequence[tuple[int, Sequence[Move]]]) -> list[tuple[int, list[Move]]]:
    """The placement relabelled (ranks, then chunks) to satisfy the model's symmetry breaking."""
    placed = relabel_ranks(placed, rank_order(grid, placed))
    return relabel_chunks(placed, chunk_order(grid, placed))


def relabel_chunks(placed: Sequence[tuple[int, Sequence[Move]]], new: Sequence[int]) -> list[tuple[int, list[Move]]]:
    return [(s, sorted(((k, new[c], u, v) for k, c, u, v in ms), key=lambda m: (m[1], m[2], m[3], m[0])))
            for s, ms in placed]


def set_start(model: Model, placed: Sequence[tuple[int, Sequence[Move]]]) -> None:
    """Give every variable the value of a placement (a MIP start)."""
    import pulp
    grid = model.grid
    for variables in (model.r, model.e, model.y):
        for x in variables.values():
            x.setInitialValue(0)
    by_slot = dict((s, m) for s, m in placed)
    state = ModelState(grid)
    done_at = None
    for t in range(grid.nslots):
        moves = by_slot.get(t, [])
        dead_before = state.dead.copy()
        for kind, c, u, v in moves:
            key = (c, min(u, v), max(u, v), t) if kind == EXCHANGE else (c, u, v, t)
            var = {REDUCE: model.r, EXCHANGE: model.e, COPY: model.y}[kind].get(key)
            if var is None:
                raise CollsynthError(f"internal: warm start uses a variable the model lacks ({kind} {key})")
            var.setInitialValue(1)
        state.apply(t, moves)
        for c in range(grid.nchunks):
            d = model.D.get((c, t))
            if isinstance(d, pulp.LpVariable):
                d.setInitialValue(int(state.dead[c]))
            for u in range(grid.n):
                x = model.S.get((c, u, t))
                if isinstance(x, pulp.LpVariable):
                    x.setInitialValue(int(not state.live[c, u]))
        if t >= grid.first_final:
            for (c, v, tt), x in model.F.items():
                if tt == t:
                    x.setInitialValue(int(state.full[c, v]))
            for (c, tt), x in model.K.items():
                if tt == t:
                    x.setInitialValue(int(state.dead[c] >= grid.n - 1))
            for (c, v, tt), x in model.G.items():
                if tt == t:
                    got = any(k == REDUCE and cc == c and dst == v for k, cc, _, dst in moves)
                    x.setInitialValue(int(got and state.dead[c] >= grid.n - 1 and dead_before[c] < grid.n - 1))
            finished = state.done()
            if finished and done_at is None:
                done_at = t
            model.q[t].setInitialValue(0 if finished else 1)


def extract(model: Model) -> list[tuple[int, list[Move]]]:
    """The placement of the incumbent solution."""
    by: dict[int, list[Move]] = {}
    for kind, d in ((REDUCE, model.r), (EXCHANGE, model.e), (COPY, model.y)):
        for (c, u, v, t), x in d.items():
            val = x.value()
            if val is not None and val > 0.5:
                by.setdefault(t, []).append((kind, c, u, v))
    return [(t, sorted(ms, key=lambda m: (m[1], m[2], m[3], m[0]))) for t, ms in sorted(by.items())]


@dataclass
class SolveResult:
    status: str  # optimal | feasible | infeasible | none
    placed: list[tuple[int, list[Move]]] | None
    objective: float | None  # final slots before completion (sum q)
    bound: float | None  # proven lower bound on the objective


def run_cbc(prob: Any, time_limit: float, warm: bool = False, threads: int = 1) -> tuple[str | None, str]:
    """Run pulp's bundled CBC on a pulp problem with a hard deadline (CBC's own time limit is overshot, e.g. in
    its root LP); ("ok" or None when it was killed or wrote no solution, its log). The solution, if any, is
    assigned to the problem's variables and status."""
    import subprocess

    import pulp

    solver = pulp.PULP_CBC_CMD(msg=False, warmStart=warm, threads=threads)
    if not solver.available():
        raise CollsynthError("CBC is not available (it ships with pulp): reinstall pulp or use --solver highs")
    with tempfile.TemporaryDirectory(prefix="collsynth-cbc-") as tmp:
        mps, mst, sol, log = (os.path.join(tmp, f) for f in ("m.mps", "m.mst", "m.sol", "m.log"))
        vs, vnames, cnames, _ = prob.writeMPS(mps, rename=1)
        args = [solver.path, mps]
        if warm:
            solver.writesol(mst, prob, vs, vnames, cnames)
            args += ["-mips", mst]
        soft = max(1.0, 0.85 * time_limit)
        args += ["-sec", f"{soft:.1f}", "-threads", str(threads), "-timeMode", "elapsed", "-solve",
                 "-printingOptions", "all", "-solution", sol]
        with open(log, "w") as pipe:
            proc = subprocess.Popen(args, stdout=pipe, stderr=pipe, stdin=subprocess.DEVNULL)
            try:
                proc.wait(timeout=time_limit + 5.0)  # CBC's own limit is not always honoured
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                return None, "killed at the time limit"
        with open(log, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if not os.path.exists(sol):
            return None, text
        status, values, _, _, _, sol_status = solver.readsol_MPS(sol, prob, vs, vnames, cnames)
        prob.assignVarsVals(values)
        prob.assignStatus(status, sol_status)
        return "ok", text


def _cbc(model: Model, time_limit: float, warm: bool, threads: int) -> SolveResult:
    import pulp
    ok, text = run_cbc(model.prob, time_limit, warm, threads)
    bound = None
    m = re.search(r"Lower bound:\s*([-0-9.eE+]+)", text)
    if m:
        bound = float(m.group(1))
    if ok is None:
        return SolveResult("none", None, None, bound)
    status = pulp.LpStatus.get(model.prob.status, "")
    sol = model.prob.sol_status
    stopped = "Stopped on time" in text or "Result - Stopped" in text
    if status == "Infeasible" and not stopped:
        return SolveResult("infeasible", None, None, None)
    if sol in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible) and status in ("Optimal", "Not Solved"):
        obj = pulp.value(model.prob.objective)
        if "Result - Optimal solution found" in text and not stopped:
            return SolveResult("optimal", extract(model), obj, obj)
        return SolveResult("feasible", extract(model), obj, bound)
    return SolveResult("none", None, None, bound)


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """Send file descriptor 1 to /dev/null (C libraries write there directly)."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _warm_highs() -> Any:
    """pulp's HiGHS interface plus a MIP start from the variables' initial values (a class built on
    first use, so that pulp stays off the import path)."""
    import pulp

    class WarmHiGHS(pulp.HiGHS):
        def callSolver(self, lp: Any) -> None:  # noqa: N802 (pulp's name)
            import highspy

            vals = [float(v.varValue) if v.varValue is not None else 0.0 for v in lp.variables()]
            sol = highspy.HighsSolution()
            sol.col_value = vals
            sol.value_valid = True
            lp.solverModel.setSolution(sol)
            lp.solverModel.run()

    return WarmHiGHS


def _highs(model: Model, time_limit: float, warm: bool, threads: int) -> SolveResult:
    import pulp

    try:
        import highspy
    except ImportError:
        raise CollsynthError("--solver highs needs the highspy package (pip install highspy); "
                             "or use --solver cbc") from None
    cls = _warm_highs() if warm else pulp.HiGHS
    solver = cls(msg=False, timeLimit=max(1.0, float(time_limit)), threads=threads)
    with quiet_stdout():  # HiGHS prints a banner on stdout even with output off (would corrupt JSON output)
        model.prob.solve(solver)
    info = model.prob.solverModel.getInfo()
    hstatus = model.prob.solverModel.getModelStatus()

    bound = float(info.mip_dual_bound) if info.mip_dual_bound < 1e30 else None
    if hstatus == highspy.HighsModelStatus.kInfeasible:
        return SolveResult("infeasible", None, None, None)
    if info.primal_solution_status >= 2:
        obj = float(info.objective_function_value)
        if hstatus == highspy.HighsModelStatus.kOptimal:
            return SolveResult("optimal", extract(model), obj, obj)
        return SolveResult("feasible", extract(model), obj, bound)
    return SolveResult("none", None, None, bound)


SOLVERS = ("cbc", "highs")


def solve_model(model: Model, solver: str, time_limit: float, warm: bool, threads: int = 1) -> SolveResult:
    """Run CBC or HiGHS with a time limit; the incumbent, its objective and the proven bound."""
    if solver == "cbc":
        return _cbc(model, time_limit, warm, threads)
    if solver == "highs":
        return _highs(model, time_limit, warm, threads)
    raise CollsynthError(f"unknown --solver {solver!r}: use cbc or highs")
