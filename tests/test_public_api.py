"""The public API (the names in the package root's ``_API`` table): every name resolves, and no signature
of a public function, or of a public class's public methods, holds ``typing.Any``."""

from __future__ import annotations

import inspect
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
