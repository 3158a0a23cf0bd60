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

# target -> (modules, tests that cover them); the first three are the representative subset
TARGETS: dict[str, tuple[list[str], list[str]]] = {
    "verify": (["synth/verify.py"], ["tests/test_verify.py", "tests/test_cluster_topology.py",
                                     "tests/test_cluster_algorithms.py"]),
    "ir": (["synth/ir.py"], ["tests/test_ir.py", "tests/test_verify.py",
                             "tests/test_bad_input.py::test_schedule_fields_are_range_checked_before_use",
                             "tests/test_bad_input.py::test_info_on_an_out_of_range_rank_is_bad_input_and_verify_a_verdict",
                             "tests/test_bad_input.py::test_verify_estimates_its_memory_before_allocating"]),
    "msccl-check": (["backends/msccl/check.py"], ["tests/test_msccl_check.py"]),
    "msccl-execute": (["backends/msccl/execute.py"], ["tests/test_msccl_check.py"]),
    "simulate": (["synth/simulate.py", "synth/arrivals.py"], ["tests/test_simulate.py"]),
    "topology": (["synth/topology.py"], ["tests/test_topology.py"]),
    "bounds-compare": (["synth/bounds.py", "synth/compare.py"], ["tests/test_algorithms.py", "tests/test_cli.py"]),
    "algorithms": (sorted(glob.glob("synth/algorithms/*.py", root_dir=ROOT)), ["tests/test_algorithms.py"]),
    "stragglar": (sorted(glob.glob("synth/algorithms/stragglar/*.py", root_dir=ROOT)),
                  ["tests/test_stragglar.py", "tests/test_stragglar_pipeline.py"]),
    "solver": (sorted(glob.glob("synth/solver/*.py", root_dir=ROOT)),
               ["tests/test_solver.py", "tests/test_solver_rounds.py"]),
    "msccl": (sorted(set(glob.glob("backends/msccl/*.py", root_dir=ROOT))
                     - {"backends/msccl/check.py", "backends/msccl/execute.py"}),
              ["tests/test_msccl_emit.py", "tests/test_msccl_check.py", "tests/test_msccl_library.py",
               "tests/test_msccl_cli.py"]),
    "mscclpp": (sorted(glob.glob("backends/mscclpp/*.py", root_dir=ROOT)),
                ["tests/test_mscclpp_emit.py", "tests/test_mscclpp_check.py", "tests/test_mscclpp_library.py"]),
    "nccl": (sorted(glob.glob("backends/nccl/*.py", root_dir=ROOT)),
             ["tests/test_nccl_plan.py", "tests/test_nccl_codegen.py", "tests/test_nccl_cli.py",
              "tests/test_nccl_plugin.py"]),
    "torch": (sorted(glob.glob("backends/torch/*.py", root_dir=ROOT)),
              ["tests/test_torch_exec.py", "tests/test_torch_faults.py", "tests/test_torch_cmds.py"]),
    "backends-common": (["backends/layout.py", "backends/render.py", "backends/libraries.py"],
                        ["tests/test_backends.py"]),
}
SUBSET = ["verify", "ir", "msccl-check"]


def _run(cmd: list[str], cwd: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"mutation: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    return r.stdout


def _copy_tree(dest: str) -> None:
    """The tracked and untracked-but-not-ignored files of the repository, copied to dest."""
    files = _run(["git", "ls-files", "-co", "--exclude-standard", "-z"], ROOT).split("\0")
    for f in filter(None, files):
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
    ops = [o.strip() for o in _run([os.path.join(bindir, "cosmic-ray"), "operators"], pkg).splitlines() if o.strip()]
    exclude = [f"^{re.escape(o)}$" for o in ops if o.split("/", 1)[-1] not in KEEP]
    test_cmd = f"{python} -m pytest -x -q -p no:cacheprovider {' '.join(tests)}"
    cfg = os.path.join(work, "config.toml")
    with open(cfg, "w") as f:
        f.write("[cosmic-ray]\n")
        f.write(f"module-path = {json.dumps(modules)}\n")
        f.write(f"timeout = {timeout}\nexcluded-modules = []\n")
        f.write(f"test-command = {json.dumps(test_cmd)}\n\n")
        f.write('[cosmic-ray.distributor]\nname = "local"\n\n')
        f.write(f"[cosmic-ray.filters.operators-filter]\nexclude-operators = {json.dumps(exclude)}\n")
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


def rerun_survivors(name: str, timeout: float, python: str) -> dict[str, object]:
    """Run the last session's survivors again against the target's test list as it is now (killed
    mutants stay killed: tests are only added). While the target's modules are byte-identical to the
    mutated copy, the copy gets the current files; otherwise the copy's own snapshot is measured. Either
    way the copy must pass its tests unmutated first."""
    modules, tests = TARGETS[name]
    work = os.path.join(ROOT, "build", "mutation", name)
    pkg = os.path.join(work, "collsynth")
    db = os.path.join(work, "session.sqlite")
    same = True
    for m in modules:
        with open(os.path.join(ROOT, m), "rb") as a, open(os.path.join(pkg, m), "rb") as b:
            same = same and a.read() == b.read()
    if same:
        _copy_tree(pkg)  # the current tests
    else:  # the module moved on: measure the copy's snapshot (its code and its tests) as it is
        print(f"mutation: {name}: modules changed since the last run; re-running on the copy's snapshot",
              file=sys.stderr, flush=True)
    env = dict(os.environ, PYTHONPATH=work, PYTHONDONTWRITEBYTECODE="1")
    test_cmd = f"{python} -m pytest -x -q -p no:cacheprovider {' '.join(tests)}"
    base = subprocess.run(test_cmd.split(), cwd=pkg, env=env, capture_output=True, text=True)
    if base.returncode != 0:
        raise SystemExit(f"mutation: the tests of target {name} fail before mutating: {base.stdout[-1500:]}")
    cfg = os.path.join(work, "config.toml")
    with open(cfg) as f:
        text = f.read()
    with open(cfg, "w") as f:
        f.write(re.sub(r"^test-command = .*$", lambda _: f"test-command = {json.dumps(test_cmd)}", text, flags=re.M))
    import sqlite3

    con = sqlite3.connect(db)
    n = con.execute("DELETE FROM work_results WHERE test_outcome = 'SURVIVED'").rowcount
    con.commit()
    con.close()
    print(f"mutation: {name}: {n} survivors again, against {' '.join(tests)}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    bindir = os.path.dirname(python)
    _run([os.path.join(bindir, "cosmic-ray"), "exec", cfg, db], pkg, env)
    return summarize(name, db, pkg, env, bindir, time.perf_counter() - t0)


def summarize(name: str, db: str, pkg: str, env: dict[str, str], bindir: str, seconds: float) -> dict[str, object]:
    equivalent: dict[str, str] = {}
    if os.path.exists(EQUIVALENT):
        with open(EQUIVALENT) as f:
            equivalent = json.load(f)
    counts = {"mutants": 0, "killed": 0, "survived": 0, "incompetent": 0, "timeouts": 0, "equivalent": 0,
              "skipped": 0, "pending": 0}
    survivors = []
    for line in _run([os.path.join(bindir, "cosmic-ray"), "dump", db], pkg, env).splitlines():
        item, result = json.loads(line)
        if result is None:  # not run yet (an interrupted or unfinished run: see --report-only)
            counts["pending"] += 1
            continue
        if result.get("worker_outcome") == "skipped":  # an operator outside KEEP
            counts["skipped"] += 1
            continue
        counts["mutants"] += 1
        mut = item["mutations"][0]
        worker, outcome = result["worker_outcome"], result["test_outcome"]
        if worker == "timeout":  # the tests did not finish: counted as killed (a mutant that hangs is caught)
            counts["timeouts"] += 1
            counts["killed"] += 1
        elif outcome == "incompetent" or worker in ("exception", "abnormal"):
            counts["incompetent"] += 1
        elif outcome == "killed":
            counts["killed"] += 1
        else:
            diff = result.get("diff") or ""
            key = _key(mut["module_path"], mut["operator_name"].split("/", 1)[-1], diff)
            if key in equivalent:
                counts["equivalent"] += 1
            else:
                counts["survived"] += 1
            survivors.append((key in equivalent, key, mut["start_pos"], diff))
    work = os.path.dirname(pkg)
    with open(os.path.join(work, "survivors.txt"), "w") as f:
        for eq, key, pos, diff in survivors:
            f.write(f"### {'EQUIVALENT' if eq else 'SURVIVED'} {key} at {pos}\n{diff}\n")
    live = counts["mutants"] - counts["incompetent"] - counts["equivalent"]
    counts["score"] = round(counts["killed"] / live, 4) if live else None  # type: ignore[assignment]
    counts["seconds"] = round(seconds)
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default=None, help=f"comma-separated targets (subset: {','.join(SUBSET)})")
    ap.add_argument("--list", action="store_true", help="print the targets and exit")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant's test run (default 120)")
    ap.add_argument("--report-only", action="store_true", help="summarize the last run's sessions without running")
    ap.add_argument("--rerun-survivors", action="store_true",
                    help="run the last session's survivors again with the current tests (modules unchanged)")
    args = ap.parse_args()
    if args.list:
        print(json.dumps({k: {"modules": m, "tests": t} for k, (m, t) in TARGETS.items()}, indent=1))
        return 0
    names = list(TARGETS) if args.targets is None else [t for t in args.targets.split(",") if t]
    unknown = [t for t in names if t not in TARGETS]
    if unknown:
        print(f"mutation: unknown target(s) {', '.join(unknown)}: use {', '.join(TARGETS)}", file=sys.stderr)
        return 2
    python = sys.executable
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
