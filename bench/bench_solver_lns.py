"""Issue 15 point 3: `-a solver` with late ranks on a cluster, the large-neighbourhood search around its warm
start (synth/solver/lns.py). Prints JSON: per case the warm start, the result, the improvement, the time
after the last arrival and the gap to the lower bound (meta["solver"]), and the wall time.

Run: .venv/bin/python bench/bench_solver_lns.py [--time-limit 30] [--cases 16:5,16:8-15,32:5,64:5]
(more: --cases 64:8-15,128:5; ``--cases random:0-4`` takes vectors 0-4 of bench_random_arrivals.py's 64-GPU
arrival vectors instead: several late ranks at arbitrary times, issue 15 point 3's own case).
``wall_s`` per row is the whole ``solve`` call: it should stay near
``time_limit_s`` (the warm starts are chosen by an estimate of their work, the search gets the rest).
A case is GPUS:LATE on h100-cluster (8 GPUs per node), 1 GiB, the late ranks 10 ms late (LATE: a rank or a range
a-b, e.g. a whole node), or random:I (random arrival vector I, as above). With a time limit the result depends
on how many moves and windows the machine tries in it; ``lns.moves`` counts the simulator-guided moves
(synth/solver/critical.py: candidates evaluated, kept, by kind; a kept move is faster, or as fast with data
landing sooner), ``lns.kept`` the MILP windows kept. ``--warm ALG`` runs the same search (moves, then windows)
around another warm start built for the topology (ring, tree, hierarchical) instead of calling the solver.
"""

from __future__ import annotations

import argparse
import json
import time

from bench_cluster_straggler import late_gpu_bound, sync_bound
from bench_random_arrivals import arrival_vectors

from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.solver import lns
from collsynth.synth.solver.solve import solve
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import check, verify


def _late(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(text)]


def _warm(alg: str, n: int, arrivals: dict[int, float], limit: float) -> dict[str, object]:
    """The search (lns.improve: moves, then windows) around another warm start, ``alg`` built for the
    topology, instead of the solver's choice."""
    topo = make_topology("h100-cluster", n)
    s = check(build_schedule(alg, n, "allreduce", topology=topo))
    t = time.perf_counter()
    res = lns.improve(s, lambda x: simulate(x, 2**30, topo, arrivals), topology=topo, time_limit=limit, size=2**30)
    wall = time.perf_counter() - t
    assert verify(res.schedule, topology=topo).ok
    last = max(arrivals.values())
    return {"gpus": n, "late": ",".join(map(str, sorted(arrivals))), "warm_start": alg,
            "warm_start_after_arrival_ms": round((res.start_s - last) * 1e3, 4),
            "after_arrival_ms": round((res.time_s - last) * 1e3, 4),
            "improvement": round((res.start_s - res.time_s) / res.start_s, 4),
            "lns": {"windows": res.windows, "kept": res.improved, "moves": res.stats.get("moves")},
            "wall_s": round(wall, 1), "time_limit_s": limit}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="16:5,16:8-15,32:5,64:5")
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--warm", default=None, help="search around this algorithm (e.g. ring, tree) instead of solving")
    args = ap.parse_args()
    rows = []
    cases: list[tuple[str, str, dict[int, float]]] = []
    for case in args.cases.split(","):
        n, late = case.split(":")
        if n == "random":
            vectors = arrival_vectors(64, max(_late(late)) + 1)
            cases += [("64", f"random {i}", vectors[i]) for i in _late(late)]
        else:
            cases.append((n, late, {r: 0.01 for r in _late(late)}))
    for n, late, arrivals in cases:
        if args.warm:
            rows.append(_warm(args.warm, int(n), arrivals, args.time_limit))
            continue
        t = time.perf_counter()
        s = solve(int(n), topology="h100-cluster", arrivals=arrivals, size=2**30, time_limit=args.time_limit)
        wall = time.perf_counter() - t
        info = s.meta["solver"]
        assert isinstance(info, dict)
        last = max(arrivals.values())
        warm_s = info.get("warm_start_s", info["objective_s"])
        rows.append({"gpus": int(n), "late": late, "status": info["status"],
                     "warm_start": info.get("warm_start_source"),
                     "warm_start_after_arrival_ms": round((warm_s - last) * 1e3, 4),
                     "after_arrival_ms": round(info["after_last_arrival_s"] * 1e3, 4),
                     "improvement": round(info.get("improvement", 0.0), 4),
                     "gap_to_lower_bound": round(info["gap"], 4),
                     "lower_bound_after_arrival_ms": round((info["lower_bound_s"] - last) * 1e3, 4),
                     "lns": info.get("lns"), "wall_s": round(wall, 1), "time_limit_s": args.time_limit})
        if late.startswith("random"):  # the random-arrivals bench's ratio, before and after the search
            denom = max(late_gpu_bound(2**30), sync_bound(int(n) // 8, 2**30) - last)
            rows[-1]["ratio_warm_start"] = round((warm_s - last) / denom, 4)
            rows[-1]["ratio"] = round(info["after_last_arrival_s"] / denom, 4)
    print(json.dumps({"bench": "solver_lns", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
