"""The public API (the names in the package root's ``_API`` table): every name resolves, and no signature
of a public function, or of a public class's public methods, holds ``typing.Any``."""

from __future__ import annotations

import inspect
import os
import typing
from functools import cached_property

import networkx
import pytest

import collsynth

# names that modules import only for type checking (``if TYPE_CHECKING:``), for get_type_hints
TYPE_CHECKING_NAMES = {"nx": networkx}


def _holds_any(hint: object, seen: set[int] | None = None) -> bool:
    """Whether ``hint`` is typing.Any or contains it (through unions, generics, TypedDict fields)."""
    seen = set() if seen is None else seen
    if id(hint) in seen:
        return False
    seen.add(id(hint))
    if hint is typing.Any:
        return True
    if typing.is_typeddict(hint):
        return any(_holds_any(h, seen) for h in typing.get_type_hints(hint).values())
    return any(_holds_any(arg, seen) for arg in typing.get_args(hint))


def _hints(func: object) -> dict[str, object]:
    return typing.get_type_hints(func, localns=TYPE_CHECKING_NAMES)


def _public_functions() -> list[tuple[str, object]]:
    """(qualified name, function) for every public function and every public method of a public class."""
    out = []
    for name in sorted(collsynth._API):
        obj = getattr(collsynth, name)
        if inspect.isclass(obj):
            for attr, member in sorted(vars(obj).items()):
                if attr.startswith("_") and attr != "__init__":
                    continue
                if isinstance(member, (classmethod, staticmethod)):
                    member = member.__func__
                elif isinstance(member, property):
                    member = member.fget
                elif isinstance(member, cached_property):
                    member = member.func
                if inspect.isfunction(member):
                    out.append((f"{name}.{attr}", member))
        elif inspect.isfunction(obj):
            out.append((name, obj))
    return out


PUBLIC = _public_functions()


def test_every_public_name_resolves():
    for name in collsynth._API:
        assert getattr(collsynth, name) is not None, name
    assert set(collsynth._API) <= set(collsynth.__all__)
    assert {"build_schedule", "verify", "check", "simulate", "compare", "emit", "emit_to", "load_schedule",
            "verify_file", "make_topology", "save_schedule", "algorithms", "topology_presets"} <= {n for n, _ in PUBLIC}


@pytest.mark.parametrize("name,func", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_public_signatures_hold_no_any(name, func):
    params = inspect.signature(func).parameters
    hints = _hints(func)
    # every parameter but self/cls, and the return value, is annotated
    unannotated = [p for p in params if p not in hints and p not in ("self", "cls")]
    assert unannotated == [], f"{name}: parameters without annotations: {unannotated}"
    assert "return" in hints, f"{name}: no return annotation"
    with_any = {k: v for k, v in hints.items() if _holds_any(v)}
    assert with_any == {}, f"{name}: typing.Any in {with_any}"


def test_the_check_sees_any_where_it_hides():
    def f(a: dict[str, list[typing.Any]], b: int | None) -> None: ...

    class Row(typing.TypedDict):
        x: typing.Any

    assert _holds_any(_hints(f)["a"]) and not _holds_any(_hints(f)["b"])
    assert _holds_any(list[Row]) and _holds_any(dict[str, typing.Any] | None)


def test_numpy_integers_are_gpu_counts():
    """A NumPy integer is an integer: build_schedule, compare and the solver took np.int64(16) for "not an integer >= 2"
    (make_topology already took it); bools, floats and strings are still refused."""
    import numpy as np

    from collsynth.errors import CollsynthError

    t = collsynth.make_topology("h100-cluster", np.int64(16))
    s = collsynth.build_schedule("clusterstraggler", np.int64(16), arrivals={np.int64(5): np.float32(0.01)},
                                 size=np.int64(2**26), topology=t)
    assert s.nranks == 16 and type(s.nranks) is int and s.meta["form"] == "gpu"
    assert s.to_json() == collsynth.build_schedule("clusterstraggler", 16, arrivals={5: np.float32(0.01)},
                                                   size=2**26, topology=t).to_json()
    rows = collsynth.compare(np.int32(16), size=2**20, topology=t, arrivals={5: 0.01}, algorithms=["ring"])
    assert [r["algorithm"] for r in rows] == ["ring"]
    for bad in (True, 2.0, "16", np.int64(1), np.float64(8)):
        with pytest.raises(CollsynthError, match="--gpus must be an integer >= 2"):
            collsynth.build_schedule("ring", bad)


@pytest.mark.parametrize("call", [lambda cs: cs.verify("s.json"), lambda cs: cs.check(None),
                                  lambda cs: cs.simulate("s.json", "1MiB"),
                                  lambda cs: cs.save_schedule({"steps": []}, "never-written.json")])
def test_a_call_given_something_other_than_a_schedule_says_so(call, tmp_path, monkeypatch):
    import collsynth as cs
    monkeypatch.chdir(tmp_path)
    with pytest.raises(cs.CollsynthError, match="takes a Schedule, got .*: build one with build_schedule"):
        call(cs)
    assert not os.listdir(tmp_path)


def test_simulate_without_a_topology_takes_the_recorded_one_else_nvswitch():
    import collsynth as cs
    s = cs.build_schedule("hierarchical", 16, topology="h100-cluster")
    assert cs.simulate(s, "1GiB").completion_s == cs.simulate(s, "1GiB", "h100-cluster").completion_s
    r = cs.build_schedule("ring", 4)
    assert cs.simulate(r, "1MiB", None, {1: 1e-3}) == cs.simulate(r, "1MiB", "nvswitch", {1: 1e-3})


@pytest.mark.parametrize("topology,match", [(5, "must be a Topology, a preset name or a JSON file, got int"),
                                            ("h100-cluster:16", "has 16 GPUs but 8 are needed")])
def test_compare_checks_the_topology_it_is_given(topology, match):
    import collsynth as cs
    topo = cs.make_topology("h100-cluster", 16) if str(topology).startswith("h100") else topology
    with pytest.raises(cs.CollsynthError, match=match):
        cs.compare(8, "1GiB", topo)


def test_api_arguments_of_the_wrong_kind_are_one_line_errors():
    import collsynth as cs
    s = cs.build_schedule("ring", 4)
    cases = [(lambda: cs.build_schedule("hierarchical", 8, topology=cs.make_topology("h100-cluster", 16)),
              "has 16 GPUs but 8 are needed"),
             (lambda: cs.build_schedule("hierarchical", 8, topology=3), "must be a Topology, a preset name"),
             (lambda: cs.verify(s, 0), r"ports \(send and receive slots per rank and step\) must be an integer >= 1"),
             (lambda: cs.verify(s, "2"), "ports .* must be an integer >= 1, got '2'"),
             (lambda: cs.verify(s, topology=cs.make_topology("nvswitch", 8)), "has 8 GPUs but 4 are needed")]
    for call, match in cases:
        with pytest.raises(cs.CollsynthError, match=match):
            call()
    assert cs.verify(s, topology="nvswitch").ok and cs.verify(s, 2).ok  # a preset name, a port count


def test_compare_reads_algorithms_as_the_cli_does():
    import collsynth as cs
    assert [r["algorithm"] for r in cs.compare(4, "1MiB", algorithms="ring")] == ["ring"]
    got = {r["algorithm"] for r in cs.compare(4, "1MiB", algorithms=" rhd, ring ")}
    assert got == {"rhd", "ring"}
    with pytest.raises(cs.CollsynthError, match="names no algorithm"):
        cs.compare(4, "1MiB", algorithms=" , ")
