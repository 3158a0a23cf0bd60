"""clusterstraggler in one NVLink domain (no nodes of 2 or more GPUs: dgx-h100, gb200-nvl72): its flat form
(multistraggler) weighed against the fastest synchronous AllReduce (synth/algorithms/synchronous.py) for one
late GPU, model numbers. Per row: the time after the arrival of clusterstraggler (what it returns, named), of
multistraggler alone (what clusterstraggler returned before 2026-12-05) and of the fastest synchronous
schedule, and clusterstraggler over the proven bound (synth/bounds.py). Every schedule is verified. Prints
JSON.

    python bench/bench_one_domain.py [--cases gb200-nvl72:72,dgx-h100:8] [--sizes 1MiB,64MiB,256MiB,1GiB]
        [--delays 1ms,10ms]
"""

from __future__ import annotations

import argparse
import json

from collsynth.synth.algorithms import synchronous
from collsynth.synth.arrivals import arrival_vector
from collsynth.synth.bounds import allreduce_bound
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology
from collsynth.synth.verify import check
from collsynth.units import parse_size, parse_time

LATE = 5  # the late rank


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="gb200-nvl72:72,dgx-h100:8")
    ap.add_argument("--sizes", default="1MiB,64MiB,256MiB,1GiB")
    ap.add_argument("--delays", default="1ms,10ms")
    args = ap.parse_args()
    rows = []
    for case in args.cases.split(","):
        spec, n_text = case.split(":")
        n = int(n_text)
        topo = make_topology(spec, n)
        for size_text in args.sizes.split(","):
            size = float(parse_size(size_text))
            for delay_text in args.delays.split(","):
                arr = {LATE: parse_time(delay_text)}
                times = arrival_vector(arr, n)
                ours = check(build_schedule("clusterstraggler", n, arrivals=arr, size=size, topology=topo))
                flat = check(build_schedule("multistraggler", n, arrivals=arr, size=size, topology=topo))
                sync = synchronous.fastest(n, topo, size, times, keep=False)
                after = simulate(ours, size, topo, arr).after_last_arrival_s
                flat_after = simulate(flat, size, topo, arr).after_last_arrival_s
                bound = allreduce_bound(topo, size, times).after_last_arrival_s
                rows.append({"topology": spec, "gpus": n, "size": size_text, "delay": delay_text,
                             "returned": ours.meta.get("synchronous", "multistraggler"),
                             "clusterstraggler_us": round(after * 1e6, 3),
                             "multistraggler_us": round(flat_after * 1e6, 3), "best_sync": sync.name,
                             "best_sync_us": round((sync.completion_s - float(times.max())) * 1e6, 3),
                             "bound_us": round(bound * 1e6, 3), "x_bound": round(after / bound, 4)})
    print(json.dumps({"bench": "one_domain", "late_rank": LATE, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
