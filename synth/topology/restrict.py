"""A topology on some of another's GPUs: the core of nodes of unequal size (synth/algorithms/uneven.py), on which
the straggler forms that need N nodes of G GPUs are built before the other GPUs are added back."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from collsynth.errors import CollsynthError
from collsynth.synth.topology.model import Topology


def restricted(topology: Topology, keep: Sequence[int]) -> Topology:
    """``topology`` with only the GPUs ``keep`` (renumbered 0, 1, ... in ascending order, so routing ties
    break as before among them), every switch, the links among those; their nodes renumbered densely and their
    local indices kept. Routes that went through a dropped GPU take another shortest path."""
    ranks = sorted(int(r) for r in keep)
    if len(set(ranks)) != len(ranks) or not ranks or ranks[0] < 0 or ranks[-1] >= topology.nranks:
        raise CollsynthError(f"restricted: GPUs {list(keep)} are not distinct GPUs of {topology.name!r}")
    n, m = topology.nranks, len(ranks)
    index = np.full(topology.nnodes, -1, np.int64)  # old node index -> new (dropped GPUs: -1)
    index[ranks] = np.arange(m)
    index[n:] = m + np.arange(topology.nnodes - n)
    src, dst = index[topology.link_src], index[topology.link_dst]
    on = (src >= 0) & (dst >= 0)
    node_of = np.asarray(topology.node_of)[ranks]
    _, dense = np.unique(node_of, return_inverse=True)
    out = Topology(f"{topology.name}[{m} of {n} GPUs]", m, src[on], dst[on], topology.link_alpha[on],
                   topology.link_bw[on], switches=topology.switches, link_class=topology.link_class[on],
                   classes=topology.classes, class_ports=topology.class_ports, node_of=dense,
                   local_index=np.asarray(topology.local_index)[ranks], fabric=topology.fabric,
                   routing=topology.routing)
    out.gpu = topology.gpu
    return out
