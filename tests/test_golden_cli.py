"""The CLI examples print byte-identical output across refactors (golden file: tests/golden/cli_outputs.json).

Each record holds a command, its exit code, stdout, stderr and the sha256 of every file it wrote.
Regenerate with `python tests/golden/capture_cli.py` only when an output changes on purpose.
"""

from __future__ import annotations

import json
import os

import pytest

from collsynth.cli import main

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "golden", "cli_outputs.json")


def _load():
    import importlib.util

    spec = importlib.util.spec_from_file_location("capture_cli", os.path.join(HERE, "golden", "capture_cli.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def records():
    return _load().run_all(main)


def test_golden_commands_match_the_recorded_list():
    with open(GOLDEN) as fh:
        want = json.load(fh)
    assert [r["command"] for r in want] == _load().COMMANDS


def test_cli_examples_print_the_recorded_output(records):
    with open(GOLDEN) as fh:
        want = json.load(fh)
    assert len(records) == len(want)
    for got, exp in zip(records, want):
        assert got["command"] == exp["command"]
        for key in ("rc", "stdout", "stderr", "files"):
            assert got[key] == exp[key], f"{exp['command']}: {key} differs"
