"""Topology JSON files (schema in the package docstring, docs/topologies.md): read, check every field and
name it in errors, build the Topology."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from collsynth.apitypes import ClassRates, ClassTimes
from collsynth.errors import CollsynthError, GpuCountError, quoted
from collsynth.fileio import json_loads, read_text
from collsynth.synth.topology.gpus import gpu_from_json
from collsynth.synth.topology.links import as_rate, as_time, check_link_params, class_values, new_graph
from collsynth.synth.topology.model import DEFAULT_ALPHA, DEFAULT_BANDWIDTH, DEFAULT_CLASS, FABRICS, Topology

if TYPE_CHECKING:
    import networkx as nx

MAX_PORTS = 1024  # messages per GPU, link class and direction at once: far above any GPU's links (an H100 has 18
# NVLinks and at most a few NICs); beyond it the simulator's port tables would be the size of the file's number


_FILE_KEYS = {"name", "gpus", "switches", "links", "ports", "alpha", "bandwidth", "nodes", "fabric", "routing",
              "gpu"}
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
    over_a = class_values(alpha, "alpha")
    over_b = class_values(bandwidth, "bandwidth")
    if not isinstance(d, dict):
        raise CollsynthError(f"{where}: expected a JSON object with \"gpus\" and \"links\"")
    extra = set(d) - _FILE_KEYS
    if extra:
        raise CollsynthError(f"{where}: unknown key {sorted(extra)[0]!r}; allowed: {', '.join(sorted(_FILE_KEYS))}")
    gpus = d.get("gpus")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 2:
        raise CollsynthError(f"{where}: \"gpus\" must be an integer >= 2, got {quoted(gpus)}")
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
            if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= MAX_PORTS:
                raise CollsynthError(f"{where}: \"ports\" of class {c!r} must be an integer in 1..{MAX_PORTS}, "
                                     f"got {quoted(p)}")
    elif isinstance(ports, bool) or not isinstance(ports, int) or not 1 <= ports <= MAX_PORTS:
        raise CollsynthError(f"{where}: \"ports\" must be an integer in 1..{MAX_PORTS} or an object per link class "
                             f"such as {{\"nvlink\": 1, \"net\": 1}}, got {quoted(ports)}")
    def_a, cls_a = _per_class_default(d.get("alpha", DEFAULT_ALPHA), as_time, where, "alpha")
    def_b, cls_b = _per_class_default(d.get("bandwidth", DEFAULT_BANDWIDTH), as_rate, where, "bandwidth")
    links = d.get("links")
    if not isinstance(links, list) or not links:
        raise CollsynthError(f"{where}: \"links\" must be a non-empty list of "
                             "{\"src\", \"dst\", \"alpha\", \"bandwidth\", \"bidirectional\", \"class\"} objects")
    if gpus > 2 * len(links):  # every GPU needs a link, each link has two ends: checked before the graph is built
        raise CollsynthError(f"{where}: \"gpus\" is {quoted(gpus)} but its {len(links)} links reach at most "
                             f"{2 * len(links)} GPUs; every GPU needs a link: lower \"gpus\" or add links")
    if n is not None and gpus != n:
        raise GpuCountError(f"{where} describes {gpus} GPUs but {n} are needed: "
                            f"use --gpus {gpus} or a topology with {n} GPUs", f"file {source}", f"{gpus} GPUs")
    sw_set = set(switches)
    g = new_graph(gpus, switches)

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
        la = _link_value(ln, "alpha", c, over_a, cls_a, DEFAULT_ALPHA if def_a is None else def_a, as_time,
                         f"{where} link {i}")
        lb = _link_value(ln, "bandwidth", c, over_b, cls_b, DEFAULT_BANDWIDTH if def_b is None else def_b,
                         as_rate, f"{where} link {i}")
        check_link_params(float(la), float(lb), f"{where} link {i}")
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
    gpu = gpu_from_json(d["gpu"], where) if "gpu" in d else None
    topo = Topology.from_graph(name, gpus, g, switches=switches, classes=classes, class_ports=class_ports,
                               node_of=node_of[0], local_index=node_of[1], fabric=fabric, routing=routing)
    topo.gpu = gpu
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

