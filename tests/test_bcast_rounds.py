"""bcast.broadcast_rounds: a valid one-port pipelined broadcast, round-optimal on powers of two."""

from __future__ import annotations

import math

import pytest

from collsynth.synth.algorithms.stragglar.bcast import broadcast_rounds


def _replay(N: int, nb: int) -> int:
    """Check every round (one send and one receive per node, only blocks the sender holds, nothing
    received twice) and that every node ends with every block; return the round count."""
    have = [set(range(nb))] + [set() for _ in range(N - 1)]
    rounds = broadcast_rounds(N, nb)
    for moves in rounds:
        senders = [s for s, _, _ in moves]
        receivers = [d for _, d, _ in moves]
        assert len(set(senders)) == len(senders) and len(set(receivers)) == len(receivers)
        for s, d, j in moves:
            assert j in have[s] and j not in have[d] and d != 0
        for _, d, j in moves:
            have[d].add(j)
    assert all(h == set(range(nb)) for h in have)
    return len(rounds)


@pytest.mark.parametrize("N", [2, 4, 8, 16, 32])
@pytest.mark.parametrize("nb", [1, 2, 5, 24])
def test_hypercube_is_round_optimal(N: int, nb: int) -> None:
    assert _replay(N, nb) == nb - 1 + int(math.log2(N))


@pytest.mark.parametrize("N", [3, 5, 6, 7, 12, 24])
@pytest.mark.parametrize("nb", [1, 3, 16])
def test_greedy_is_valid_and_near_optimal(N: int, nb: int) -> None:
    opt = nb - 1 + math.ceil(math.log2(N))
    assert opt <= _replay(N, nb) <= opt + 4
