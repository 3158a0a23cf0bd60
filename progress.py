"""Progress lines on stderr for work that can take more than a couple of seconds.

Library code calls ``note("...")`` at the start of each long stage or item; it prints nothing unless
a front end turned progress on with ``enable()``. The CLI does so when stderr is a terminal or
``COLLSYNTH_PROGRESS=1`` is set, so piped output (``--json``) stays clean and scripts see no noise.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

_stream: TextIO | None = None
_t0 = 0.0


def enable(stream: TextIO | None = None) -> None:
    """Print progress lines to ``stream`` (default stderr) from now on."""
    global _stream, _t0
    _stream = stream if stream is not None else sys.stderr
    _t0 = time.perf_counter()


def disable() -> None:
    global _stream
    _stream = None


def wanted() -> bool:
    """Whether the CLI should show progress: stderr is a terminal, or COLLSYNTH_PROGRESS is set (not 0)."""
    env = os.environ.get("COLLSYNTH_PROGRESS", "")
    if env:
        return env != "0"
    return sys.stderr.isatty()


def note(message: str) -> None:
    """One progress line, "collsynth: [12.3s] message", if progress is on."""
    if _stream is not None:
        _stream.write(f"collsynth: [{time.perf_counter() - _t0:.1f}s] {message}\n")
        _stream.flush()
