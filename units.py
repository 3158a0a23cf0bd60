"""Parsing of sizes (B, KB, MiB...), times (s, ms, us, ns) and rates (450GiB/s)."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, TypeVar, overload

from collsynth.errors import CollsynthError, quoted

T = TypeVar("T")

_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15, "eb": 10**18,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50, "eib": 2**60,
    "k": 2**10, "m": 2**20, "g": 2**30,
}
_TIME_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_NUM = r"([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"  # ASCII digits only (\d takes any script's)


MAX_BYTES = 2**62  # the largest size any flag takes (4 EiB: int64 with room; the runtimes use int64 counts)
MAX_SECONDS = 1e9  # about 30 years: a longer time is a typo


def _split(text: str, what: str, example: str, flag: str | None = None) -> tuple[Fraction, str]:
    """The number (exact, so that whole-byte checks are exact) and the unit of ``text``."""
    m = re.fullmatch(_NUM + r"\s*([A-Za-zµ/]*)", str(text).strip())
    if not m:
        raise CollsynthError(_prefixed(flag, f"cannot read {what} {text!r}: write a number with a unit, "
                                             f"e.g. {example}"))
    mantissa, _, exponent = m.group(1).lower().partition("e")
    if exponent and abs(int(exponent)) > 400:
        raise CollsynthError(_prefixed(flag, f"{what} {text!r} is out of range: write e.g. {example}"))
    return Fraction(m.group(1)), m.group(2)


INT_MAX = 2**31 - 1  # counts (ranks, steps, ports, iterations) beyond this are typos, and overflow C ints
_COUNT = re.compile(r"-?[0-9]{1,40}")


def parse_count(text: str | int, *, flag: str, lo: int | None = None, hi: int = INT_MAX) -> int:
    """A count (ranks, steps, chunks, a rank number) written as plain ASCII digits, in [lo, hi].

    Stricter than Python's int(), which also reads ``1_000``, `` 4``, ``+4`` and other scripts' digits
    (``\u0663``): a count on the command line is digits only, so such text is refused, not guessed."""
    if isinstance(text, bool):
        raise CollsynthError(f"{flag} must be an integer, got {text!r}")
    t = str(text)
    if not _COUNT.fullmatch(t):
        long = len(t.lstrip("-")) > 40 and t.lstrip("-").isascii() and t.lstrip("-").isdigit()
        raise CollsynthError(f"{flag} {t[:40]}... is too large: at most {hi}" if long else
                             f"{flag} must be an integer written with the digits 0-9 only (no '_', '+', spaces "
                             f"or exponent), got {t[:40]!r}")
    value = int(t)
    if value > hi:
        raise CollsynthError(f"{flag} {t} is too large: at most {hi}")
    if lo is not None and value < lo:
        raise CollsynthError(f"{flag} must be at least {lo}, got {t}")
    return value


def int_count(n: object, least: int, what: str) -> int:
    """A count an API call was given (``what`` names it): an int or a NumPy integer (not a bool) of at least
    ``least``, as an int; else a one-line error."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < least:
        raise CollsynthError(f"{what} must be an integer >= {least}, got {n!r}")
    return int(n)


def gpu_count(n: object, least: int = 2) -> int:
    """The API's GPU count (``int_count``), with the error the CLI's --gpus gives."""
    return int_count(n, least, "--gpus")


def parse_number(text: str | float, *, flag: str) -> float:
    """A finite plain number (``0.1``, ``1e-3``) in ASCII digits: float() also reads ``1_0``, `` 1``,
    ``nan``, ``inf`` and other scripts' digits, which are refused here."""
    t = str(text)
    if not re.fullmatch(_NUM, t, flags=re.ASCII):
        raise CollsynthError(f"{flag} must be a number such as 0.5 or 1e-3 (digits 0-9, no '_' or spaces), "
                             f"got {t[:40]!r}")
    value = float(t)
    if not math.isfinite(value):
        raise CollsynthError(f"{flag} must be a finite number, got {t[:40]!r}")
    return value


def _finite(x: int | float) -> bool:
    """math.isfinite without its OverflowError on an int beyond a float (10**400 from a JSON file)."""
    return isinstance(x, int) or math.isfinite(x)


def _prefixed(flag: str | None, message: str) -> str:
    return f"{flag}: {message}" if flag else message


def size_bytes(value: object, *, flag: str | None = None) -> int | float:
    """A message size given to the Python API: a string as ``parse_size`` reads it, or a number of bytes
    (a fraction allowed: the model moves size * count / nchunks bytes unrounded) that is finite, positive
    and at most MAX_BYTES, like every size the CLI takes (an API caller's 1e40 gave 40-digit times). Returns
    the bytes (a string's as an int, an int or float as given, other numbers as a float)."""
    if isinstance(value, str):
        return parse_size(value, flag=flag)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise CollsynthError(_prefixed(flag, f"size {quoted(value)} must be a number of bytes or like '1GiB'"))
    x = int(value) if isinstance(value, numbers.Integral) else float(value)
    if not _finite(x) or x <= 0:
        raise CollsynthError(_prefixed(flag, f"size {quoted(value)} must be a positive, finite number of bytes"))
    if x > MAX_BYTES:
        raise CollsynthError(_prefixed(flag, f"size {quoted(value)} is too large (at most {MAX_BYTES} bytes, 4 EiB)"))
    return value if isinstance(value, (int, float)) else float(x)


def parse_size(text: str | int | float, *, flag: str | None = None) -> int:
    """Bytes in `text` ('1GiB', '32MiB', '4096'); a positive whole number of bytes, at most MAX_BYTES
    (a fraction of a byte is refused, not rounded: `--max-bytes 0.5` must not become 0, "no limit").
    ``flag`` names the option in the error."""
    if isinstance(text, bool):
        raise CollsynthError(_prefixed(flag, f"size must be a number of bytes, not {text!r}"))
    if isinstance(text, (int, float)):
        if not _finite(text):
            raise CollsynthError(_prefixed(flag, f"size {text!r} must be a finite number of bytes"))
        value, unit = Fraction(text), ""
    else:
        value, unit = _split(text, "size", "1GiB or 32MB", flag)
    factor = _SIZE_UNITS.get(unit.lower())
    if factor is None:
        raise CollsynthError(_prefixed(flag, f"unknown size unit {unit!r} in {text!r}: use B, KB, MB, GB, TB, KiB, "
                                             "MiB, GiB or TiB (up to EB/EiB)"))
    if value <= 0:
        raise CollsynthError(_prefixed(flag, f"size {text!r} must be positive"))
    nbytes = value * factor
    if nbytes > MAX_BYTES:
        raise CollsynthError(_prefixed(flag, f"size {text!r} is too large (at most {MAX_BYTES} bytes, 4 EiB)"))
    if nbytes.denominator != 1:
        raise CollsynthError(_prefixed(flag, f"size {text!r} is not a whole number of bytes ({float(nbytes):g}): "
                                             "give whole bytes"))
    return int(nbytes)


def parse_time(text: str | float, *, allow_zero: bool = True, flag: str | None = None) -> float:
    """Seconds in `text` ('3us', '5ms', '0.1s'); never negative, finite, at most MAX_SECONDS. A bare
    number in text other than 0 is refused (`--alpha 3` would silently mean 3 s): write the unit.
    A Python number is seconds. ``flag`` names the option in the error."""
    if isinstance(text, bool):
        raise CollsynthError(_prefixed(flag, f"time must be a number of seconds, not {text!r}"))
    if isinstance(text, (int, float)):
        if not _finite(text):
            raise CollsynthError(_prefixed(flag, f"time {text!r} must be finite"))
        value, unit = Fraction(text), "s"
    else:
        value, unit = _split(text, "time", "3us or 5ms", flag)
        if unit == "" and value > 0:  # a negative one is refused for its sign below, which a unit would not fix
            raise CollsynthError(_prefixed(flag, f"time {text!r} has no unit: write {str(text).strip()}s, "
                                                 f"{str(text).strip()}ms, {str(text).strip()}us or "
                                                 f"{str(text).strip()}ns"))
    factor = _TIME_UNITS.get(unit.lower() if unit != "µs" else unit)
    if factor is None:
        raise CollsynthError(_prefixed(flag, f"unknown time unit {unit!r} in {text!r}: use s, ms, us or ns"))
    if value < 0 or (value == 0 and not allow_zero):
        raise CollsynthError(_prefixed(flag, f"time {text!r} must be {'non-negative' if allow_zero else 'positive'}"))
    if value * Fraction(factor) > MAX_SECONDS:
        raise CollsynthError(_prefixed(flag, f"time {text!r} is too long (at most {MAX_SECONDS:g} s)"))
    seconds = float(value) * factor
    if seconds == 0 and value != 0:
        raise CollsynthError(_prefixed(flag, f"time {text!r} is below the smallest representable time"))
    return seconds


def parse_rate(text: str | float, *, flag: str | None = None) -> float:
    """Bytes per second in `text` ('450GiB/s', '25GB/s', '1e9B/s'); positive and finite. A bare number in
    text is refused (write the unit); a Python number is bytes per second."""
    if isinstance(text, bool):
        raise CollsynthError(_prefixed(flag, f"bandwidth must be a rate such as 450GiB/s, not {text!r}"))
    if isinstance(text, (int, float)):
        if not _finite(text) or text <= 0:
            raise CollsynthError(_prefixed(flag, f"bandwidth {text!r} must be a positive finite rate, "
                                                 "e.g. 450GiB/s"))
        if not 1 <= text <= MAX_BYTES:  # below 1 B/s every transfer time overflows to infinity in the model
            raise CollsynthError(_prefixed(flag, f"bandwidth {text!r} bytes/s is out of range: 1 to {MAX_BYTES} "
                                                 "bytes/s, e.g. 450GiB/s"))
        return float(text)
    s = str(text).strip()
    if s.lower().endswith("/s"):
        s = s[:-2]
    value, unit = _split(s, "bandwidth", "450GiB/s", flag) if s else (Fraction(-1), "")
    if unit == "" and not str(text).strip().lower().endswith("/s") and value > 0:
        t = str(text).strip()  # `--bandwidth 450` would silently mean 450 B/s, like `--alpha 3` 3 s
        raise CollsynthError(_prefixed(flag, f"bandwidth {t!r} has no unit: write {t}GB/s, {t}GiB/s or {t}B/s"))
    factor = _SIZE_UNITS.get(unit.lower())
    if factor is None:
        raise CollsynthError(_prefixed(flag, f"unknown bandwidth unit in {text!r}: write e.g. 450GiB/s or 25GB/s"))
    if value <= 0:
        raise CollsynthError(_prefixed(flag, f"bandwidth {text!r} must be positive, e.g. 450GiB/s"))
    rate = value * factor
    if rate < 1:  # 1e-300B/s: every transfer time overflows to infinity in the model
        raise CollsynthError(_prefixed(flag, f"bandwidth {text!r} is below 1 byte/s: write e.g. 450GiB/s"))
    if rate > MAX_BYTES:
        raise CollsynthError(_prefixed(flag, f"bandwidth {text!r} is too large (at most {MAX_BYTES} bytes/s)"))
    return float(rate)


def check_class_values(text: str | None, parse: Callable[..., object], flag: str) -> str | None:
    """Check --alpha/--bandwidth text before a topology reads it: one value, or per link class
    ("nvlink=3us,net=14us"); every value must parse (``parse`` with ``flag``, so the error names the flag).
    Returns ``text`` unchanged."""
    if text is None:
        return None
    for part in str(text).split(","):
        value = part.split("=", 1)[1] if "=" in part else part
        if "=" in part or value.strip() or str(text).strip() == "":
            parse(value.strip(), flag=flag)
    return text


def rank_ranges(ranks: Sequence[int]) -> str:
    """Sorted ranks as runs: [0, 1, 2, 5] -> "0-2,5" (what `info`, XML phase comments and file names print)."""
    parts: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(parts)


@overload
def parse_rank_map(items: Sequence[str] | None, nranks: int, *, flag: str = ..., value: None = None,
                   what: str = ..., example: str = ...) -> dict[int, float]: ...


@overload
def parse_rank_map(items: Sequence[str] | None, nranks: int, *, flag: str = ..., value: Callable[[str], T],
                   what: str = ..., example: str = ...) -> dict[int, T]: ...


def parse_rank_map(items: Sequence[str] | None, nranks: int, *, flag: str = "--arrival",
                   value: Callable[[str], object] | None = None, what: str = "TIME",
                   example: str = "7=5ms") -> dict[int, Any]:
    """RANK=VALUE pairs (repeated, or comma-separated) into {rank: value}; every rank must exist, once.
    ``value`` parses the right-hand side (default: a time in seconds)."""
    parse: Callable[[str], object] = value or parse_time
    out: dict[int, Any] = {}
    for item in items or []:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            rank_text, sep, value_text = part.partition("=")
            if not sep:
                raise CollsynthError(f"cannot read {flag} {part!r}: write RANK={what}, e.g. {flag} {example}")
            try:
                rank = parse_count(rank_text, flag="rank")
            except CollsynthError:
                raise CollsynthError(f"{flag} {part!r}: rank {rank_text!r} is not an integer") from None
            if not 0 <= rank < nranks:
                raise CollsynthError(f"{flag} {part!r}: rank {rank} does not exist; ranks are 0..{nranks - 1}")
            if rank in out:
                raise CollsynthError(f"{flag} names rank {rank} twice; keep one {what} for it")
            try:
                out[rank] = parse(value_text)
            except CollsynthError as e:
                msg = str(e).removeprefix(f"{flag}: ")
                raise CollsynthError(f"{flag} {part!r}: {msg}") from None
    return out


def parse_arrivals(items: Sequence[str] | None, nranks: int) -> dict[int, float]:
    """--arrival RANK=TIME pairs into {rank: seconds}; ranks must exist."""
    return parse_rank_map(items, nranks, flag="--arrival")


def format_time(seconds: float) -> str:
    """Human-readable time with a sensible unit."""
    a = abs(seconds)
    if a >= 1:
        return f"{seconds:.3f} s"
    if a >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    if a >= 1e-6:
        return f"{seconds * 1e6:.3f} us"
    return f"{seconds * 1e9:.1f} ns"


def parse_class_values(text: str | float | dict[str, Any] | None, parse: Callable[[Any], float],
                       *, flag: str = "--bandwidth", example: str = "nvlink=450GB/s,net=50GB/s"
                       ) -> float | dict[str, float] | None:
    """One value for every link class ('450GB/s', a number) or per class ('nvlink=450GB/s,net=50GB/s',
    or a {class: value} mapping); ``parse`` reads one value (parse_rate or parse_time)."""
    if text is None:
        return None
    if isinstance(text, dict):
        items = list(text.items())
    elif isinstance(text, str) and "=" in text:
        items = []
        for part in text.split(","):
            cls, eq, val = part.partition("=")
            if not eq or not cls.strip() or not val.strip():
                raise CollsynthError(f"{flag} {text!r}: write one value or CLASS=VALUE pairs, e.g. {example}")
            items.append((cls.strip(), val.strip()))
    else:
        return parse(text)
    out: dict[str, float] = {}
    for cls, val in items:
        if not isinstance(cls, str) or not cls:
            raise CollsynthError(f"{flag}: link class names must be non-empty strings, e.g. {example}")
        if cls in out:
            raise CollsynthError(f"{flag} names link class {cls!r} twice; keep one")
        out[cls] = parse(val)
    if not out:
        raise CollsynthError(f"{flag}: no value given, e.g. {example}")
    return out
