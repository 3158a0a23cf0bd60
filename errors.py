"""The one exception type users can cause; the CLI turns it into a one-line error and exit 2."""

import importlib.util
import sys


class CollsynthError(ValueError):
    """A problem with the user's input: the message says what to change."""


class ScheduleFileError(CollsynthError):
    """A schedule file that cannot be read (malformed, unknown version)."""


def require_extra(module: str, extra: str, what: str) -> None:
    """Refuse up front, before any work, when the optional dependency ``module`` is missing: one line
    naming the extra to install (pyproject.toml [project.optional-dependencies]), exit 2."""
    if sys.modules.get(module) is not None:
        return
    try:
        found = module not in sys.modules and importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise CollsynthError(f"{what} needs {module}, which is not installed: pip install 'collsynth[{extra}]'")


def quoted(value: object, limit: int = 40) -> str:
    """A user's value as an error message quotes it: its repr, cut to ``limit`` characters ("..." at the end;
    a fuzzed file's 418-digit number would otherwise fill the line)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
