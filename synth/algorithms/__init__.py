"""Constructive algorithms, one module each, registered by name.

Each module defines a pure ``build(n, collective=..., **params) -> Schedule`` and registers it with
``@register``. ``build_schedule`` is the one entry point the CLI and the other stages use.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable

from ...errors import CollsynthError
from ..ir import Schedule

# Modules imported (in this order) to fill the registry.
_MODULES = ("ring", "rhd", "direct", "twoshot", "stragglar", "solver")


@dataclass(frozen=True)
class AlgorithmInfo:
    name: str
    description: str
    build: Callable[..., Schedule]
    collectives: tuple[str, ...]


_REGISTRY: dict[str, AlgorithmInfo] = {}
_loaded = False


def register(name: str, description: str, collectives: tuple[str, ...] = ("allreduce",)) -> Callable:
    """Decorator: register ``build`` under ``name``."""

    def deco(fn: Callable[..., Schedule]) -> Callable[..., Schedule]:
        _REGISTRY[name] = AlgorithmInfo(name, description, fn, collectives)
        return fn

    return deco


def _load() -> None:
    global _loaded
    _loaded = True
    for mod in _MODULES:
        try:
            importlib.import_module(f"{__name__}.{mod}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{mod}":
                raise


def algorithms() -> dict[str, AlgorithmInfo]:
    """Every registered algorithm, by name, in registration order."""
    if not _loaded:
        _load()
    return dict(_REGISTRY)


def get_algorithm(name: str) -> AlgorithmInfo:
    algs = algorithms()
    if name not in algs:
        raise CollsynthError(f"unknown algorithm {name!r}: choose one of {', '.join(algs)} "
                             f"(see `collsynth algorithms`)")
    return algs[name]


def build_schedule(name: str, n: int, collective: str = "allreduce", **params: Any) -> Schedule:
    """Build algorithm ``name`` for ``n`` ranks (not yet verified: see synth.verify.check)."""
    info = get_algorithm(name)
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise CollsynthError(f"--gpus must be an integer >= 2, got {n!r}")
    if collective not in info.collectives:
        raise CollsynthError(f"algorithm {name!r} builds {', '.join(info.collectives)}, not {collective!r}")
    accepted = algorithm_params(name)
    for key in params:
        if key not in accepted:
            raise CollsynthError(f"algorithm {name!r} takes no {param_flag(key)} option"
                                 + (f" (it takes {', '.join(param_flag(a) for a in accepted)})"
                                    if accepted else ""))
    return info.build(n, collective=collective, **params)


_FLAGS = {"arrivals": "--arrival"}  # parameters whose CLI flag is not the parameter's own name


def param_flag(param: str) -> str:
    """The `collsynth synth` flag that sets build parameter ``param``."""
    return _FLAGS.get(param, "--" + param.replace("_", "-"))


def algorithm_params(name: str) -> tuple[str, ...]:
    """The keyword parameters algorithm ``name`` accepts besides n and collective."""
    params = list(inspect.signature(get_algorithm(name).build).parameters.values())[1:]
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(p.name for p in params if p.name != "collective" and p.kind in kinds)
