"""A seeded campaign of clusterstraggler builds on clusters (issue 15): random node counts, late ranks (one GPU,
a whole node, or 2 to 8 ranks), delays and sizes on ``h100-cluster`` and on a topology JSON of 4-GPU nodes
(``--json-gpus``: other node sizes, e.g. 6, 12 or 24, where the wide form and Bruck's steps apply).
Each case is built with pipeline "auto", verified with its topology's per-class ports and simulated; it must
complete no later than hierarchical (clusterstraggler always weighs the synchronous schedule with a late rank;
above waves.SEARCH_MAX_GPUS GPUs for several late ranks since 2026-12-04), and both must complete no earlier
than the proven bound (synth.bounds). With ``--emit`` the
schedules of up to EMIT_MAX_GPUS GPUs are also emitted as an MSCCL XML file and an MSCCL++ plan (each checked
by its emitter; a CollsynthError naming a limit is a clean answer, any other exception a failure). Prints one
JSON line per case that fails (exception, unverified, slower, under the bound) and a summary.

(``--unequal P``: that share of the cases on nodes of unequal size, written as a topology JSON.)

    python bench/fuzz_cluster.py [--cases 100] [--seed 1] [--max-nodes 16] [--emit] [--json-gpus 4] [--unequal 0.3]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import traceback

import numpy as np
from bench_cluster_straggler import json_topology
from bench_uneven_nodes import write_topology

from collsynth.backends import emit
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms import hierarchical
from collsynth.synth.arrivals import arrival_vector
from collsynth.synth.bounds import allreduce_bound
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import verify

EMIT_MAX_GPUS = 32


def case(rng: np.random.Generator, max_nodes: int, tmp: str, json_gpus: list[int],
         unequal: float = 0.0) -> dict[str, object]:
    N = int(rng.integers(2, max_nodes + 1))
    if unequal and rng.random() < unequal:  # nodes of 8 GPUs, one to three with 2 to 7 (drained GPUs)
        sizes = [8] * N
        for b in rng.choice(N, size=int(rng.integers(1, min(3, N) + 1)), replace=False):
            sizes[int(b)] = int(rng.integers(2, 8))
        n = sum(sizes)
        topo = make_topology(write_topology(sizes, os.path.join(tmp, f"u{n}-{N}.json")), n)
        size = float(rng.choice([2**20, 2**26, 2**30]))
        k = int(rng.choice([1, 1, 2, 3]))
        arr = {int(r): float(rng.uniform(0, 0.01)) for r in rng.choice(n, size=k, replace=False)}
        return {"n": n, "G": sizes, "topology": topo, "size": size, "arrivals": arr, "kind": "unequal"}
    if rng.random() < 0.7:
        G, topo = 8, make_topology("h100-cluster", 8 * N)
    else:
        G = json_gpus[int(rng.integers(len(json_gpus)))] if len(json_gpus) > 1 else json_gpus[0]
        path = json_topology(G * N, os.path.join(tmp, f"t{N}x{G}.json"), G, "300GB/s", "25GB/s", "fuzz")
        topo = make_topology(path, G * N)
    n = G * N
    size = float(rng.choice([2**20, 2**26, 2**30]))
    kind = rng.choice(["gpu", "node", "several"])
    if kind == "gpu":
        arr = {int(rng.integers(n)): float(rng.uniform(0, 0.01))}
    elif kind == "node":
        b, d = int(rng.integers(N)), float(rng.uniform(0, 0.01))
        arr = {b * G + g: d for g in range(G)}
    else:
        k = int(rng.integers(2, min(8, n - 1) + 1))
        arr = {int(r): float(rng.uniform(0, 0.01)) for r in rng.choice(n, size=k, replace=False)}
    return {"n": n, "G": G, "topology": topo, "size": size, "arrivals": arr, "kind": str(kind)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-nodes", type=int, default=16)
    ap.add_argument("--emit", action="store_true", help="also emit MSCCL XML and MSCCL++ plans (up to 32 GPUs)")
    ap.add_argument("--json-gpus", default="4",
                    help="GPUs per node of the topology-JSON cases, comma-separated (e.g. 4,6,12,24)")
    ap.add_argument("--unequal", type=float, default=0.0,
                    help="share of cases on nodes of unequal size (8 GPUs, a few with fewer; one to three late "
                         "ranks), e.g. 0.3 (default 0: the campaigns quoted before keep their cases)")
    a = ap.parse_args()
    json_gpus = [int(x) for x in a.json_gpus.split(",") if x.strip()]
    rng = np.random.default_rng(a.seed)
    bad, forms, emitted, t0 = [], {}, {"ok": 0, "refused": 0}, time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.cases):
            c = case(rng, a.max_nodes, tmp, json_gpus, a.unequal)
            n, topo, size, arr = c["n"], c["topology"], c["size"], c["arrivals"]
            label = {"i": i, "n": n, "gpus_per_node": c["G"], "size": size, "kind": c["kind"],
                     "arrivals": {str(k): round(v, 6) for k, v in sorted(arr.items())}}  # type: ignore[union-attr]
            try:
                s = build_schedule("clusterstraggler", n, arrivals=arr, size=size, topology=topo)
                form = str(s.meta.get("form"))
                forms[form] = forms.get(form, 0) + 1
                if not verify(s, topology=topo).ok:
                    bad.append({**label, "problem": "does not verify"})
                else:
                    ours = simulate(s, size, topo, arr).completion_s
                    sync = simulate(hierarchical.build(n, topology=topo, size=size), size, topo, arr).completion_s
                    bound = allreduce_bound(topo, size, arrival_vector(arr, n))
                    if ours > sync * (1 + 1e-9):
                        bad.append({**label, "problem": f"slower than hierarchical: {ours} > {sync}"})
                    elif min(ours, sync) < bound.value_s * (1 - 1e-9):
                        bad.append({**label, "problem": f"under the {bound.kind} bound: {min(ours, sync)} < "
                                    f"{bound.value_s}"})
                if a.emit and n <= EMIT_MAX_GPUS:
                    for fmt in ("msccl-xml", "mscclpp-plan"):
                        try:
                            emit(s, fmt)
                            emitted["ok"] += 1
                        except CollsynthError:  # a limit of the format, named in one line
                            emitted["refused"] += 1
            except Exception as e:  # noqa: BLE001 - the campaign reports every failure
                bad.append({**label, "problem": f"{type(e).__name__}: {e}",
                            "where": traceback.format_exc().splitlines()[-3].strip()})
            if bad and bad[-1]["i"] == i:
                print(json.dumps(bad[-1]), flush=True)
    summary = {"bench": "fuzz_cluster", "cases": a.cases, "seed": a.seed, "failures": len(bad),
               "forms": dict(sorted(forms.items()))}
    if a.emit:
        summary["emitted"] = emitted
    print(json.dumps({**summary, "wall_s": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
