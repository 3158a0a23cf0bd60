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


@pytest.mark.parametrize("N", [3, 5, 6, 7, 10, 11, 12, 13])
@pytest.mark.parametrize("nb", [1, 3, 16, 32])
def test_phantom_cube_is_round_optimal_on_small_clusters(N: int, nb: int) -> None:
    """The placement search reaches nb - 1 + ceil(log2 N) here (the greedy alone: up to 4 rounds more)."""
    assert _replay(N, nb) == nb - 1 + math.ceil(math.log2(N))


@pytest.mark.parametrize("N", [20, 24, 40, 100])
@pytest.mark.parametrize("nb", [9, 24])
def test_larger_clusters_are_valid_and_within_one_round(N: int, nb: int) -> None:
    assert _replay(N, nb) <= nb - 1 + math.ceil(math.log2(N)) + 1


def test_greedy_and_phantom_candidates_are_valid() -> None:
    """Every candidate the search weighs is itself a valid broadcast (not only the one returned)."""
    from collsynth.synth.algorithms.stragglar import bcast

    for N, nb in [(6, 5), (12, 9), (24, 7)]:
        for rounds in (bcast.greedy_rounds(N, nb), bcast.phantom_cube_rounds(N, nb, list(range(N)), 10**6)):
            assert rounds is not None
            have = [set(range(nb))] + [set() for _ in range(N - 1)]
            for moves in rounds:
                assert len({s for s, _, _ in moves}) == len(moves) == len({d for _, d, _ in moves})
                for s, d, j in moves:
                    assert j in have[s] and j not in have[d]
                for _, d, j in moves:
                    have[d].add(j)
            assert all(h == set(range(nb)) for h in have)


def test_same_output_every_call() -> None:
    a, b = broadcast_rounds(12, 16), broadcast_rounds(12, 16)
    assert a == b and a is not b  # a fresh list each call: callers may not alter the cache
