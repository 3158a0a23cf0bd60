"""Lower bounds on AllReduce completion time with per-rank arrivals (valid for every schedule the
simulator accepts, whatever ports it declares).

Sources: the straggler bound of StragglAR (Devraj et al., arXiv 2505.23523; cost-models.md): a rank
arriving at a_i must still push its s bytes out (every element of its contribution leaves it at least
once, raw or inside a sum) and pull s bytes in, and a message costs at least alpha, so
T >= a_i + alpha + s / B_i, with B_i the total bandwidth of rank i's first-hop links in that direction;
and the bandwidth bound of Patarasuk & Yuan (JPDC 2009), T >= t_0 + 2(n-1)/n * s/B from the earliest
arrival t_0, applied only where every GPU has a single link each way (the single-port setting it is
stated for, e.g. ``nvswitch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def _first_hop_bandwidth(topology: Any, rank: int, outgoing: bool) -> tuple[float, int]:
    col = topology.link_src if outgoing else topology.link_dst
    mask = np.asarray(col) == rank
    return float(np.asarray(topology.link_bw)[mask].sum()), int(mask.sum())


def lower_bound(n: int, size: float, topology: Any, arrivals: Sequence[float]) -> float:
    """Seconds from time 0 before which no AllReduce can finish (alpha-beta model, gamma = 0)."""
    pairs = np.array([(u, v) for u in range(n) for v in range(n) if u != v], np.int64)
    _, alpha = topology.pair_table(pairs)
    amin = float(alpha.min())
    best = 0.0
    single = True
    bws = []
    for r in range(n):
        bw_out, k_out = _first_hop_bandwidth(topology, r, True)
        bw_in, k_in = _first_hop_bandwidth(topology, r, False)
        single = single and k_out == 1 and k_in == 1
        bws.append(max(bw_out, bw_in))
        best = max(best, arrivals[r] + amin + size / bw_out, arrivals[r] + amin + size / bw_in)
    if single:
        best = max(best, min(arrivals) + 2 * (n - 1) / n * size / max(bws))
    return best
