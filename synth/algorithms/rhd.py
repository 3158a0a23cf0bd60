"""Recursive halving-doubling AllReduce (Rabenseifner).

Source: Thakur, Rabenseifner & Gropp, "Optimization of collective communication operations in
MPICH", IJHPCA 2005, section 4. For n = 2^k: k halving steps (rank r swaps with r XOR d, d = n/2,
n/4, ..., 1, sending the half of its current chunk block that the partner keeps, reduced) then k
doubling steps in reverse (copies). Cost: 2k alpha + 2(n-1)/n s beta.

n not a power of two: the standard MPICH fold. With p = 2^floor(log2 n) and e = n - p, ranks 2i
(i < e) first reduce their whole buffer into rank 2i+1 and drop out; the remaining p ranks run the
power-of-two algorithm; finally each rank 2i+1 copies the result back to rank 2i. Two extra steps
of s bytes each.
"""

from __future__ import annotations

import numpy as np

from collsynth.synth.ir import Schedule, ScheduleBuilder


def build(n: int, collective: str = "allreduce") -> Schedule:
    p = 1 << (n.bit_length() - 1)
    e = n - p
    k = p.bit_length() - 1
    # active[j] = real rank playing virtual rank j of the power-of-two algorithm
    active = np.array([2 * i + 1 for i in range(e)] + list(range(2 * e, n)), np.int64)
    b = ScheduleBuilder(collective, n, p, name=f"rhd_allreduce_n{n}",
                        meta={"algorithm": "rhd", "fold": e})
    if e:
        b.new_step()
        b.add_many(np.arange(0, 2 * e, 2), np.arange(1, 2 * e, 2), 0, p, True)
    v = np.arange(p)
    for j in range(k):  # recursive halving: reduce-scatter, rank v ends with chunk v
        d = p >> (j + 1)
        partner = v ^ d
        b.new_step()
        b.add_many(active[v], active[partner], partner & ~(d - 1), d, True)
    for j in range(k - 1, -1, -1):  # recursive doubling: allgather
        d = p >> (j + 1)
        partner = v ^ d
        b.new_step()
        b.add_many(active[v], active[partner], v & ~(d - 1), d, False)
    if e:
        b.new_step()
        b.add_many(np.arange(1, 2 * e, 2), np.arange(0, 2 * e, 2), 0, p, False)
    return b.build()
