"""The import graph: no cycles, no other module's _private names, own-module imports at the top of the
file, and heavy third-party modules kept off the import path of `import collsynth` and the CLI."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import networkx as nx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP = {"tests", "bench", "docs", "schedules", "build"}


def _modules() -> dict[str, str]:
    out = {}
    for dp, dns, fns in os.walk(ROOT):
        rel = os.path.relpath(dp, ROOT)
        parts = [] if rel == "." else rel.split(os.sep)
        dns[:] = [d for d in dns if not d.startswith(".") and not (not parts and d in SKIP)]
        for f in fns:
            if f.endswith(".py"):
                name = ".".join(["collsynth", *parts] + ([] if f == "__init__.py" else [f[:-3]]))
                out[name] = os.path.join(dp, f)
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports():
    """(importer, imported module, imported name or None, inside a function?) for every own import."""
    for mod, path in MODULES.items():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
        inner = {id(sub) for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for sub in ast.walk(node) if sub is not node}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}:{node.lineno}: use absolute imports (collsynth.x.y)"
                if not (node.module or "").startswith("collsynth"):
                    continue
                for alias in node.names:
                    target = _resolve(f"{node.module}.{alias.name}")
                    name = None if target == f"{node.module}.{alias.name}" else alias.name
                    yield mod, target, name, id(node) in inner
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("collsynth"):
                        yield mod, _resolve(alias.name), None, id(node) in inner


def test_no_import_cycles():
    g = nx.DiGraph()
    g.add_nodes_from(MODULES)
    g.add_edges_from((a, b) for a, b, _, _ in _imports() if b and a != b)
    cycles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert cycles == []


def test_no_private_names_across_modules():
    bad = [(a, b, n) for a, b, n, _ in _imports() if n and n.startswith("_") and not n.startswith("__") and a != b]
    assert bad == []


def test_own_modules_are_imported_at_the_top():
    assert [(a, b) for a, b, _, inner in _imports() if inner] == []


def _loaded(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True).stdout.split()
    return set(out)


HEAVY = {"torch", "matplotlib", "networkx", "pulp", "jinja2", "numpy"}


def test_import_collsynth_is_light():
    assert _loaded("import collsynth") & HEAVY == set()


def test_cli_help_imports_no_command_module_and_nothing_heavy():
    loaded = _loaded("import contextlib, io\nfrom collsynth.cli import main\n"
                     "with contextlib.redirect_stdout(io.StringIO()):\n    main(['--help']) if False else None\n"
                     "from collsynth.cli import build_parser\nbuild_parser(None).format_help()")
    assert loaded & HEAVY == set()
    assert not any(m.startswith("collsynth.commands.") and m != "collsynth.commands.catalog" for m in loaded)


def test_running_a_command_keeps_torch_and_matplotlib_away():
    loaded = _loaded("from collsynth.cli import main\nmain(['algorithms'])")
    assert loaded & {"torch", "matplotlib"} == set()
