"""An independent, naive reference for tests: numeric execution of a Schedule on random vectors.

Written without numpy bit sets and without sharing code with synth/verify.py, so that the two can be
compared on mutants. Semantics (synth/ir.py): a step reads all sources, then copies overwrite and
reduces accumulate; a copy whose destination another transfer of the same step reads or writes makes
that location, and what any transfer reads from it in that step, garbage (NaN). Ports and ranges are checked by
plain counting.
"""

from __future__ import annotations

import math
import random
from collections import Counter

from collsynth.synth.ir import Schedule


def structurally_ok(s: Schedule, ports: int | None = None) -> bool:
    p = s.ports if ports is None else ports
    for t in s.transfers():
        if not (0 <= t.src < s.nranks and 0 <= t.dst < s.nranks) or t.src == t.dst:
            return False
        if t.count < 1 or t.chunk < 0 or t.chunk + t.count > s.nchunks:
            return False
    for k in range(s.nsteps):
        ts = list(s.transfers(k))
        if ts and (max(Counter(t.src for t in ts).values()) > p or max(Counter(t.dst for t in ts).values()) > p):
            return False
    return True


def numeric_ok(s: Schedule, seed: int = 0, width: int = 3) -> bool:
    """Execute on random float vectors and compare with the collective's definition."""
    rng = random.Random(seed)
    n, C = s.nranks, s.nchunks
    orig = {(r, c): [rng.uniform(-1, 1) for _ in range(width)] for r in range(n) for c in range(C)}
    nan = [math.nan] * width
    if s.collective == "allgather":
        buf = {(r, c): (list(orig[(r, c)]) if s.owner[c] == r else list(nan)) for r in range(n) for c in range(C)}
    else:
        buf = {k: list(v) for k, v in orig.items()}
    for k in range(s.nsteps):
        ts = list(s.transfers(k))
        reads = Counter()
        writes = Counter()
        for t in ts:
            for c in range(t.chunk, t.chunk + t.count):
                reads[(t.src, c)] += 1
                writes[(t.dst, c)] += 1
        copied = {(t.dst, c) for t in ts if not t.reduce for c in range(t.chunk, t.chunk + t.count)}
        racy = {loc for loc in copied if reads[loc] > 0 or writes[loc] > 1}
        snap = {}
        for t in ts:
            for c in range(t.chunk, t.chunk + t.count):
                snap[(t.src, c)] = list(nan) if (t.src, c) in racy else list(buf[(t.src, c)])
        for t in ts:
            for c in range(t.chunk, t.chunk + t.count):
                d = (t.dst, c)
                v = snap[(t.src, c)]
                buf[d] = [a + b for a, b in zip(buf[d], v)] if t.reduce else list(v)
        for loc in racy:
            buf[loc] = list(nan)
    def close(a: list[float], b: list[float]) -> bool:
        return all(not math.isnan(x) and abs(x - y) <= 1e-9 * (1 + abs(y)) for x, y in zip(a, b))
    if s.collective == "allgather":
        return all(close(buf[(r, c)], orig[(s.owner[c], c)]) for r in range(n) for c in range(C))
    total = {c: [sum(orig[(r, c)][i] for r in range(n)) for i in range(width)] for c in range(C)}
    if s.collective == "allreduce":
        return all(close(buf[(r, c)], total[c]) for r in range(n) for c in range(C))
    return all(close(buf[(s.owner[c], c)], total[c]) for c in range(C))


def reference_ok(s: Schedule, ports: int | None = None) -> bool:
    return structurally_ok(s, ports) and numeric_ok(s)
