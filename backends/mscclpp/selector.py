"""Generated plan selectors for MSCCL++ (Python, and C++ for its NCCL-compatible library).

``render_selector_files(manifest)`` renders, from a plan manifest (library.py, or ``selector_manifest``
for any folder of plans):

- ``selector.py``: standalone Python (no collsynth import) with the plan table compiled in and
  ``select_plan(collective, world_size, message_bytes, inplace, late_rank=None, ranks_per_node=None)``;
- ``collsynth_mscclpp_selector.h`` / ``.cc``: the same rules in C++. Built plainly it is a table and
  ``collsynth_mscclpp::select_plan``; with ``-DCOLLSYNTH_WITH_MSCCLPP`` it also has ``register_plans(dir,
  rank)``, which registers every plan as an MSCCL++ ``DslAlgorithm`` and installs the selector with
  ``AlgorithmCollectionBuilder::setAlgorithmSelector`` (the NCCL shim then asks it first, and falls back
  to MSCCL++'s own choice when it returns nothing);
- ``run_plans.py``: every plan through MSCCL++'s executor against NCCL's AllReduce on GPUs.

Selection rules, the same as the MSCCL scheduler plugin's (backends/nccl/plugin.py) plus MSCCL++'s own
matching (docs/mscclpp-plan.md, "Choosing a plan"): the collective, the world size and ranks per node
match; the message size (the total output for allgather) lies in the plan's range and is a multiple of its
granularity (16 bytes times its chunk count: the executor refuses other sizes); the buffer mode matches.
Plans tied to a late set (one rank: StragglAR, a cluster's late GPU; several: a cluster's late node; the
entry's ``late``) are chosen first when the late set in force is exactly theirs: ``late_ranks`` /
``late_rank`` (Python), ``set_late`` / ``set_late_rank`` (C++), else ``$COLLSYNTH_STRAGGLER`` ("5", "4-7",
"0,4-7"), the MSCCL scheduler plugin's rules (backends/nccl/plugin.py; the C++ parsing and matching are
rendered from its template, nccl/late_set.inc.j2); then the plans for punctual ranks; first match in
manifest order.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from collsynth.backends.mscclpp.check import read_plan_text
from collsynth.backends.mscclpp.schedule import plan_to_schedule
from collsynth.backends.render import render
from collsynth.errors import CollsynthError
from collsynth.fileio import read_text

_FILE_OK = re.compile(r"^[A-Za-z0-9._+-]+\.json$")
_NAME_OK = re.compile(r"^[A-Za-z0-9._+-]+$")


def render_selector_files(manifest: dict[str, Any]) -> dict[str, str]:
    """selector.py, collsynth_mscclpp_selector.{h,cc} and run_plans.py for a manifest's entries."""
    rows = []
    late_ranks: list[int] = []
    entries = [{**e, "late": entry_late(e)} for e in manifest["entries"]]
    for e in entries:
        if not _NAME_OK.match(str(e["name"])) or not _FILE_OK.match(os.path.basename(str(e["file"]))):
            raise CollsynthError(f"plan {e['name']!r} ({e['file']}): use letters, digits and ._+- in names and files "
                                 "(they are compiled into the selector as strings)")
        late = e["late"]
        rows.append({**e, "straggler": late[0] if late else -1, "nlate": len(late), "late_at": len(late_ranks)})
        late_ranks.extend(late)
    table = "[\n" + "".join(f"    {e!r},\n" for e in entries) + "]"
    ctx = {"rows": rows, "nplans": len(rows), "table": table, "late_ranks": ", ".join(map(str, late_ranks)) or "-1",
           "nlate_max": max([len(e["late"]) for e in entries] + [1])}
    return {"selector.py": render("mscclpp/selector.py.j2", **ctx),
            "collsynth_mscclpp_selector.h": render("mscclpp/selector.h.j2", **ctx),
            "collsynth_mscclpp_selector.cc": render("mscclpp/selector.cc.j2", **ctx),
            "run_plans.py": render("mscclpp/run_plans.py.j2", **ctx)}


def entry_late(e: dict[str, Any]) -> list[int]:
    """A manifest entry's late set, sorted: its ``late`` ranks, else its one ``straggler``, else [] (punctual)."""
    late = e.get("late")
    if isinstance(late, list):
        return sorted(int(r) for r in late)
    return [] if e.get("straggler") is None else [int(e["straggler"])]


def plan_late(meta: dict[str, Any], nranks: int) -> list[int]:
    """The late set a plan's collsynth record names: ``late`` (emit.py writes it for several late ranks, e.g. a
    cluster's late node), else ``straggler`` (one rank), else [] (punctual); ranks outside 0..n-1 are refused."""
    late = meta.get("late")
    if isinstance(late, list) and late and all(isinstance(r, int) and not isinstance(r, bool) for r in late):
        got = sorted(set(late))
    else:
        s = meta.get("straggler")
        got = [s] if isinstance(s, int) and not isinstance(s, bool) else []
    bad = [r for r in got if not 0 <= r < nranks]
    return [] if bad else got


def selector_manifest(plan_dir: str) -> dict[str, Any]:
    """A manifest for every ``*.json`` plan in ``plan_dir`` (each checked; the late rank from collsynth's
    record, else none)."""
    if not os.path.isdir(plan_dir):
        raise CollsynthError(f"{plan_dir} is not a directory: give the folder that holds the MSCCL++ plans")
    names = sorted(f for f in os.listdir(plan_dir) if f.endswith(".json") and os.path.isfile(os.path.join(plan_dir, f)))
    if not names:
        raise CollsynthError(f"{plan_dir} holds no .json plans: emit some with `collsynth emit ... --format "
                             f"mscclpp-plan`")
    items = []
    for f in names:
        path = os.path.join(plan_dir, f)
        plan = read_plan_text(read_text(path), path)
        plan_to_schedule(plan)  # checks the plan (CollsynthError naming the problem when it does not verify)
        meta = plan.meta
        g0 = plan.gpus[0]
        late = plan_late(meta, plan.nranks)
        gpn = meta.get("gpus_per_node")
        items.append({"name": plan.name, "file": f, "algorithm": meta.get("algorithm"),
                      "collective": plan.collective, "world_size": plan.nranks,
                      "ranks_per_node": gpn if isinstance(gpn, int) else plan.nranks,
                      "protocol": "LL" if plan.packets else "Simple", "inplace": plan.inplace,
                      "min_bytes": plan.min_size, "max_bytes": plan.max_size,
                      "straggler": late[0] if len(late) == 1 else None, "late": late,
                      "granularity": plan.alignment * (g0.output_chunks if plan.collective == "allgather"
                                                       else g0.input_chunks)})
    return {"entries": items}


def render_mscclpp_selector(plan_dir: str) -> dict[str, str | bytes]:
    """The selector files for a folder of plans, with the plans copied into ``plans/``."""
    manifest = selector_manifest(plan_dir)
    out: dict[str, str | bytes] = dict(render_selector_files(
        {"entries": [{**e, "file": f"plans/{e['file']}"} for e in manifest["entries"]]}))
    for e in manifest["entries"]:
        with open(os.path.join(plan_dir, e["file"]), "rb") as fh:
            out[f"plans/{e['file']}"] = fh.read()
    out["MANIFEST.json"] = json.dumps({"format": "collsynth-mscclpp-plan-selection", "version": 1,
                                       "entries": [{**e, "file": f"plans/{e['file']}"} for e in
                                                   manifest["entries"]]}, indent=1) + "\n"
    return out
