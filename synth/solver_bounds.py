"""Lower bounds on AllReduce completion time with per-rank arrivals (valid for every schedule).

Sources: the bandwidth bound of Patarasuk & Yuan (JPDC 2009), T >= 2(n-1)/n * s/B from a common start;
the straggler bound of StragglAR (Devraj et al., arXiv 2505.23523): a rank arriving at a_i must still
push its s bytes out (nobody else has them) and pull s bytes of result, T >= a_i + alpha + s/B_i; and
the latency bound: after the last byte of the last rank's data leaves it, at most two ranks hold a
value that depends on it and holders at most double per message (one port; (1+p)-fold with p ports),
so ceil(log2 n) - 1 more hops follow.
B_i is the bandwidth of rank i's p fastest first-hop links (p = ports).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np


def _port_bandwidth(topology: Any, rank: int, outgoing: bool) -> float:
    col = topology.link_src if outgoing else topology.link_dst
    bws = sorted((float(b) for b, x in zip(topology.link_bw.tolist(), col.tolist()) if x == rank), reverse=True)
    return sum(bws[: max(1, int(topology.ports))]) if bws else 0.0


def lower_bound(n: int, size: float, topology: Any, arrivals: Sequence[float]) -> float:
    """Seconds from time 0 before which no AllReduce can finish (alpha-beta model, gamma = 0)."""
    pairs = np.array([(u, v) for u in range(n) for v in range(n) if u != v], np.int64)
    _, alpha = topology.pair_table(pairs)
    amin = float(alpha.min())
    bw_out = [_port_bandwidth(topology, r, True) for r in range(n)]
    bw_in = [_port_bandwidth(topology, r, False) for r in range(n)]
    fan = 1 + max(1, int(topology.ports))  # holders multiply by at most 1 + ports per hop
    hops = max(0, math.ceil(math.log(n) / math.log(fan) - 1e-9) - 1)
    best = 0.0
    for r in range(n):
        a = arrivals[r]
        best = max(best, a + amin + size / bw_out[r] + hops * amin, a + amin + size / bw_in[r])
    bmax = max(max(bw_out), 1e-300)
    best = max(best, min(arrivals) + 2 * (n - 1) / n * size / bmax)
    return best
