"""Topology-aware synchronous AllReduce on real machines (issue 14's numbers). Prints JSON.

Run: .venv/bin/python bench/bench_cluster.py [--nodes 16] [--scale 1024,8192] [--size 1GiB]

- ``h100_cluster``: `compare` on h100-cluster with --nodes x 8 GPUs (simulated, no straggler): every
  algorithm's completion and its ratio to the node-cut bound 2(N-1)/N s/(G B_net) (clusters.md
  section 4; B_net = the topology's rail route bandwidth), the best algorithm and its ratio (issue
  target: <= 1.25).
- ``h100_json``: the same comparison on a topology JSON of the same machine, written by
  `collsynth topology import tests/fixtures/topologies/dgx_h100_8nic.xml --nodes N --fabric rail`
  (a DGX H100 NCCL dump with 8 NICs; NVLink from NCCL's link constants, 18 x 20.6 GB/s).
- ``dgx1``: `compare` on dgx1, each algorithm against the per-GPU bound 2(n-1)/n s / (6 x 25 GB/s)
  (target: best <= 1.3), and ring over twoshot (it was 3.5 in rank order).
- ``scale``: for each GPU count, the CLI pipeline `synth -a hierarchical -t h100-cluster` + `verify` +
  `simulate` as three fresh processes: wall seconds of each and of all, the peak resident memory of the
  largest (ru_maxrss of the children), and the simulated time (targets: 1,024 under 30 s; 8,192 under
  300 s and 8 GiB).
Simulated times are deterministic model results; wall times are measurements on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

from collsynth.synth.algorithms.layout import pair_model
from collsynth.synth.compare import compare
from collsynth.synth.topology import make_topology
from collsynth.units import parse_size


def node_cut_bound(N: int, G: int, size: float, bw_net: float) -> float:
    """clusters.md section 4: T >= 2 (N-1)/N s / (G B_net)."""
    return 2 * (N - 1) / N * size / (G * bw_net)


def rows_with_ratio(rows: list, bound: float) -> list[dict]:
    return [{"algorithm": r["algorithm"], "completion_s": r["completion_s"], "steps": r["steps"], "note": r["note"],
             "x_bound": round(r["completion_s"] / bound, 4)} for r in rows]


def h100_cluster(nodes: int, size: float, spec: str = "h100-cluster") -> dict:
    n = nodes * 8
    topo = make_topology(spec, n)
    _, bw_net = pair_model(topo, 0, 8)  # GPU 0 to GPU 0 of node 1: one rail hop
    bound = node_cut_bound(nodes, 8, size, bw_net)
    t = time.perf_counter()
    rows = compare(n, size, topo)
    wall = time.perf_counter() - t
    out = rows_with_ratio(rows, bound)
    return {"gpus": n, "nodes": nodes, "size_bytes": size, "bw_net_Bps": bw_net, "node_cut_bound_s": bound,
            "rows": out, "best": out[0]["algorithm"], "best_x_bound": out[0]["x_bound"],
            "target_x_bound": 1.25, "compare_wall_s": round(wall, 2)}


def dgx1(size: float) -> dict:
    topo = make_topology("dgx1", 8)
    bound = 2 * 7 / 8 * size / (6 * 25e9)
    rows = rows_with_ratio(compare(8, size, topo), bound)
    by = {r["algorithm"]: r["completion_s"] for r in rows}
    return {"gpus": 8, "size_bytes": size, "per_gpu_bound_s": bound, "rows": rows, "best": rows[0]["algorithm"],
            "best_x_bound": rows[0]["x_bound"], "target_x_bound": 1.3,
            "ring_over_twoshot": round(by["ring"] / by["twoshot"], 4)}


def _run(cmd: list[str], cwd: str) -> tuple[float, str]:
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return wall, r.stdout


def scale(n: int, size: str) -> dict:
    exe = os.path.join(os.path.dirname(sys.executable), "collsynth")
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        w_synth, _ = _run([exe, "synth", "-a", "hierarchical", "-n", str(n), "-t", "h100-cluster", "--size", size,
                           "-o", "h.json"], tmp)
        w_verify, vout = _run([exe, "verify", "h.json"], tmp)
        w_sim, sout = _run([exe, "simulate", "h.json", "--size", size, "-t", "h100-cluster", "--json"], tmp)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        info = json.loads(subprocess.run([exe, "info", "h.json", "--json"], cwd=tmp, capture_output=True,
                                         text=True, check=True).stdout)
        file_mb = os.path.getsize(os.path.join(tmp, "h.json")) / 2**20
    sim = json.loads(sout)
    meta = info["meta"]
    return {"gpus": n, "synth_s": round(w_synth, 2), "verify_s": round(w_verify, 2), "simulate_s": round(w_sim, 2),
            "total_s": round(w_synth + w_verify + w_sim, 2), "peak_rss_gib": round(max(peak, before) / 2**20, 3),
            "verify": vout.strip()[:160], "transfers": info["transfers"], "chunks": info["chunks"],
            "steps": info["steps"], "pipeline": meta.get("pipeline"), "inter": meta.get("inter"),
            "file_mib": round(file_mb, 1), "completion_s": sim["completion_s"],
            "node_cut_bound_s": node_cut_bound(n // 8, 8, parse_size(size), 50e9)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--size", default="1GiB")
    ap.add_argument("--scale", default="1024", help="comma-separated GPU counts for the CLI pipeline ('' = none)")
    args = ap.parse_args()
    size = float(parse_size(args.size))
    res: dict[str, object] = {"cpus": os.cpu_count(), "numpy": np.__version__}
    res["h100_cluster"] = h100_cluster(args.nodes, size)
    fixture = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fixtures",
                           "topologies", "dgx_h100_8nic.xml")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"h100-{args.nodes}x8.json")
        exe = os.path.join(os.path.dirname(sys.executable), "collsynth")
        _run([exe, "topology", "import", fixture, "--nodes", str(args.nodes), "--fabric", "rail", "-o", path], tmp)
        res["h100_json"] = h100_cluster(args.nodes, size, path)
    res["dgx1"] = dgx1(size)
    res["scale"] = [scale(int(x), args.size) for x in args.scale.split(",") if x.strip()]
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
