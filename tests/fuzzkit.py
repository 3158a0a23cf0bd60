"""Fuzzing harness for the CLI (tests/test_fuzz_*.py): run one argument vector under resource limits and
check that the answer is clean (issue 13).

A fork server (this file run as a script) imports collsynth once; for every case it forks a child that
changes into the case's folder, sets RLIMIT_CPU (10 s) and RLIMIT_AS (1 GiB), sends stdout and stderr
to files and calls ``collsynth.cli.main(argv)`` in process. Forking keeps a case at milliseconds where
a fresh interpreter costs a second, and the limits hold per case. The parent also kills a child after
WALL_S seconds of wall time (a blocked read of a named pipe uses no CPU).

Every case runs with the time budget COLLSYNTH_MAX_TIME=3s (MAX_TIME): work estimated longer is refused
with exit 2, so the 10 s limit checks the estimates too.

Clean means: exit 0, 1 or 2 (never 3, a signal, the CPU or wall limit); exactly one line on stderr for
exit 2; no file in the case's folder created, changed or removed except the requested outputs.

Examples per test: ``COLLSYNTH_FUZZ_EXAMPLES`` (a long run; examples are then random), else a small
derandomized number so that `make test` is fast and repeatable. ``COLLSYNTH_FUZZ_STATS=FILE`` appends
one JSON line per case (test, exit code) for bench/fuzz_long.py to count.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

CPU_S = 10
MAX_TIME = "3s"  # collsynth --max-time for every case (COLLSYNTH_MAX_TIME), well under CPU_S
AS_BYTES = 1 << 30
WALL_S = 30.0
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------------------- the fork server (child side)
def _serve() -> None:  # pragma: no cover - runs in the server process
    import importlib
    import resource

    from collsynth.cli import main
    from collsynth.commands.catalog import COMMANDS

    # import every command module and what its commands load on first use once, before forking, so a
    # case costs its own work only (torch stays out: the commands that need it are not run for real)
    for c in COMMANDS:
        importlib.import_module(f"collsynth.commands.{c.module}")
    for mod in ("networkx", "jinja2", "pulp", "collsynth.synth.registry", "collsynth.synth.compare",
                "collsynth.synth.simulate", "collsynth.backends.msccl", "collsynth.backends.mscclpp",
                "collsynth.backends.nccl", "collsynth.training", "collsynth.synth.algorithms.stragglar.family"):
        try:
            importlib.import_module(mod)
        except ImportError:
            pass
    try:
        from collsynth.synth.registry import algorithms

        algorithms()
    except Exception:
        pass

    out = sys.stdout
    for line in sys.stdin:
        case = json.loads(line)
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                os.chdir(case["cwd"])
                resource.setrlimit(resource.RLIMIT_CPU, (CPU_S, CPU_S + 1))
                resource.setrlimit(resource.RLIMIT_AS, (AS_BYTES, AS_BYTES))
                fo = os.open(case["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                fe = os.open(case["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(fo, 1)
                os.dup2(fe, 2)
                sys.stdin = os.fdopen(0)
                sys.stdout = os.fdopen(1, "w")
                sys.stderr = os.fdopen(2, "w")
                try:
                    code = main(case["argv"])
                except SystemExit as e:
                    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException as e:  # a crash outside main's own handlers: report it as such
                try:
                    os.write(2, f"fuzzkit: {type(e).__name__}: {e}\n".encode())
                except BaseException:
                    pass
                code = 99
            os._exit(code)
        status = _wait(pid, case.get("wall", WALL_S))
        out.write(json.dumps({"status": status, "wall": time.perf_counter() - t0}) + "\n")
        out.flush()


def _wait(pid: int, wall: float) -> list:  # pragma: no cover - runs in the server process
    deadline = time.monotonic() + wall
    while True:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            if os.WIFSIGNALED(st):
                return ["signal", os.WTERMSIG(st)]
            return ["exit", os.WEXITSTATUS(st)]
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return ["wall", wall]
        time.sleep(0.002)


# ----------------------------------------------------------------------------- the client (pytest side)
@dataclass
class Outcome:
    argv: list[str]
    kind: str  # exit | signal | wall
    code: int
    stdout: str
    stderr: str
    changed: list[str]  # files created, changed or removed that were not allowed
    wall: float = 0.0

    def problems(self) -> list[str]:
        """What is not clean about this outcome (empty: clean)."""
        bad = []
        if self.kind == "wall":
            bad.append(f"still running after {WALL_S:g} s wall (hang)")
        elif self.kind == "signal":
            what = {signal.SIGXCPU: f"over {CPU_S} s CPU", signal.SIGKILL: "killed (memory?)",
                    signal.SIGSEGV: "segfault"}.get(self.code, f"signal {self.code}")
            bad.append(f"died: {what}")
        elif self.code not in (0, 1, 2):
            bad.append(f"exit {self.code}")
        if self.kind == "exit" and self.code == 2:
            lines = self.stderr.splitlines()
            if len(lines) != 1:
                bad.append(f"exit 2 with {len(lines)} lines on stderr")
        if self.changed:
            bad.append(f"touched {', '.join(self.changed[:5])}")
        return bad

    def describe(self) -> str:
        return (f"collsynth {' '.join(map(repr, self.argv))}\n  -> {self.kind} {self.code}: "
                f"{'; '.join(self.problems())}\n  stderr: {self.stderr[-1500:]}")


class Server:
    """One fork server per test session (see the module docstring)."""

    def __init__(self) -> None:
        # COLLSYNTH_DEBUG: an internal error (a failure anyway) comes with its traceback in the report
        # COLLSYNTH_MAX_TIME: the product's time budget below the harness's CPU limit, so that work estimated
        # too long is refused (exit 2) and an estimate that is far too low shows up as a case over CPU_S
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   COLLSYNTH_DEBUG="1", PYTHONHASHSEED="0", COLLSYNTH_MAX_TIME=MAX_TIME)
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self.count = 0
        self.last_wall = 0.0

    def run(self, argv: list[str], cwd: str, capture: str, wall: float = WALL_S) -> tuple[str, int, str, str]:
        so, se = os.path.join(capture, "stdout"), os.path.join(capture, "stderr")
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"argv": argv, "cwd": cwd, "stdout": so, "stderr": se, "wall": wall}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], wall + 30)
        if not ready:
            raise RuntimeError("fuzz server stopped answering")
        reply = json.loads(self.proc.stdout.readline())
        kind, code = reply["status"]
        self.count += 1
        self.last_wall = float(reply["wall"])
        return kind, int(code), _read(so), _read(se)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(200_000).decode("utf-8", "replace")
    except OSError:
        return ""


def snapshot(folder: str) -> dict[str, tuple[int, str]]:
    """{relative path: (size, sha1)} of every file and folder under ``folder`` (named pipes by name)."""
    out: dict[str, tuple[int, str]] = {}
    for base, dirs, files in os.walk(folder):
        for d in dirs:
            out[os.path.relpath(os.path.join(base, d), folder) + "/"] = (0, "dir")
        for f in files:
            p = os.path.join(base, f)
            rel = os.path.relpath(p, folder)
            try:
                st = os.lstat(p)
                if not os.path.isfile(p) or os.path.islink(p):
                    out[rel] = (0, f"special {st.st_mode:o}")
                    continue
                with open(p, "rb") as fh:
                    out[rel] = (st.st_size, hashlib.sha1(fh.read()).hexdigest())
            except OSError as e:
                out[rel] = (-1, str(e))
    return out


def changed_files(before: dict, after: dict, allowed: list[str]) -> list[str]:
    """Paths that differ between two snapshots, except ``allowed`` ones (a path, or a folder and all under it)."""
    allow = [a.rstrip("/") for a in allowed if a]

    def ok(p: str) -> bool:
        q = p.rstrip("/")
        return any(q == a or q.startswith(a + "/") for a in allow)

    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p) and not ok(p))


def examples(default: int) -> int:
    """Examples per fuzz test: COLLSYNTH_FUZZ_EXAMPLES for a long run, else ``default``."""
    v = os.environ.get("COLLSYNTH_FUZZ_EXAMPLES", "")
    return int(v) if v.strip() else default


def derandomize() -> bool:
    """Short runs (make test) replay the same examples every time; long runs draw new ones."""
    return not os.environ.get("COLLSYNTH_FUZZ_EXAMPLES", "").strip()


def record(test: str, outcome: Outcome, case: str | None = None) -> None:
    """Append the case to COLLSYNTH_FUZZ_STATS (if set): the whole argument vector, and for a case that is
    not clean its problems, stderr and a copy of its input folder (``case``) to reproduce it from."""
    path = os.environ.get("COLLSYNTH_FUZZ_STATS", "")
    if not path:
        return
    row = {"test": test, "kind": outcome.kind, "code": outcome.code, "argv": outcome.argv,
           "wall": round(outcome.wall, 3), "clean": not outcome.problems()}
    if outcome.problems():
        row.update(problems=outcome.problems(), stderr=outcome.stderr[-2000:])
        if case:
            import shutil
            import tempfile

            keep = tempfile.mkdtemp(prefix="case-", dir=os.path.dirname(os.path.abspath(path)))
            shutil.copytree(case, os.path.join(keep, "case"), symlinks=True, dirs_exist_ok=True,
                            ignore_dangling_symlinks=True, copy_function=_copy_plain)
            row["inputs"] = os.path.join(keep, "case")
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def _copy_plain(src: str, dst: str) -> None:
    """copytree's copy: regular files only (a named pipe in a case folder would block the copy)."""
    import shutil

    if os.path.isfile(src) and not os.path.islink(src):
        shutil.copy2(src, dst)


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1:] == ["--serve"]:
        _serve()


# ----------------------------------------------------------------------------- one case
def make_case(root: str, files: dict[str, bytes | str | None]) -> tuple[str, str]:
    """A fresh case folder under ``root`` holding ``files`` (None: a named pipe; a name ending in '/': a
    folder); returns (case folder, capture folder)."""
    import tempfile

    base = tempfile.mkdtemp(dir=root)
    case, cap = os.path.join(base, "case"), os.path.join(base, "cap")
    os.mkdir(case)
    os.mkdir(cap)
    for name, content in files.items():
        p = os.path.join(case, name)
        os.makedirs(os.path.dirname(p.rstrip("/")) or case, exist_ok=True)
        if name.endswith("/"):
            os.makedirs(p, exist_ok=True)
        elif content is None:
            os.mkfifo(p)
        else:
            with open(p, "wb") as f:
                f.write(content.encode() if isinstance(content, str) else content)
    return case, cap


def run_case(server: Server, root: str, test: str, argv: list[str], files: dict[str, bytes | str | None],
             outputs: list[str] = ()) -> Outcome:  # type: ignore[assignment]
    """Run ``argv`` in a fresh folder holding ``files``; ``outputs`` are the paths it may write."""
    import shutil

    case, cap = make_case(root, files)
    try:
        before = snapshot(case)
        kind, code, out, err = server.run(argv, case, cap)
        after = snapshot(case)
        allowed = [o for o in outputs if o and not os.path.isabs(o)]
        # a rejected output must not be half-written either: the check only spares what was asked for
        outcome = Outcome(argv, kind, code, out, err, changed_files(before, after, allowed), server.last_wall)
        record(test, outcome, case)
        return outcome
    finally:
        shutil.rmtree(os.path.dirname(case), ignore_errors=True)
