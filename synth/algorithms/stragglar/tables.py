"""Precomputed StragglAR designs for n that is not a power of two (designs.json).

Searching a design by integer programming takes from milliseconds (n < 100) to a minute (n ~ 500),
so designs are generated once by this module and shipped; tests check that every stored design is
valid and gives a verified schedule. Only the receive ages are stored (one base-36 character per
offset); the senders are recomputed by a max-flow (design.design_from_ages) and the tail
by the (fast) tail program. Regenerate, e.g. for every n up to 256:

    python -m collsynth.synth.algorithms.stragglar.tables --max 256
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from typing import Any

from collsynth.fileio import write_text_atomic
from collsynth.synth.algorithms.stragglar.design import Design, ceil_log2, design_from_ages, is_pow2, search_design

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "designs.json")
FORMAT = "collsynth-stragglar-designs"
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    try:
        with open(PATH, encoding="utf-8") as f:
            d = json.load(f)
    except FileNotFoundError:
        return {}
    if d.get("format") != FORMAT:
        return {}
    return d.get("designs", {})


def stored_sizes() -> list[int]:
    """The n with a stored design."""
    return sorted(int(k) for k in _table())


def cached_design(n: int) -> Design | None:
    """The stored design for n (None when there is none or it does not complete)."""
    entry = _table().get(str(n))
    if entry is None:
        return None
    age = [_DIGITS.index(ch) for ch in entry["age"]]
    return design_from_ages(n - 1, int(entry["K"]), age)


def encode(d: Design) -> dict[str, Any]:
    return {"K": d.K, "age": "".join(_DIGITS[a] for a in d.age)}


def generate(ns: list[int], time_limit: float, out: str = PATH, log: Any = sys.stderr) -> None:
    """Search designs for ``ns`` (depth ceil(log2 n)+1) and merge them into the table file."""
    try:
        with open(out, encoding="utf-8") as f:
            designs = json.load(f).get("designs", {})
    except FileNotFoundError:
        designs = {}
    for n in ns:
        if is_pow2(n) or n < 4 or str(n) in designs:
            continue
        t = time.time()
        d = search_design(n - 1, ceil_log2(n) + 1, time_limit)
        print(f"n={n}: {'found' if d else 'NOT FOUND'} in {time.time() - t:.1f}s", file=log, flush=True)
        if d is not None:
            designs[str(n)] = encode(d)
            _write(out, designs)
    _write(out, designs)


def _write(out: str, designs: dict[str, Any]) -> None:
    body = ",\n".join(f' "{k}": ' + json.dumps(designs[k], separators=(",", ":"))
                      for k in sorted(designs, key=int))
    write_text_atomic(out, f'{{"format": "{FORMAT}", "version": 1, "designs": {{\n{body}\n}}}}\n')


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="generate StragglAR designs for non-power-of-two n")
    ap.add_argument("--min", type=int, default=3)
    ap.add_argument("--max", type=int, default=256)
    ap.add_argument("--only", type=int, nargs="*", help="just these n")
    ap.add_argument("--time-limit", type=float, default=600.0)
    ap.add_argument("-o", "--output", default=PATH)
    a = ap.parse_args(argv)
    ns = a.only if a.only else list(range(a.min, a.max + 1))
    generate(ns, a.time_limit, a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
