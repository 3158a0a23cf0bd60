"""listsched.Busy: the busy intervals of one port or link (earliest free gap with backfill, booking in
any order), checked on hand-made interval sets (docs/stragglar.md's list-scheduling model)."""

from __future__ import annotations

import itertools

from collsynth.synth.algorithms.stragglar.listsched import Busy, Timeline, common_fit


def test_empty_port_is_free_at_once() -> None:
    b = Busy()
    assert b.fit(5.0, 2.0) == 5.0 and b.fit(0.0, 1e9) == 0.0
    assert b.last_end() == 0.0


def test_fit_finds_the_earliest_gap_long_enough() -> None:
    b = Busy()
    b.take(0.0, 1.0)
    b.take(2.0, 3.0)
    assert b.fit(0.0, 1.0) == 1.0  # the gap [1, 2) fits exactly
    assert b.fit(0.0, 1.5) == 3.0  # too short: after the last interval
    assert b.fit(1.5, 0.5) == 1.5 and b.fit(1.5, 0.6) == 3.0
    assert b.fit(2.5, 0.1) == 3.0  # inside a busy interval: its end
    assert b.fit(3.0, 7.0) == 3.0 and b.fit(4.0, 1.0) == 4.0
    assert b.fit(-1.0, 1.0) == -1.0  # before everything, ending where the first interval starts
    assert b.fit(-1.0, 1.5) == 3.0
    assert b.fit(1.0, 1.0 + 1e-13) == 1.0  # a relative 1e-12 of rounding at the next start is tolerated
    assert b.fit(1.0, 1.001) == 3.0
    assert b.last_end() == 3.0


def test_take_in_any_order_keeps_the_intervals_sorted() -> None:
    b = Busy()
    b.take(5.0, 6.0)
    b.take(3.0, 4.0)  # a backfilled booking before the last one
    b.take(0.0, 1.0)
    b.take(8.0, 9.0)
    assert b.lo == [0.0, 3.0, 5.0, 8.0] and b.hi == [1.0, 4.0, 6.0, 9.0]
    assert b.last_end() == 9.0
    assert b.fit(0.0, 2.0) == 1.0 and b.fit(0.0, 2.5) == 9.0 and b.fit(4.0, 1.0) == 4.0
    assert b.fit(4.0, 1.5) == 6.0 and b.fit(6.0, 2.0) == 6.0 and b.fit(6.0, 2.5) == 9.0
    b.take(4.0, 5.0)  # touching its neighbours: one interval [3, 6) (a gap of 0 fits nothing)
    assert b.lo == [0.0, 3.0, 8.0] and b.hi == [1.0, 6.0, 9.0] and b.fit(3.0, 0.5) == 6.0
    b.take(1.0, 2.0)  # touching the one before only
    b.take(7.0, 8.0)  # ... the one after only
    b.take(9.0, 9.5)  # ... the last
    assert b.lo == [0.0, 3.0, 7.0] and b.hi == [2.0, 6.0, 9.5]


class _Unjoined:
    """Busy as it was before touching intervals joined (every booking its own interval): the reference."""

    def __init__(self) -> None:
        self.iv: list[tuple[float, float]] = []

    def fit(self, t: float, dur: float) -> float:
        for lo, hi in sorted(self.iv):
            if hi <= t:
                continue
            if t + dur <= lo * (1 + 1e-12):
                return t
            t = max(t, hi)
        return t

    def take(self, start: float, end: float) -> None:
        self.iv.append((start, end))


def test_joined_intervals_fit_as_the_bookings_they_join() -> None:
    """Bookings placed by ``fit`` (so many touch) in any order, on a grid of times: every later ``fit``
    answers as the unjoined reference does."""
    import random

    rng = random.Random(48)
    for _ in range(200):
        b, ref = Busy(), _Unjoined()
        for _ in range(60):
            t, dur = rng.randrange(0, 40) / 4, rng.randrange(1, 12) / 4
            start = b.fit(t, dur)
            assert start == ref.fit(t, dur)
            if rng.random() < 0.7:
                b.take(start, start + dur)
                ref.take(start, start + dur)
        assert all(x < y for x, y in zip(b.hi, b.lo[1:]))  # sorted, disjoint, no two touching


def _busy(*intervals: tuple[float, float]) -> Busy:
    b = Busy()
    for lo, hi in intervals:
        b.take(lo, hi)
    return b


def test_common_fit_is_the_least_start_every_port_allows_in_any_order() -> None:
    a = _busy((1.0, 2.0), (4.0, 5.0))  # free [0, 1), [2, 4), [5, inf)
    b = _busy((0.0, 2.5), (6.0, 7.0))  # free [2.5, 6), [7, inf)
    c = _busy((3.0, 3.2))  # free [0, 3), [3.2, inf)
    # starts allowed for dur 0.5: a [0, 0.5], [2, 3.5], 5+; b [2.5, 5.5], 7+; c [0, 2.5], 3.2+ -> 2.5;
    # dur 1: a [2, 3], 5+; b [2.5, 5], 7+; c [0, 2], 3.2+ -> 5; dur 1.5: a 5+, b [2.5, 4.5], 7+ -> 7
    for ports in itertools.permutations([a, b, c]):
        assert common_fit(ports, 0.0, 0.5) == 2.5
        assert common_fit(ports, 0.0, 1.0) == 5.0
        assert common_fit(ports, 0.0, 1.5) == 7.0 and common_fit(ports, 0.0, 2.0) == 7.0
        assert common_fit(ports, 2.6, 0.5) == 3.2  # c's busy [3, 3.2) pushes a and b on
        assert common_fit(ports, 8.0, 5.0) == 8.0  # after everything
    assert common_fit([], 1.5, 1.0) == 1.5 and common_fit([a], 0.0, 1.0) == 0.0
    # every port accepts the answer, and no earlier candidate (a port's interval end) is accepted by all
    for dur in (0.1, 0.5, 1.0, 1.5, 2.0, 3.0):
        t = common_fit([a, b, c], 0.0, dur)
        assert all(q.fit(t, dur) == t for q in (a, b, c))
        cands = {0.0} | {h for q in (a, b, c) for h in q.hi}
        assert not [x for x in cands if x < t and all(q.fit(x, dur) == x for q in (a, b, c))]


# ---------------------------------------------------------------- Timeline on a cluster (h100-cluster, 2 x 8)
def _timeline(arrival: list[float] | None = None) -> Timeline:
    from collsynth.synth.topology import make_topology

    t = make_topology("h100-cluster", 16)
    return Timeline(t, 4, arrival or [0.0] * 16, 2**20)


def test_timeline_ports_links_and_durations() -> None:
    tl = _timeline()
    net, nv = tl.classes(8, 0), tl.classes(0, 1)
    assert net == (1, 1) and nv == (0, 0)  # ('nvlink', 'net'): across nodes on the rail, within a node NVLink
    assert tl.classes(9, 1) == (1, 1) and tl.classes(1, 2) == (0, 0) and tl.classes(15, 7) == (1, 1)
    d_net = tl.duration(8, 0, 1)
    assert d_net == tl.pair(8, 0)[1] + 2**20 / tl.pair(8, 0)[2] and tl.duration(0, 1, 2) > tl.duration(0, 1, 1)
    assert tl.add(8, 0, 0, 1, False) == 0.0
    assert tl.add(9, 1, 1, 1, False) == 0.0  # another GPU's NIC and rail: no wait
    assert tl.add(0, 2, 3, 1, False) == 0.0  # rank 0's NVLink send port is free (its net receive is busy)
    assert tl.earliest(10, 0, 2, 1) == d_net  # rank 0's net receive port is busy until the first ends
    assert tl.earliest(8, 0, 2, 1) == d_net and tl.classes(8, 3)[0] == 0  # 8 -> 3 starts on NVLink (PXN)
    assert tl.port_free(8, 1) == d_net and tl.port_free(0, 1, receive=True) == d_net
    assert tl.port_free(0, 0) == tl.duration(0, 2, 1) and tl.port_free(5, 0) == 0.0
    assert len(tl.moves) == 3  # earliest adds nothing
    one = _timeline()
    one.add(8, 0, 0, 1, False)  # port_free reads the port the move booked, of that rank and class only
    assert one.port_free(8, 1) == d_net and one.port_free(0, 1, receive=True) == d_net
    assert one.port_free(9, 1) == one.port_free(8, 0) == one.port_free(7, 1) == one.port_free(0, 0, True) == 0.0


def test_timeline_waits_for_arrivals_and_data() -> None:
    tl = _timeline([0.0, 0.0, 1e-3] + [0.0] * 13)
    d = tl.duration(0, 1, 1)
    assert tl.add(0, 2, 0, 1, False) == 1e-3  # rank 2 arrives late
    assert tl.add(0, 1, 1, 2, False) == 0.0
    e = tl.duration(0, 1, 2)
    assert tl.ready(1, 1) == e and tl.ready(1, 1, 2) == e and tl.ready(1, 0) == 0.0
    assert tl.add(1, 3, 2, 1, False) == e  # reads chunk 2 of rank 1, written by the 2-chunk move
    assert tl.add(1, 4, 1, 2, False) >= e
    # a write to rank 1's chunk 1 waits for the reads of it (write after read), also as part of a range
    r_end = tl.end[-1]  # the end of the 2-chunk read of chunks 1-2
    assert tl.add(5, 1, 1, 1, True) == r_end
    tl2 = _timeline()
    tl2.add(0, 1, 0, 2, False)
    assert tl2.earliest(6, 0, 2, 1) == 0.0  # rank 0's chunk 2 was never read: a write to it need not wait
    assert tl2.earliest(6, 0, 2, 1, after=1.0) == 1.0  # (after is a floor)
    assert tl2.earliest(6, 0, 1, 1) == tl2.end[0]  # chunk 1 was read by the 2-chunk move: wait for its end
    t_w = tl2.add(7, 0, 0, 2, True)
    assert t_w == tl2.end[0] and d > 0
    assert tl2.ordered() == [[(0, 1, 0, 2, False)], [(7, 0, 0, 2, True)]]


def test_timeline_backfills_an_earlier_gap() -> None:
    tl = _timeline()
    late = tl.add(0, 1, 0, 1, False, after=1.0)
    early = tl.add(0, 2, 1, 1, False)  # rank 0's send port is free before the first booking
    assert late == 1.0 and early == 0.0
    assert tl.ordered() == [[(0, 2, 1, 1, False)], [(0, 1, 0, 1, False)]]
