"""The Topology model: flat per-link arrays, link classes, server nodes, cached routes and (lazily)
the networkx graph. The package docstring (collsynth.synth.topology) describes presets, routing and files."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from collsynth.apitypes import Column
from collsynth.errors import CollsynthError
from collsynth.synth.topology.gpus import GpuJson, GpuModel

if TYPE_CHECKING:
    import networkx as nx

DEFAULT_ALPHA = 3e-6
DEFAULT_BANDWIDTH = 450.0 * 2**30
DEFAULT_CLASS = "default"
FABRICS = ("rail", "fat-tree")


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
    gpu: GpuJson | None  # GpuModel.to_json() of the GPU the topology names


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
        self.gpu: GpuModel | None = None  # the GPU model it names (presets, files), set by builders
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
        """Per class (alpha, bandwidth) of one GPU-to-GPU message over that class: the least alpha of the routes
        from GPU 0 (and from the first GPU with a link of the class) that leave and enter a GPU over the class,
        every hop counted (an imported rail fabric puts its latency on the NIC-to-rail links); without such a
        route, the cheapest GPU out-link of the class plus, if it ends at a switch, the cheapest switch-to-GPU
        link of the class. The bandwidth is the largest such GPU link (out and in)."""
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
                routed = self._route_alpha(c, int(self.link_src[up].min()))
                inb = m & (self.link_dst < n)
                bw = float(min(self.link_bw[up].max(), self.link_bw[inb].max() if inb.any() else np.inf))
                out[name] = (routed if routed is not None else min(alphas) if alphas else
                             float(self.link_alpha[up].min()), bw)
            self._class_nominal = out
        return self._class_nominal

    def _route_alpha(self, c: int, first: int) -> float | None:
        """The least alpha of the routes, every hop counted, whose first and last links are of class index ``c``, from
        GPU 0 and GPU ``first`` to a sample of GPUs (those of the sources' nodes and of node 1, or on one node up to
        64; a route table toward every GPU took 595 s and 10 GB for 40,000 GPUs on one switch); None without one."""
        n = self.nranks
        srcs = sorted({0, first})
        if self.node_count > 1:
            nodes = {int(self.node_of[x]) for x in srcs} | {1}
            dsts = [d for k in sorted(nodes) for d in self.node_gpus(k)]
        else:
            dsts = list(range(min(n, 65)))
        pairs = np.array([(x, d) for x in srcs for d in dsts if d != x], np.int64).reshape(-1, 2)
        if not len(pairs):
            return None
        links, alpha = self.pair_table(pairs)
        hops = (links >= 0).sum(axis=1)
        ok = hops > 0
        head = np.where(ok, links[:, 0], 0)
        tail = links[np.arange(len(links)), np.maximum(hops - 1, 0)]
        ok &= (self.link_class[head] == c) & (self.link_class[tail] == c)
        return float(alpha[ok].min()) if ok.any() else None

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

    def unique_pairs(self, src: Column, dst: Column) -> tuple[np.ndarray, np.ndarray]:
        """The distinct (src, dst) pairs of the transfers (U x 2, ascending) and each transfer's row among them.
        Where the transfers are at least a quarter of the n^2 pairs, a table over all pairs instead of a sort
        (multiring at 1,024 GPUs: 16.8 million transfers, seconds of np.unique)."""
        n = self.nranks
        key = np.asarray(src, np.int64) * n + np.asarray(dst, np.int64)
        if n * n <= 4 * len(key):
            slot = np.zeros(n * n, np.int64)
            slot[key] = 1
            uniq = np.flatnonzero(slot)
            slot[uniq] = np.arange(len(uniq))
            inv = slot[key]
        else:
            uniq, inv = np.unique(key, return_inverse=True)
        return np.stack(np.divmod(uniq, n), 1), inv

    def route_classes(self, src: Column, dst: Column) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised ``transfer_class``: class indices (first hop, last hop) per (src[i], dst[i]) pair."""
        if not len(src):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        pairs, inv = self.unique_pairs(src, dst)
        links, _ = self.pair_table(pairs)
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
                "nodes": self.node_count, "fabric": self.fabric, "routing": self.routing,
                "gpu": self.gpu.to_json() if self.gpu else None}

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



def _ro(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a

