"""Writing files the way every command does: whole or not at all.

Every file and folder the project writes goes through here: ``write_text_atomic`` for one file,
``save_figure`` for a PNG, ``write_tree`` for a folder of generated files (built in a temporary
sibling and renamed into place, so a failure leaves nothing behind), ``replace_subtrees`` for the
managed parts of a folder (the schedule library), ``check_outdir`` for the "exists and is not empty:
pass --force" rule. Written files get the usual permissions (0666 less the umask), not mkstemp's 0600.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from collsynth.errors import CollsynthError

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))  # the installed package (schedules/ lives here)


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


def read_text(path: str, *, what: str = "", error: type[CollsynthError] = CollsynthError,
              max_bytes: int | None = None) -> str:
    """A UTF-8 text file's contents; a missing, unreadable or binary file raises ``error`` with one
    line naming it (``what``, e.g. "topology file ", prefixes the path). With ``max_bytes``, a larger
    file is refused without reading it whole."""
    try:
        with open(path, "rb") as f:
            raw = f.read() if max_bytes is None else f.read(max_bytes + 1)
    except OSError as e:
        raise error(f"cannot read {what}{path}: {e.strerror}") from None
    if max_bytes is not None and len(raw) > max_bytes:
        raise error(f"{what}{path} is larger than {max_bytes} bytes; that is not a file this command reads")
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
    """The "exists and is not empty: pass --force" rule for an output folder."""
    if os.path.exists(outdir) and not os.path.isdir(outdir):
        raise CollsynthError(f"output {outdir} exists and is not a directory: choose another -o")
    if os.path.isdir(outdir) and os.listdir(outdir) and not force:
        raise CollsynthError(f"output directory {outdir} exists and is not empty: choose another -o or pass --force")


def write_tree(outdir: str, files: Mapping[str, str | bytes], *, force: bool) -> list[str]:
    """Write ``files`` (relative path -> content) as the folder ``outdir``, all or nothing: they are
    written into a temporary sibling that then takes the folder's place. An existing non-empty
    ``outdir`` is refused unless ``force``, which replaces it whole (no earlier file stays behind).
    Returns the written paths, sorted."""
    check_outdir(outdir, force)
    outdir = os.path.abspath(outdir)
    with _staged_dir(outdir) as tmp:
        for rel, content in files.items():
            _write(os.path.join(tmp, rel), content)
        _swap_in(tmp, outdir)
    return sorted(os.path.join(outdir, rel) for rel in files)


def replace_subtrees(root: str, files: Mapping[str, str | bytes], tops: Sequence[str]) -> None:
    """Replace the entries ``tops`` (files or folders directly under ``root``) with ``files``, whose
    paths all start with one of ``tops``; everything is written into a staging folder first, so a
    failure never leaves a half-written entry. Other entries of ``root`` are kept."""
    root = os.path.abspath(root)
    os.makedirs(root, exist_ok=True)
    with _staged_dir(os.path.join(root, "staging")) as tmp:
        for rel, content in files.items():
            if rel.split("/", 1)[0] not in tops:
                raise ValueError(f"{rel} is outside {', '.join(tops)}")
            _write(os.path.join(tmp, rel), content)
        for top in tops:
            src, dst = os.path.join(tmp, top), os.path.join(root, top)
            if os.path.isdir(src):
                _swap_in(src, dst)
            elif os.path.exists(src):
                os.replace(src, dst)
            elif os.path.isdir(dst):
                shutil.rmtree(dst)
            elif os.path.exists(dst):
                os.unlink(dst)


@contextmanager
def _staged_dir(target: str) -> Iterator[str]:
    """A temporary folder beside ``target``, removed afterwards whatever happens."""
    parent = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(parent):
        raise CollsynthError(f"cannot write {target}: directory {parent} does not exist")
    tmp = tempfile.mkdtemp(dir=parent, prefix=".collsynth-")
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _swap_in(src: str, dst: str) -> None:
    """Rename folder ``src`` to ``dst``, replacing what is there (put back if the rename fails)."""
    os.chmod(src, 0o777 & ~_umask())
    if not os.path.lexists(dst):
        os.rename(src, dst)
        return
    old = tempfile.mkdtemp(dir=os.path.dirname(dst), prefix=".collsynth-old-")
    os.rmdir(old)
    os.rename(dst, old)
    try:
        os.rename(src, dst)
    except BaseException:
        os.rename(old, dst)
        raise
    if os.path.isdir(old) and not os.path.islink(old):
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.unlink(old)


def _write(path: str, content: str | bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content.encode() if isinstance(content, str) else content)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
