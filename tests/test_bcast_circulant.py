"""circulant.py: Traeff's circulant broadcast, round-optimal for every node count (checked by an independent replay)."""

from __future__ import annotations

import math

import pytest

from collsynth.synth.algorithms.stragglar import circulant
from collsynth.synth.algorithms.stragglar.circulant import base_block, circulant_rounds, receive_schedule, skips


def _replay(N: int, nb: int, rounds: list[list[tuple[int, int, int]]]) -> int:
    """One send and one receive per node and round, the circulant pattern (r -> r + skip[i mod q]), only
    blocks the sender holds, nothing received twice, every node ends with every block: the round count."""
    s = skips(N)
    q = len(s) - 1
    shift = (q - (nb - 1) % q) % q
    have = [set(range(nb))] + [set() for _ in range(N - 1)]
    for i, moves in enumerate(rounds):
        assert len({a for a, _, _ in moves}) == len(moves) == len({d for _, d, _ in moves})
        for a, d, j in moves:
            assert d == (a + s[(i + shift) % q]) % N
            assert j in have[a] and j not in have[d] and d != 0
            assert a != 0 or j == min(i, nb - 1)  # the root sends a new block every round while it has one
        for _, d, j in moves:
            have[d].add(j)
    assert all(h == set(range(nb)) for h in have)
    return len(rounds)


@pytest.mark.parametrize("N", [3, 5, 6, 7, 9, 12, 17, 20, 24, 33, 40, 48, 63, 96, 100, 127])
@pytest.mark.parametrize("nb", [1, 2, 3, 9, 24])
def test_round_optimal_for_any_node_count(N: int, nb: int) -> None:
    rounds = circulant_rounds(N, nb)
    assert rounds is not None
    assert _replay(N, nb, rounds) == nb - 1 + math.ceil(math.log2(N))


def test_skips_and_base_blocks() -> None:
    assert skips(12) == [1, 2, 3, 6, 12] and skips(100) == [1, 2, 4, 7, 13, 25, 50, 100]
    for N in (5, 12, 100):
        s = skips(N)
        q = len(s) - 1
        assert [base_block(s[k], s) for k in range(q)] == list(range(q))  # the root's targets
        assert base_block(0, s) == q


@pytest.mark.parametrize("N", [6, 24, 100])
def test_receive_schedule_takes_every_residue_once_per_cycle(N: int) -> None:
    rec = receive_schedule(N)
    assert rec is not None
    s = skips(N)
    q = len(s) - 1
    for r in range(1, N):
        b = base_block(r, s)
        assert sorted(rec[r]) == sorted([b] + [j - q for j in range(q) if j != b])


def test_powers_of_two_and_out_of_range_are_left_to_the_caller() -> None:
    assert circulant_rounds(16, 8) is None and circulant_rounds(2, 3) is None
    assert circulant_rounds(circulant.MAX_NODES + 1, 4) is None


def test_a_wrong_schedule_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The expansion replays every move: a receive schedule whose sender lacks the block is refused."""
    good = receive_schedule(12)
    assert good is not None
    bad = tuple(tuple(reversed(row)) for row in good)
    monkeypatch.setattr(circulant, "receive_schedule", lambda N: bad)
    with pytest.raises(AssertionError, match="before it has it|misses a block"):
        circulant_rounds(12, 9)


def test_same_output_every_call() -> None:
    a = circulant_rounds(24, 16)
    receive_schedule.cache_clear()
    assert circulant_rounds(24, 16) == a


def test_no_cbc_means_no_schedule_and_the_search_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    import pulp

    from collsynth.synth.algorithms.stragglar import bcast

    def broken(self, *a, **k):  # type: ignore[no-untyped-def]
        raise pulp.PulpSolverError("cbc missing")

    monkeypatch.setattr(pulp.PULP_CBC_CMD, "actualSolve", broken)
    receive_schedule.cache_clear()
    bcast._rounds.cache_clear()
    try:
        assert receive_schedule(12) is None and circulant_rounds(12, 5) is None
        assert len(bcast.broadcast_rounds(12, 5)) == 5 - 1 + math.ceil(math.log2(12))  # the phantom search
    finally:
        receive_schedule.cache_clear()
        bcast._rounds.cache_clear()
