"""The one exception type users can cause; the CLI turns it into a one-line error and exit 2."""

import importlib.util
import sys


class CollsynthError(ValueError):
    """A problem with the user's input: the message says what to change."""


class ScheduleFileError(CollsynthError):
    """A schedule file that cannot be read (malformed, unknown version)."""


class GpuCountError(CollsynthError):
    """A topology that does not take the GPU count asked for. ``topology`` names it and ``takes`` says which
    counts it does take ("8 GPUs", "a multiple of 8 GPUs"), so that a command whose count does not come from
    --gpus (a schedule's ranks, --ranks) can say what to change in its own terms (``for_count``)."""

    def __init__(self, message: str, topology: str, takes: str) -> None:
        super().__init__(message)
        self.topology = topology
        self.takes = takes

    def for_count(self, count: str, fix: str) -> CollsynthError:
        """The same refusal for a count stated as ``count`` ("the schedule has 2 ranks"), ending in ``fix``."""
        return CollsynthError(f"{count}, but topology {self.topology} takes {self.takes}: {fix}")


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
