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

JSON file schema (``make_topology("path/to/topo.json", n)``)::

    {"name": "my-box",              # optional, default: the file name
     "gpus": 4,                     # required: the GPUs are 0..gpus-1
     "switches": ["sw0"],           # optional: switch names (strings)
     "alpha": "3us",                # optional default for links without one (else 3us)
     "bandwidth": "450GiB/s",       # optional default for links without one (else 450GiB/s)
     "ports": 1,                    # optional: messages per rank per step the hardware supports
     "links": [{"src": 0, "dst": "sw0", "alpha": "1.5us", "bandwidth": "450GiB/s",
                "bidirectional": true}]}   # bidirectional defaults to true

Times are "3us"-style strings or float seconds; bandwidths "450GiB/s" strings or float bytes/s.
``alpha``/``bandwidth`` arguments of ``make_topology`` override every link of a file.
Every GPU must reach every other GPU.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from collsynth.apitypes import Column
from collsynth.errors import CollsynthError
from collsynth.fileio import json_loads, read_text
from collsynth.units import parse_rate, parse_time

if TYPE_CHECKING:
    import networkx as nx

DEFAULT_ALPHA = 3e-6
DEFAULT_BANDWIDTH = 450.0 * 2**30
DGX1_ALPHA = 0.7e-6
DGX1_BANDWIDTH = 25e9

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


class Topology:
    """A validated network: flat per-link arrays, cached routes and (lazily) the networkx graph.

    Treat as read-only. Links are numbered in the order of (source node index, destination node
    index), where GPU r has index r and switch k (in declaration order) has index n + k. Build with
    ``make_topology``, ``Topology.from_graph`` or ``Topology.from_arrays``.
    """

    def __init__(self, name: str, nranks: int, link_src: Column, link_dst: Column,
                 link_alpha: Sequence[float] | np.ndarray, link_bw: Sequence[float] | np.ndarray, ports: int = 1,
                 switches: Sequence[str] = ()) -> None:
        self.name = name
        self.nranks = int(nranks)
        self.ports = int(ports)
        self.switches = tuple(switches)
        self.nodes: tuple[int | str, ...] = tuple(range(self.nranks)) + self.switches
        nv = self.nnodes = len(self.nodes)
        ls, ld = np.asarray(link_src, np.int64), np.asarray(link_dst, np.int64)
        order = np.lexsort((ld, ls))
        self.link_src = _ro(ls[order])
        self.link_dst = _ro(ld[order])
        self.link_alpha = _ro(np.asarray(link_alpha, np.float64)[order])
        self.link_bw = _ro(np.asarray(link_bw, np.float64)[order])
        self._keys = _ro(self.link_src * nv + self.link_dst)  # sorted, one per link
        if len(self._keys) > 1 and np.any(self._keys[1:] == self._keys[:-1]):
            raise CollsynthError(f"topology {name!r} lists a link twice; keep one")
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
                   switches: Sequence[str] = ()) -> Topology:
        """From a DiGraph whose edges carry ``alpha`` and ``bandwidth``."""
        index: dict[Any, int] = {r: r for r in range(nranks)}
        for k, sw in enumerate(switches):
            index[sw] = nranks + k
        e = [(index[u], index[v], float(d["alpha"]), float(d["bandwidth"])) for u, v, d in graph.edges(data=True)]
        topo = cls(name, nranks, [x[0] for x in e], [x[1] for x in e], [x[2] for x in e], [x[3] for x in e],
                   ports=ports, switches=switches)
        topo._graph = graph
        return topo

    @property
    def graph(self) -> nx.DiGraph:
        """The networkx DiGraph (GPU ints, switch strings; edge attrs alpha, bandwidth)."""
        import networkx as nx
        if self._graph is None:
            g = nx.DiGraph()
            g.add_nodes_from(self.nodes)
            nodes = self.nodes
            g.add_edges_from((nodes[u], nodes[v], {"alpha": a, "bandwidth": b}) for u, v, a, b in
                             zip(self.link_src.tolist(), self.link_dst.tolist(),
                                 self.link_alpha.tolist(), self.link_bw.tolist()))
            self._graph = g
        return self._graph
    # ------------------------------------------------------------------ views
    @property
    def nlinks(self) -> int:
        return len(self.link_alpha)

    def link_name(self, link: int) -> str:
        """'u->v' for a link index."""
        return f"{self.nodes[int(self.link_src[link])]}->{self.nodes[int(self.link_dst[link])]}"

    def summary(self) -> TopologySummary:
        """JSON-ready description (for `collsynth topologies` and reports)."""
        return {"name": self.name, "gpus": self.nranks, "switches": list(self.switches),
                "links": self.nlinks, "ports": self.ports,
                "alpha_s": sorted(set(self.link_alpha.tolist())),
                "bandwidth_Bps": sorted(set(self.link_bw.tolist()))}

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


def make_topology(spec: str, n: int, alpha: float | str | None = None,
                  bandwidth: float | str | None = None) -> Topology:
    """A preset (see ``topology_presets()``) or a JSON topology file, for ``n`` GPUs.

    ``alpha`` (seconds) and ``bandwidth`` (bytes/s) override the preset's per-link defaults (for
    nvswitch, alpha is the GPU-to-GPU start-up cost; for dgx1, bandwidth is per NVLink) or every link
    of a file.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise CollsynthError(f"a topology needs an integer number of GPUs >= 2, got {n!r}")
    n = int(n)
    a = None if alpha is None else _as_time(alpha, "topology")
    b = None if bandwidth is None else _as_rate(bandwidth, "topology")
    spec = str(spec)
    if spec in _BUILDERS:
        build, da, db = _BUILDERS[spec]
        a = da if a is None else a
        b = db if b is None else b
        _check_link_params(float(a), float(b), f"topology {spec}")
        return build(n, float(a), float(b))
    if spec.lower().endswith(".json") or os.path.sep in spec or os.path.exists(spec):
        return load_topology(spec, n, alpha=a, bandwidth=b)
    raise CollsynthError(f"unknown topology {spec!r}: choose one of {', '.join(_BUILDERS)} "
                         f"or give a JSON topology file")


_FILE_KEYS = {"name", "gpus", "switches", "links", "ports", "alpha", "bandwidth"}
_LINK_KEYS = {"src", "dst", "alpha", "bandwidth", "bidirectional"}


def load_topology(path: str, n: int | None = None, alpha: float | None = None,
                  bandwidth: float | None = None) -> Topology:
    """Read a JSON topology file (schema in the module docstring); n, if given, must match "gpus"."""
    text = read_text(path, what="topology file ")
    try:
        d = json_loads(text)
    except json.JSONDecodeError as e:
        raise CollsynthError(f"topology file {path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    name = os.path.splitext(os.path.basename(path))[0]
    return topology_from_dict(d, n, alpha=alpha, bandwidth=bandwidth, source=path, default_name=name)


def topology_from_dict(d: Any, n: int | None = None, alpha: float | None = None,
                       bandwidth: float | None = None, source: str = "topology",
                       default_name: str = "custom") -> Topology:
    """Build a Topology from the JSON schema (already parsed)."""
    where = f"topology file {source}"
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
    if isinstance(ports, bool) or not isinstance(ports, int) or ports < 1:
        raise CollsynthError(f"{where}: \"ports\" must be an integer >= 1, got {ports!r}")
    def_a = _as_time(d["alpha"], where) if "alpha" in d else DEFAULT_ALPHA
    def_b = _as_rate(d["bandwidth"], where) if "bandwidth" in d else DEFAULT_BANDWIDTH
    links = d.get("links")
    if not isinstance(links, list) or not links:
        raise CollsynthError(f"{where}: \"links\" must be a non-empty list of "
                             "{\"src\", \"dst\", \"alpha\", \"bandwidth\", \"bidirectional\"} objects")
    sw_set = set(switches)
    g = _graph(gpus, switches)

    def node(x: Any, i: int) -> Any:
        if isinstance(x, bool):
            pass
        elif isinstance(x, int) and 0 <= x < gpus or isinstance(x, str) and x in sw_set:
            return x
        raise CollsynthError(f"{where}: link {i} names node {x!r}; use a GPU 0..{gpus - 1} or a switch "
                             f"listed in \"switches\" ({', '.join(switches) or 'none'})")

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
        la = alpha if alpha is not None else (_as_time(ln["alpha"], f"{where} link {i}") if "alpha" in ln else def_a)
        lb = bandwidth if bandwidth is not None else (
            _as_rate(ln["bandwidth"], f"{where} link {i}") if "bandwidth" in ln else def_b)
        _check_link_params(float(la), float(lb), f"{where} link {i}")
        both = ln.get("bidirectional", True)
        if not isinstance(both, bool):
            raise CollsynthError(f"{where}: link {i}: \"bidirectional\" must be true or false")
        for a, b in ((u, v), (v, u)) if both else ((u, v),):
            if g.has_edge(a, b):
                raise CollsynthError(f"{where}: link {a!r}->{b!r} is listed twice; keep one")
            g.add_edge(a, b, alpha=float(la), bandwidth=float(lb))
    _check_connected(g, gpus, where)
    return Topology.from_graph(name, gpus, g, ports=ports, switches=switches)


def _check_connected(g: nx.DiGraph, gpus: int, where: str) -> None:
    import networkx as nx
    down = nx.descendants(g, 0) | {0}
    up = nx.ancestors(g, 0) | {0}
    for r in range(gpus):
        if r not in down or r not in up:
            how = "cannot be reached from GPU 0" if r not in down else "cannot reach GPU 0"
            raise CollsynthError(f"{where}: GPU {r} is disconnected ({how}); add links")
