"""README.md and docs/*.md run as written: every command block and Python snippet is executed.

Conventions (also stated in docs/architecture.md, "Writing docs"):
- ```sh blocks: shell commands, run with ``bash -e`` in one temporary folder per document, blocks in
  order (a later block may use files an earlier one wrote); ``collsynth`` and ``python`` are the
  project's (the test puts the interpreter's bin folder first on PATH). Every block must exit 0.
- ```console blocks: a transcript. A line starting with ``$ `` is a command; the lines after it, up to
  the next command, are exactly what it prints (stdout, then stderr). A line ``...`` matches any lines.
- ```python blocks: a complete script, run with this interpreter in the same folder; must exit 0.
- A block right after a line ``<!-- not run: REASON -->`` is skipped (GPU, MPI or a compiler this
  machine lacks); the reason is reported. Other fences (text, json, c, ...) are never run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs"))
                             if f.endswith(".md"))
RUN = ("sh", "console", "python")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
SKIP = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->\s*$")


@dataclass
class Block:
    doc: str
    line: int
    lang: str
    text: str
    skip: str | None


def blocks(doc: str) -> list[Block]:
    with open(os.path.join(ROOT, doc), encoding="utf-8") as fh:
        text = fh.read()
    out = []
    for m in FENCE.finditer(text):
        lang = m.group(1)
        if lang not in RUN:
            continue
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.search(before)
        out.append(Block(doc, text.count("\n", 0, m.start()) + 1, lang, m.group(2), skip.group(1) if skip else None))
    return out


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("COLLSYNTH_PROGRESS", None)
    env["COLUMNS"] = "100"
    return env


def _sh(cmd: str, cwd: str, where: str) -> str:
    r = subprocess.run(["bash", "-e", "-c", cmd], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{where}: exit {r.returncode}\n$ {cmd}\n{r.stdout}{r.stderr}"
    return r.stdout + r.stderr


def _matches(expected: list[str], got: list[str]) -> bool:
    if not expected:
        return not got
    if expected[0] == "...":
        return any(_matches(expected[1:], got[i:]) for i in range(len(got) + 1))
    return bool(got) and got[0].rstrip() == expected[0].rstrip() and _matches(expected[1:], got[1:])


def _console(block: Block, cwd: str) -> None:
    cmds: list[tuple[str, list[str]]] = []
    for ln in block.text.splitlines():
        if ln.startswith("$ "):
            cmds.append((ln[2:], []))
        elif cmds:
            cmds[-1][1].append(ln)
        elif ln.strip():
            raise AssertionError(f"{block.doc}:{block.line}: a console block starts with `$ `")
    for cmd, want in cmds:
        got = _sh(cmd, cwd, f"{block.doc}:{block.line}").splitlines()
        while want and not want[-1].strip():
            want.pop()
        assert _matches(want, got), (f"{block.doc}:{block.line}: `{cmd}` printed\n" + "\n".join(got)
                                     + "\n--- the document says\n" + "\n".join(want))


def _python(block: Block, cwd: str, index: int) -> None:
    path = os.path.join(cwd, f"snippet_{index}.py")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(block.text)
    r = subprocess.run([sys.executable, path], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{block.doc}:{block.line}: the Python snippet failed\n{r.stdout}{r.stderr}"


@pytest.mark.parametrize("doc", DOCS)
def test_document_runs_as_written(doc, tmp_path):
    found = blocks(doc)
    skipped = []
    for i, b in enumerate(found):
        if b.skip is not None:
            skipped.append(f"{doc}:{b.line} ({b.skip})")
            continue
        if b.lang == "sh":
            _sh(b.text, str(tmp_path), f"{doc}:{b.line}")
        elif b.lang == "console":
            _console(b, str(tmp_path))
        else:
            _python(b, str(tmp_path), i)
    if skipped:
        print("not run: " + "; ".join(skipped))


def test_every_document_has_something_to_run_or_says_why():
    """README and the command reference must be executable, not prose about commands."""
    for doc in ("README.md", os.path.join("docs", "commands.md")):
        if os.path.exists(os.path.join(ROOT, doc)):
            assert any(b.skip is None for b in blocks(doc)), f"{doc} has no block that runs"


def test_skipped_blocks_say_why():
    for doc in DOCS:
        for b in blocks(doc):
            if b.skip is not None:
                assert len(b.skip) > 5, f"{doc}:{b.line}: say why the block is not run"


def test_every_doc_a_source_file_cites_exists():
    """Docstrings cite docs/NAME.md (sometimes with a section); each must be in the repository."""
    cited = set()
    for dp, dns, fns in os.walk(ROOT):
        dns[:] = [d for d in dns if not d.startswith(".") and d not in ("build", "schedules")]
        for f in fns:
            if f.endswith(".py"):
                with open(os.path.join(dp, f), encoding="utf-8") as fh:
                    cited |= set(re.findall(r"\bdocs/([a-z0-9_-]+\.md)", fh.read()))
    assert cited, "no citation found: the pattern is wrong"
    assert sorted(c for c in cited if not os.path.exists(os.path.join(ROOT, "docs", c))) == []
