"""Rendering and writing generated files: jinja2 templates next to this module, all-or-nothing output."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from functools import lru_cache
from typing import Any, Mapping

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
    fresh = not os.path.isdir(outdir) or not os.listdir(outdir)
    if fresh:
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
            fd, tmpf = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".collsynth-", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(content.encode() if isinstance(content, str) else content)
                os.chmod(tmpf, 0o666 & ~_umask())
                os.replace(tmpf, path)
            except BaseException:
                if os.path.exists(tmpf):
                    os.unlink(tmpf)
                raise
    return sorted(os.path.join(outdir, rel) for rel in files)


def _write(path: str, content: str | bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content.encode() if isinstance(content, str) else content)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
