"""Writing files the way every command does: whole or not at all.

Every file and folder the project writes goes through here: ``write_text_atomic`` for one file,
``save_figure`` for a PNG, ``write_tree`` for a folder of generated files (built in a temporary
sibling and renamed into place, so a failure leaves nothing behind), ``replace_subtrees`` for the
managed parts of a folder (the schedule library), ``check_outdir`` for the "exists and is not empty:
pass --force" rule, ``check_output`` for every output flag (checked before any work: a path that
cannot be written, or one that names an input, is refused with one line naming the flag). Written
files get the usual permissions (0666 less the umask), not mkstemp's 0600; an OSError while writing
becomes a CollsynthError naming the path (exit 2, never a traceback).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from collsynth.errors import CollsynthError

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))  # the installed package (schedules/ lives here)


@contextmanager
def _atomic_target(path: str, *, suffix: str = ".tmp") -> Iterator[str]:
    """Yield a temporary path beside ``path`` (or the file a symlink names); on success it replaces that file
    (a character device or named pipe gets the finished bytes written into it), on failure it goes."""
    check_output(path)
    target = os.path.realpath(path)  # through a symlink: the link stays, the file it names is replaced
    stream = _is_stream(target)  # a character device or named pipe (/dev/null, a FIFO) is written into
    directory = tempfile.gettempdir() if stream else os.path.dirname(target)
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".collsynth-", suffix=suffix)
    except OSError as e:
        raise CollsynthError(f"cannot write {path}: {e.strerror or e}") from None
    os.close(fd)
    try:
        yield tmp
        if stream:
            with open(tmp, "rb") as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            _unlink_quietly(tmp)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, target)
    except OSError as e:
        _unlink_quietly(tmp)
        raise CollsynthError(f"cannot write {path}: {e.strerror or e}") from None
    except BaseException:
        _unlink_quietly(tmp)
        raise


def _is_stream(path: str) -> bool:
    """An existing character device or named pipe: written into, never replaced by a regular file."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _name_max(directory: str) -> int:
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def check_output(path: str | None, *, flag: str = "-o", inputs: Sequence[str | None] = (),
                 folder: bool = False) -> None:
    """Refuse, before any work, an output path that cannot be written or that would overwrite an input.

    Checked: an empty name; a name longer than the file system allows; a parent folder that is missing,
    is a regular file, or is not writable; an existing directory where a file goes (``folder`` False)
    or a file where a folder goes; the same file as one of ``inputs`` (symlinks and hard links
    included); for a folder, an input inside it (``--force`` would replace it); a device or socket. A file
    is written through a symlink (the file it names is checked and replaced) and into a character device
    or named pipe (/dev/null). ``None`` and "-" (stdout) pass. Raises CollsynthError naming ``flag``."""
    if path is None or path == "-":
        return
    if not path.strip():
        raise CollsynthError(f"{flag}: empty file name: give a path")
    if "\0" in path:
        raise CollsynthError(f"{flag} {path!r}: a path cannot contain a NUL character")
    full = os.path.abspath(path)
    if not folder and os.path.islink(full):
        full = os.path.realpath(full)  # a file is written through a symlink: check what it names
    if not folder and os.path.exists(full) and not os.path.isdir(full) and not os.path.isfile(full):
        if not _is_stream(full):
            raise CollsynthError(f"{flag} {path} is a device or socket, not a regular file: choose another path")
        if not os.access(full, os.W_OK):
            raise CollsynthError(f"{flag} {path}: cannot write it (permission denied): choose another path")
        _check_not_input(path, full, flag, inputs, folder)
        return
    parent = os.path.dirname(full.rstrip(os.sep)) or os.sep
    base = os.path.basename(full.rstrip(os.sep))
    if len(full.encode(errors="surrogateescape")) >= 4096:
        raise CollsynthError(f"{flag}: path is too long ({len(full)} characters): choose a shorter one")
    if len(base.encode(errors="surrogateescape")) > _name_max(parent if os.path.isdir(parent) else os.sep):
        raise CollsynthError(f"{flag} {path[:40]}...: file name is too long ({len(base)} characters, the file "
                             f"system allows {_name_max(parent if os.path.isdir(parent) else os.sep)}): "
                             "choose a shorter one")
    probe = parent
    while probe and not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if probe != parent:
        if os.path.isdir(probe):
            raise CollsynthError(f"{flag} {path}: directory {os.path.dirname(path) or parent} does not exist: "
                                 "create it first or choose another path")
        raise CollsynthError(f"{flag} {path}: {probe} is a file, not a directory: choose another path")
    if not os.path.isdir(parent):
        raise CollsynthError(f"{flag} {path}: {parent} is not a directory: choose another path")
    try:  # the real test (access() says yes to root on /proc and on read-only mounts)
        fd, probe_file = tempfile.mkstemp(dir=parent, prefix=".collsynth-probe-")
    except OSError as e:
        raise CollsynthError(f"{flag} {path}: cannot write in {parent} ({e.strerror or e}): "
                             "choose another path") from None
    os.close(fd)
    _unlink_quietly(probe_file)
    if folder:
        if os.path.exists(full) and not os.path.isdir(full):
            raise CollsynthError(f"{flag} {path} exists and is not a directory: choose another path")
    elif os.path.isdir(full):
        raise CollsynthError(f"{flag} {path} is a directory: give a file name")
    _check_not_input(path, full, flag, inputs, folder)


def _check_not_input(path: str, full: str, flag: str, inputs: Sequence[str | None], folder: bool) -> None:
    """Refuse an output that is one of ``inputs`` (or, for a folder, contains one)."""
    real = os.path.realpath(full)
    for inp in inputs:
        if not inp or inp == "-":
            continue
        try:
            same = os.path.exists(full) and os.path.exists(inp) and os.path.samefile(full, inp)
        except OSError:
            same = False
        rin = os.path.realpath(inp)
        if same or rin == real:
            what = "folder" if os.path.isdir(rin) else "file"
            raise CollsynthError(f"{flag} {path} is the input {what} {inp}: writing it would overwrite the input; "
                                 "choose another path")
        if folder and rin.startswith(real.rstrip(os.sep) + os.sep):
            raise CollsynthError(f"{flag} {path} contains the input file {inp}: choose another folder")


DEFAULT_MAX_READ_BYTES = 256 * 2**20
MAX_READ_BYTES = DEFAULT_MAX_READ_BYTES  # the largest input file read (--max-file-size / COLLSYNTH_MAX_FILE_SIZE)


def set_max_read_bytes(nbytes: int) -> None:
    """Change the input size cap (the CLI's --max-file-size)."""
    global MAX_READ_BYTES
    MAX_READ_BYTES = int(nbytes)


def read_bytes(path: str, *, what: str = "", error: type[CollsynthError] = CollsynthError) -> bytes:
    """A regular file's bytes, at most MAX_READ_BYTES. A device (/dev/zero), a named pipe (which would block
    forever), a directory or a socket is refused before it is opened; a larger file is refused with the
    flag that raises the cap. Errors are ``error`` with one line naming the file."""
    try:
        st = os.stat(path)
    except (OSError, ValueError) as e:
        raise error(f"cannot read {what}{path}: {getattr(e, 'strerror', None) or e}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a named pipe" if stat.S_ISFIFO(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
        raise error(f"cannot read {what}{path}: it is {kind}, not a regular file: give a file")
    limit = MAX_READ_BYTES
    if st.st_size > limit:
        raise error(f"{what}{path} is {st.st_size} bytes, more than the {limit}-byte input limit: raise it with "
                    "`collsynth --max-file-size SIZE ...` (or COLLSYNTH_MAX_FILE_SIZE)")
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)  # a file that grows (or reports size 0, like /proc) is still capped
    except OSError as e:
        raise error(f"cannot read {what}{path}: {e.strerror or e}") from None
    if len(raw) > limit:
        raise error(f"{what}{path} is more than the {limit}-byte input limit: raise it with "
                    "`collsynth --max-file-size SIZE ...` (or COLLSYNTH_MAX_FILE_SIZE)")
    return raw


def read_text(path: str, *, what: str = "", error: type[CollsynthError] = CollsynthError) -> str:
    """A UTF-8 text file's contents (``read_bytes``'s rules); a missing, unreadable, special, too large or
    binary file raises ``error`` with one line naming it (``what``, e.g. "topology file ", prefixes the path)."""
    raw = read_bytes(path, what=what, error=error)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{what}{path} is not a UTF-8 text file") from None


def json_loads(text: str | bytes) -> Any:
    """json.loads whose too-deep nesting (RecursionError in the C parser) is a JSONDecodeError like any
    other malformed JSON, so every reader reports it as bad input."""
    try:
        return json.loads(text)
    except RecursionError:
        s = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise json.JSONDecodeError("nested too deeply", s, 0) from None


def write_text_atomic(path: str, text: str | bytes) -> None:
    """Write the whole file or nothing."""
    with _atomic_target(path) as tmp:
        _write(tmp, text)


def save_figure(fig: Any, path: str, *, dpi: int = 120) -> None:
    """Save a matplotlib figure as PNG, whole or not at all (no timestamp: byte-identical reruns)."""
    with _atomic_target(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, metadata={"Software": None})


def check_outdir(outdir: str, force: bool, *, flag: str = "-o", inputs: Sequence[str | None] = ()) -> None:
    """The "exists and is not empty: pass --force" rule for an output folder (after ``check_output``)."""
    check_output(outdir, flag=flag, inputs=inputs, folder=True)
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
    try:
        with _staged_dir(outdir) as tmp:
            for rel, content in files.items():
                _write(os.path.join(tmp, rel), content)
            _swap_in(tmp, outdir)
    except OSError as e:
        raise CollsynthError(f"cannot write {outdir}: {e.strerror or e}") from None
    return sorted(os.path.join(outdir, rel) for rel in files)


def replace_subtrees(root: str, files: Mapping[str, str | bytes], tops: Sequence[str]) -> None:
    """Replace the entries ``tops`` (files or folders directly under ``root``) with ``files``, whose
    paths all start with one of ``tops``; everything is written into a staging folder first, so a
    failure never leaves a half-written entry. Other entries of ``root`` are kept."""
    check_output(root, flag="--out", folder=True)
    root = os.path.abspath(root)
    try:
        os.makedirs(root, exist_ok=True)
        _replace_subtrees(root, files, tops)
    except OSError as e:
        raise CollsynthError(f"cannot write {root}: {e.strerror or e}") from None


def _replace_subtrees(root: str, files: Mapping[str, str | bytes], tops: Sequence[str]) -> None:
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
