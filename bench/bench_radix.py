"""radix (mixed-radix halving-doubling, synth/algorithms/radix.py) where n is composite and not a power of
two: model numbers from ``compare`` (every default AllReduce built, verified and simulated), the proven bound
it uses, and radix against the ring, rhd and the best of the others. Prints JSON.

    python bench/bench_radix.py [--cases gb200-nvl72:72,nvswitch:12,nvswitch:24,nvswitch:48]
        [--sizes 1MiB,64MiB,1GiB]
"""

from __future__ import annotations

import argparse
import json

from collsynth.synth.compare import compare


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="gb200-nvl72:72,nvswitch:12,nvswitch:24,nvswitch:48")
    ap.add_argument("--sizes", default="1MiB,64MiB,1GiB")
    args = ap.parse_args()
    rows = []
    for case in args.cases.split(","):
        topo, n_text = case.split(":")
        for size in args.sizes.split(","):
            got = {r["algorithm"]: r for r in compare(int(n_text), size, topo)}
            us = {a: round(r["completion_s"] * 1e6, 3) for a, r in got.items()}
            others = {a: v for a, v in us.items() if a != "radix"}
            best = min(others, key=lambda a: (others[a], a))
            rows.append({"topology": topo, "gpus": int(n_text), "size": size,
                         "steps": {a: got[a]["steps"] for a in ("radix", "ring", "rhd")},
                         "radix_us": us["radix"], "ring_us": us["ring"], "rhd_us": us["rhd"],
                         "best_other": best, "best_other_us": others[best],
                         "bound_us": round(got["radix"]["bound_s"] * 1e6, 3),
                         "radix_x_bound": round(got["radix"]["x_bound"], 4),
                         "radix_vs_best_other": round(others[best] / us["radix"], 4)})
    print(json.dumps({"bench": "radix", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
