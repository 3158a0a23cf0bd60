"""Worker processes for clusterstraggler's search (collsynth.workers, `collsynth --jobs N`): the build time
of several late ranks on h100-cluster (1 GiB per rank, the cluster study's seeded random arrival vectors:
2 to 8 late ranks, delays uniform in 0-10 ms) and of one late GPU 4 ms late (its funnel choices weighed),
with 1 job and with each given job count; the schedule files must be byte-identical (sha256 printed).
Prints JSON: per case the seconds per job count, the speedup over one job and the form chosen.

    python bench/bench_jobs.py [--nodes 8,16,32] [--jobs 2] [--seed 1]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time

import numpy as np

import collsynth as cs
from collsynth import workers
from collsynth.synth.algorithms.stragglar import cluster_study
from collsynth.synth.ir import save_schedule


def _timed(n: int, arrivals: dict[int, float], k: int, folder: str) -> tuple[float, str, str]:
    workers.set_jobs(k)
    topo = cs.make_topology("h100-cluster", n)
    t = time.perf_counter()
    s = cs.build_schedule("clusterstraggler", n, arrivals=arrivals, size=2**30, topology=topo)
    dt = time.perf_counter() - t
    path = os.path.join(folder, f"{n}_{k}.json")
    save_schedule(s, path)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    return dt, str(s.meta.get("form")), digest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="8,16,32", help="comma-separated node counts (8 GPUs each)")
    ap.add_argument("--jobs", default=str(workers.cpu_count()), help="comma-separated job counts besides 1")
    ap.add_argument("--seed", type=int, default=1, help="the study's random arrival vector")
    a = ap.parse_args()
    counts = [int(x) for x in a.jobs.split(",") if x.strip() and int(x) > 1]
    out: dict[str, object] = {"bench": "jobs", "cpu_cores": workers.cpu_count(), "size_bytes": 2**30,
                              "topology": "h100-cluster"}
    with tempfile.TemporaryDirectory() as folder:
        for N in (int(x) for x in a.nodes.split(",") if x.strip()):
            n = 8 * N
            several = cluster_study.case_arrivals("random", np.arange(n).reshape(N, 8), 0, a.seed)
            for case, arrivals in (("several_late", several), ("late_gpu_4ms", {5: 4e-3})):
                row: dict[str, object] = {"late_ranks": len(arrivals)}
                base, form, digest = _timed(n, arrivals, 1, folder)
                row.update(form=form, seconds={"1": round(base, 2)}, sha256=digest)
                for k in counts:
                    dt, form_k, digest_k = _timed(n, arrivals, k, folder)
                    if (form_k, digest_k) != (form, digest):
                        raise SystemExit(f"{N} nodes, {case}: {k} jobs built another schedule "
                                         f"({form_k} {digest_k} against {form} {digest})")
                    row["seconds"][str(k)] = round(dt, 2)  # type: ignore[index]
                    row[f"speedup_{k}"] = round(base / dt, 2)
                out[f"{N}_nodes_{case}"] = row
                print(json.dumps({f"{N}_nodes_{case}": row}), flush=True)
    workers.set_jobs(None)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
