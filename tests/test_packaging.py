"""The wheel holds exactly the package (code, templates, designs, schedules) and builds without warnings."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOWED = re.compile(r"^collsynth/(([a-z_]+/)*[a-z_0-9]+\.py|py\.typed|backends/[a-z]+/templates/[A-Za-z_.]+\.j2|"
                     r"synth/algorithms/stragglar/designs\.json|schedules/.+)$")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    pytest.importorskip("setuptools")
    out = tmp_path_factory.mktemp("wheel")
    # build from a copy without build outputs: setuptools reuses a stale build/lib (a module deleted since the
    # last build would ship again), and the test should not write build/ into the working tree either
    src = tmp_path_factory.mktemp("src") / "collsynth"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", "build", ".git", "*.egg-info", "__pycache__",
                                                             ".*_cache", ".hypothesis"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out),
                        str(src)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (path,) = [os.path.join(out, f) for f in os.listdir(out) if f.endswith(".whl")]
    return path, r.stdout + r.stderr


def test_the_build_prints_no_warning(wheel):
    _, log = wheel
    warnings = [ln for ln in log.splitlines() if "warning" in ln.lower() and "Location 'file:" not in ln]
    assert warnings == []


def test_the_wheel_holds_the_package_and_nothing_else(wheel):
    path, _ = wheel
    names = zipfile.ZipFile(path).namelist()
    files = [n for n in names if not n.startswith("collsynth-")]
    assert [n for n in files if not ALLOWED.match(n)] == []
    for needed in ("collsynth/__init__.py", "collsynth/backends/msccl/templates/msccl.xml.j2",
                   "collsynth/backends/nccl/templates/library.cu.j2",
                   "collsynth/synth/algorithms/stragglar/designs.json",
                   "collsynth/schedules/MANIFEST.json", "collsynth/py.typed"):
        assert needed in files
    assert not any(n.startswith(("collsynth/tests/", "collsynth/bench/", "collsynth/docs/")) for n in files)
    py = {os.path.relpath(os.path.join(dp, f), ROOT) for dp, dns, fns in os.walk(ROOT)
          for f in fns if f.endswith(".py")
          and os.path.relpath(dp, ROOT).split(os.sep)[0] not in {"tests", "bench", ".venv", "build", ".git"}}
    assert {f"collsynth/{p}" for p in py} == {n for n in files if n.endswith(".py")}
