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
def test_larger_clusters_are_round_optimal(N: int, nb: int) -> None:
    """The circulant broadcast (circulant.py) where the phantom search stayed one round above."""
    assert _replay(N, nb) == nb - 1 + math.ceil(math.log2(N))


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


def test_non_powers_of_two_take_the_circulant_broadcast() -> None:
    from collsynth.synth.algorithms.stragglar.circulant import circulant_rounds

    for N, nb in [(6, 5), (24, 16), (100, 9)]:
        assert broadcast_rounds(N, nb) == circulant_rounds(N, nb)


def test_same_output_every_call() -> None:
    a, b = broadcast_rounds(12, 16), broadcast_rounds(12, 16)
    assert a == b and a is not b  # a fresh list each call: callers may not alter the cache


@pytest.mark.parametrize("N", [5, 6, 10, 12, 24])
@pytest.mark.parametrize("nb", [1, 4, 9])
def test_copyback_cube_leaves_the_root_targets_send_port_free(N: int, nb: int) -> None:
    """Whoever the root sends to in a round sends nothing else then (its send port returns the block),
    and the root sends only to its cube partner; still a complete one-port broadcast."""
    from collsynth.synth.algorithms.stragglar.bcast import copyback_cube_rounds

    rounds = copyback_cube_rounds(N, nb)
    have = [set(range(nb))] + [set() for _ in range(N - 1)]
    for moves in rounds:
        assert len({s for s, _, _ in moves}) == len(moves) == len({d for _, d, _ in moves})
        targets = {d for s, d, _ in moves if s == 0}
        assert len(targets) <= 1 and not targets & {s for s, _, _ in moves}
        for s, d, j in moves:
            assert j in have[s] and j not in have[d]
        for _, d, j in moves:
            have[d].add(j)
    assert all(h == set(range(nb)) for h in have)
    assert len(rounds) <= nb - 1 + math.ceil(math.log2(N)) + 2


# ---------------------------------------------------------------- the construction itself (mutation run of 2026-12-02)
def _phantom_replay(N: int, nb: int, vert: list[int], copyback: bool = False) -> list[list[tuple[int, int, int]]]:
    """phantom_cube_rounds with placement vert, checked round by round against its definition: in round r
    every node whose partner vertex vert[x] ^ 2^(r mod q) holds a node (not the root) that lacks one of its
    blocks sends it the newest such block (the root: block r while r < nb and the partner lacks it); the
    other moves go between nodes left free, to receivers without a cube move; a valid one-port round."""
    from collsynth.synth.algorithms.stragglar.bcast import phantom_cube_rounds

    q = math.ceil(math.log2(N))
    at = {v: i for i, v in enumerate(vert)}
    rounds = phantom_cube_rounds(N, nb, vert, 10**6, copyback=copyback)
    assert rounds is not None
    have = [(1 << nb) - 1] + [0] * (N - 1)
    for r, moves in enumerate(rounds):
        d = 1 << (r % q)
        cube = {}
        for x in range(N):
            y = at.get(vert[x] ^ d)
            if y is None or y == 0 or not have[x] & ~have[y]:
                continue
            diff = have[x] & ~have[y]
            cube[x] = (y, r if x == 0 and r < nb and not have[y] >> r & 1 else diff.bit_length() - 1)
        assert {(x, y, j) for x, (y, j) in cube.items()} <= set(moves), (r, cube, moves)
        busy = set(cube) | ({y for x, (y, _) in cube.items() if x == 0} if copyback else set())
        for x, y, j in moves:
            assert have[x] >> j & 1 and not have[y] >> j & 1 and y != 0
            if cube.get(x, (None,))[0] != y:  # a matched move: a free sender to a receiver without a cube move
                assert x not in busy and y not in {c for c, _ in cube.values()}
                assert not (copyback and x == 0)
        assert len({x for x, _, _ in moves}) == len(moves) == len({y for _, y, _ in moves})
        for _, y, j in moves:
            have[y] |= 1 << j
    assert all(h == (1 << nb) - 1 for h in have)
    return rounds


@pytest.mark.parametrize("N,vert", [(5, [0, 1, 2, 3, 4]), (6, [0, 3, 5, 6, 1, 2]), (12, list(range(12))),
                                    (8, list(range(8)))])
@pytest.mark.parametrize("nb", [1, 6])
def test_phantom_cube_moves_follow_the_cube_exchange(N: int, vert: list[int], nb: int) -> None:
    _phantom_replay(N, nb, vert)
    if N not in (8,) and all((1 << d) in vert for d in range(math.ceil(math.log2(N)))):
        _phantom_replay(N, nb, vert, copyback=True)


def test_placement_generator_is_knuths_mmix_lcg() -> None:
    """The placements come from Knuth's MMIX LCG (x <- 6364136223846793005 x + 1442695040888963407 mod
    2^64, the high 31 bits of the state drawn) and a Fisher-Yates shuffle, never Python's random."""
    from collsynth.synth.algorithms.stragglar.bcast import _Lcg

    g = _Lcg(12 * 1_000_003 + 16)
    x = 12 * 1_000_003 + 16
    for n in (1000, 7, 2**31, 3):
        x = (6364136223846793005 * x + 1442695040888963407) % 2**64
        assert g.below(n) == (x >> 33) % n
    assert _Lcg(-1).x == 2**64 - 1 and _Lcg(2**64 + 5).x == 5
    items, ref, h = list(range(10)), list(range(10)), _Lcg(99)
    _Lcg(99).shuffle(items)
    for i in range(9, 0, -1):
        j = h.below(i + 1)
        ref[i], ref[j] = ref[j], ref[i]
    assert items == ref and sorted(items) == list(range(10)) and items != list(range(10))


@pytest.mark.parametrize("copyback", [False, True])
def test_phantom_cube_gives_up_past_its_limit(copyback: bool) -> None:
    from collsynth.synth.algorithms.stragglar.bcast import phantom_cube_rounds

    full = phantom_cube_rounds(6, 5, [0, 1, 2, 4, 3, 5], 10**6, copyback=copyback)
    assert full is not None
    assert phantom_cube_rounds(6, 5, [0, 1, 2, 4, 3, 5], len(full), copyback=copyback) == full
    assert phantom_cube_rounds(6, 5, [0, 1, 2, 4, 3, 5], len(full) - 1, copyback=copyback) is None


# rounds above nb - 1 + ceil(log2 N) that the seeded searches reach today (0 elsewhere in the grid): a change
# of the search (seeds, placements, budget) shows here and must update these and the numbers quoted from them.
# Copy-back on 3 nodes takes about two rounds per block (the root's target returns every block), far above
# the one-port optimum (cluster.build simulates it beside the other rules and keeps the fastest)
_ABOVE = {"broadcast": {(20, 24): 1, (24, 16): 1, (40, 9): 1, (40, 16): 1},  # the phantom search alone
          "copyback": {(3, 16): 15, (5, 9): 1, (5, 16): 1, (6, 9): 1, (6, 16): 1, (7, 9): 2, (7, 16): 5, (11, 16): 1,
                       (13, 9): 1, (13, 16): 1, (20, 16): 1, (20, 24): 1, (24, 9): 1, (40, 9): 1, (40, 16): 1}}


@pytest.mark.parametrize("kind", ["broadcast", "copyback"])
def test_search_reaches_the_pinned_round_counts(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """The seeded searches; for "broadcast" broadcast_rounds' fallback without the circulant broadcast (N
    above circulant.MAX_NODES, or no CBC)."""
    from collsynth.synth.algorithms.stragglar import bcast

    monkeypatch.setattr(bcast, "circulant_rounds", lambda N, nb: None)

    def f(N: int, nb: int) -> tuple[tuple[tuple[int, int, int], ...], ...]:
        return bcast._rounds.__wrapped__(N, nb) if kind == "broadcast" else bcast._copyback_cube.__wrapped__(N, nb)

    grid = [(N, nb) for N in (5, 6, 7, 11, 13, 20, 24) for nb in (9, 16)] + [(40, 9), (40, 16), (20, 24), (3, 16)]
    got = {(N, nb): len(f(N, nb)) - (nb - 1 + math.ceil(math.log2(N))) for N, nb in grid}
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in _ABOVE[kind].items() if k in got}


@pytest.mark.parametrize("N,nb", [(100, 24), (40, 9)])
def test_placement_search_spends_its_budget(monkeypatch: pytest.MonkeyPatch, N: int, nb: int) -> None:
    """Where no placement reaches the optimum the search tries SEARCH_WORK // (N (nb + q)) placements (at
    most SEARCH_TRIALS, at least one): about SEARCH_WORK node-rounds, whatever N and nb."""
    from collsynth.synth.algorithms.stragglar import bcast

    calls: list[int] = []
    real = bcast.phantom_cube_rounds

    def counted(*a, **k):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(bcast, "phantom_cube_rounds", counted)
    monkeypatch.setattr(bcast, "circulant_rounds", lambda N, nb: None)  # the fallback search
    q = math.ceil(math.log2(N))
    want = max(1, min(bcast.SEARCH_TRIALS, bcast.SEARCH_WORK // (N * (nb + q))))
    assert len(bcast._rounds.__wrapped__(N, nb)) > nb - 1 + q  # never optimal here: every trial runs
    assert len(calls) == want and want * N * (nb + q) <= bcast.SEARCH_WORK
    calls.clear()
    assert len(bcast._copyback_cube.__wrapped__(N, nb)) > nb - 1 + q
    assert len(calls) == want


def test_greedy_rules_reach_the_pinned_round_counts() -> None:
    """The greedy rule (``greedy_rounds``) and the copy-back variant that balances the returns
    (``copyback_rounds``: cluster.py's "balanced" rule) are heuristics; their round counts on a grid
    (nblocks 4, 9, 16) are pinned: a change of their tie rules shows here (and in the cluster times
    quoted from them). Both stay valid (tests above) whatever the counts."""
    from collsynth.synth.algorithms.stragglar.bcast import copyback_rounds, greedy_rounds

    want = {"greedy": {3: [5, 10, 17], 5: [6, 12, 19], 6: [7, 12, 20], 7: [7, 12, 20], 10: [8, 13, 21],
                       12: [8, 13, 21]},
            "copyback": {3: [5, 10, 17], 5: [6, 11, 18], 6: [7, 13, 19], 7: [7, 13, 22], 10: [8, 16, 22],
                         12: [8, 13, 20]}}
    for name, f in (("greedy", greedy_rounds), ("copyback", copyback_rounds)):
        assert {N: [len(f(N, nb)) for nb in (4, 9, 16)] for N in want[name]} == want[name], name


def test_muted_rounds_fall_back_to_every_node_sending_when_too_many_are_muted() -> None:
    """bcast.muted_cube_rounds with all but one receiver muted on 16 nodes (two late GPUs on 16 x 8 with short,
    close delays: the funnel mutes the 14 nodes that feed the last one's rail): no muted placement completes
    within its round limit, so the plain broadcast_rounds (every node sends) comes back instead of an
    internal error."""
    from collsynth.synth.algorithms.stragglar.bcast import muted_cube_rounds

    mute = frozenset(range(1, 15))
    assert muted_cube_rounds(16, 24, mute) == broadcast_rounds(16, 24)
    assert len(muted_cube_rounds(8, 24, frozenset({7}))) == 24 - 1 + 3  # a muted placement where one exists
