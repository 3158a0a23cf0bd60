"""The MSCCL++ executor's interval maps (backends/mscclpp/memory.py): joining ranges whose values continue
each other must not change what any read returns, only how many pieces it walks."""

from __future__ import annotations

import random

import numpy as np

from collsynth.backends.mscclpp.exec_values import continues, equal_records, shift_value
from collsynth.backends.mscclpp.memory import Segments


def _bytes(seg: Segments, lo: int, hi: int) -> list[object]:
    """What every byte of [lo, hi) holds, one entry per byte: its range's value cut to it (None: undefined)."""
    out: list[object] = []
    for x in range(lo, hi):
        i = next((i for i in range(len(seg.lo)) if seg.lo[i] <= x < seg.hi[i]), None)
        out.append(None if i is None else shift_value(seg.val[i], x - seg.lo[i]))
    return out


def _read(seg: Segments, lo: int, hi: int) -> list[object]:
    """The same through ``get`` (each piece's value cut to its bytes; even offsets, as the executor's)."""
    out: list[object] = []
    for a, b, v in seg.get(lo, hi):
        out += [None if v is None else shift_value(v, x - a) for x in range(a, b)]
    return out


def _values(rng: random.Random, clock: np.ndarray) -> list[tuple[int, int, object]]:
    """A random stream of pieces over a random range: runs of one value continued (as one op writes a
    range that it read in several pieces), other values, packets and gaps; every boundary even, as the
    executor's are (whole chunks; an LL packet is 2 bytes an element, and a cut inside one loses its phase
    in both maps)."""
    lo = 2 * rng.randrange(0, 100)
    pieces = []
    pos = lo
    elem = rng.randrange(0, 50)
    for _ in range(rng.randrange(1, 6)):
        scale = rng.choice((1, 1, 2))
        n = rng.randrange(1, 20) * 2
        kind = rng.random()
        if kind < 0.15:
            v = None
        else:
            if kind < 0.4:
                elem = rng.randrange(0, 50)
            v = (rng.choice((1, 3)), elem, 1, rng.choice((None, None, "tainted")), scale, scale - 1,
                 rng.choice((None, clock)), rng.choice((-1, 7)))
            elem += n // scale
        pieces.append((pos, pos + n, v))
        pos += n
    return pieces


def test_joined_ranges_read_as_the_pieces_they_replace():
    rng = random.Random(48)
    clock = np.zeros(3)
    for _ in range(300):
        plain, joined = Segments(shift_value), Segments(shift_value, continues)
        for _ in range(25):
            pieces = _values(rng, clock)
            lo, hi = pieces[0][0], pieces[-1][1]
            plain.set(lo, hi, pieces)
            joined.set(lo, hi, pieces)
            a = 2 * rng.randrange(0, 150)
            b = 2 * rng.randrange(a // 2, 160)
            assert _read(joined, a, b) == _read(plain, a, b) == _bytes(plain, a, b)
        assert _bytes(joined, 0, 320) == _bytes(plain, 0, 320)
        assert len(joined.lo) <= len(plain.lo)


def test_a_range_written_in_pieces_that_continue_each_other_is_one_range():
    v = (1, 0, 1, None, 1, 0, None, 5)
    seg = Segments(shift_value, continues)
    seg.set(0, 16, [(0, 16, v)])
    seg.set(16, 48, [(16, 32, shift_value(v, 16)), (32, 48, shift_value(v, 32))])
    assert seg.get(0, 48) == [(0, 48, v)]
    seg.set(8, 12, [(8, 12, (1, 99, 1, None, 1, 0, None, 5))])  # another element: cut in three
    assert [(a, b) for a, b, _ in seg.get(0, 48)] == [(0, 8), (8, 12), (12, 48)]
    packets = (1, 0, 1, None, 2, 1, None, 5)  # LL packets: 2 bytes an element, joined on whole elements only
    seg2 = Segments(shift_value, continues)
    seg2.set(0, 3, [(0, 3, packets)])
    seg2.set(3, 6, [(3, 6, shift_value(packets, 3))])
    assert len(seg2.lo) == 2
    hist = Segments(same=equal_records)
    rec = ((4, 1, 0, 0, "op"), ())
    hist.set(0, 8, [(0, 8, rec)])
    hist.set(8, 16, [(8, 16, ((4, 1, 0, 0, "op"), ()))])
    assert hist.get(0, 16) == [(0, 16, rec)]
