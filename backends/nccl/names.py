"""C identifiers for generated code: check a user-given name, derive one from a schedule name."""

from __future__ import annotations

import re

from collsynth.errors import CollsynthError

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
