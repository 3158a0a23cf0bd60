"""Pipelined broadcast rounds along a rail (issue 15): shared by the cluster forms of clusterstraggler
(cluster.py: a late GPU or node; funnel.py: several late ranks)."""

from __future__ import annotations


def broadcast_rounds(N: int, nblocks: int) -> list[list[tuple[int, int, int]]]:
    """Rounds of a pipelined broadcast of ``nblocks`` blocks from node 0 to nodes 1..N-1, each node
    sending at most one block and receiving at most one per round: (src, dst, block) per move.

    N a power of two: the hypercube exchange (round r pairs x with x xor 2^(r mod log2 N); the root
    sends block r, every other node the newest block its partner lacks), nblocks - 1 + log2 N rounds:
    the one-port model's optimum nblocks - 1 + ceil(log2 N) (Bar-Noy & Kipnis, Discrete Applied
    Mathematics 1994). Otherwise a greedy rule (the root sends the next block to the node with the
    fewest; every other node, most blocks first, sends its newest block a receiver lacks to the receiver
    with the fewest): up to a few rounds above that optimum (N = 6, 7, 12, 24 and 16-40 blocks: 1 to 4;
    round-optimal schedules for any N exist, Traeff, arXiv 2312.11236, and are not built here).
    Deterministic."""
    full = (1 << nblocks) - 1
    have = [0] * N
    have[0] = full
    out: list[list[tuple[int, int, int]]] = []
    if N <= 1:
        return out
    k = N.bit_length() - 1
    cube = (1 << k) == N
    nxt = 0
    cnt = [0] * N
    while any(h != full for h in have[1:]):
        moves: list[tuple[int, int, int]] = []
        r = len(out)
        if cube:
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
        else:
            got: set[int] = set()
            if nxt < nblocks:
                y = min(range(1, N), key=lambda y: (cnt[y], y))
                moves.append((0, y, nxt))
                got.add(y)
                nxt += 1
            for x in sorted(range(1, N), key=lambda x: (-cnt[x], x)):
                best = None
                for y in range(1, N):
                    if y in got:
                        continue
                    diff = have[x] & ~have[y]
                    if diff:
                        key = (cnt[y], y)
                        if best is None or key < best[0]:
                            best = (key, y, diff.bit_length() - 1)
                if best is not None:
                    moves.append((x, best[1], best[2]))
                    got.add(best[1])
            if nxt >= nblocks and not moves:
                raise AssertionError("broadcast_rounds: no progress")
        for _, y, j in moves:
            have[y] |= 1 << j
            cnt[y] += 1
        out.append(moves)
    return out
