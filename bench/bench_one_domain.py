"""clusterstraggler in one NVLink domain (no nodes of 2 or more GPUs: dgx-h100, gb200-nvl72, nvswitch): its flat
form (multistraggler), with one late GPU its broadcast form (synth/algorithms/stragglar/domain.py, since the
second session of 2026-12-05) and the fastest synchronous AllReduce (synth/algorithms/synchronous.py), model
numbers. Per row: the time after the arrival of clusterstraggler (what it returns, named), of multistraggler
alone (what clusterstraggler returned before the first session of 2026-12-05), of the broadcast form alone and
of the fastest synchronous schedule, and clusterstraggler over the proven bound (synth/bounds.py). Every
schedule is verified. Prints JSON.

    python bench/bench_one_domain.py [--cases gb200-nvl72:72,dgx-h100:8,nvswitch:256]
        [--sizes 1MiB,64MiB,256MiB,1GiB] [--delays 1ms,10ms]
"""

from __future__ import annotations

import argparse
import json

from collsynth.synth.algorithms import synchronous
from collsynth.synth.algorithms.stragglar import domain
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
    ap.add_argument("--cases", default="gb200-nvl72:72,dgx-h100:8,nvswitch:256")
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
                bcast = domain.build(n, times, size, topo)
                sync = synchronous.fastest(n, topo, size, times, keep=False)
                after = simulate(ours, size, topo, arr).after_last_arrival_s
                flat_after = simulate(flat, size, topo, arr).after_last_arrival_s
                bcast_after = None if bcast is None else simulate(check(bcast), size, topo, arr).after_last_arrival_s
                bound = allreduce_bound(topo, size, times).after_last_arrival_s
                returned = ours.meta.get("synchronous") or ("domain" if ours.meta.get("form") == "domain"
                                                            else "multistraggler")
                rows.append({"topology": spec, "gpus": n, "size": size_text, "delay": delay_text,
                             "returned": returned, "clusterstraggler_us": round(after * 1e6, 3),
                             "multistraggler_us": round(flat_after * 1e6, 3),
                             "domain_us": None if bcast_after is None else round(bcast_after * 1e6, 3),
                             "best_sync": sync.name,
                             "best_sync_us": round((sync.completion_s - float(times.max())) * 1e6, 3),
                             "bound_us": round(bound * 1e6, 3), "x_bound": round(after / bound, 4)})
    print(json.dumps({"bench": "one_domain", "late_rank": LATE, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
