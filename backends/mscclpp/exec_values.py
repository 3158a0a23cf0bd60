"""Symbolic data values of the MSCCL++ executor (execute.py). A byte holds (ranks whose contribution it
sums, the element it is, the launch it belongs to, a taint message, scale (1 data, 2 LL packets), packet
flag, release clock, movement tag); buffers are interval maps of them (memory.py). Reads yield streams of
pieces (lo, hi, value), and reductions add them, tainting a value that mixes elements or launches or
counts a rank twice with a message naming the op."""

from __future__ import annotations

from typing import Any

# a data value: (ranks mask, element of the first byte, launch, taint, scale, packet flag, release VC, movement)
Val = tuple[int, int, int, Any, int, int, Any, int]


def shift_value(v: Val, d: int) -> Val:
    """The value ``d`` bytes past ``v``'s first byte (how an interval map splits a value)."""
    return (v[0], v[1] + d // v[4], v[2], v[3], v[4], v[5], v[6], v[7])


def continues(v: Val, d: int, w: Val) -> bool:
    """Whether ``w`` is the value ``d`` bytes past ``v``'s first byte (``shift_value``, on a whole element),
    so that an interval map may hold both as one range (memory.Segments; the release clock, a shared
    array, compared by identity)."""
    return (d % v[4] == 0 and w[1] == v[1] + d // v[4] and w[0] == v[0] and w[2] == v[2] and w[3] == v[3]
            and w[4] == v[4] and w[5] == v[5] and w[6] is v[6] and w[7] == v[7])


def equal_records(v: Any, d: int, w: Any) -> bool:
    """Whether two access-history values are equal (they do not change along a range)."""
    return v == w


def untagged(stream: list[tuple[int, int, Any]]) -> list[tuple[int, int, Any]]:
    """A computed result: it carries no movement tag (the data it came from have landed)."""
    return [(x0, x1, None if v is None else (v[0], v[1], v[2], v[3], -1)) for x0, x1, v in stream]

def sum_streams(streams: list[list[tuple[int, int, Any]]], where: str) -> list[tuple[int, int, Any]]:
    """Element-wise sum of equally long streams (pieces relative to 0); ``where`` names the op in the
    message of a value it spoils."""
    bounds = sorted({b for s in streams for p in s for b in (p[0], p[1])})
    out = []
    idx = [0] * len(streams)
    for x0, x1 in zip(bounds, bounds[1:]):
        vals = []
        for k, s in enumerate(streams):
            while idx[k] < len(s) and s[idx[k]][1] <= x0:
                idx[k] += 1
            p = s[idx[k]]
            v = p[2]
            vals.append(None if v is None else (v[0], v[1] + (x0 - p[0]), v[2], v[3], v[4]))
        out.append((x0, x1, _add(vals, where)))
    return out


def _add(vals: list[Any], where: str) -> Any:
    first = vals[0]
    if any(v is None for v in vals):
        base = next((v for v in vals if v is not None), None)
        if base is None:
            return None
        return (base[0], base[1], base[2], f"{where} adds undefined data", -1)
    mask, elem, launch, taint = first[0], first[1], first[2], first[3]
    for v in vals[1:]:
        if taint is None and v[3] is not None:
            taint = v[3]
        if taint is None and v[1] != elem:
            taint = f"{where} adds element {v[1]} to element {elem} (different data)"
        if taint is None and v[2] != launch:
            taint = f"{where} adds data of launch {v[2]} to data of launch {launch}"
        if taint is None and mask & v[0]:
            dup = [r for r in range(mask.bit_length()) if (mask & v[0]) >> r & 1]
            taint = f"{where} counts the contribution of rank(s) {', '.join(map(str, dup[:8]))} twice"
        mask |= v[0]
    return (mask, elem, launch, taint, -1)
