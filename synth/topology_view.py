"""Describe and draw a topology: what `collsynth topology show` prints and plots.

``describe(topo)`` returns GPUs, server nodes, switches, links, the link classes (ports, nominal alpha
and bandwidth of one GPU port, ``Topology.class_alpha``/``class_bandwidth``) and the bisection
bandwidth; ``bisection_bandwidth(topo)`` is the maximum flow from one half of the GPUs to the other
(by server node when there are several nodes: nodes 0..N/2-1 against the rest; else GPUs 0..n/2-1
against the rest), computed on the link bandwidths (networkx preflow-push), so it is the capacity of
the narrowest cut between those two halves, not a formula. ``plot_topology(topo, path)`` draws it:
GPUs by node and local index, the switches above, links coloured by class.
"""

from __future__ import annotations

from typing import Any

from collsynth import budget
from collsynth.errors import CollsynthError
from collsynth.fileio import save_figure
from collsynth.synth.topology import Topology

PLOT_MAX_NODES = 8
PLOT_MAX_GPUS = 128
CLASS_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B2", "#937860")


def halves(topo: Topology) -> tuple[list[int], list[int], str]:
    """The two GPU halves the bisection is taken between, and how they were chosen."""
    n, nodes = topo.nranks, topo.node_count
    if nodes >= 2:
        first = [g for k in range(nodes // 2) for g in topo.node_gpus(k)]
        how = f"nodes 0-{nodes // 2 - 1} | {nodes // 2}-{nodes - 1}"
    else:
        first = list(range(n // 2))
        how = f"GPUs 0-{n // 2 - 1} | {n // 2}-{n - 1}"
    a = set(first)
    return sorted(a), [g for g in range(n) if g not in a], how


def bisection_bandwidth(topo: Topology) -> tuple[float, str]:
    """(bytes/s from the first half of the GPUs to the second, the halves in words): a maximum flow."""
    import networkx as nx

    a, b, how = halves(topo)
    g = nx.DiGraph()
    src, dst, bw = topo.link_src.tolist(), topo.link_dst.tolist(), topo.link_bw.tolist()
    for u, v, c in zip(src, dst, bw):
        g.add_edge(u, v, capacity=c)
    total = float(sum(bw))
    for x in a:
        g.add_edge("S", x, capacity=total)
    for x in b:
        g.add_edge(x, "T", capacity=total)
    value = nx.maximum_flow_value(g, "S", "T")
    return float(value), how


def describe(topo: Topology, *, bisection: bool = True) -> dict[str, Any]:
    """JSON-ready description: ``Topology.summary()`` plus the nodes' GPUs and the bisection bandwidth."""
    out: dict[str, Any] = dict(topo.summary())
    out["switches"] = len(topo.switches)
    out["gpus_per_node"] = sorted({len(topo.node_gpus(k)) for k in range(topo.node_count)})
    if bisection:  # about 3 KB and up to 100 us per link (measured 6-80 us)
        what = f"the bisection bandwidth of {topo.name} ({topo.nlinks} links)"
        budget.check(3000.0 * topo.nlinks, what, hint="give fewer GPUs")
        budget.check_seconds(1e-4 * topo.nlinks, what, hint="give fewer GPUs")
        value, how = bisection_bandwidth(topo)
        out["bisection_Bps"] = value
        out["bisection_halves"] = how
    return out


def _positions(topo: Topology, nodes_shown: int) -> dict[int, tuple[float, float]]:
    """x, y of every node index drawn: GPUs in a column per server node, switches in rows above."""
    pos: dict[int, tuple[float, float]] = {}
    per = max(len(topo.node_gpus(k)) for k in range(nodes_shown))
    for k in range(nodes_shown):
        for i, gpu in enumerate(topo.node_gpus(k)):
            pos[gpu] = (k * 3.0, -float(i))
    n = topo.nranks
    shown = set(pos)
    # a switch joins the node column whose GPUs it touches only, else the fabric rows above
    nbrs: dict[int, set[int]] = {}
    for u, v in zip(topo.link_src.tolist(), topo.link_dst.tolist()):
        nbrs.setdefault(u, set()).add(v)
        nbrs.setdefault(v, set()).add(u)
    fabric: list[int] = []
    local: dict[int, list[int]] = {}
    for s in range(n, topo.nnodes):
        gpus = {x for x in nbrs.get(s, ()) if x < n}
        owners = {int(topo.node_of[x]) for x in gpus}
        if len(owners) == 1 and gpus:
            k = owners.pop()
            if k < nodes_shown:
                local.setdefault(k, []).append(s)
        elif not gpus or gpus & shown:
            fabric.append(s)
        else:
            fabric.append(s)
    for k, sws in local.items():
        for j, s in enumerate(sws):
            pos[s] = (k * 3.0 + 1.5, -(per - 1) / 2 - j * 0.8)
    # fabric switches: those touching GPUs (leaves, rails) in one row, the rest (spines) above
    low = [s for s in fabric if any(x < n for x in nbrs.get(s, ()))]
    high = [s for s in fabric if s not in low]
    width = max(nodes_shown * 3.0 - 1.5, 1.0)
    for row, sws in ((1.5, low), (3.0, high)):
        for j, s in enumerate(sws):
            pos[s] = (width * (j + 0.5) / max(len(sws), 1) - 0.75, row)
    return pos


def plot_topology(topo: Topology, path: str) -> str:
    """Draw ``topo`` as a PNG at ``path`` (the first PLOT_MAX_NODES server nodes of a cluster); returns a
    one-line note of what was drawn."""
    if not path.lower().endswith(".png"):
        raise CollsynthError(f"--plot writes PNG: give a file name ending in .png, got {path!r}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes_shown = topo.node_count
    while nodes_shown > 1 and (nodes_shown > PLOT_MAX_NODES
                               or sum(len(topo.node_gpus(k)) for k in range(nodes_shown)) > PLOT_MAX_GPUS):
        nodes_shown -= 1
    if nodes_shown == 1 and topo.nranks > PLOT_MAX_GPUS:
        raise CollsynthError(f"topology {topo.name!r} has {topo.nranks} GPUs in one node; --plot draws up to "
                             f"{PLOT_MAX_GPUS}")
    pos = _positions(topo, nodes_shown)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * nodes_shown * 3), 6.0))
    drawn: set[tuple[int, int]] = set()
    handles: dict[str, Any] = {}
    for u, v, c in zip(topo.link_src.tolist(), topo.link_dst.tolist(), topo.link_class.tolist()):
        if u not in pos or v not in pos or (v, u) in drawn:
            continue
        drawn.add((u, v))
        (x0, y0), (x1, y1) = pos[u], pos[v]
        name = topo.classes[c]
        (line,) = ax.plot([x0, x1], [y0, y1], color=CLASS_COLORS[c % len(CLASS_COLORS)], lw=1.0, alpha=0.7,
                          zorder=1)
        handles.setdefault(name, line)
    n = topo.nranks
    for node, (x, y) in sorted(pos.items()):
        is_gpu = node < n
        ax.scatter([x], [y], s=160 if is_gpu else 260, marker="o" if is_gpu else "s",
                   color="#FFFFFF" if is_gpu else "#DDDDDD", edgecolors="#333333", zorder=2)
        ax.annotate(str(topo.nodes[node]), (x, y), ha="center", va="center", fontsize=6, zorder=3)
    more = f" (nodes 0-{nodes_shown - 1} of {topo.node_count})" if nodes_shown < topo.node_count else ""
    ax.set_title(f"{topo.name}: {n} GPUs, {topo.node_count} node(s){more}")
    ax.legend(list(handles.values()), list(handles), loc="lower right", fontsize=8)
    ax.set_axis_off()
    ax.set_xlim(min(p[0] for p in pos.values()) - 1, max(p[0] for p in pos.values()) + 1)
    ax.set_ylim(min(p[1] for p in pos.values()) - 1, max(p[1] for p in pos.values()) + 1)
    save_figure(fig, path)
    plt.close(fig)
    return f"drew {path}: {sum(1 for x in pos if x < n)} of {n} GPUs{more}"


