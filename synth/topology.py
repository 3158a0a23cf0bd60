"""Network topologies for the simulator: a networkx DiGraph with alpha and bandwidth on every link.

GPU nodes are the ints 0..n-1 (the ranks); switch nodes are strings ("sw0"). Every directed edge
carries ``alpha`` (seconds, the start-up cost of crossing it) and ``bandwidth`` (bytes/second).
A message from GPU s to GPU d follows the shortest path by hop count; among equally short paths it
takes, hop by hop, the lowest-indexed next node (GPUs 0..n-1 first, then switches in the order they
were declared), so routes are deterministic. The path's alpha is the sum of its links' alphas.

Presets (``topology_presets()``; every one takes ``alpha``/``bandwidth`` overrides):

- ``nvswitch``: every GPU has one port of bandwidth B into a non-blocking switch ``sw0`` (the model of
  the StragglAR paper). Links gpu->sw0 and sw0->gpu each have bandwidth B and alpha/2, so a
  GPU-to-GPU message costs alpha + b/B (alpha/2 + alpha/2 == alpha exactly in floating point).
  Defaults alpha = 3us, B = 450GiB/s.
- ``full-mesh``: a dedicated link of (alpha, B) for every ordered pair of GPUs. Same defaults.
- ``ring``: bidirectional ring, links i <-> i+1 (mod n); messages between non-neighbours take the
  shorter way round (ties: the lower-indexed next GPU). Same defaults.
- ``torus2d``: an r x c grid with wrap-around, r = the largest divisor of n that is <= sqrt(n), each GPU
  linked to its 4 neighbours (fewer where a dimension has size 1 or 2). Same defaults.
- ``dgx1``: the 8-GPU V100 DGX-1 hybrid cube-mesh. GPUs 0-3 and 4-7 are fully connected quads and
  i <-> i+4 are linked; with 6 NVLinks per GPU these pairs have two NVLinks: 0-1, 1-3, 3-2, 2-6, 6-7,
  7-5, 5-4, 4-0 (a ring of double links), and these one: 0-2, 0-3, 1-2, 1-5, 3-7, 4-6, 4-7, 5-6.
  Link counts follow the DGX-1 table of SCCL/msccl-tools (``dgx1()``) and TE-CCL (``DGX1``,
  25 GB/s per NVLink); a doubled pair is one link of twice the bandwidth. Defaults alpha = 0.7us,
  B = 25GB/s per NVLink (``bandwidth`` overrides the per-NVLink figure).

Cluster presets (``cluster_topology``; docs/topologies.md; the brief's clusters.md): GPUs are grouped
in server nodes (``node_of``, ``local_index``, ``node_gpus(k)``); links have a class (``classes``,
``link_class``): ``nvlink`` (GPU <-> its node's NVSwitch ``nvsw<k>``) and ``net`` (GPU NIC <-> leaf switch,
leaves <-> spines). A GPU drives ``class_ports[c]`` messages per class per step (``ports`` = their sum).

- ``dgx-h100`` (8 GPUs), ``h100-cluster`` (n/8 nodes of 8 on a rail-optimized fabric: NIC of local
  index i into ``rail<i>``), ``gb200-nvl72`` (72 GPUs, one NVLink domain); alpha and bandwidth per
  class (constants below, with sources), overridable per class: ``bandwidth="nvlink=450GB/s,net=50GB/s"``
  or a mapping; a single value applies to every class (today's meaning).
- Options after the preset name: ``h100-cluster:fabric=fat-tree,oversubscription=2`` (fabric ``rail`` or
  ``fat-tree``, routing ``pxn`` or ``spine``, oversubscription >= 1 of the leaf uplinks).
- Routing (``routing``): ``pxn`` (rails, default): inside a node through the NVSwitch; across nodes on
  the same rail one rail hop; otherwise NVLink to the sender-node GPU on the destination's rail first
  (NCCL's PXN), then the rail hop. ``spine``: leaf -> spine -> leaf (fat-tree always). ``shortest``:
  today's hop-count shortest paths (presets above the cluster ones and files).
- ``transfer_class(src, dst)``: (class of the first hop, class of the last hop) = the sending and the
  receiving port a message occupies.

JSON file schema (``make_topology("path/to/topo.json", n)``)::

    {"name": "my-box",              # optional, default: the file name
     "gpus": 4,                     # required: the GPUs are 0..gpus-1
     "switches": ["sw0"],           # optional: switch names (strings)
     "alpha": "3us",                # optional default for links without one (else 3us); or per class
     "bandwidth": "450GiB/s",       # optional default for links without one (else 450GiB/s); or per class
     "ports": 1,                    # optional: messages per rank per step, or per class {"nvlink": 1, "net": 1}
     "nodes": [[0, 1], [2, 3]],     # optional: server nodes, each GPU once, in local order (default: one node)
     "fabric": "rail",              # optional, informational: "rail" or "fat-tree"
     "routing": "shortest",         # optional: files route by shortest paths only
     "links": [{"src": 0, "dst": "sw0", "alpha": "1.5us", "bandwidth": "450GiB/s",
                "class": "default", "bidirectional": true}]}   # class defaults to "default"

Times are "3us"-style strings or float seconds; bandwidths "450GiB/s" strings or float bytes/s.
With several link classes "ports" must be an object naming each class (default 1 per class).
``alpha``/``bandwidth`` arguments of ``make_topology`` override every link of a file (one value) or
the links of the named classes (per class).
Every GPU must reach every other GPU.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from collsynth.apitypes import ClassRates, ClassTimes, Column
from collsynth.errors import CollsynthError
from collsynth.fileio import json_loads, read_text
from collsynth.units import parse_class_values, parse_rate, parse_time

if TYPE_CHECKING:
    import networkx as nx

DEFAULT_ALPHA = 3e-6
DEFAULT_BANDWIDTH = 450.0 * 2**30
DGX1_ALPHA = 0.7e-6
DGX1_BANDWIDTH = 25e9
DEFAULT_CLASS = "default"
FABRICS = ("rail", "fat-tree")
# H100 / DGX H100 (the brief's clusters.md section 1): 18 NVLink4 links x 25 GB/s = 450 GB/s per GPU per
# direction (NVIDIA H100 datasheet: "NVLink 900GB/s", both directions); one ConnectX-7 400 Gb/s NIC per GPU
# = 50 GB/s (NVIDIA DGX H100 user guide, DGX BasePOD reference architecture). Start-up costs: NCCL's ring
# per-hop latency for the Simple protocol (src/graph/tuning.cc hwLat; clusters.md section 3): NVLink
# 3.4 us, network 14 us.
H100_NVLINK_BANDWIDTH = 450e9
H100_NET_BANDWIDTH = 50e9
H100_NVLINK_ALPHA = 3.4e-6
H100_NET_ALPHA = 14e-6
# GB200 NVL72 (clusters.md section 1; NVIDIA GB200 NVL72 product page): 72 GPUs in one NVLink switch
# domain, NVLink5 1.8 TB/s per GPU both ways = 900 GB/s per direction; 4 ConnectX-7 400 Gb/s NICs per
# 4-GPU compute tray = 50 GB/s per GPU. Start-up costs as for H100 (NCCL tuning.cc Simple protocol).
GB200_NVLINK_BANDWIDTH = 900e9
GB200_NET_BANDWIDTH = 50e9
GB200_NVLINK_ALPHA = 3.4e-6
GB200_NET_ALPHA = 14e-6

# (a, b, NVLinks) for the V100 DGX-1 hybrid cube-mesh, numbered as in SCCL/msccl-tools `dgx1()` and
# TE-CCL `topologies/dgx1.py`: two fully connected quads {0,1,2,3}, {4,5,6,7} plus i <-> i+4.
DGX1_LINKS: tuple[tuple[int, int, int], ...] = (
    (0, 1, 2), (0, 2, 1), (0, 3, 1), (0, 4, 2),
    (1, 2, 1), (1, 3, 2), (1, 5, 1),
    (2, 3, 2), (2, 6, 2),
    (3, 7, 1),
    (4, 5, 2), (4, 6, 1), (4, 7, 1),
    (5, 6, 1), (5, 7, 2),
    (6, 7, 2),
)

_PRESET_TEXT = {
    "nvswitch": "every GPU has one port (alpha/2, B each way) into a non-blocking switch; "
                "GPU to GPU costs alpha + b/B (default 3us, 450GiB/s)",
    "full-mesh": "a dedicated (alpha, B) link for every ordered GPU pair (default 3us, 450GiB/s)",
    "ring": "bidirectional ring i <-> i+1 mod n, multi-hop routes (default 3us, 450GiB/s)",
    "dgx1": "8-GPU V100 DGX-1 hybrid cube-mesh, doubled NVLinks get 2x bandwidth "
            "(default 0.7us, 25GB/s per NVLink)",
    "torus2d": "near-square r x c torus with wrap-around, 4 neighbours per GPU (default 3us, 450GiB/s)",
    "dgx-h100": "8 H100 GPUs on NVSwitch (class nvlink 3.4us, 450GB/s) plus one NIC each "
                "(class net 14us, 50GB/s)",
    "h100-cluster": "nodes of 8 dgx-h100 GPUs (--gpus / 8 nodes) on a rail-optimized fabric, PXN routing",
    "gb200-nvl72": "72 GB200 GPUs in one NVLink domain (class nvlink 3.4us, 900GB/s) plus one NIC each "
                   "(class net 14us, 50GB/s)",
}


def topology_presets() -> dict[str, str]:
    """Preset name -> one-line description."""
    return dict(_PRESET_TEXT)


class TopologySummary(TypedDict):
    """What ``Topology.summary()`` returns."""

    name: str
    gpus: int
    switches: list[str]
    links: int
    ports: int
    alpha_s: list[float]
    bandwidth_Bps: list[float]
    classes: dict[str, dict[str, float]]  # class -> ports, alpha_s, bandwidth_Bps (nominal, per GPU port)
    nodes: int
    fabric: str | None
    routing: str


class Topology:
    """A validated network: flat per-link arrays, cached routes and (lazily) the networkx graph.

    Treat as read-only. Links are numbered in the order of (source node index, destination node
    index), where GPU r has index r and switch k (in declaration order) has index n + k. Build with
    ``make_topology``, ``Topology.from_graph`` or ``Topology.from_arrays``.
    """

    def __init__(self, name: str, nranks: int, link_src: Column, link_dst: Column,
                 link_alpha: Sequence[float] | np.ndarray, link_bw: Sequence[float] | np.ndarray, ports: int = 1,
                 switches: Sequence[str] = (), *, link_class: Column | None = None,
                 classes: Sequence[str] = (DEFAULT_CLASS,), class_ports: dict[str, int] | None = None,
                 node_of: Column | None = None, local_index: Column | None = None,
                 fabric: str | None = None, routing: str = "shortest") -> None:
        self.name = name
        self.nranks = int(nranks)
        self.switches = tuple(switches)
        self.nodes: tuple[int | str, ...] = tuple(range(self.nranks)) + self.switches
        nv = self.nnodes = len(self.nodes)
        self.classes: tuple[str, ...] = tuple(classes)
        if class_ports is None:
            if len(self.classes) != 1:
                raise CollsynthError(f"topology {name!r} has link classes {', '.join(self.classes)}: "
                                     "give ports per class")
            class_ports = {self.classes[0]: int(ports)}
        if set(class_ports) != set(self.classes):
            raise CollsynthError(f"topology {name!r}: ports are given for classes {sorted(class_ports)} but the "
                                 f"links use {list(self.classes)}; give one port count per link class")
        self.class_ports: dict[str, int] = {c: int(class_ports[c]) for c in self.classes}
        self.ports = sum(self.class_ports.values())
        ls, ld = np.asarray(link_src, np.int64), np.asarray(link_dst, np.int64)
        lc = np.zeros(len(ls), np.int64) if link_class is None else np.asarray(link_class, np.int64)
        order = np.lexsort((ld, ls))
        self.link_src = _ro(ls[order])
        self.link_dst = _ro(ld[order])
        self.link_alpha = _ro(np.asarray(link_alpha, np.float64)[order])
        self.link_bw = _ro(np.asarray(link_bw, np.float64)[order])
        self.link_class = _ro(lc[order])
        self._keys = _ro(self.link_src * nv + self.link_dst)  # sorted, one per link
        if len(self._keys) > 1 and np.any(self._keys[1:] == self._keys[:-1]):
            raise CollsynthError(f"topology {name!r} lists a link twice; keep one")
        n = self.nranks
        no = np.zeros(n, np.int64) if node_of is None else np.asarray(node_of, np.int64)
        if local_index is None:  # position inside the node, in rank order
            by = np.lexsort((np.arange(n), no))
            first = np.searchsorted(no[by], no[by])
            li = np.empty(n, np.int64)
            li[by] = np.arange(n) - first
        else:
            li = np.asarray(local_index, np.int64)
        self.node_of = _ro(no)
        self.local_index = _ro(li)
        self.node_count = int(no.max()) + 1 if n else 0
        self.fabric = fabric
        self.routing = routing
        self.spec: dict[str, Any] | None = None  # how to rebuild it (make_topology_from_spec), set by builders
        self._node_gpus: list[tuple[int, ...]] | None = None
        self._class_nominal: dict[str, tuple[float, float]] | None = None
        # in-links per node (CSR over link destinations) for the backward BFS
        by_dst = np.argsort(self.link_dst, kind="stable")
        self._in_links = by_dst
        self._in_ptr = np.searchsorted(self.link_dst[by_dst], np.arange(nv + 1))
        self._next_row = np.full(self.nranks, -1, np.int64)  # destination GPU -> row of _next_mat
        self._next_mat = np.zeros((0, nv), np.int32)  # row: next node index toward that GPU
        self._path_cache: dict[tuple[int, int], tuple[int, ...]] = {}
        self._graph: nx.DiGraph | None = None

    @classmethod
    def from_graph(cls, name: str, nranks: int, graph: nx.DiGraph, ports: int = 1,
                   switches: Sequence[str] = (), *, classes: Sequence[str] = (),
                   class_ports: dict[str, int] | None = None, node_of: Column | None = None,
                   local_index: Column | None = None, fabric: str | None = None,
                   routing: str = "shortest") -> Topology:
        """From a DiGraph whose edges carry ``alpha``, ``bandwidth`` and optionally ``class`` (a name;
        classes are numbered in first-seen edge order after those given in ``classes``)."""
        index: dict[Any, int] = {r: r for r in range(nranks)}
        for k, sw in enumerate(switches):
            index[sw] = nranks + k
        names = list(classes)
        e = []
        for u, v, d in graph.edges(data=True):
            c = d.get("class", DEFAULT_CLASS)
            if c not in names:
                names.append(c)
            e.append((index[u], index[v], float(d["alpha"]), float(d["bandwidth"]), names.index(c)))
        topo = cls(name, nranks, [x[0] for x in e], [x[1] for x in e], [x[2] for x in e], [x[3] for x in e],
                   ports=ports, switches=switches, link_class=[x[4] for x in e],
                   classes=tuple(names) or (DEFAULT_CLASS,), class_ports=class_ports, node_of=node_of,
                   local_index=local_index, fabric=fabric, routing=routing)
        topo._graph = graph
        return topo

    @property
    def graph(self) -> nx.DiGraph:
        """The networkx DiGraph (GPU ints, switch strings; edge attrs alpha, bandwidth, class)."""
        import networkx as nx
        if self._graph is None:
            g = nx.DiGraph()
            g.add_nodes_from(self.nodes)
            nodes, cl = self.nodes, self.classes
            g.add_edges_from((nodes[u], nodes[v], {"alpha": a, "bandwidth": b, "class": cl[c]}) for u, v, a, b, c in
                             zip(self.link_src.tolist(), self.link_dst.tolist(), self.link_alpha.tolist(),
                                 self.link_bw.tolist(), self.link_class.tolist()))
            self._graph = g
        return self._graph
    # ------------------------------------------------------------------ views
    @property
    def nlinks(self) -> int:
        return len(self.link_alpha)

    def link_name(self, link: int) -> str:
        """'u->v' for a link index."""
        return f"{self.nodes[int(self.link_src[link])]}->{self.nodes[int(self.link_dst[link])]}"

    def node_gpus(self, k: int) -> tuple[int, ...]:
        """The GPUs of server node ``k`` in local order."""
        if self._node_gpus is None:
            order = np.lexsort((self.local_index, self.node_of))
            cut = np.searchsorted(self.node_of[order], np.arange(self.node_count + 1))
            self._node_gpus = [tuple(int(x) for x in order[cut[i]:cut[i + 1]]) for i in range(self.node_count)]
        if not 0 <= int(k) < self.node_count:
            raise CollsynthError(f"topology {self.name!r} has nodes 0..{self.node_count - 1}, not {k}")
        return self._node_gpus[int(k)]

    def class_index(self, cls: str) -> int:
        """Index of link class ``cls`` in ``classes`` (a one-line error naming the classes otherwise)."""
        if cls not in self.classes:
            raise CollsynthError(f"topology {self.name!r} has no link class {cls!r}; its classes are "
                                 f"{', '.join(self.classes)}")
        return self.classes.index(cls)

    def _nominal(self) -> dict[str, tuple[float, float]]:
        """Per class (alpha, bandwidth) of one GPU-to-GPU message over that class: the cheapest GPU
        out-link of the class plus, if it ends at a switch, the cheapest switch-to-GPU link of the class;
        the bandwidth is the largest such GPU link (out and in)."""
        if self._class_nominal is None:
            n = self.nranks
            out: dict[str, tuple[float, float]] = {}
            for c, name in enumerate(self.classes):
                m = self.link_class == c
                up = m & (self.link_src < n)
                down = m & (self.link_dst < n) & (self.link_src >= n)
                if not up.any():
                    out[name] = (0.0, 0.0)
                    continue
                direct = up & (self.link_dst < n)
                alphas = []
                if direct.any():
                    alphas.append(float(self.link_alpha[direct].min()))
                if (up & ~direct).any() and down.any():
                    alphas.append(float(self.link_alpha[up & ~direct].min() + self.link_alpha[down].min()))
                inb = m & (self.link_dst < n)
                bw = float(min(self.link_bw[up].max(), self.link_bw[inb].max() if inb.any() else np.inf))
                out[name] = (min(alphas) if alphas else float(self.link_alpha[up].min()), bw)
            self._class_nominal = out
        return self._class_nominal

    def class_alpha(self, cls: str) -> float:
        """Nominal start-up time (s) of one GPU-to-GPU message over link class ``cls`` (one switch hop)."""
        self.class_index(cls)
        return self._nominal()[cls][0]

    def class_bandwidth(self, cls: str) -> float:
        """Nominal bandwidth (bytes/s) of one GPU port of link class ``cls``."""
        self.class_index(cls)
        return self._nominal()[cls][1]

    def transfer_class(self, src: int, dst: int) -> tuple[str, str]:
        """(class of the sending port = first hop, class of the receiving port = last hop) of src -> dst."""
        path = self.path_links(src, dst)
        if not path:
            raise CollsynthError(f"transfer_class: GPU {src} sends to itself")
        return self.classes[int(self.link_class[path[0]])], self.classes[int(self.link_class[path[-1]])]

    def route_classes(self, src: Column, dst: Column) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised ``transfer_class``: class indices (first hop, last hop) per (src[i], dst[i]) pair."""
        s, d = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        if not len(s):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        uniq, inv = np.unique(s * self.nranks + d, return_inverse=True)
        links, _ = self.pair_table(np.stack(np.divmod(uniq, self.nranks), 1))
        nhops = (links >= 0).sum(axis=1)
        first = self.link_class[links[:, 0]]
        last = self.link_class[links[np.arange(len(links)), np.maximum(nhops - 1, 0)]]
        return first[inv], last[inv]

    def summary(self) -> TopologySummary:
        """JSON-ready description (for `collsynth topologies` and reports)."""
        return {"name": self.name, "gpus": self.nranks, "switches": list(self.switches),
                "links": self.nlinks, "ports": self.ports,
                "alpha_s": sorted(set(self.link_alpha.tolist())),
                "bandwidth_Bps": sorted(set(self.link_bw.tolist())),
                "classes": {c: {"ports": self.class_ports[c], "alpha_s": self.class_alpha(c),
                                "bandwidth_Bps": self.class_bandwidth(c)} for c in self.classes},
                "nodes": self.node_count, "fabric": self.fabric, "routing": self.routing}

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, gpus={self.nranks}, links={self.nlinks})"

    # ------------------------------------------------------------------ routes
    def path_links(self, src: int, dst: int) -> tuple[int, ...]:
        """Link indices of the route from GPU src to GPU dst (cached)."""
        key = (int(src), int(dst))
        hit = self._path_cache.get(key)
        if hit is None:
            links, _ = self.pair_table(np.array([key], np.int64))
            hit = tuple(int(x) for x in links[0] if x >= 0)
            self._path_cache[key] = hit
        return hit

    def pair_table(self, pairs: Sequence[tuple[int, int]] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Routes of many (src, dst) GPU pairs at once.

        Returns ``links`` (P x L int64, the path's link indices padded with -1) and ``alpha_sum`` (P,),
        the sum of the path's link alphas (added hop by hop). A pair with src == dst has an empty path.
        """
        p = np.asarray(pairs, np.int64).reshape(-1, 2)
        n = self.nranks
        if len(p) and (p.min() < 0 or p.max() >= n):
            raise CollsynthError(f"topology {self.name!r} has GPUs 0..{n - 1}; a route names GPU "
                                 f"{int(p.min() if p.min() < 0 else p.max())}")
        s, d = p[:, 0], p[:, 1]
        nv = self.nnodes
        hops: list[np.ndarray] = []
        cur = s.copy()
        active = np.nonzero(cur != d)[0]
        while len(active):
            col = np.full(len(p), -1, np.int64)
            nxt = self._next_nodes(cur[active], d[active])
            key = cur[active] * nv + nxt
            col[active] = np.searchsorted(self._keys, key)
            hops.append(col)
            cur[active] = nxt
            active = active[nxt != d[active]]
        links = np.stack(hops, axis=1) if hops else np.full((len(p), 0), -1, np.int64)
        alpha = np.zeros(len(p), np.float64)
        for col in hops:
            m = col >= 0
            alpha[m] = alpha[m] + self.link_alpha[col[m]]
        return links, alpha

    def _next_nodes(self, cur: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Next node index from each cur toward each dst GPU (direct link first, else the BFS table)."""
        nv = self.nnodes
        key = cur * nv + dst
        pos = np.minimum(np.searchsorted(self._keys, key), max(self.nlinks - 1, 0))
        out = np.where(self._keys[pos] == key, dst, -1) if self.nlinks else np.full(len(cur), -1)
        miss = np.nonzero(out < 0)[0]
        if len(miss):
            rows = self._next_row[dst[miss]]
            if np.any(rows < 0):
                self._bfs(np.unique(dst[miss][rows < 0]).tolist())
                rows = self._next_row[dst[miss]]
            out[miss] = self._next_mat[rows, cur[miss]]
        if np.any(out < 0):  # cannot happen after validation: every GPU reaches every GPU
            raise CollsynthError(f"topology {self.name!r}: some GPU cannot reach another; add links")
        return out

    def _bfs(self, dests: Sequence[int], batch_cells: int = 1 << 22) -> None:
        """Backward BFS from many destinations at once; fills ``_next_mat[_next_row[d], v]`` = next node toward d.

        Ties (several next nodes on a shortest path) go to the lowest node index.
        """
        nv = self.nnodes
        step = max(1, batch_cells // max(nv, 1))
        for b0 in range(0, len(dests), step):
            ds = np.asarray(dests[b0:b0 + step], np.int64)
            m = len(ds)
            flat = np.full(m * nv, nv, np.int64)  # next node toward row's GPU; nv = not reached yet
            rows = np.arange(m)
            flat[rows * nv + ds] = ds
            f_row, f_node = rows, ds
            while len(f_row):
                deg = self._in_ptr[f_node + 1] - self._in_ptr[f_node]
                rep_row = np.repeat(f_row, deg)
                via = np.repeat(f_node, deg)
                starts = np.repeat(self._in_ptr[f_node] - np.cumsum(deg) + deg, deg)
                u = self.link_src[self._in_links[starts + np.arange(len(rep_row))]]
                cell = rep_row * nv + u
                fresh = flat[cell] == nv
                cell, via = cell[fresh], via[fresh]
                np.minimum.at(flat, cell, via)  # the lowest next node wins a tie
                won = flat[cell] == via  # each (cell, via) occurs once, so winners are unique cells
                cell = cell[won]
                f_row, f_node = np.divmod(cell, nv)
            nxt = flat.reshape(m, nv)
            nxt[nxt == nv] = -1
            self._next_row[ds] = len(self._next_mat) + rows
            self._next_mat = np.concatenate([self._next_mat, nxt.astype(np.int32)])


class _ClusterTopology(Topology):
    """A cluster built by ``cluster_topology``: routes are computed arithmetically (no BFS table), so
    8,192 GPUs route as fast as 8. Node indices: GPUs 0..n-1, then ``nvsw<k>`` (one per node), then
    ``rail<i>`` (rail fabric, one per local index) or ``leaf<k>`` (fat-tree, one per node), then
    ``spine<j>`` (one per local index)."""

    def _setup_routes(self, nodes: int, gpn: int, nleaf: int, nspine: int) -> None:
        self._N, self._G, self._R, self._S = nodes, gpn, nleaf, nspine

    def pair_table(self, pairs: Sequence[tuple[int, int]] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p = np.asarray(pairs, np.int64).reshape(-1, 2)
        n, N, G, R, S = self.nranks, self._N, self._G, self._R, self._S
        if len(p) and (p.min() < 0 or p.max() >= n):
            raise CollsynthError(f"topology {self.name!r} has GPUs 0..{n - 1}; a route names GPU "
                                 f"{int(p.min() if p.min() < 0 else p.max())}")
        s, d = p[:, 0], p[:, 1]
        ns, ls = np.divmod(s, G)
        nd, ld = np.divmod(d, G)
        seq = np.full((len(p), 5), -1, np.int64)
        seq[:, 0] = s
        intra = (ns == nd) & (s != d)
        seq[intra, 1] = n + ns[intra]
        seq[intra, 2] = d[intra]
        leaf0, spine0 = n + N, n + N + R
        inter = ns != nd
        spine = spine0 + (ls + nd) % S  # a deterministic ECMP choice: distinct per local index of a node pair
        if self.fabric == "rail":
            one = inter & (ls == ld)
            seq[one, 1] = leaf0 + ls[one]
            seq[one, 2] = d[one]
            far = inter & (ls != ld)
            if self.routing == "pxn":  # NVLink to the GPU on the destination's rail, then one rail hop
                seq[far, 1] = n + ns[far]
                seq[far, 2] = ns[far] * G + ld[far]
                seq[far, 3] = leaf0 + ld[far]
            else:
                seq[far, 1] = leaf0 + ls[far]
                seq[far, 2] = spine[far]
                seq[far, 3] = leaf0 + ld[far]
            seq[far, 4] = d[far]
        else:  # fat-tree: own leaf, spine, destination's leaf
            seq[inter, 1] = leaf0 + ns[inter]
            seq[inter, 2] = spine[inter]
            seq[inter, 3] = leaf0 + nd[inter]
            seq[inter, 4] = d[inter]
        nv = self.nnodes
        hops = int((seq[:, 1:] >= 0).sum(axis=1).max()) if len(p) else 0
        links = np.full((len(p), hops), -1, np.int64)
        alpha = np.zeros(len(p), np.float64)
        for h in range(hops):
            m = seq[:, h + 1] >= 0
            col = np.searchsorted(self._keys, seq[m, h] * nv + seq[m, h + 1])
            links[m, h] = col
            alpha[m] = alpha[m] + self.link_alpha[col]
        return links, alpha


def _ro(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


# ---------------------------------------------------------------------- construction helpers
def _check_link_params(alpha: float, bandwidth: float, what: str) -> None:
    if not (isinstance(alpha, float) and math.isfinite(alpha) and alpha >= 0):
        raise CollsynthError(f"{what}: alpha {alpha!r} must be a finite time >= 0, e.g. 3us")
    if not (isinstance(bandwidth, float) and math.isfinite(bandwidth) and bandwidth > 0):
        raise CollsynthError(f"{what}: bandwidth {bandwidth!r} must be a positive rate, e.g. 450GiB/s")


def _graph(n: int, switches: Sequence[str] = ()) -> nx.DiGraph:
    import networkx as nx
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_nodes_from(switches)
    return g


def _arrays(name: str, n: int, u: Any, v: Any, alpha: float, bw: Any, both: bool = True,
            switches: Sequence[str] = ()) -> Topology:
    """A Topology from link endpoint arrays (both directions when ``both``), one alpha for all."""
    u, v = np.asarray(u, np.int64), np.asarray(v, np.int64)
    bw = np.broadcast_to(np.asarray(bw, np.float64), u.shape)
    if both:
        u, v, bw = np.concatenate([u, v]), np.concatenate([v, u]), np.concatenate([bw, bw])
    keep = u != v
    key = np.unique(u[keep] * (n + len(switches)) + v[keep], return_index=True)[1]
    u, v, bw = u[keep][key], v[keep][key], bw[keep][key]
    return Topology(name, n, u, v, np.full(len(u), alpha), bw, switches=switches)


def _nvswitch(n: int, alpha: float, bw: float) -> Topology:
    return _arrays("nvswitch", n, np.arange(n), np.full(n, n), alpha / 2, bw, switches=["sw0"])


def _full_mesh(n: int, alpha: float, bw: float) -> Topology:
    u, v = np.divmod(np.arange(n * n), n)
    return _arrays("full-mesh", n, u, v, alpha, bw, both=False)


def _ring(n: int, alpha: float, bw: float) -> Topology:
    return _arrays("ring", n, np.arange(n), (np.arange(n) + 1) % n, alpha, bw)


def torus_shape(n: int) -> tuple[int, int]:
    """(rows, cols) of the torus2d preset: rows = largest divisor of n that is <= sqrt(n)."""
    r = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return r, n // r


def _torus2d(n: int, alpha: float, bw: float) -> Topology:
    rows, cols = torus_shape(n)
    i, j = np.divmod(np.arange(n), cols)
    me = np.arange(n)
    down, right = ((i + 1) % rows) * cols + j, i * cols + (j + 1) % cols
    return _arrays(f"torus2d-{rows}x{cols}", n, np.concatenate([me, me]), np.concatenate([down, right]),
                   alpha, bw)


def _dgx1(n: int, alpha: float, bw: float) -> Topology:
    if n != 8:
        raise CollsynthError(f"topology dgx1 has 8 GPUs, not {n}: use --gpus 8 or another topology")
    a, b, k = (np.array(c) for c in zip(*DGX1_LINKS))
    return _arrays("dgx1", 8, a, b, alpha, k * bw)


_BUILDERS: dict[str, tuple[Callable[[int, float, float], Topology], float, float]] = {
    "nvswitch": (_nvswitch, DEFAULT_ALPHA, DEFAULT_BANDWIDTH),
    "full-mesh": (_full_mesh, DEFAULT_ALPHA, DEFAULT_BANDWIDTH),
    "ring": (_ring, DEFAULT_ALPHA, DEFAULT_BANDWIDTH),
    "dgx1": (_dgx1, DGX1_ALPHA, DGX1_BANDWIDTH),
    "torus2d": (_torus2d, DEFAULT_ALPHA, DEFAULT_BANDWIDTH),
}


def _as_time(x: Any, what: str) -> float:
    if isinstance(x, bool):
        raise CollsynthError(f"{what}: alpha must be a time such as \"3us\" or seconds, not {x!r}")
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return parse_time(x)
        except CollsynthError as e:
            raise CollsynthError(f"{what}: alpha {x!r}: {e}") from None
    raise CollsynthError(f"{what}: alpha must be a time such as \"3us\" or seconds, not {x!r}")


def _as_rate(x: Any, what: str) -> float:
    if isinstance(x, bool):
        raise CollsynthError(f"{what}: bandwidth must be a rate such as \"450GiB/s\" or bytes/s, not {x!r}")
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            v = parse_rate(x)
        except CollsynthError:
            raise CollsynthError(f"{what}: bandwidth {x!r} is not a positive rate: write e.g. 450GiB/s "
                                 f"or 25GB/s") from None
        if v <= 0:
            raise CollsynthError(f"{what}: bandwidth {x!r} must be a positive rate, e.g. 450GiB/s")
        return v
    raise CollsynthError(f"{what}: bandwidth must be a rate such as \"450GiB/s\" or bytes/s, not {x!r}")


def cluster_topology(nodes: int, gpus_per_node: int = 8, *, fabric: str = "rail",
                     nvlink_bandwidth: float = H100_NVLINK_BANDWIDTH, nvlink_alpha: float = H100_NVLINK_ALPHA,
                     net_bandwidth: float = H100_NET_BANDWIDTH, net_alpha: float = H100_NET_ALPHA,
                     oversubscription: float = 1.0, routing: str = "pxn", name: str | None = None) -> Topology:
    """``nodes`` servers of ``gpus_per_node`` GPUs (docs/topologies.md, the brief's clusters.md section 1).

    GPU r is in node r // G with local index r % G. Each node has a non-blocking NVSwitch ``nvsw<k>``:
    link class ``nvlink``, GPU <-> switch of (nvlink_alpha/2, nvlink_bandwidth) each way. Each GPU has one
    NIC, link class ``net``, (net_alpha/2, net_bandwidth) each way, into its leaf switch: ``rail<i>`` for
    local index i (fabric "rail", rail-optimized) or ``leaf<k>`` of its node ("fat-tree"). G spine
    switches ``spine<j>`` join the leaves (net class, alpha net_alpha/2); the uplinks of a leaf carry
    in all 1/oversubscription of what its NICs can send. One port per class per GPU.

    Routes: inside a node, through its NVSwitch. Across nodes with the same local index on rails, one
    rail hop. Otherwise ``routing="pxn"`` (rails only; NCCL's PXN) moves the data over NVLink to the GPU
    of the sending node with the destination's local index, then one rail hop; ``routing="spine"``
    goes leaf -> spine -> leaf, on spine (local index of the source + destination node) mod G.
    """
    where = "cluster topology"
    for v, what in ((nodes, "nodes"), (gpus_per_node, "gpus_per_node")):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise CollsynthError(f"{where}: {what} must be an integer >= 1, got {v!r}")
    N, G = int(nodes), int(gpus_per_node)
    n = N * G
    if n < 2:
        raise CollsynthError(f"{where}: needs at least 2 GPUs, got {N} node(s) of {G}")
    if fabric not in FABRICS:
        raise CollsynthError(f"{where}: unknown fabric {fabric!r}; use one of {', '.join(FABRICS)}")
    if routing not in ("pxn", "spine"):
        raise CollsynthError(f"{where}: unknown routing {routing!r}; use pxn or spine")
    if fabric == "fat-tree" and routing == "pxn":
        raise CollsynthError(f"{where}: a fat-tree has one leaf per node, so PXN gains nothing; use routing spine")
    ov = float(oversubscription)
    if not (math.isfinite(ov) and ov >= 1.0):
        raise CollsynthError(f"{where}: oversubscription {oversubscription!r} must be a number >= 1 (1 = non-blocking)")
    _check_link_params(float(nvlink_alpha), float(nvlink_bandwidth), f"{where} class nvlink")
    _check_link_params(float(net_alpha), float(net_bandwidth), f"{where} class net")
    R = G if fabric == "rail" else N
    S = G
    gpu = np.arange(n)
    nvsw = n + gpu // G
    leaf = n + N + (gpu % G if fabric == "rail" else gpu // G)
    rl, sp = np.divmod(np.arange(R * S), S)
    up_bw = (N if fabric == "rail" else G) * float(net_bandwidth) / (ov * S)
    src = np.concatenate([gpu, nvsw, gpu, leaf, n + N + rl, n + N + R + sp])
    dst = np.concatenate([nvsw, gpu, leaf, gpu, n + N + R + sp, n + N + rl])
    cls = np.concatenate([np.zeros(2 * n, np.int64), np.ones(2 * n + 2 * R * S, np.int64)])
    alpha = np.concatenate([np.full(2 * n, float(nvlink_alpha) / 2), np.full(2 * n + 2 * R * S, float(net_alpha) / 2)])
    bw = np.concatenate([np.full(2 * n, float(nvlink_bandwidth)), np.full(2 * n, float(net_bandwidth)),
                         np.full(2 * R * S, up_bw)])
    switches = ([f"nvsw{k}" for k in range(N)] + [f"rail{i}" if fabric == "rail" else f"leaf{i}" for i in range(R)]
                + [f"spine{j}" for j in range(S)])
    label = name or f"{fabric}-{N}x{G}"
    topo = _ClusterTopology(label, n, src, dst, alpha, bw, switches=switches, link_class=cls,
                            classes=("nvlink", "net"), class_ports={"nvlink": 1, "net": 1},
                            node_of=gpu // G, local_index=gpu % G, fabric=fabric, routing=routing)
    topo._setup_routes(N, G, R, S)
    topo.spec = {"cluster": {"nodes": N, "gpus_per_node": G, "fabric": fabric, "routing": routing,
                             "oversubscription": ov, "name": label,
                             "alpha": {"nvlink": float(nvlink_alpha), "net": float(net_alpha)},
                             "bandwidth": {"nvlink": float(nvlink_bandwidth), "net": float(net_bandwidth)}}}
    return topo


def _class_values(x: Any, what: str) -> float | dict[str, float] | None:
    """A single alpha/bandwidth (every class) or a per-class mapping / "cls=value,..." string."""
    parse = (lambda v: _as_time(v, f"--{what}")) if what == "alpha" else (lambda v: _as_rate(v, f"--{what}"))
    if isinstance(x, Mapping):
        x = dict(x)
    return parse_class_values(x, parse, flag=f"--{what}",
                              example="nvlink=1us,net=3us" if what == "alpha" else "nvlink=450GB/s,net=50GB/s")


def _resolve(defaults: Mapping[str, float], given: float | dict[str, float] | None, what: str,
             topo: str) -> dict[str, float]:
    """Per-class values: the defaults, all replaced by a single value, or some replaced per class."""
    if given is None:
        return dict(defaults)
    if not isinstance(given, dict):
        return {c: float(given) for c in defaults}
    for c in given:
        if c not in defaults:
            raise CollsynthError(f"--{what} names link class {c!r}, but topology {topo} has "
                                 f"{', '.join(defaults)}; use one of those")
    return {c: float(given.get(c, v)) for c, v in defaults.items()}


_Builder = Callable[[int, dict[str, float], dict[str, float], dict[str, str]], Topology]


def _single(build: Callable[[int, float, float], Topology]) -> _Builder:
    return lambda n, a, b, opts: build(n, a[DEFAULT_CLASS], b[DEFAULT_CLASS])


def _gpus(n: int, per: int, preset: str, exact: bool) -> int:
    if exact and n != per:
        raise CollsynthError(f"topology {preset} has {per} GPUs, not {n}: use --gpus {per} or another topology")
    if n % per:
        raise CollsynthError(f"topology {preset} has {per} GPUs per node: --gpus must be a multiple of {per}, "
                             f"got {n}")
    return n // per


def _cluster_preset(preset: str, per: int, exact: bool) -> _Builder:
    def build(n: int, a: dict[str, float], b: dict[str, float], opts: dict[str, str]) -> Topology:
        nodes = _gpus(n, per, preset, exact)
        fabric = opts.get("fabric", "rail")
        routing = opts.get("routing", "pxn" if fabric == "rail" else "spine")
        try:
            ov = float(opts.get("oversubscription", "1"))
        except ValueError:
            raise CollsynthError(f"topology {preset}: oversubscription={opts['oversubscription']!r} must be a "
                                 f"number >= 1, e.g. {preset}:fabric=fat-tree,oversubscription=2") from None
        return cluster_topology(nodes, per, fabric=fabric, routing=routing, oversubscription=ov,
                                nvlink_bandwidth=b["nvlink"], nvlink_alpha=a["nvlink"], net_bandwidth=b["net"],
                                net_alpha=a["net"], name=preset if not opts else f"{preset}-{fabric}")
    return build


_CLUSTER_OPTIONS = ("fabric", "routing", "oversubscription")


def _preset_options(spec: str) -> tuple[str, dict[str, str]]:
    """"h100-cluster:fabric=fat-tree,oversubscription=2" -> ("h100-cluster", {...})."""
    base, sep, rest = spec.partition(":")
    opts: dict[str, str] = {}
    if not sep:
        return base, opts
    for part in rest.split(","):
        k, eq, v = (x.strip() for x in part.partition("="))
        if not eq or not k or not v:
            raise CollsynthError(f"topology {spec!r}: write options as NAME:key=value,key=value, e.g. "
                                 f"h100-cluster:fabric=fat-tree,oversubscription=2")
        if k not in _CLUSTER_OPTIONS:
            raise CollsynthError(f"topology {spec!r}: unknown option {k!r}; use {', '.join(_CLUSTER_OPTIONS)}")
        opts[k] = v
    return base, opts


_H100 = ({"nvlink": H100_NVLINK_ALPHA, "net": H100_NET_ALPHA},
         {"nvlink": H100_NVLINK_BANDWIDTH, "net": H100_NET_BANDWIDTH})
_GB200 = ({"nvlink": GB200_NVLINK_ALPHA, "net": GB200_NET_ALPHA},
          {"nvlink": GB200_NVLINK_BANDWIDTH, "net": GB200_NET_BANDWIDTH})

_PRESETS: dict[str, tuple[_Builder, dict[str, float], dict[str, float]]] = {
    **{k: (_single(f), {DEFAULT_CLASS: a}, {DEFAULT_CLASS: b}) for k, (f, a, b) in _BUILDERS.items()},
    "dgx-h100": (_cluster_preset("dgx-h100", 8, True), *_H100),
    "h100-cluster": (_cluster_preset("h100-cluster", 8, False), *_H100),
    "gb200-nvl72": (_cluster_preset("gb200-nvl72", 72, True), *_GB200),
}


def make_topology(spec: str, n: int, alpha: ClassTimes = None, bandwidth: ClassRates = None) -> Topology:
    """A preset (see ``topology_presets()``) or a JSON topology file, for ``n`` GPUs.

    ``alpha`` (seconds or "3us") and ``bandwidth`` (bytes/s or "450GiB/s") override the preset's
    defaults: one value for every link class (for nvswitch, alpha is the GPU-to-GPU start-up cost; for
    dgx1, bandwidth is per NVLink; on a cluster, the GPU-to-GPU alpha of either class), or per class as
    a mapping or "nvlink=450GB/s,net=50GB/s"; for a file they replace the links' own values.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise CollsynthError(f"a topology needs an integer number of GPUs >= 2, got {n!r}")
    n = int(n)
    a = _class_values(alpha, "alpha")
    b = _class_values(bandwidth, "bandwidth")
    spec = str(spec)
    base, opts = _preset_options(spec) if ":" in spec and spec.partition(":")[0] in _PRESETS else (spec, {})
    if base in _PRESETS:
        build, da, db = _PRESETS[base]
        if opts and set(da) != {"nvlink", "net"}:
            raise CollsynthError(f"topology {base} takes no options; fabric, routing and oversubscription apply to "
                                 f"the cluster presets (e.g. h100-cluster:fabric=fat-tree)")
        aa, bb = _resolve(da, a, "alpha", base), _resolve(db, b, "bandwidth", base)
        for c in aa:
            _check_link_params(aa[c], bb[c], f"topology {base} class {c}")
        topo = build(n, aa, bb, opts)
        topo.spec = {"preset": spec, "gpus": n, "alpha": aa, "bandwidth": bb}
        return topo
    if spec.lower().endswith(".json") or os.path.sep in spec or os.path.exists(spec):
        return load_topology(spec, n, alpha=a, bandwidth=b)
    raise CollsynthError(f"unknown topology {spec!r}: choose one of {', '.join(_PRESETS)} "
                         f"or give a JSON topology file")


def topology_from_spec(spec: Mapping[str, Any]) -> Topology:
    """Rebuild a topology from its ``spec`` (what schedules record in meta["topology"])."""
    if not isinstance(spec, Mapping):
        raise CollsynthError(f"a topology spec must be an object, got {spec!r}")
    if "preset" in spec:
        return make_topology(spec["preset"], spec.get("gpus", 0), alpha=spec.get("alpha"),
                             bandwidth=spec.get("bandwidth"))
    if "cluster" in spec:
        c = dict(spec["cluster"])
        a, b = c.pop("alpha", {}), c.pop("bandwidth", {})
        try:
            return cluster_topology(c.pop("nodes"), c.pop("gpus_per_node"), nvlink_alpha=a["nvlink"],
                                    net_alpha=a["net"], nvlink_bandwidth=b["nvlink"], net_bandwidth=b["net"], **c)
        except (KeyError, TypeError) as e:
            raise CollsynthError(f"topology spec: bad cluster description ({e})") from None
    if "file" in spec:
        return topology_from_dict(spec["file"], alpha=spec.get("alpha"), bandwidth=spec.get("bandwidth"),
                                  source="spec", default_name="custom")
    raise CollsynthError("a topology spec needs \"preset\", \"cluster\" or \"file\"")


_FILE_KEYS = {"name", "gpus", "switches", "links", "ports", "alpha", "bandwidth", "nodes", "fabric", "routing"}
_LINK_KEYS = {"src", "dst", "alpha", "bandwidth", "bidirectional", "class"}


def load_topology(path: str, n: int | None = None, alpha: ClassTimes = None,
                  bandwidth: ClassRates = None) -> Topology:
    """Read a JSON topology file (schema in the module docstring); n, if given, must match "gpus"."""
    text = read_text(path, what="topology file ")
    try:
        d = json_loads(text)
    except json.JSONDecodeError as e:
        if text.lstrip().startswith("<system") or "GPU0" in text[:4096]:  # a machine description, not a topology
            raise CollsynthError(f"topology file {path} is NCCL topology XML or nvidia-smi output, not a "
                                 f"topology JSON: convert it with `collsynth topology import {path} -o topo.json`"
                                 ) from None
        raise CollsynthError(f"topology file {path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    name = os.path.splitext(os.path.basename(path))[0]
    return topology_from_dict(d, n, alpha=alpha, bandwidth=bandwidth, source=path, default_name=name)


def _per_class_default(x: Any, parse: Callable[[Any, str], float], where: str, key: str
                       ) -> tuple[float | None, dict[str, float]]:
    """A file's top-level "alpha"/"bandwidth": one value, or an object per link class."""
    if isinstance(x, dict):
        return None, {str(c): parse(v, f"{where} {key}[{c!r}]") for c, v in x.items()}
    return parse(x, where), {}


def topology_from_dict(d: Any, n: int | None = None, alpha: ClassTimes = None, bandwidth: ClassRates = None,
                       source: str = "topology", default_name: str = "custom") -> Topology:
    """Build a Topology from the JSON schema (already parsed); ``alpha``/``bandwidth`` as in make_topology."""
    where = f"topology file {source}"
    over_a = _class_values(alpha, "alpha")
    over_b = _class_values(bandwidth, "bandwidth")
    if not isinstance(d, dict):
        raise CollsynthError(f"{where}: expected a JSON object with \"gpus\" and \"links\"")
    extra = set(d) - _FILE_KEYS
    if extra:
        raise CollsynthError(f"{where}: unknown key {sorted(extra)[0]!r}; allowed: {', '.join(sorted(_FILE_KEYS))}")
    gpus = d.get("gpus")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 2:
        raise CollsynthError(f"{where}: \"gpus\" must be an integer >= 2, got {gpus!r}")
    if n is not None and gpus != n:
        raise CollsynthError(f"{where} describes {gpus} GPUs but {n} are needed: "
                             f"use --gpus {gpus} or a topology with {n} GPUs")
    name = d.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise CollsynthError(f"{where}: \"name\" must be a non-empty string")
    switches = d.get("switches", [])
    if not isinstance(switches, list) or not all(isinstance(s, str) and s for s in switches):
        raise CollsynthError(f"{where}: \"switches\" must be a list of switch names (strings)")
    if len(set(switches)) != len(switches):
        raise CollsynthError(f"{where}: switch names must be unique")
    ports = d.get("ports", 1)
    if isinstance(ports, dict):
        for c, p in ports.items():
            if isinstance(p, bool) or not isinstance(p, int) or p < 1:
                raise CollsynthError(f"{where}: \"ports\" of class {c!r} must be an integer >= 1, got {p!r}")
    elif isinstance(ports, bool) or not isinstance(ports, int) or ports < 1:
        raise CollsynthError(f"{where}: \"ports\" must be an integer >= 1 or an object per link class "
                             f"such as {{\"nvlink\": 1, \"net\": 1}}, got {ports!r}")
    def_a, cls_a = _per_class_default(d.get("alpha", DEFAULT_ALPHA), _as_time, where, "alpha")
    def_b, cls_b = _per_class_default(d.get("bandwidth", DEFAULT_BANDWIDTH), _as_rate, where, "bandwidth")
    links = d.get("links")
    if not isinstance(links, list) or not links:
        raise CollsynthError(f"{where}: \"links\" must be a non-empty list of "
                             "{\"src\", \"dst\", \"alpha\", \"bandwidth\", \"bidirectional\", \"class\"} objects")
    sw_set = set(switches)
    g = _graph(gpus, switches)

    def node(x: Any, i: int) -> Any:
        if isinstance(x, bool):
            pass
        elif isinstance(x, int) and 0 <= x < gpus or isinstance(x, str) and x in sw_set:
            return x
        raise CollsynthError(f"{where}: link {i} names node {x!r}; use a GPU 0..{gpus - 1} or a switch "
                             f"listed in \"switches\" ({', '.join(switches) or 'none'})")

    classes: list[str] = []
    for i, ln in enumerate(links):
        if not isinstance(ln, dict) or "src" not in ln or "dst" not in ln:
            raise CollsynthError(f"{where}: link {i} must be an object with \"src\" and \"dst\"")
        bad = set(ln) - _LINK_KEYS
        if bad:
            raise CollsynthError(f"{where}: link {i} has unknown key {sorted(bad)[0]!r}; "
                                 f"allowed: {', '.join(sorted(_LINK_KEYS))}")
        u, v = node(ln["src"], i), node(ln["dst"], i)
        if u == v:
            raise CollsynthError(f"{where}: link {i} goes from {u!r} to itself; remove it")
        c = ln.get("class", DEFAULT_CLASS)
        if not isinstance(c, str) or not c:
            raise CollsynthError(f"{where}: link {i}: \"class\" must be a non-empty string such as \"nvlink\"")
        if c not in classes:
            classes.append(c)
        la = _link_value(ln, "alpha", c, over_a, cls_a, DEFAULT_ALPHA if def_a is None else def_a, _as_time,
                         f"{where} link {i}")
        lb = _link_value(ln, "bandwidth", c, over_b, cls_b, DEFAULT_BANDWIDTH if def_b is None else def_b,
                         _as_rate, f"{where} link {i}")
        _check_link_params(float(la), float(lb), f"{where} link {i}")
        both = ln.get("bidirectional", True)
        if not isinstance(both, bool):
            raise CollsynthError(f"{where}: link {i}: \"bidirectional\" must be true or false")
        for a, b in ((u, v), (v, u)) if both else ((u, v),):
            if g.has_edge(a, b):
                raise CollsynthError(f"{where}: link {a!r}->{b!r} is listed twice; keep one")
            g.add_edge(a, b, alpha=float(la), bandwidth=float(lb), **{"class": c})
    for key, over in (("alpha", over_a), ("bandwidth", over_b)):
        for c in over if isinstance(over, dict) else ():
            if c not in classes:
                raise CollsynthError(f"--{key} names link class {c!r}, but {where} has {', '.join(classes)}; "
                                     f"use one of those")
    for key, given in (("alpha", cls_a), ("bandwidth", cls_b)):
        for c in given:
            if c not in classes:
                raise CollsynthError(f"{where}: \"{key}\" names link class {c!r} that no link has; "
                                     f"use one of {', '.join(classes)}")
    if isinstance(ports, dict):
        unknown = sorted(set(ports) - set(classes))
        if unknown:
            raise CollsynthError(f"{where}: \"ports\" names link class {unknown[0]!r} that no link has; "
                                 f"use {', '.join(classes)}")
        missing = [c for c in classes if c not in ports]
        if missing:
            raise CollsynthError(f"{where}: \"ports\" has no entry for link class {missing[0]!r}; add one")
        class_ports = {c: int(ports[c]) for c in classes}
    elif len(classes) > 1 and "ports" in d:
        raise CollsynthError(f"{where}: links have classes {', '.join(classes)}, so \"ports\" must be an object "
                             f"per class, e.g. {json.dumps({c: 1 for c in classes})}")
    else:
        class_ports = {c: (int(ports) if len(classes) == 1 else 1) for c in classes}
    for r in range(gpus):
        if g.out_degree(r) == 0 and g.in_degree(r) == 0:
            raise CollsynthError(f"{where}: GPU {r} has no links; add a link from it or lower \"gpus\"")
    _check_connected(g, gpus, where)
    node_of = _file_nodes(d.get("nodes"), gpus, where)
    fabric = d.get("fabric")
    if fabric is not None and fabric not in FABRICS:
        raise CollsynthError(f"{where}: \"fabric\" {fabric!r} is unknown; use {' or '.join(FABRICS)} (or leave it out)")
    routing = d.get("routing", "shortest")
    if routing != "shortest":
        raise CollsynthError(f"{where}: \"routing\" {routing!r}: a file's routes are shortest paths (ties to the "
                             f"lowest-numbered node); use \"shortest\" or build a cluster preset")
    topo = Topology.from_graph(name, gpus, g, switches=switches, classes=classes, class_ports=class_ports,
                               node_of=node_of[0], local_index=node_of[1], fabric=fabric, routing=routing)
    topo.spec = {"file": d, "alpha": over_a, "bandwidth": over_b}
    return topo


def _file_nodes(nodes: Any, gpus: int, where: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(node_of, local_index) from a file's "nodes": [[gpu, ...], ...] (every GPU exactly once)."""
    if nodes is None:
        return None, None
    if not isinstance(nodes, list) or not nodes or not all(isinstance(x, list) and x for x in nodes):
        raise CollsynthError(f"{where}: \"nodes\" must be a list of non-empty GPU lists, e.g. [[0, 1], [2, 3]]")
    node_of = np.full(gpus, -1, np.int64)
    local = np.zeros(gpus, np.int64)
    for k, grp in enumerate(nodes):
        for i, r in enumerate(grp):
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < gpus:
                raise CollsynthError(f"{where}: \"nodes\"[{k}] names {r!r}; use GPUs 0..{gpus - 1}")
            if node_of[r] >= 0:
                raise CollsynthError(f"{where}: GPU {r} is in \"nodes\" twice (nodes {node_of[r]} and {k}); keep one")
            node_of[r], local[r] = k, i
    if (node_of < 0).any():
        r = int(np.argmax(node_of < 0))
        raise CollsynthError(f"{where}: GPU {r} is in no entry of \"nodes\"; add it to one")
    return node_of, local


def _link_value(ln: dict[str, Any], key: str, cls: str, override: float | dict[str, float] | None,
                per_class: Mapping[str, float], default: float, parse: Callable[[Any, str], float],
                what: str) -> float:
    """A link's alpha or bandwidth: the caller's override (one value, or this class's), else the link's own,
    else the file's value for its class, else the file's default."""
    if isinstance(override, float):
        return override
    if isinstance(override, dict) and cls in override:
        return override[cls]
    if key in ln:
        return parse(ln[key], what)
    return per_class.get(cls, default)


def _check_connected(g: nx.DiGraph, gpus: int, where: str) -> None:
    import networkx as nx
    down = nx.descendants(g, 0) | {0}
    up = nx.ancestors(g, 0) | {0}
    for r in range(gpus):
        if r not in down or r not in up:
            how = "cannot be reached from GPU 0" if r not in down else "cannot reach GPU 0"
            raise CollsynthError(f"{where}: GPU {r} is disconnected ({how}); add links")
