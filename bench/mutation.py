"""Mutation testing of synth/ and backends/ with cosmic-ray (`make mutation`, opt-in, long).

Each target is a set of modules and the tests that cover them. The tracked files are copied to
build/mutation/<target>/collsynth and mutated there (never in the working tree; PYTHONPATH makes the
copy the imported ``collsynth``). For every mutant cosmic-ray runs the target's tests
(``pytest -x``); a mutant is killed when they fail, survives when they pass.

Operators: a bounded set (one natural replacement per binary operator, boundary flips of comparisons,
and/or, not, booleans, numbers +-1, break/continue, zero-iteration loops); the full cross product of
cosmic-ray's operators is ~10x larger and mostly duplicates. Survivors are listed with their diff in
build/mutation/<target>/survivors.txt. Survivors judged equivalent (no input can tell them apart from
the original) are listed with the reason in bench/mutation_equivalent.json, keyed by module, operator
and the mutated source line before and after; the score is killed / (mutants - incompetent - equivalent). The last run
and its classification are quoted in docs/mutation.md.

    python bench/mutation.py --targets verify,ir,msccl-check   # the representative subset
    python bench/mutation.py --list                            # every target
    python bench/mutation.py                                   # all targets (hours on 2 cores)

Prints one JSON object: per target mutants, killed, survived, incompetent, timeouts, equivalent,
score; and the totals.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EQUIVALENT = os.path.join(ROOT, "bench", "mutation_equivalent.json")

# operators kept (cosmic-ray names without "core/"); everything else is filtered out
KEEP = {
    *(f"ReplaceBinaryOperator_{a}_{b}" for a, b in (
        ("Add", "Sub"), ("Sub", "Add"), ("Mul", "Add"), ("Div", "Mul"), ("FloorDiv", "Mul"), ("Mod", "FloorDiv"),
        ("Pow", "Mul"), ("LShift", "RShift"), ("RShift", "LShift"), ("BitOr", "BitAnd"), ("BitAnd", "BitOr"),
        ("BitXor", "BitOr"))),
    *(f"ReplaceComparisonOperator_{a}_{b}" for a, b in (
        ("Lt", "LtE"), ("LtE", "Lt"), ("Gt", "GtE"), ("GtE", "Gt"), ("Eq", "NotEq"), ("NotEq", "Eq"),
        ("Is", "IsNot"), ("IsNot", "Is"), ("In", "NotIn"), ("NotIn", "In"))),
    "ReplaceUnaryOperator_Delete_Not", "ReplaceUnaryOperator_Delete_USub", "ReplaceUnaryOperator_Delete_Invert",
    "AddNot", "ReplaceTrueWithFalse", "ReplaceFalseWithTrue", "ReplaceAndWithOr", "ReplaceOrWithAnd",
    "ReplaceBreakWithContinue", "ReplaceContinueWithBreak", "NumberReplacer", "ZeroIterationForLoop",
}

KS = "tests/test_mutation_kills_synth.py"  # tests for survivors of the sampled run (synth/)
KB = "tests/test_mutation_kills_backends.py"  # (backends/)

# the late-GPU/late-node StragglAR forms: their own tests (test_stragglar*.py never reach them)
STRAGGLAR_CLUSTER = [f"synth/algorithms/stragglar/{m}.py"
                     for m in ("cluster", "cluster_cost", "cluster_study", "fanout", "multi", "prephase", "waves")]
# the rail broadcasts, the list-scheduling model's Busy intervals and the trees: target "bcast" (one target each)
BCAST = ["synth/algorithms/stragglar/bcast.py", "synth/algorithms/stragglar/circulant.py",
         "synth/algorithms/stragglar/listsched.py", "synth/trees.py"]

# target -> (modules, tests that cover them); the first three are the representative subset
TARGETS: dict[str, tuple[list[str], list[str]]] = {
    "verify": (["synth/verify.py"], ["tests/test_verify.py", "tests/test_cluster_topology.py",
                                     "tests/test_cluster_algorithms.py", KS]),
    "ir": (["synth/ir.py"], ["tests/test_ir.py", "tests/test_verify.py",
                             "tests/test_bad_input.py::test_schedule_fields_are_range_checked_before_use",
                             "tests/test_bad_input.py::test_info_on_an_out_of_range_rank_is_bad_input_and_verify_a_verdict",
                             "tests/test_bad_input.py::test_verify_estimates_its_memory_before_allocating",
                             KS]),
    "msccl-check": (["backends/msccl/check.py"], ["tests/test_msccl_check.py", KB]),
    "msccl-execute": (["backends/msccl/execute.py"], ["tests/test_msccl_check.py", KB]),
    "simulate": (["synth/simulate.py", "synth/arrivals.py"],
                 ["tests/test_simulate.py", "tests/test_arrival_offsets.py", KS]),
    "topology": (sorted(glob.glob("synth/topology/*.py", root_dir=ROOT)),
                 ["tests/test_topology.py", "tests/test_cluster_topology.py", "tests/test_gpu_model.py",
                  "tests/test_uneven_nodes.py", KS]),  # gpus.py; restrict.py
    "bounds-compare": (["synth/bounds.py", "synth/compare.py"], ["tests/test_algorithms.py", "tests/test_cli.py",
                                                             "tests/test_bounds.py", KS]),
    "algorithms": (sorted(glob.glob("synth/algorithms/*.py", root_dir=ROOT)),
                   ["tests/test_algorithms.py", "tests/test_cluster_algorithms.py", "tests/test_estimate.py",
                    "tests/test_radix.py", "tests/test_synchronous.py", "tests/test_uneven_nodes.py", KS]),
    "stragglar": (sorted(set(glob.glob("synth/algorithms/stragglar/*.py", root_dir=ROOT)) - set(STRAGGLAR_CLUSTER)
                         - set(BCAST)),
                  ["tests/test_stragglar.py", "tests/test_cluster_family.py", "tests/test_solver_rounds.py",
                   "tests/test_stragglar_pipeline.py", "tests/test_domain.py", "tests/test_funnel.py",
                   "tests/test_uneven_nodes.py", "tests/test_workers.py", KS]),  # domain, funnel, choose
    "stragglar-cluster": (STRAGGLAR_CLUSTER, ["tests/test_waves.py", "tests/test_multistraggler.py",
                                              "tests/test_clusterstraggler.py", "tests/test_cluster_study.py",
                                              "tests/test_node_bcast.py", "tests/test_fanout.py", KS]),
    "solver": (sorted(glob.glob("synth/solver/*.py", root_dir=ROOT)),
               ["tests/test_solver.py", "tests/test_solver_rounds.py", "tests/test_solver_moves.py",
                "tests/test_solver_lns.py", KS]),
    "msccl": (sorted(set(glob.glob("backends/msccl/*.py", root_dir=ROOT))
                     - {"backends/msccl/check.py", "backends/msccl/execute.py"}),
              ["tests/test_msccl_check.py", "tests/test_msccl_cli.py", "tests/test_msccl_emit.py",
               "tests/test_stragglar_pipeline.py::test_msccl_xml_pipeline_limit_is_one_line_with_the_largest_k",
               "tests/test_msccl_library.py", KB]),  # fast first (-x stops at the first failure); library: 30 s
    "mscclpp": (sorted(glob.glob("backends/mscclpp/*.py", root_dir=ROOT)),
                ["tests/test_mscclpp_check.py", "tests/test_mscclpp_memory.py", "tests/test_mscclpp_library.py",
                 "tests/test_mscclpp_emit.py", "tests/test_mscclpp_fit.py", "tests/test_mscclpp_cluster_selector.py",
                 KB]),
    "nccl": (sorted(glob.glob("backends/nccl/*.py", root_dir=ROOT)),
             ["tests/test_nccl_plan.py", "tests/test_nccl_codegen.py", "tests/test_nccl_cli.py",
              "tests/test_nccl_plugin.py", KB]),
    "torch": (sorted(glob.glob("backends/torch/*.py", root_dir=ROOT)),
              ["tests/test_torch_exec.py", "tests/test_torch_faults.py", "tests/test_torch_cmds.py", KB]),
    "backends-common": (["backends/__init__.py", "backends/layout.py", "backends/render.py", "backends/libraries.py",
                         "backends/cost.py"], ["tests/test_backends.py", "tests/test_emit_estimate.py", KB]),
    "topology-import": (sorted(glob.glob("synth/topology_import/*.py", root_dir=ROOT)),
                        ["tests/test_topology_import.py", KS]),
    "topology-view": (["synth/topology_view.py"], ["tests/test_topology_show.py", KS]),
    "composition": (["synth/composition.py"],
                    ["tests/test_cluster_algorithms.py", "tests/test_hierarchical_intra.py",
                     "tests/test_uneven_nodes.py", KS]),  # NodeSteps: the ring form on nodes of unequal size
    "bruck": (["synth/bruck.py"], ["tests/test_wide_nodes.py", KS]),
    "registry": (["synth/registry.py", "synth/__init__.py"],
                 ["tests/test_algorithms.py", "tests/test_verify.py", KS]),
    # the rail broadcasts of the cluster forms (2026-12-02: phantom cubes, copy-back, ClusterPlan.rule), the
    # list-scheduling model's Busy intervals and the broadcast/AllReduce trees: their fastest tests (~25 s)
    "bcast": (BCAST,
              ["tests/test_bcast_rounds.py", "tests/test_bcast_circulant.py", "tests/test_listsched_busy.py",
               "tests/test_trees_shapes.py",
               "tests/test_clusterstraggler.py::test_copyback_rounds_deliver_every_block_once_per_round_and_port",
               "tests/test_clusterstraggler.py::test_late_node_on_nodes_not_a_power_of_two_keeps_the_faster_broadcast",
               "tests/test_cluster_algorithms.py::test_double_binary_tree_verifies",
               "tests/test_cluster_algorithms.py::test_tree_cost_near_twice_the_bandwidth_term",
               "tests/test_waves.py", "tests/test_funnel.py"]),
}
SUBSET = ["verify", "ir", "msccl-check"]

# slow tests left out of a target's first pass (--deselect): every mutant they alone would kill is a
# survivor of that pass, and --rerun-survivors runs the survivors against the full list, these included
SLOW: dict[str, list[str]] = {
    "msccl": ["tests/test_msccl_library.py::test_regenerate_matches_the_committed_library",  # 30 s
              "tests/test_msccl_emit.py::test_lanes_for_more_than_32_peers"],  # 10 s
    "mscclpp": ["tests/test_mscclpp_emit.py::test_a_schedule_that_needs_too_many_thread_blocks_names_the_largest_"
                "that_fits",  # 34 s; the multiring and tree cluster plans: 80 s
                *(f"tests/test_mscclpp_emit.py::test_cluster_schedules_use_port_channels_across_nodes[{p}-{a}]"
                  for p in ("Simple", "LL") for a in ("multiring-kw1", "tree-kw2"))],
    "stragglar-cluster": ["tests/test_cluster_study.py::test_cli_json_plot_and_determinism"],  # 26 s
}


def uncovered() -> list[str]:
    """The modules of synth/ and backends/ that no target mutates (should be none)."""
    mine = {m for modules, _ in TARGETS.values() for m in modules}
    every = glob.glob("synth/**/*.py", root_dir=ROOT, recursive=True) + glob.glob("backends/**/*.py", root_dir=ROOT,
                                                                                   recursive=True)
    return sorted(set(every) - mine)


def _run(cmd: list[str], cwd: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"mutation: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    return r.stdout


def _copy_tree(dest: str, keep: Callable[[str], bool] = lambda f: True) -> None:
    """The tracked and untracked-but-not-ignored files of the repository (those keep accepts), copied to dest."""
    files = _run(["git", "ls-files", "-co", "--exclude-standard", "-z"], ROOT).split("\0")
    for f in filter(keep, filter(None, files)):
        src = os.path.join(ROOT, f)
        if not os.path.isfile(src):
            continue
        out = os.path.join(dest, f)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.copy2(src, out)


def _key(module: str, operator: str, diff: str) -> str:
    """module|operator|the source line before|after the mutation (stable when other lines move)."""
    old = next((ln[1:] for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")), "")
    new = next((ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")), "")
    return f"{module}|{operator}|{old.strip()}|{new.strip()}"


def run_target(name: str, timeout: float, python: str) -> dict[str, object]:
    modules, tests = TARGETS[name]
    work = os.path.join(ROOT, "build", "mutation", name)
    shutil.rmtree(work, ignore_errors=True)
    pkg = os.path.join(work, "collsynth")
    _copy_tree(pkg)
    env = dict(os.environ, PYTHONPATH=work, PYTHONDONTWRITEBYTECODE="1")
    bindir = os.path.dirname(python)
    cfg = os.path.join(work, "config.toml")
    test_cmd = _configure(name, work, pkg, cfg, timeout, python)
    db = os.path.join(work, "session.sqlite")
    t0 = time.perf_counter()
    base = subprocess.run(test_cmd.split(), cwd=pkg, env=env, capture_output=True, text=True)
    if base.returncode != 0:
        raise SystemExit(f"mutation: the tests of target {name} fail before mutating: {base.stdout[-1500:]}")
    _run([os.path.join(bindir, "cosmic-ray"), "init", cfg, db], pkg, env)
    _run([os.path.join(bindir, "cr-filter-operators"), db, cfg], pkg, env)
    print(f"mutation: {name}: {' '.join(modules)} against {' '.join(tests)}", file=sys.stderr, flush=True)
    _run([os.path.join(bindir, "cosmic-ray"), "exec", cfg, db], pkg, env)
    return summarize(name, db, pkg, env, bindir, time.perf_counter() - t0)


SAMPLE = os.path.join(ROOT, "build", "mutation", "sample")


def _configure(name: str, work: str, pkg: str, cfg: str, timeout: float, python: str) -> str:
    """Writes the cosmic-ray config of target name to cfg (operators outside KEEP excluded); returns
    the test command."""
    modules, tests = TARGETS[name]
    tests = sorted(tests, key=lambda t: t not in (KS, KB))  # the tests written for survivors first: fail fast
    bindir = os.path.dirname(python)
    ops = [o.strip() for o in _run([os.path.join(bindir, "cosmic-ray"), "operators"], pkg).splitlines() if o.strip()]
    exclude = [f"^{re.escape(o)}$" for o in ops if o.split("/", 1)[-1] not in KEEP]
    deselect = "".join(f" --deselect {t}" for t in SLOW.get(name, []))
    test_cmd = f"{python} -m pytest -x -q -p no:cacheprovider {' '.join(tests)}{deselect}"
    with open(cfg, "w") as f:
        f.write("[cosmic-ray]\n")
        f.write(f"module-path = {json.dumps(modules)}\n")
        f.write(f"timeout = {timeout}\nexcluded-modules = []\n")
        f.write(f"test-command = {json.dumps(test_cmd)}\n\n")
        f.write('[cosmic-ray.distributor]\nname = "local"\n\n')
        f.write(f"[cosmic-ray.filters.operators-filter]\nexclude-operators = {json.dumps(exclude)}\n")
    return test_cmd


def allocate(population: dict[str, int], n: int) -> dict[str, int]:
    """n split over the strata in proportion to their sizes (largest remainder; ties by name)."""
    total = sum(population.values())
    n = min(n, total)
    exact = {m: n * c / total for m, c in population.items()}
    alloc = {m: int(e) for m, e in exact.items()}
    for m in sorted(exact, key=lambda m: (-(exact[m] - alloc[m]), m))[:n - sum(alloc.values())]:
        alloc[m] += 1
    return alloc


def run_sample(names: list[str], n: int, seed: int, timeout: float, python: str) -> dict[str, object]:
    """A uniform random sample of n mutants of every module of names, stratified by module in proportion
    to its mutant count (seeded: the same code, n and seed draw the same mutants), each run against its
    target's tests. Work in build/mutation/sample: one copy of the tree, TARGET.toml and TARGET.sqlite
    per target (holding only the sampled mutants), sample.json (the population and the draw)."""
    import random
    import sqlite3

    shutil.rmtree(SAMPLE, ignore_errors=True)
    pkg = os.path.join(SAMPLE, "collsynth")
    _copy_tree(pkg)
    env = dict(os.environ, PYTHONPATH=SAMPLE, PYTHONDONTWRITEBYTECODE="1")
    bindir = os.path.dirname(python)
    items: dict[str, list[tuple[str, str, tuple[object, ...]]]] = {}  # module -> (target, job id, sort key)
    test_cmds: dict[str, str] = {}
    for name in names:
        cfg, db = os.path.join(SAMPLE, f"{name}.toml"), os.path.join(SAMPLE, f"{name}.sqlite")
        test_cmds[name] = _configure(name, SAMPLE, pkg, cfg, timeout, python)
        _run([os.path.join(bindir, "cosmic-ray"), "init", cfg, db], pkg, env)
        # operators outside KEEP are left out here (their rows are deleted with the ones not drawn below):
        # cr-filter-operators commits one row at a time, minutes per target on a loaded machine
        for line in _run([os.path.join(bindir, "cosmic-ray"), "dump", db], pkg, env).splitlines():
            item, result = json.loads(line)
            mut = item["mutations"][0]
            if result is not None or mut["operator_name"].split("/", 1)[-1] not in KEEP:
                continue
            key = (tuple(mut["start_pos"]), tuple(mut["end_pos"]), mut["operator_name"], mut["occurrence"])
            items.setdefault(mut["module_path"], []).append((name, item["job_id"], key))
    population = {m: len(v) for m, v in sorted(items.items())}
    alloc = allocate(population, n)
    rng = random.Random(seed)
    chosen: dict[str, set[str]] = {name: set() for name in names}
    for m in sorted(items):
        for name, job, _ in rng.sample(sorted(items[m], key=lambda t: t[2]), alloc[m]):
            chosen[name].add(job)
    with open(os.path.join(SAMPLE, "sample.json"), "w") as f:
        json.dump({"n": sum(alloc.values()), "seed": seed, "targets": names, "population": population,
                   "sampled": alloc}, f, indent=1, sort_keys=True)
    print(f"mutation: sample of {sum(alloc.values())} of {sum(population.values())} mutants "
          f"(seed {seed}) over {len(population)} modules", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    for name in names:
        cfg, db = os.path.join(SAMPLE, f"{name}.toml"), os.path.join(SAMPLE, f"{name}.sqlite")
        con = sqlite3.connect(db)
        con.execute("CREATE TEMP TABLE keep (job_id TEXT PRIMARY KEY)")
        con.executemany("INSERT INTO keep VALUES (?)", [(j,) for j in chosen[name]])
        for table in ("work_results", "mutation_specs", "work_items"):
            con.execute(f"DELETE FROM {table} WHERE job_id NOT IN (SELECT job_id FROM keep)")
        con.commit()
        con.close()
        if not chosen[name]:
            continue
        base = subprocess.run(test_cmds[name].split(), cwd=pkg, env=env, capture_output=True, text=True)
        if base.returncode != 0:
            raise SystemExit(f"mutation: the tests of target {name} fail before mutating: {base.stdout[-1500:]}")
        t1 = time.perf_counter()
        _run([os.path.join(bindir, "cosmic-ray"), "exec", cfg, db], pkg, env)
        print(f"mutation: {name}: {len(chosen[name])} mutants in {time.perf_counter() - t1:.0f} s "
              f"({time.perf_counter() - t0:.0f} s so far)", file=sys.stderr, flush=True)
    return sample_report(python, time.perf_counter() - t0)


def _replay_draw(python: str) -> tuple[dict[str, Any], str, dict[str, str], str, dict[str, set[int]]]:
    """The last sampled run's sample.json, its package copy, the environment and bin folder its tests run
    with, and its draw replayed: the positions of each module's sampled mutants (rng.sample picks by
    position, so each module's population count replays it)."""
    import random

    with open(os.path.join(SAMPLE, "sample.json")) as f:
        meta = json.load(f)
    pkg = os.path.join(SAMPLE, "collsynth")
    env = dict(os.environ, PYTHONPATH=SAMPLE, PYTHONDONTWRITEBYTECODE="1")
    draw, pos = random.Random(meta["seed"]), {}
    for m in sorted(meta["population"]):
        pos[m] = set(draw.sample(range(meta["population"][m]), meta["sampled"][m]))
    return meta, pkg, env, os.path.dirname(python), pos


def thin_and_resume(python: str, keep: float | None, timeout: float, only: list[str] | None = None) -> float:
    """Finish the last sampled run: with ``keep``, first drop a seeded random share 1 - keep of each module's
    mutants not run yet (for a run that cannot finish in time; the report weights each module by its
    population over the mutants it ran), then run the pending mutants of every target (of ``only`` when
    given). Each target's pending mutants run against its first-pass test command (the survivor re-runs
    rewrite it), less the tests that fail on the snapshot unmutated (named). Returns seconds."""
    import random
    import sqlite3

    # the draw again for the sessions of targets the interrupted run had not yet cut down to their sample
    meta, pkg, env, bindir, pos = _replay_draw(python)
    rng = random.Random(meta["seed"] + 1)
    t0 = time.perf_counter()
    todo: list[tuple[int, str, str, str]] = []
    for name in meta["targets"]:
        if only is not None and name not in only:
            continue
        cfg, db = os.path.join(SAMPLE, f"{name}.toml"), os.path.join(SAMPLE, f"{name}.sqlite")
        con = sqlite3.connect(db)
        ops = [str(o) for (o,) in con.execute("SELECT DISTINCT operator_name FROM mutation_specs")]
        if con.execute("SELECT COUNT(*) FROM work_results WHERE worker_outcome = 'SKIPPED'").fetchone()[0] or any(
                o.split("/", 1)[-1] not in KEEP for o in ops):  # not cut yet (filtered, or all operators)
            every: dict[str, list[tuple[tuple[object, ...], str]]] = {}
            for job, mod, r0, c0, r1, c1, op, occ in con.execute(
                    "SELECT m.job_id, m.module_path, m.start_pos_row, m.start_pos_col, m.end_pos_row, m.end_pos_col, "
                    "m.operator_name, m.occurrence FROM mutation_specs m LEFT JOIN work_results r "
                    "ON m.job_id = r.job_id WHERE r.job_id IS NULL"):
                if str(op).split("/", 1)[-1] in KEEP:
                    every.setdefault(mod, []).append((((r0, c0), (r1, c1), op, occ), job))
            chosen = [job for mod, items in every.items()
                      for i, (_, job) in enumerate(sorted(items)) if i in pos[mod]]
            con.execute("CREATE TEMP TABLE keep (job_id TEXT PRIMARY KEY)")
            con.executemany("INSERT INTO keep VALUES (?)", [(j,) for j in chosen])
            for table in ("work_results", "mutation_specs", "work_items"):
                con.execute(f"DELETE FROM {table} WHERE job_id NOT IN (SELECT job_id FROM keep)")
            con.commit()
        rows = con.execute("SELECT m.job_id, m.module_path, m.start_pos_row, m.start_pos_col, m.operator_name, "
                           "m.occurrence FROM mutation_specs m LEFT JOIN work_results r ON m.job_id = r.job_id "
                           "WHERE r.job_id IS NULL").fetchall()
        if keep is not None:
            per: dict[str, list[tuple[object, ...]]] = {}
            for row in sorted(rows, key=lambda r: r[1:]):
                per.setdefault(str(row[1]), []).append(row)
            for m, items in sorted(per.items()):
                k = min(len(items), max(1, round(keep * len(items))))
                kept = set(rng.sample(items, k))  # one draw per module (a draw per item dropped whole modules)
                drop = [r[0] for r in items if r not in kept]
                for table in ("mutation_specs", "work_items"):
                    con.executemany(f"DELETE FROM {table} WHERE job_id = ?", [(j,) for j in drop])
                meta.setdefault("dropped", {})[m] = meta.get("dropped", {}).get(m, 0) + len(drop)
                rows = [r for r in rows if r[0] not in set(drop)]
        con.commit()
        con.close()
        if rows:
            todo.append((len(rows), name, cfg, db))
    if keep is not None:
        meta["keep"] = keep
        with open(os.path.join(SAMPLE, "sample.json"), "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
    for k, name, cfg, db in sorted(todo):  # the smallest first: an interrupted resume has reached most targets
        print(f"mutation: {name}: {k} pending mutants", file=sys.stderr, flush=True)
        _first_pass_command(name, cfg, pkg, env, python)
        _run([os.path.join(bindir, "cosmic-ray"), "exec", cfg, db], pkg, env)
    return time.perf_counter() - t0


def _first_pass_command(name: str, cfg: str, pkg: str, env: dict[str, str], python: str) -> None:
    """Set the sampled target's cosmic-ray test command back to its first pass (its tests, survivor tests
    first, SLOW deselected), less the tests that fail on the snapshot unmutated (today's survivor tests
    of behaviour the snapshot predates: with -x they would count every mutant killed)."""
    _, tests = TARGETS[name]
    tests = sorted(tests, key=lambda t: t not in (KS, KB))
    deselect = "".join(f" --deselect {t}" for t in SLOW.get(name, []))
    base = subprocess.run([python, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", *tests, *deselect.split()],
                          cwd=pkg, env=env, capture_output=True, text=True)
    failed = re.findall(r"^FAILED (\S+)", base.stdout, flags=re.M)
    if base.returncode not in (0, 1) or (base.returncode == 1 and not failed):
        raise SystemExit(f"mutation: the tests of target {name} do not run on the snapshot: {base.stdout[-1500:]}")
    if failed:
        print(f"mutation: {name}: left out (they fail on the snapshot unmutated): {' '.join(failed)}",
              file=sys.stderr, flush=True)
    test_cmd = (f"{python} -m pytest -x -q -p no:cacheprovider {' '.join(tests)}{deselect}"
                + "".join(f" --deselect {t}" for t in failed))
    with open(cfg) as f:
        text = f.read()
    with open(cfg, "w") as f:
        f.write(re.sub(r"^test-command = .*$", lambda _: f"test-command = {json.dumps(test_cmd)}", text, flags=re.M))


def restore_thinned(python: str, only: list[str] | None = None) -> int:
    """Put the mutants that ``--thin`` dropped back into the last sampled run's sessions (of ``only`` when
    given), as pending: each target's session is initialised again on the snapshot, the draw replayed, and
    the drawn mutants that the session lacks are added. A module whose mutant count changed since the draw
    is left as it is (named). Returns the number restored."""
    import sqlite3

    meta, pkg, env, bindir, pos = _replay_draw(python)
    dropped = meta.get("dropped", {})
    total = 0
    for name in meta["targets"]:
        if only is not None and name not in only:
            continue
        cfg, db = os.path.join(SAMPLE, f"{name}.toml"), os.path.join(SAMPLE, f"{name}.sqlite")
        with open(cfg) as f:
            modules = json.loads(re.search(r"^module-path = (.*)$", f.read(), flags=re.M).group(1))  # type: ignore[union-attr]
        if not any(dropped.get(m) for m in modules):
            continue
        fresh = os.path.join(SAMPLE, f"{name}.restore.sqlite")
        if os.path.exists(fresh):
            os.remove(fresh)
        _run([os.path.join(bindir, "cosmic-ray"), "init", cfg, fresh], pkg, env)
        con = sqlite3.connect(db)
        con.execute("ATTACH DATABASE ? AS fresh", (fresh,))
        cols = "m.start_pos_row, m.start_pos_col, m.end_pos_row, m.end_pos_col, m.operator_name, m.occurrence"
        have = {(str(r[0]), ((r[1], r[2]), (r[3], r[4]), r[5], r[6]))
                for r in con.execute(f"SELECT m.module_path, {cols} FROM main.mutation_specs m")}
        every: dict[str, list[tuple[tuple[object, ...], str]]] = {}
        for r in con.execute(f"SELECT m.module_path, {cols}, m.job_id FROM fresh.mutation_specs m"):
            if str(r[5]).split("/", 1)[-1] in KEEP:
                every.setdefault(str(r[0]), []).append((((r[1], r[2]), (r[3], r[4]), r[5], r[6]), str(r[7])))
        back: list[str] = []
        for m, items in sorted(every.items()):
            if not dropped.get(m):
                continue
            if len(items) != meta["population"][m]:
                print(f"mutation: {name}: {m} has {len(items)} mutants, {meta['population'][m]} at the draw: "
                      f"its dropped mutants are not restored", file=sys.stderr, flush=True)
                continue
            mine = [job for i, (key, job) in enumerate(sorted(items)) if i in pos[m] and (m, key) not in have]
            back += mine
            dropped[m] -= len(mine)
            print(f"mutation: {name}: {m}: {len(mine)} dropped mutants restored", file=sys.stderr, flush=True)
        con.executemany("INSERT INTO main.work_items SELECT * FROM fresh.work_items WHERE job_id = ?",
                        [(j,) for j in back])
        con.executemany("INSERT INTO main.mutation_specs SELECT * FROM fresh.mutation_specs WHERE job_id = ?",
                        [(j,) for j in back])
        con.commit()
        con.execute("DETACH DATABASE fresh")
        con.close()
        os.remove(fresh)
        total += len(back)
        meta["dropped"] = dropped
        with open(os.path.join(SAMPLE, "sample.json"), "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
    return total


def sample_report(python: str, seconds: float) -> dict[str, object]:
    """The last sampled run (build/mutation/sample), per module and in total: its killed / non-equivalent
    share with a 95% Wilson interval, and each module's and the whole population's mutant count.

    "weighted" in the total counts each run mutant of module m as population(m) / mutants run of m (the
    combined ratio estimator of a sample stratified by module): equal to the plain totals while every
    module ran its proportional share, and the unbiased figure once ``--thin`` dropped some. Its interval
    is Wilson's with Kish's effective sample size (sum of weights)^2 / sum of squared weights."""
    with open(os.path.join(SAMPLE, "sample.json")) as f:
        meta = json.load(f)
    pkg = os.path.join(SAMPLE, "collsynth")
    env = dict(os.environ, PYTHONPATH=SAMPLE)
    bindir = os.path.dirname(python)
    modules: dict[str, object] = {}
    tot: dict[str, object] = dict.fromkeys(COUNTS, 0)
    tot["pending"] = 0
    for name in meta["targets"]:
        db = os.path.join(SAMPLE, f"{name}.sqlite")
        counts = summarize(name, db, pkg, env, bindir, 0.0, os.path.join(SAMPLE, f"{name}-survivors.txt"))
        for k in (*COUNTS, "pending"):
            tot[k] += counts[k]  # type: ignore[operator]
        modules.update(counts["modules"])  # type: ignore[call-overload]
    wk = wl = w2 = 0.0
    for m, pop in meta["population"].items():
        if m in modules:
            c: dict[str, int] = modules[m]  # type: ignore[assignment]
            live = c["mutants"] - c["incompetent"] - c["equivalent"]
            w = pop / c["mutants"]
            wk, wl, w2 = wk + w * c["killed"], wl + w * live, w2 + w * w * live
            modules[m] = {"population": pop, **c}
            if meta.get("dropped", {}).get(m):
                modules[m]["dropped"] = meta["dropped"][m]  # type: ignore[index]
        elif meta["sampled"].get(m):
            modules[m] = {"population": pop, "pending": meta["sampled"][m]}
    _score(tot)
    if wl:
        n_eff = wl * wl / w2
        lo, hi = wilson(round(wk / wl * n_eff), round(n_eff))
        tot["weighted"] = {"score": round(wk / wl, 4), "n_eff": round(n_eff, 1),
                           "wilson95": [round(lo, 4), round(hi, 4)]}
    unrun = sorted(m for m, k in meta["sampled"].items() if k and m not in modules)
    return {"sample": {"n": meta["n"], "seed": meta["seed"], "population": sum(meta["population"].values()),
                       "modules": len(meta["population"]), "keep": meta.get("keep"),
                       "dropped": sum(meta.get("dropped", {}).values()), "modules_not_run": unrun,
                       "seconds": round(seconds)},
            "modules": dict(sorted(modules.items())), "total": tot}


def rerun_survivors(name: str, timeout: float, python: str, sampled: bool = False,
                    new_only: bool = False) -> dict[str, object]:
    """Run the last session's survivors again against the target's test list as it is now (killed
    mutants stay killed: tests are only added). While the target's modules are byte-identical to the
    mutated copy, the copy gets the current files; otherwise the copy's own snapshot is measured. Either
    way the copy must pass its tests unmutated first. sampled: the last sampled run's session of the
    target, whose copy (shared by every target) stays the snapshot it was sampled from except for the
    current survivor tests (KS, KB): the other tests of the snapshot match its code, today's may not."""
    modules, tests = TARGETS[name]
    if sampled:
        work, cfg, db = SAMPLE, os.path.join(SAMPLE, f"{name}.toml"), os.path.join(SAMPLE, f"{name}.sqlite")
    else:
        work = os.path.join(ROOT, "build", "mutation", name)
        cfg, db = os.path.join(work, "config.toml"), os.path.join(work, "session.sqlite")
    pkg = os.path.join(work, "collsynth")
    same = True
    for m in [] if sampled else modules:
        with open(os.path.join(ROOT, m), "rb") as a, open(os.path.join(pkg, m), "rb") as b:
            same = same and a.read() == b.read()
    if sampled:  # the snapshot stays (its tests match its code); only the survivor tests are the current ones
        _copy_tree(pkg, keep=lambda f: f in (KS, KB))
    elif same:
        _copy_tree(pkg)  # the current tests
    else:  # the module moved on: measure the copy's snapshot (its code and its tests) as it is
        print(f"mutation: {name}: modules changed since the last run; re-running on the copy's snapshot",
              file=sys.stderr, flush=True)
    env = dict(os.environ, PYTHONPATH=work, PYTHONDONTWRITEBYTECODE="1")
    tests = sorted(tests, key=lambda t: t not in (KS, KB))  # the tests written for survivors first: fail fast
    import sqlite3

    stale = ""
    if sampled:
        con = sqlite3.connect(db)
        left = con.execute("SELECT COUNT(*) FROM work_results WHERE test_outcome = 'SURVIVED'").fetchone()[0]
        con.close()
        if not left:
            return summarize(name, db, pkg, env, os.path.dirname(python), 0.0,
                             os.path.join(SAMPLE, f"{name}-survivors.txt"))
        # the snapshot's own tests passed unmutated before its first pass; the tests new to it are the
        # survivor tests and the first pass's SLOW ones: run those unmutated, and leave out the ones that
        # fail there (survivor tests of behaviour the snapshot predates), naming them
        new = [t for t in tests if t in (KS, KB)] + ([] if new_only else SLOW.get(name, []))
        r = subprocess.run([python, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", *new], cwd=pkg, env=env,
                           capture_output=True, text=True)
        failed = re.findall(r"^FAILED (\S+)", r.stdout, flags=re.M)
        if r.returncode not in (0, 1) or (r.returncode == 1 and not failed):
            raise SystemExit(f"mutation: the new tests of target {name} do not run on the snapshot: {r.stdout[-1500:]}")
        if failed:
            print(f"mutation: {name}: left out (they fail on the snapshot unmutated): {' '.join(failed)}",
                  file=sys.stderr, flush=True)
        stale = "".join(f" --deselect {t}" for t in failed)
    if new_only:  # a survivor survived the rest of the list already: only the tests written since can kill it
        tests = [t for t in tests if t in (KS, KB)]
    test_cmd = f"{python} -m pytest -x -q -p no:cacheprovider {' '.join(tests)}{stale}"
    if not sampled:
        base = subprocess.run(test_cmd.split(), cwd=pkg, env=env, capture_output=True, text=True)
        if base.returncode != 0:
            raise SystemExit(f"mutation: the tests of target {name} fail before mutating: {base.stdout[-1500:]}")
    with open(cfg) as f:
        text = f.read()
    with open(cfg, "w") as f:
        f.write(re.sub(r"^test-command = .*$", lambda _: f"test-command = {json.dumps(test_cmd)}", text, flags=re.M))
    con = sqlite3.connect(db)
    if new_only:  # the ones judged equivalent stay as they are
        equivalent: dict[str, str] = {}
        if os.path.exists(EQUIVALENT):
            with open(EQUIVALENT) as f:
                equivalent = json.load(f)
        again = []
        for job, mod, op, diff in con.execute(
                "SELECT r.job_id, m.module_path, m.operator_name, r.diff FROM work_results r JOIN mutation_specs m "
                "ON r.job_id = m.job_id WHERE r.test_outcome = 'SURVIVED'").fetchall():
            if _key(str(mod), str(op).split("/", 1)[-1], str(diff or "")) not in equivalent:
                again.append((job,))
        con.executemany("DELETE FROM work_results WHERE job_id = ?", again)
        n = len(again)
    else:
        n = con.execute("DELETE FROM work_results WHERE test_outcome = 'SURVIVED'").rowcount
    con.commit()
    con.close()
    print(f"mutation: {name}: {n} survivors again, against {' '.join(tests)}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    bindir = os.path.dirname(python)
    _run([os.path.join(bindir, "cosmic-ray"), "exec", cfg, db], pkg, env)
    survivors = os.path.join(SAMPLE, f"{name}-survivors.txt") if sampled else None
    return summarize(name, db, pkg, env, bindir, time.perf_counter() - t0, survivors)


COUNTS = ("mutants", "killed", "survived", "incompetent", "timeouts", "equivalent")


def _score(counts: dict[str, object]) -> None:
    """Adds score = killed / (mutants - incompetent - equivalent) and its 95% Wilson interval."""
    killed = int(counts["killed"])  # type: ignore[call-overload]
    live = int(counts["mutants"]) - int(counts["incompetent"]) - int(counts["equivalent"])  # type: ignore[call-overload]
    counts["score"] = round(killed / live, 4) if live else None
    counts["wilson95"] = [round(b, 4) for b in wilson(killed, live)] if live else None


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of a proportion k/n (95% for the default z): E. B. Wilson, "Probable
    inference, the law of succession, and statistical inference", JASA 22 (1927)."""
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def summarize(name: str, db: str, pkg: str, env: dict[str, str], bindir: str, seconds: float,
              survivors_file: str | None = None) -> dict[str, object]:
    """Counts of the session in db (cosmic-ray dump), in total and per module ("modules"); writes the
    survivors with their diff to survivors_file (default: survivors.txt beside the copy)."""
    equivalent: dict[str, str] = {}
    if os.path.exists(EQUIVALENT):
        with open(EQUIVALENT) as f:
            equivalent = json.load(f)
    counts: dict[str, object] = {"mutants": 0, "killed": 0, "survived": 0, "incompetent": 0, "timeouts": 0,
                                 "equivalent": 0, "skipped": 0, "pending": 0}
    per: dict[str, dict[str, int]] = {}
    survivors = []
    for line in _run([os.path.join(bindir, "cosmic-ray"), "dump", db], pkg, env).splitlines():
        item, result = json.loads(line)
        if result is None:  # not run yet (an interrupted or unfinished run: see --report-only)
            counts["pending"] += 1  # type: ignore[operator]
            continue
        if result.get("worker_outcome") == "skipped":  # an operator outside KEEP
            counts["skipped"] += 1  # type: ignore[operator]
            continue
        mut = item["mutations"][0]
        mod = per.setdefault(mut["module_path"], dict.fromkeys(COUNTS, 0))
        worker, outcome = result["worker_outcome"], result["test_outcome"]
        hits = ["mutants"]
        if worker == "timeout":  # the tests did not finish: counted as killed (a mutant that hangs is caught)
            hits += ["timeouts", "killed"]
        elif outcome == "incompetent" or worker in ("exception", "abnormal"):
            hits.append("incompetent")
        elif outcome == "killed":
            hits.append("killed")
        else:
            diff = result.get("diff") or ""
            key = _key(mut["module_path"], mut["operator_name"].split("/", 1)[-1], diff)
            hits.append("equivalent" if key in equivalent else "survived")
            survivors.append((key in equivalent, key, mut["start_pos"], diff))
        for h in hits:
            counts[h] += 1  # type: ignore[operator]
            mod[h] += 1
    path = survivors_file or os.path.join(os.path.dirname(pkg), "survivors.txt")
    with open(path, "w") as f:
        for eq, key, pos, diff in survivors:
            f.write(f"### {'EQUIVALENT' if eq else 'SURVIVED'} {key} at {pos}\n{diff}\n")
    _score(counts)
    counts["seconds"] = round(seconds)
    modules: dict[str, object] = {}
    for m in sorted(per):
        c: dict[str, object] = dict(per[m])
        _score(c)
        modules[m] = c
    counts["modules"] = modules
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default=None, help=f"comma-separated targets (subset: {','.join(SUBSET)})")
    ap.add_argument("--list", action="store_true", help="print the targets and exit")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant's test run (default 120)")
    ap.add_argument("--report-only", action="store_true", help="summarize the last run's sessions without running")
    ap.add_argument("--rerun-survivors", action="store_true",
                    help="run the last session's survivors again with the current tests (modules unchanged)")
    ap.add_argument("--sample", type=int, default=None, metavar="N",
                    help="run a seeded random sample of N mutants of every module of the targets (stratified by "
                         "module) instead of all of them; build/mutation/sample")
    ap.add_argument("--seed", type=int, default=0, help="seed of --sample's draw (default 0)")
    ap.add_argument("--sampled", action="store_true",
                    help="with --report-only, --rerun-survivors or --resume: the last --sample run")
    ap.add_argument("--resume", action="store_true", help="with --sampled: run its pending mutants")
    ap.add_argument("--new-tests-only", action="store_true",
                    help="with --sampled --rerun-survivors: run the survivors (not those judged equivalent) against "
                         "the survivor tests only (tests/test_mutation_kills_*.py), not the whole list again")
    ap.add_argument("--thin", type=float, default=None, metavar="KEEP",
                    help="with --sampled --resume: first keep only this share (0..1] of each module's pending "
                         "mutants (seeded); the report weights modules by population / mutants run")
    ap.add_argument("--restore-thinned", action="store_true",
                    help="with --sampled --resume: first put back the mutants an earlier --thin dropped (the draw "
                         "replayed on the snapshot), so that they run")
    args = ap.parse_args()
    if args.list:
        listing: dict[str, object] = {k: {"modules": m, "tests": t} for k, (m, t) in TARGETS.items()}
        listing["uncovered"] = uncovered()
        print(json.dumps(listing, indent=1))
        return 0
    names = list(TARGETS) if args.targets is None else [t for t in args.targets.split(",") if t]
    unknown = [t for t in names if t not in TARGETS]
    if unknown:
        print(f"mutation: unknown target(s) {', '.join(unknown)}: use {', '.join(TARGETS)}", file=sys.stderr)
        return 2
    if args.sample is not None and args.sample < 1:
        print(f"mutation: --sample {args.sample}: use a positive number of mutants", file=sys.stderr)
        return 2
    python = sys.executable
    if args.sampled:
        if not os.path.exists(os.path.join(SAMPLE, "sample.json")):
            print("mutation: --sampled: no sampled run in build/mutation/sample: run with --sample N first",
                  file=sys.stderr)
            return 2
        seconds = 0.0
        if args.resume:
            only = None if args.targets is None else names
            if args.restore_thinned:
                print(f"mutation: {restore_thinned(python, only)} mutants dropped by --thin restored",
                      file=sys.stderr, flush=True)
            seconds = thin_and_resume(python, args.thin, args.timeout, only)
        if args.rerun_survivors:
            with open(os.path.join(SAMPLE, "sample.json")) as f:
                sampled = json.load(f)["targets"]
            for name in sampled if args.targets is None else [n for n in names if n in sampled]:
                rerun_survivors(name, args.timeout, python, sampled=True, new_only=args.new_tests_only)
        print(json.dumps(sample_report(python, seconds), indent=1))
        return 0
    if args.sample is not None:
        print(json.dumps(run_sample(names, args.sample, args.seed, args.timeout, python), indent=1))
        return 0
    out: dict[str, object] = {}
    for name in names:
        if args.report_only:
            work = os.path.join(ROOT, "build", "mutation", name)
            env = dict(os.environ, PYTHONPATH=work)
            out[name] = summarize(name, os.path.join(work, "session.sqlite"), os.path.join(work, "collsynth"), env,
                                  os.path.dirname(python), 0.0)
        elif args.rerun_survivors:
            out[name] = rerun_survivors(name, args.timeout, python)
        else:
            out[name] = run_target(name, args.timeout, python)
    tot = {k: sum(int(v[k]) for v in out.values()) for k in ("mutants", "killed", "survived", "incompetent",  # type: ignore[index]
                                                              "timeouts", "equivalent")}
    live = tot["mutants"] - tot["incompetent"] - tot["equivalent"]
    out["total"] = {**tot, "score": round(tot["killed"] / live, 4) if live else None}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
