"""Writing files the way every command does: whole or not at all.

``write_text_atomic`` for one file, ``save_figure`` for a PNG, ``write_tree`` for a folder of
generated files (built in a temporary sibling and renamed into place, so a failure leaves nothing
behind), ``check_outdir`` for the "exists and is not empty: pass --force" rule. Written files get the
usual permissions (0666 less the umask), not mkstemp's 0600.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from .errors import CollsynthError


@contextmanager
def _atomic_target(path: str, *, suffix: str = ".tmp") -> Iterator[str]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on failure it goes."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CollsynthError(f"cannot write {path}: directory {directory} does not exist")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".collsynth-", suffix=suffix)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_text(path: str, *, what: str = "", error: type[CollsynthError] = CollsynthError) -> str:
    """A UTF-8 text file's contents; a missing, unreadable or binary file raises ``error`` with one
    line naming it (``what``, e.g. "topology file ", prefixes the path)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise error(f"cannot read {what}{path}: {e.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{what}{path} is not a UTF-8 text file") from None


def write_text_atomic(path: str, text: str | bytes) -> None:
    """Write the whole file or nothing."""
    with _atomic_target(path) as tmp:
        _write(tmp, text)


def save_figure(fig: Any, path: str, *, dpi: int = 120) -> None:
    """Save a matplotlib figure as PNG, whole or not at all (no timestamp: byte-identical reruns)."""
    with _atomic_target(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, metadata={"Software": None})


def check_outdir(outdir: str, force: bool) -> None:
    if os.path.exists(outdir) and not os.path.isdir(outdir):
        raise CollsynthError(f"output {outdir} exists and is not a directory: choose another -o")
    if os.path.isdir(outdir) and os.listdir(outdir) and not force:
        raise CollsynthError(f"output directory {outdir} exists and is not empty: choose another -o or pass --force")


def write_tree(outdir: str, files: Mapping[str, str | bytes], *, force: bool) -> list[str]:
    """Write ``files`` (relative path -> content) under ``outdir``: all of them or, on failure, none
    when the directory is new (built in a temporary sibling and renamed); file by file atomically when
    ``force`` reuses an existing directory. Returns the written paths, sorted."""
    check_outdir(outdir, force)
    outdir = os.path.abspath(outdir)
    parent = os.path.dirname(outdir)
    if not os.path.isdir(parent):
        raise CollsynthError(f"cannot write {outdir}: directory {parent} does not exist")
    if not os.path.isdir(outdir) or not os.listdir(outdir):
        tmp = tempfile.mkdtemp(dir=parent, prefix=".collsynth-")
        try:
            for rel, content in files.items():
                _write(os.path.join(tmp, rel), content)
            if os.path.isdir(outdir):
                os.rmdir(outdir)  # empty
            os.rename(tmp, outdir)
            os.chmod(outdir, 0o777 & ~_umask())
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    else:
        for rel, content in files.items():
            path = os.path.join(outdir, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_text_atomic(path, content)
    return sorted(os.path.join(outdir, rel) for rel in files)


def _write(path: str, content: str | bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content.encode() if isinstance(content, str) else content)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
