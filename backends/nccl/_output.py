"""Rendering and writing generated files: jinja2 templates next to this module, all-or-nothing output."""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Any

from ...errors import CollsynthError

_TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@lru_cache(maxsize=1)
def _env() -> Any:
    import jinja2

    return jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATES), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False, trim_blocks=False)


def render(template: str, **context: Any) -> str:
    return _env().get_template(template).render(**context)


def c_identifier(name: str, *, what: str = "--name") -> str:
    """A user-given name must already be a C identifier."""
    if not _IDENT.match(name) or len(name) > 64:
        raise CollsynthError(f"{what} {name!r} is not a C identifier: use letters, digits and '_' "
                             "(not starting with a digit, at most 64 characters)")
    return name


def sanitize(name: str) -> str:
    """Turn a schedule name into a C identifier (deterministically)."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", name.strip()) or "schedule"
    if s[0].isdigit():
        s = "s_" + s
    return s[:64]
