"""The fan-out form of one late GPU on 2 G nodes of G GPUs (G a power of two, at least 4): our construction
(docs/stragglar.md section 9, "the fan-out form"; issue 15 point 1).

The late GPU L, local index l in node a, cuts its buffer into G parts and each part into blocks, as the star form
of ``cluster.py``. Node a's GPU r_p = x p (multiplication in GF(2^k), G = 2^k) is the root of part p: L reduces
its block into it over NVLink (L's own part, p5 with r_p5 = l, goes raw over L's NIC instead), and it sends the
final block over rail r_p to the node X_p. Since p xor r_p = (x + 1) p is a permutation too, every X_p has a
class m_p of its own, and the other G - 1 nodes are Y_m, one per class but the class of X_p5. Per block:

- X_p relays the block to its G GPUs (a binomial tree along directions 1, 2, 4, ..., those of the doubling
  below, so that no GPU sends more than the doubling would) and sends it on every rail k to the node of class
  p xor k (Y_m, or X_p5 for the class without a Y);
- Y_m forwards the block it got on rail k on the same rail to the X of its class;
- every node of class m then holds part k xor m on GPU k, so each row is gathered by recursive doubling (partners
  k xor 1, 2, 4, ...) in contiguous runs; an X node leaves out its own part, which the relay brought;
- node a's roots send their final parts to their node peers and L; L's own part comes back to L from X_p5 (its
  free rail is l) and to the other GPUs of node a from the Y nodes, whose one free NIC send per row is on the
  rail of their class's X root; the last row's part from L, by a binomial tree.

Every NIC sends and receives at most one block per row, a block crosses three network hops (blocks + 2 rounds in
all, against the hypercube's blocks + log2 N - 1 = blocks + 3 at 16 nodes) and the NVLink messages are those of a
recursive doubling plus the relay. L's NVLink port starts the roots one message apart, so the parts are uneven: a
root served later carries fewer units (``skew_share``) and every rail's chain ends about together. The moves are
listed for the list-scheduling model of ``ClusterPlan`` in the order that kept its NVLink ports packed in the
prototype: the network moves and relays row by row, each row's AllGathers three rows behind, an X node's as
one-part messages but in its last rows. How well that packs depends on the root rail map x -> a x
(``multipliers``), so ``cluster.late_gpu_plan`` tries them.
"""

from __future__ import annotations

import math
from itertools import accumulate
from typing import Any

# irreducible polynomials of GF(2^k) (bit i: x^i), k = 2..7: nodes of 4 to 128 GPUs
_POLY = {2: 0b111, 3: 0b1011, 4: 0b10011, 5: 0b100101, 6: 0b1000011, 7: 0b10000011}
LAG = 3  # rows each AllGather is listed behind the network moves
FAN_TIE = 0.005  # cluster.late_gpu_plan stops trying multipliers at one this close to the estimate
MERGED_ROWS = 3  # an X node's last rows are gathered in runs of parts, the others one part per message


def applies(N: int, G: int) -> bool:
    """Whether the fan-out form exists: 2 G nodes of G GPUs, G a power of two from 4 to 128."""
    return N == 2 * G and G >= 4 and G & (G - 1) == 0 and G.bit_length() - 1 in _POLY


def times_x(p: int, G: int) -> int:
    """x p in GF(G), G = 2^k (``_POLY``): part p's root rail; p xor x p = (x + 1) p is a permutation too."""
    k = G.bit_length() - 1
    p <<= 1
    return p ^ _POLY[k] if p & G else p


def gmul(a: int, p: int, G: int) -> int:
    """a p in GF(G), G = 2^k (``_POLY``)."""
    out = 0
    while p:
        if p & 1:
            out ^= a
        p >>= 1
        a = times_x(a, G)
    return out


def multipliers(G: int) -> list[int]:
    """The a of GF(G) with r_p = a p a root rail map whose classes p xor a p are a permutation: every a but 0
    and 1 ((a + 1) p is then a bijection). ``cluster.late_gpu_plan`` builds them in order: which packs best in the
    list-scheduling model depends on L's local index (16 x 8, 1 GiB: 3.487-3.495 ms with the best, up to 3.54
    with others)."""
    return list(range(2, G))


def skew_share(G: int, rows: int, size: float, model: tuple[float, ...]) -> float:
    """sigma: the share of a part's units each later place in L's NVLink order takes off its root, so that every
    root's chain ends together: L serves the roots one NVLink message q apart, and a root's chain is its blocks
    plus two hops, so sigma = q / ((rows + 2) c) (c: a block's time on a NIC)."""
    a_nv, b_nv, _, b_net = model
    block = size / (G * rows)
    return (a_nv + block / b_nv) / ((rows + 2) * block / b_net)


def estimate(G: int, runs: list[tuple[int, int]], size: float, model: tuple[float, ...], uneven: bool = True) -> float:
    """Alpha-beta estimate of the time after the arrival: L's NVLink port passes G - 1 blocks before the root it
    serves last starts (``uneven``: the roots' chains end together, ``skew_share``, so (G - 1) / 2 on average),
    that root's blocks, two more network hops of the largest block, the relay (log2 G messages) and the last row's
    recursive doubling. With equal parts the simulator meets it exactly (16 x 8, 1 GiB, 24-32 blocks); the uneven
    parts' gain depends on the packing and is about half of it."""
    a_nv, b_nv, a_net, b_net = model
    M = sum(w for _, w in runs)
    unit = size / (G * M)
    steps = int(math.log2(G))
    w_max = max(w for _, w in runs)
    front = (G - 1) / (2 if uneven else 1) * (a_nv + runs[0][1] * unit / b_nv)
    rails = sum(a_net + w * unit / b_net for _, w in runs) + 2 * (a_net + w_max * unit / b_net)
    w_last = runs[-1][1]
    relay = steps * (a_nv + w_last * unit / b_nv)
    return front + rails + relay + steps * a_nv + (G - 1) * w_last * unit / b_nv


def merge(plan: Any, L: int, mult: int) -> None:
    """Add the moves of the fan-out form after L's arrival to ``plan`` (a ClusterPlan whose other ranks hold
    the sum of their buffers, ``ClusterPlan.pre``; ``applies`` holds for its grid; its blocks ``runs`` uniform)
    with the root rails r_p = ``mult`` p. The parts of a row are not equal: part p's units shrink by
    ``skew_share`` per place of its root in L's NVLink order (Bresenham over the rows, every row contiguous)."""
    grid = plan.grid
    N, G = grid.shape
    a, lo = int(plan.node[L]), int(plan.local[L])
    rows = len(plan.runs)
    r = [gmul(mult, p, G) for p in range(G)]
    mask_of_part = [p ^ r[p] for p in range(G)]
    own = r.index(lo)  # L's own part: raw over its NIC
    others = [b for b in range(N) if b != a]
    X = others[:G]  # X[p]: the hop-1 node of part p
    ys = others[G:]
    Y = dict(zip([m for m in range(G) if m != mask_of_part[own]], ys))  # class -> its Y node
    x_of_class = {mask_of_part[p]: p for p in range(G)}
    mask = {X[p]: mask_of_part[p] for p in range(G)} | {y: m for m, y in Y.items()}
    order = [p for p in sorted(range(G), key=lambda p: r[p]) if p != own]
    dirs = [1 << i for i in range(G.bit_length() - 1)]

    def gpu(b: int, g: int) -> int:
        return int(grid[b, g])

    place = {own: 0} | {p: i + 1 for i, p in enumerate(order)}
    sigma = skew_share(G, rows, plan.C * plan.chunk_bytes, plan.model)
    total = [round(plan.M * (1 - sigma * (place[p] - (G - 1) / 2))) for p in range(G)]
    total[own] += G * plan.M - sum(total)
    width = [[(j + 1) * total[p] // rows - j * total[p] // rows for p in range(G)] for j in range(rows)]
    offsets = list(accumulate((w for row in width for w in row), initial=0))  # rows in order, parts in order
    start = [offsets[j * G:(j + 1) * G] for j in range(rows)]
    plan.fan_rows = offsets[::G]

    def move(src: int, dst: int, p: int, j: int, parts: int = 1, reduce: bool = False) -> None:
        plan.add(src, dst, start[j][p], sum(width[j][p:p + parts]), reduce)

    def target(cls: int) -> int:
        return Y.get(cls, X[own])

    def tree(b: int, root: int, p: int, j: int, directions: list[int]) -> None:
        """Binomial tree of node b's GPUs from local ``root``, one step per direction (partner h xor d)."""
        held = [root]
        for d in directions:
            for h in list(held):
                move(gpu(b, h), gpu(b, h ^ d), p, j)
            held += [h ^ d for h in held]

    def network_row(j: int) -> None:
        move(L, gpu(X[own], lo), own, j, reduce=True)
        for p in order:
            move(L, gpu(a, r[p]), p, j, reduce=True)
            move(gpu(a, r[p]), gpu(X[p], r[p]), p, j)
        for p in [own] + order:
            tree(X[p], r[p], p, j, dirs)  # the relay
            for k in range(G):  # hop 2
                t = target(p ^ k)
                if t != X[p]:
                    move(gpu(X[p], k), gpu(t, k), p, j)
        move(gpu(X[own], lo), L, own, j)  # L's own part back to L
        for m, y in Y.items():  # hop 3
            q = x_of_class[m]
            for p in range(G):
                if p != q:
                    move(gpu(y, p ^ m), gpu(X[q], p ^ m), p, j)

    def gather(b: int, j: int, single: bool) -> None:
        """Node b's recursive doubling of row j: in the step of distance d GPU g sends the aligned group of d
        parts it holds, as one run or (``single``) one part per message; an X node leaves out its own part,
        which splits the group around it."""
        m = mask[b]
        skip = x_of_class[m] if b == X[x_of_class[m]] else -1
        for d in dirs:
            for g in range(G):
                base = (g ^ m) & ~(d - 1)
                cuts = [base, skip, skip + 1, base + d] if base <= skip < base + d else [base, base + d]
                for first, end in zip(cuts[::2], cuts[1::2]):
                    for p, w in ([(q, 1) for q in range(first, end)] if single else [(first, end - first)]):
                        if w:
                            move(gpu(b, g), gpu(b, g ^ d), p, j, w)

    def node_a_row(j: int) -> None:
        if j < rows - 1:  # L's own part from the Y nodes' free sends
            for m, y in Y.items():
                k = r[x_of_class[m]]
                move(gpu(y, k), gpu(a, k), own, j)
        else:
            tree(a, lo, own, j, dirs[::-1])
        for p in order:
            for g in range(G):
                if g != r[p]:
                    move(gpu(a, r[p]), gpu(a, g), p, j)

    for j in range(rows + LAG):
        if j < rows:
            network_row(j)
        jj = j - LAG
        if jj >= 0:
            for p in range(G):
                gather(X[p], jj, single=jj < rows - MERGED_ROWS)
            for y in Y.values():
                gather(y, jj, single=False)
            node_a_row(jj)

