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
Plans tied to a late rank are chosen first, when the late rank (``late_rank``, else
``$COLLSYNTH_STRAGGLER``) is that rank; then the plans for punctual ranks; first match in manifest order.
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
    for e in manifest["entries"]:
        if not _NAME_OK.match(str(e["name"])) or not _FILE_OK.match(os.path.basename(str(e["file"]))):
            raise CollsynthError(f"plan {e['name']!r} ({e['file']}): use letters, digits and ._+- in names and files "
                                 "(they are compiled into the selector as strings)")
        rows.append({**e, "straggler": -1 if e["straggler"] is None else int(e["straggler"])})
    table = "[\n" + "".join(f"    {e!r},\n" for e in manifest["entries"]) + "]"
    ctx = {"rows": rows, "nplans": len(rows), "table": table}
    return {"selector.py": render("mscclpp/selector.py.j2", **ctx),
            "collsynth_mscclpp_selector.h": render("mscclpp/selector.h.j2", **ctx),
            "collsynth_mscclpp_selector.cc": render("mscclpp/selector.cc.j2", **ctx),
            "run_plans.py": render("mscclpp/run_plans.py.j2", **ctx)}


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
        late = meta.get("straggler")
        gpn = meta.get("gpus_per_node")
        items.append({"name": plan.name, "file": f, "algorithm": meta.get("algorithm"),
                      "collective": plan.collective, "world_size": plan.nranks,
                      "ranks_per_node": gpn if isinstance(gpn, int) else plan.nranks,
                      "protocol": "LL" if plan.packets else "Simple", "inplace": plan.inplace,
                      "min_bytes": plan.min_size, "max_bytes": plan.max_size,
                      "straggler": late if isinstance(late, int) and 0 <= late < plan.nranks else None,
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
