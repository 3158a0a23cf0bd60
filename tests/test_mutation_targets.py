"""bench/mutation.py: every module of synth/ and backends/ is mutated by exactly one target whose tests
exist, and the sampled run's draw and interval (docs/mutation.md) are right."""

from __future__ import annotations

import importlib.util
import os
from collections import Counter

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def mutation():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("mutation_bench", os.path.join(ROOT, "bench", "mutation.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_module_has_one_target_and_its_tests_exist(mutation) -> None:  # type: ignore[no-untyped-def]
    assert mutation.uncovered() == []
    counts = Counter(m for modules, _ in mutation.TARGETS.values() for m in modules)
    assert [m for m, c in counts.items() if c > 1] == []
    for modules, tests in mutation.TARGETS.values():
        assert modules and tests
        for path in [*modules, *(t.split("::")[0] for t in tests)]:
            assert os.path.isfile(os.path.join(ROOT, path)), path


def test_allocation_is_proportional_and_sums_to_n(mutation) -> None:  # type: ignore[no-untyped-def]
    assert mutation.allocate({"a": 50, "b": 30, "c": 20}, 10) == {"a": 5, "b": 3, "c": 2}
    # 7 * (5, 3, 2) / 10 = 3.5, 2.1, 1.4: the largest remainders (a, c) get the two left over
    assert mutation.allocate({"a": 5, "b": 3, "c": 2}, 7) == {"a": 4, "b": 2, "c": 1}
    assert mutation.allocate({"a": 5, "b": 3}, 100) == {"a": 5, "b": 3}  # never more than the population


def test_wilson_interval(mutation) -> None:  # type: ignore[no-untyped-def]
    z2 = 1.959964 ** 2
    lo, hi = mutation.wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(z2 / (10 + z2))
    lo, hi = mutation.wilson(1, 1)
    assert lo == pytest.approx(1 / (1 + z2)) and hi == 1.0
    lo, hi = mutation.wilson(90, 100)
    assert lo == pytest.approx(0.8256, abs=1e-4) and hi == pytest.approx(0.9448, abs=1e-4)
