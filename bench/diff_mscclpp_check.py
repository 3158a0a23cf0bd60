"""Differential check of the MSCCL++ plan checker: the same plans, this tree's checker against another
tree's (a commit checked out with `git worktree add`). Prints JSON; every verdict, message and race list
must agree unless a change of the checker meant to change them.

    git worktree add /tmp/old <commit> && mkdir -p /tmp/oldpkg && ln -s /tmp/old /tmp/oldpkg/collsynth
    .venv/bin/python bench/diff_mscclpp_check.py --old /tmp/oldpkg [--mutants 60] [--seed 7]

Plans: emitted ones (ring, pipelined ring over 2 nodes, StragglAR Simple and LL, rhd, hierarchical Simple
and LL, multiring and clusterstraggler on h100-cluster: port channels and proxies), the real plans of
../shared/vectors/mscclpp, and random mutants of each (an op deleted, two ops swapped, a buffer index
moved, an op duplicated, a nop deleted), so that races, deadlocks, unbalanced semaphores and wrong results
all occur.
"""

from __future__ import annotations

import argparse
import copy
import glob
import json
import os
import random
import subprocess
import sys
import tempfile

_CHECK = r"""
import glob, json, os, sys
from collsynth.backends.mscclpp import check_plan_text
from collsynth.backends.mscclpp.model import PlanFormatError
res = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        r = check_plan_text(open(f).read(), "p")
        res[os.path.basename(f)] = [r.ok, r.kind, r.message, list(r.details)]
    except PlanFormatError as e:
        res[os.path.basename(f)] = ["format", str(e)]
print(json.dumps(res))
"""


def bases() -> dict[str, dict]:
    from collsynth.backends.mscclpp import emit_plan
    from collsynth.synth.registry import build_schedule

    gib = float(2**30)
    cases = {"ring4": (("ring", 4), {}, {}), "ring4_2nodes_pipelined": (("ring", 4), {}, {"gpus_per_node": 2,
                                                                                            "pipeline": 256}),
             "stragglar6": (("stragglar", 6), {}, {}), "stragglar6_LL": (("stragglar", 6), {}, {"proto": "LL"}),
             "rhd8": (("rhd", 8), {}, {}),
             "hierarchical16": (("hierarchical", 16), {"topology": "h100-cluster", "size": gib}, {}),
             "hierarchical16_LL": (("hierarchical", 16), {"topology": "h100-cluster", "size": gib}, {"proto": "LL"}),
             "multiring16": (("multiring", 16), {"topology": "h100-cluster"}, {}),
             "clusterstraggler16_gpu": (("clusterstraggler", 16), {"topology": "h100-cluster", "size": gib,
                                                                   "arrivals": {5: 0.01}}, {}),
             "clusterstraggler16_node": (("clusterstraggler", 16), {"topology": "h100-cluster", "size": gib,
                                                                    "arrivals": {r: 0.01 for r in range(8)}}, {})}
    out = {name: json.loads(emit_plan(build_schedule(*args, **params), **opts))
           for name, (args, params, opts) in cases.items()}
    here = os.path.dirname(os.path.abspath(__file__))
    for f in sorted(glob.glob(os.path.join(here, "..", "..", "shared", "vectors", "mscclpp", "*.json"))):
        with open(f, encoding="utf-8") as fh:
            out["vector_" + os.path.basename(f)[:-5]] = json.load(fh)
    return out


def mutants(plan: dict, k: int, rng: random.Random) -> list[tuple[str, dict]]:
    slots = [(g, t, i) for g, gpu in enumerate(plan["gpus"]) for t, tb in enumerate(gpu["threadblocks"])
             for i in range(len(tb["ops"]))]
    out = []
    for m in range(k):
        p = copy.deepcopy(plan)
        g, t, i = rng.choice(slots)
        ops = p["gpus"][g]["threadblocks"][t]["ops"]
        kind = rng.choice(["delete", "swap", "index", "duplicate", "delete_nop"])
        if kind == "delete":
            del ops[i]
        elif kind == "swap" and i + 1 < len(ops):
            ops[i], ops[i + 1] = ops[i + 1], ops[i]
        elif kind == "index" and any(ops[i].get(s) for s in ("src_buff", "dst_buff")):
            ref = rng.choice([r for s in ("src_buff", "dst_buff") for r in ops[i].get(s, [])])
            ref["index"] = max(0, ref["index"] + rng.choice([-1, 1]))
        elif kind == "duplicate":
            ops.insert(i, copy.deepcopy(ops[i]))
        elif kind == "delete_nop" and any(o["name"] == "nop" for o in ops):
            del ops[rng.choice([j for j, o in enumerate(ops) if o["name"] == "nop"])]
        else:
            continue
        out.append((f"m{m}_{kind}", p))
    return out


def verdicts(folder: str, pythonpath: str | None) -> dict:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    p = subprocess.run([sys.executable, "-c", _CHECK, folder], capture_output=True, text=True, env=env, check=True)
    return json.loads(p.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="a folder holding the other tree as `collsynth` (for PYTHONPATH)")
    ap.add_argument("--mutants", type=int, default=60, help="mutants per plan (default %(default)s)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as d:
        for name, plan in bases().items():
            for tag, p in [("base", plan), *mutants(plan, args.mutants, rng)]:
                with open(os.path.join(d, f"{name}__{tag}.json"), "w", encoding="utf-8") as f:
                    json.dump(p, f)
        new, old = verdicts(d, None), verdicts(d, args.old)
    differ = sorted(k for k in new if new[k] != old.get(k))
    kinds: dict[str, int] = {}
    for v in new.values():
        key = "format" if v[0] == "format" else ("ok" if v[0] else v[1])
        kinds[key] = kinds.get(key, 0) + 1
    print(json.dumps({"plans": len(new), "verdicts": kinds, "differ": len(differ),
                      "examples": [{"plan": k, "old": old.get(k, [None])[:3], "new": new[k][:3]} for k in differ[:5]]},
                     indent=1))
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
