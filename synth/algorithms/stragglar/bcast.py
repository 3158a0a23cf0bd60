"""Pipelined broadcast rounds along a rail (issue 15): shared by the cluster forms of clusterstraggler
(cluster.py: a late GPU or node; funnel.py: several late ranks)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

from collsynth.synth.algorithms.stragglar.circulant import circulant_rounds

Round = list[tuple[int, int, int]]  # one round's moves: (src node, dst node, block)

SEARCH_WORK = 200_000  # node-rounds the placement search may spend per (N, nblocks) (about 1.5 s at N = 100)
SEARCH_TRIALS = 400  # ... and at most this many placements


def broadcast_rounds(N: int, nblocks: int) -> list[Round]:
    """Rounds of a pipelined broadcast of ``nblocks`` blocks from node 0 to nodes 1..N-1, each node
    sending at most one block and receiving at most one per round: (src, dst, block) per move. The
    one-port model's optimum is nblocks - 1 + ceil(log2 N) rounds (Bar-Noy & Kipnis, Discrete Applied
    Mathematics 1994).

    N a power of two: the hypercube exchange (round r pairs x with x xor 2^(r mod log2 N); the root sends
    block r, every other node the newest block its partner lacks): that optimum. Otherwise Traeff's
    circulant broadcast (circulant.py), also that optimum (1 round fewer than the search below for most
    block counts on 17-62 nodes, 80 and 100, 2 on 96). Where it is not available (more than
    circulant.MAX_NODES nodes, no CBC) the fewest rounds of (1) a greedy rule (the root sends the next block
    to the node with the fewest; every other node, most blocks first, sends its newest block a receiver
    lacks to the receiver with the fewest) and (2) *phantom hypercubes*: the nodes placed on vertices of the
    next power-of-two cube (the root on vertex 0), the exchange run on it, and in each round the nodes whose
    partner vertex is empty, or that have nothing for their partner, matched among themselves (a receiver
    with the fewest blocks first gets the newest block a free sender has for it). The identity placement and
    then seeded pseudo-random ones are tried (at most SEARCH_TRIALS, about SEARCH_WORK node-rounds) until
    one reaches the optimum (our construction; it reaches it on 5-7 and 10-13 nodes for 9-32 blocks, one
    round above it on 20, 24, 40, 48 and 100). Deterministic; cached per (N, nblocks)."""
    return [list(r) for r in _rounds(N, nblocks)]


@lru_cache(maxsize=256)
def _rounds(N: int, nblocks: int) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    if N <= 1:
        return ()
    q = max(1, math.ceil(math.log2(N)))
    if 1 << q == N:
        return _frozen(_cube(N, nblocks))
    circ = circulant_rounds(N, nblocks)
    if circ is not None:
        return _frozen(circ)
    trials = max(1, min(SEARCH_TRIALS, SEARCH_WORK // (N * (nblocks + q))))
    rng = _Lcg(N * 1_000_003 + nblocks)
    return _frozen(_search(N, nblocks, trials, lambda: _any_vertices(N, q, rng), greedy_rounds(N, nblocks), 0))


def _frozen(rounds: list[Round]) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    return tuple(tuple(r) for r in rounds)


def _any_vertices(N: int, q: int, rng: _Lcg) -> list[int]:
    """A seeded placement: the root on vertex 0, the other nodes on N - 1 shuffled vertices of the q-cube."""
    pool = list(range(1, 1 << q))
    rng.shuffle(pool)
    return [0] + pool[:N - 1]


def _search(N: int, nblocks: int, trials: int, place: Callable[[], list[int]], best: list[Round] | None,
            first_limit: int, copyback: bool = False, mute: frozenset[int] = frozenset()) -> list[Round]:
    """The placement search shared by ``broadcast_rounds``, ``copyback_cube_rounds`` and ``muted_cube_rounds``:
    ``phantom_cube_rounds`` on the identity placement, then on ``place()``'s, at most ``trials`` of them,
    each only kept when it needs fewer rounds than ``best`` (without one yet: at most ``first_limit``),
    until one reaches the one-port optimum nblocks - 1 + ceil(log2 N). [] when none completes."""
    optimum = nblocks - 1 + max(1, math.ceil(math.log2(N)))
    vert = list(range(N))
    for _ in range(trials):
        if best is not None and len(best) <= optimum:
            break
        got = phantom_cube_rounds(N, nblocks, vert, first_limit if best is None else len(best) - 1,
                                  copyback=copyback, mute=mute)
        if got is not None:
            best = got
        vert = place()
    return [] if best is None else best


def copyback_cube_rounds(N: int, nblocks: int) -> list[Round]:
    """A broadcast whose root's every receiver returns the block in the same round (a whole late node's
    exchange, cluster.py): the phantom hypercube with ``copyback`` (the root's cube partners, vertices
    2^d, always occupied), identity then seeded placements as in ``broadcast_rounds``; the fewest
    rounds found. N not a power of two (there the hypercube itself serves). Deterministic; cached."""
    return [list(r) for r in _copyback_cube(N, nblocks)]


@lru_cache(maxsize=64)
def _copyback_cube(N: int, nblocks: int) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    q = max(1, math.ceil(math.log2(N)))
    must = [1 << d for d in range(q)]  # the root's cube partners
    rest = [v for v in range(1, 1 << q) if v not in must]
    rng = _Lcg(N * 1_000_033 + nblocks)

    def place() -> list[int]:
        rng.shuffle(rest)
        chosen = must + rest[:N - 1 - q]
        rng.shuffle(chosen)
        return [0] + chosen

    trials = max(1, min(SEARCH_TRIALS, SEARCH_WORK // (N * (nblocks + q))))
    got = _search(N, nblocks, trials, place, None, 10 * (nblocks - 1 + q), copyback=True)
    if not got:
        raise AssertionError(f"no placement completes a copy-back broadcast on {N} nodes")
    return _frozen(got)


MUTE_TRIALS = 64  # placements muted_cube_rounds tries besides the identity


def muted_cube_rounds(N: int, nblocks: int, mute: frozenset[int]) -> list[Round]:
    """Rounds of a pipelined broadcast from node 0 in which the nodes in ``mute`` only receive (the funnel
    form's nodes still sending their own stream, funnel.py): the fewest rounds of ``phantom_cube_rounds``
    with ``mute`` over the identity placement and up to MUTE_TRIALS seeded ones, stopping at the one-port
    optimum nblocks - 1 + ceil(log2 N). Where none completes within 4 (nblocks + log2 N) + 8 rounds (most
    nodes muted: a single late GPU on 16 nodes mutes 14), the plain ``broadcast_rounds``: every node sends.
    Our construction; deterministic; cached."""
    return [list(r) for r in _muted(N, nblocks, frozenset(mute))]


@lru_cache(maxsize=128)
def _muted(N: int, nblocks: int, mute: frozenset[int]) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    q = max(1, math.ceil(math.log2(N)))
    rng = _Lcg(N * 7919 + nblocks * 104729 + sum(1 << b for b in mute))
    got = _search(N, nblocks, MUTE_TRIALS + 1, lambda: _any_vertices(N, q, rng), None, 4 * (nblocks + q) + 8,
                  mute=mute)
    return _frozen(got) if got else _rounds(N, nblocks)


class _Lcg:
    """A tiny seeded generator (Knuth's MMIX LCG) so that the placements never depend on the Python
    version's ``random``."""

    def __init__(self, seed: int) -> None:
        self.x = seed & (2**64 - 1)

    def below(self, n: int) -> int:
        self.x = (6364136223846793005 * self.x + 1442695040888963407) & (2**64 - 1)
        return (self.x >> 33) % n

    def shuffle(self, items: list[int]) -> None:
        for i in range(len(items) - 1, 0, -1):
            j = self.below(i + 1)
            items[i], items[j] = items[j], items[i]


def _cube(N: int, nblocks: int) -> list[Round]:
    """The hypercube exchange on N = 2^k nodes (``broadcast_rounds``)."""
    full = (1 << nblocks) - 1
    have = [0] * N
    have[0] = full
    out: list[Round] = []
    k = N.bit_length() - 1
    while any(h != full for h in have[1:]):
        moves: Round = []
        r = len(out)
        d = 1 << (r % k)
        for x in range(N):
            y = x ^ d
            if y == 0:
                continue
            diff = have[x] & ~have[y]
            if not diff:
                continue
            if x == 0:
                j = r if r < nblocks else diff.bit_length() - 1
            else:
                j = diff.bit_length() - 1
            moves.append((x, y, j))
        for _, y, j in moves:
            have[y] |= 1 << j
        out.append(moves)
    return out


def greedy_rounds(N: int, nblocks: int, balanced: bool = False) -> list[Round]:
    """The greedy rule of ``broadcast_rounds`` (any N); ``balanced``: ``copyback_rounds``' tie rule (ties
    go to the node with the fewest sends so far, the root's target's return counted as a send)."""
    full = (1 << nblocks) - 1
    have = [0] * N
    have[0] = full
    out: list[Round] = []
    nxt = 0
    cnt = [0] * N
    sends = [0] * N  # stays 0 unless balanced: the keys then order as (cnt, y)
    step = 1 if balanced else 0
    while any(h != full for h in have[1:]):
        moves: Round = []
        got: set[int] = set()
        if nxt < nblocks:
            y = min(range(1, N), key=lambda y: (cnt[y], sends[y], y))
            moves.append((0, y, nxt))
            got.add(y)
            sends[y] += step
            nxt += 1
        for x in sorted(range(1, N), key=lambda x: (-cnt[x], sends[x], x)):
            best: tuple[tuple[int, int, int], int, int] | None = None
            for y in range(1, N):
                if y in got:
                    continue
                diff = have[x] & ~have[y]
                if diff:
                    key = (cnt[y], sends[y], y)
                    if best is None or key < best[0]:
                        best = (key, y, diff.bit_length() - 1)
            if best is not None:
                moves.append((x, best[1], best[2]))
                got.add(best[1])
                sends[x] += step
        if nxt >= nblocks and not moves:
            raise AssertionError(f"{'copyback' if balanced else 'broadcast'}_rounds: no progress")
        for _, y, j in moves:
            have[y] |= 1 << j
            cnt[y] += 1
        out.append(moves)
    return out


def phantom_cube_rounds(N: int, nblocks: int, vert: list[int], limit: int, copyback: bool = False,
                        mute: frozenset[int] = frozenset()) -> list[Round] | None:
    """The exchange on the next power-of-two cube with node i on vertex vert[i] (vert[0] = 0), the
    nodes left free in a round matched among themselves (``broadcast_rounds``); None when it needs more
    than ``limit`` rounds. ``copyback``: whoever the root sends to returns the block to it in the same
    round (``copyback_rounds``), so it sends nothing else then, and the root sends only to its cube
    partner. ``mute``: nodes that only receive (their sends dropped; served first among the free
    receivers: ``muted_cube_rounds``)."""
    q = max(1, math.ceil(math.log2(N)))
    at = {v: i for i, v in enumerate(vert)}
    full = (1 << nblocks) - 1
    have = [0] * N
    have[0] = full
    out: list[Round] = []
    while any(h != full for h in have[1:]):
        if len(out) >= limit:
            return None
        r = len(out)
        d = 1 << (r % q)
        moves: Round = []
        sends = [False] * N
        gets = [False] * N
        for x in range(N):
            y = at.get(vert[x] ^ d)
            if y is None or y == 0 or x in mute:
                continue
            diff = have[x] & ~have[y]
            if not diff:
                continue
            j = r if x == 0 and r < nblocks and not (have[y] >> r) & 1 else diff.bit_length() - 1
            moves.append((x, y, j))
            sends[x] = gets[y] = True
            if copyback and x == 0:
                sends[y] = True  # its send port returns the block to the root
        free = [x for x in range(N) if not sends[x] and have[x] and not (copyback and x == 0) and x not in mute]
        for y in sorted((y for y in range(1, N) if not gets[y] and have[y] != full),
                        key=lambda y: (y not in mute, bin(have[y]).count("1"), y)):
            pick = None
            for x in free:
                if x != y:
                    diff = have[x] & ~have[y]
                    if diff and (pick is None or diff.bit_length() > pick[1]):
                        pick = (x, diff.bit_length())
            if pick is not None:
                moves.append((pick[0], y, pick[1] - 1))
                free.remove(pick[0])
        if not moves:
            return None
        for _, y, j in moves:
            have[y] |= 1 << j
        out.append(moves)
    return out


def copyback_rounds(N: int, nblocks: int) -> list[Round]:
    """``bcast.broadcast_rounds``' greedy rule (N not a power of two) for a root whose every receiver
    returns the block at once (a whole late node's exchange): ties in the root's and the senders' choice
    of receiver go to the node with the fewest sends so far, a return counted as a send, so that the
    root's targets alternate instead of loading the lowest node with every return (our variant;
    3 x 8 h100-cluster, 1 GiB: 5.79 -> 4.87 ms after the arrival, 5 x 8: 5.44 -> 4.39 ms, 6 x 8 slower:
    cluster.build simulates it beside the other rules). Deterministic."""
    return greedy_rounds(N, nblocks, balanced=True)
