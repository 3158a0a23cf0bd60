"""Byte-interval maps: what every byte of a buffer holds, and who accessed it last.

``Segments`` maps disjoint byte ranges [lo, hi) to values; bytes outside every range are undefined.
Writing a range replaces what was there (the parts of old ranges outside it stay). A ``shift``
function adjusts a value when a range is cut (data values name the element their first byte holds).
Symbolic data are exact at byte granularity however large the message is: a range stays one entry
until an op touches part of it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

Piece = tuple[int, int, Any]  # (lo, hi, value); value None: undefined


class Segments:
    __slots__ = ("lo", "hi", "val", "shift", "same")

    def __init__(self, shift: Callable[[Any, int], Any] | None = None,
                 same: Callable[[Any, int, Any], bool] | None = None) -> None:
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.val: list[Any] = []
        self.shift = shift
        # same(v, d, w): whether w is what v holds d bytes past its start; adjacent ranges that continue each
        # other are joined (what ``get`` returns is unchanged)
        self.same = same

    def _cut(self, v: Any, delta: int) -> Any:
        return v if self.shift is None or delta == 0 else self.shift(v, delta)

    def get(self, lo: int, hi: int) -> list[Piece]:
        """The pieces covering [lo, hi) in order, gaps as (a, b, None)."""
        out: list[Piece] = []
        i = bisect.bisect_right(self.lo, lo) - 1
        if i < 0 or self.hi[i] <= lo:
            i += 1
        pos = lo
        n = len(self.lo)
        while pos < hi and i < n and self.lo[i] < hi:
            a, b = self.lo[i], self.hi[i]
            if a > pos:
                out.append((pos, a, None))
                pos = a
            end = min(b, hi)
            out.append((pos, end, self._cut(self.val[i], pos - a)))
            pos = end
            i += 1
        if pos < hi:
            out.append((pos, hi, None))
        return out

    def set(self, lo: int, hi: int, pieces: list[Piece]) -> None:
        """Replace [lo, hi) with ``pieces`` (covering it in order; None values leave bytes undefined)."""
        if hi <= lo:
            return
        i = bisect.bisect_right(self.lo, lo) - 1
        if i < 0 or self.hi[i] <= lo:
            i += 1
        j = i
        n = len(self.lo)
        while j < n and self.lo[j] < hi:
            j += 1
        new_lo: list[int] = []
        new_hi: list[int] = []
        new_val: list[Any] = []
        if i < j and self.lo[i] < lo:
            new_lo.append(self.lo[i])
            new_hi.append(lo)
            new_val.append(self.val[i])
        for a, b, v in pieces:
            if v is not None and b > a:
                new_lo.append(a)
                new_hi.append(b)
                new_val.append(v)
        if i < j and self.hi[j - 1] > hi:
            new_lo.append(hi)
            new_hi.append(self.hi[j - 1])
            new_val.append(self._cut(self.val[j - 1], hi - self.lo[j - 1]))
        if self.same is not None:
            new_lo, new_hi, new_val, i, j = self._joined(self.same, new_lo, new_hi, new_val, i, j)
        self.lo[i:j] = new_lo
        self.hi[i:j] = new_hi
        self.val[i:j] = new_val

    def _joined(self, same: Callable[[Any, int, Any], bool], new_lo: list[int], new_hi: list[int],
                new_val: list[Any], i: int, j: int) -> tuple[list[int], list[int], list[Any], int, int]:
        """The ranges replacing [i, j), each that continues the one before it (adjacent, and ``same`` says its
        value is the earlier one's there) joined to it, the neighbours on both sides included (i and j then
        widen): a buffer written by one op in many pieces stays one range, so later accesses walk one piece."""
        if len(new_lo) > 1:
            out_lo, out_hi, out_val = new_lo[:1], new_hi[:1], new_val[:1]
            for a, b, v in zip(new_lo[1:], new_hi[1:], new_val[1:]):
                if out_hi[-1] == a and same(out_val[-1], a - out_lo[-1], v):
                    out_hi[-1] = b
                else:
                    out_lo.append(a)
                    out_hi.append(b)
                    out_val.append(v)
            new_lo, new_hi, new_val = out_lo, out_hi, out_val
        if not new_lo:
            return new_lo, new_hi, new_val, i, j
        lo, hi, val = self.lo, self.hi, self.val
        if i > 0 and hi[i - 1] == new_lo[0] and same(val[i - 1], new_lo[0] - lo[i - 1], new_val[0]):
            i -= 1
            new_lo[0], new_val[0] = lo[i], val[i]
        if j < len(lo) and new_hi[-1] == lo[j] and same(new_val[-1], lo[j] - new_lo[-1], val[j]):
            new_hi[-1] = hi[j]
            j += 1
        return new_lo, new_hi, new_val, i, j
