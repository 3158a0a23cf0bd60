"""The named presets (``topology_presets()``) and ``make_topology``, which resolves a preset name (with
options such as ``h100-cluster:fabric=fat-tree``) or a JSON file; ``topology_from_spec`` rebuilds what a schedule
recorded."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from collsynth import budget
from collsynth.apitypes import ClassRates, ClassTimes
from collsynth.errors import CollsynthError, GpuCountError
from collsynth.synth.topology.cluster import (
    GB200_NET_ALPHA,
    GB200_NET_BANDWIDTH,
    GB200_NVLINK_ALPHA,
    GB200_NVLINK_BANDWIDTH,
    H100_NET_ALPHA,
    H100_NET_BANDWIDTH,
    H100_NVLINK_ALPHA,
    H100_NVLINK_BANDWIDTH,
    cluster_topology,
)
from collsynth.synth.topology.files import load_topology, topology_from_dict
from collsynth.synth.topology.gpus import PRESET_GPUS
from collsynth.synth.topology.links import check_link_params, class_values
from collsynth.synth.topology.model import DEFAULT_ALPHA, DEFAULT_BANDWIDTH, DEFAULT_CLASS, Topology

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
    "dgx-h100": "8 H100 GPUs on NVSwitch (class nvlink 3.4us, 450GB/s) plus one NIC each "
                "(class net 14us, 50GB/s)",
    "h100-cluster": "nodes of 8 dgx-h100 GPUs (--gpus / 8 nodes) on a rail-optimized fabric, PXN routing",
    "gb200-nvl72": "72 GB200 GPUs in one NVLink domain (class nvlink 3.4us, 900GB/s) plus one NIC each "
                   "(class net 14us, 50GB/s)",
}


def topology_presets() -> dict[str, str]:
    """Preset name -> one-line description."""
    return dict(_PRESET_TEXT)



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
        raise GpuCountError(f"topology dgx1 has 8 GPUs, not {n}: use --gpus 8 or another topology", "dgx1", "8 GPUs")
    a, b, k = (np.array(c) for c in zip(*DGX1_LINKS))
    return _arrays("dgx1", 8, a, b, alpha, k * bw)


_BUILDERS: dict[str, tuple[Callable[[int, float, float], Topology], float, float]] = {
    "nvswitch": (_nvswitch, DEFAULT_ALPHA, DEFAULT_BANDWIDTH),
    "full-mesh": (_full_mesh, DEFAULT_ALPHA, DEFAULT_BANDWIDTH),
    "ring": (_ring, DEFAULT_ALPHA, DEFAULT_BANDWIDTH),
    "dgx1": (_dgx1, DGX1_ALPHA, DGX1_BANDWIDTH),
    "torus2d": (_torus2d, DEFAULT_ALPHA, DEFAULT_BANDWIDTH),
}


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
        raise GpuCountError(f"topology {preset} has {per} GPUs, not {n}: use --gpus {per} or another topology",
                            preset, f"{per} GPUs")
    if n % per:
        raise GpuCountError(f"topology {preset} has {per} GPUs per node: --gpus must be a multiple of {per}, got {n}",
                            preset, f"a multiple of {per} GPUs")
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

# the cluster presets: GPUs per node, whether that is the only GPU count (one node), their links' (alpha, bandwidth)
_CLUSTER_PRESETS = {"dgx-h100": (8, True, _H100), "h100-cluster": (8, False, _H100), "gb200-nvl72": (72, True, _GB200)}

_PRESETS: dict[str, tuple[_Builder, dict[str, float], dict[str, float]]] = {
    **{k: (_single(f), {DEFAULT_CLASS: a}, {DEFAULT_CLASS: b}) for k, (f, a, b) in _BUILDERS.items()},
    **{k: (_cluster_preset(k, per, exact), *links) for k, (per, exact, links) in _CLUSTER_PRESETS.items()},
}


DEFAULT_TOPOLOGY = "nvswitch"  # where none is given: one switch, every GPU one hop from every other


def preset_gpus_per_node(spec: str) -> int:
    """The GPUs per node of a cluster preset (``spec`` may carry options, "h100-cluster:fabric=fat-tree"); 1 for any
    other preset or a file: the GPU counts it takes are the multiples of it."""
    got = _CLUSTER_PRESETS.get(str(spec).partition(":")[0])
    return got[0] if got is not None else 1


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
    a = class_values(alpha, "alpha")
    b = class_values(bandwidth, "bandwidth")
    spec = str(spec)
    base, opts = _preset_options(spec) if ":" in spec and spec.partition(":")[0] in _PRESETS else (spec, {})
    if base in _PRESETS:
        build, da, db = _PRESETS[base]
        links = n * (n - 1) if base == "full-mesh" else 8 * n  # at most; about 200 bytes each once built
        budget.check(200.0 * links, f"the {base} topology of {n} GPUs", hint="give fewer GPUs")
        if opts and set(da) != {"nvlink", "net"}:
            raise CollsynthError(f"topology {base} takes no options; fabric, routing and oversubscription apply to "
                                 f"the cluster presets (e.g. h100-cluster:fabric=fat-tree)")
        aa, bb = _resolve(da, a, "alpha", base), _resolve(db, b, "bandwidth", base)
        for c in aa:
            check_link_params(aa[c], bb[c], f"topology {base} class {c}")
        topo = build(n, aa, bb, opts)
        topo.spec = {"preset": spec, "gpus": n, "alpha": aa, "bandwidth": bb}
        topo.gpu = PRESET_GPUS.get(base)
        return topo
    if spec.lower().endswith(".json") or os.path.sep in spec or os.path.exists(spec):
        return load_topology(spec, n, alpha=a, bandwidth=b)
    raise CollsynthError(f"unknown topology {spec!r}: choose one of {', '.join(_PRESETS)} "
                         f"or give a JSON topology file")


def topology_for(topology: Topology | str | None, n: int, alpha: ClassTimes = None,
                 bandwidth: ClassRates = None) -> Topology:
    """The topology a library call was given, for ``n`` GPUs: None is DEFAULT_TOPOLOGY, a name or JSON path is
    built (``alpha``/``bandwidth`` as in make_topology), a Topology must have ``n`` GPUs and is returned as is."""
    if topology is None or isinstance(topology, str):
        return make_topology(DEFAULT_TOPOLOGY if topology is None else topology, n, alpha=alpha, bandwidth=bandwidth)
    if not isinstance(topology, Topology):
        raise CollsynthError(f"topology must be a Topology, a preset name or a JSON file, got "
                             f"{type(topology).__name__}")
    if alpha is not None or bandwidth is not None:
        raise CollsynthError("alpha and bandwidth apply to a topology name or file, not to a built Topology")
    if topology.nranks != n:
        raise CollsynthError(f"topology {topology.name!r} has {topology.nranks} GPUs but {n} are needed: give a "
                             f"topology for {n} GPUs")
    return topology


def resized(topology: Topology, n: int) -> Topology | None:
    """The same machine with ``n`` GPUs, rebuilt from ``topology.spec`` (a preset, or a cluster of the same nodes
    and links); None where there is no spec to rebuild from or ``n`` does not fit it (not a multiple of the GPUs per
    node, a fixed-size preset). The budget's search for the largest GPU count that fits uses it."""
    spec = getattr(topology, "spec", None)
    if not isinstance(spec, Mapping):
        return None
    try:
        if "preset" in spec:
            return topology_from_spec({**spec, "gpus": n})
        if "cluster" in spec and isinstance(spec["cluster"], Mapping):
            per = int(spec["cluster"]["gpus_per_node"])
            return None if n % per else topology_from_spec({**spec, "cluster": {**spec["cluster"], "nodes": n // per}})
    except (CollsynthError, KeyError, TypeError, ValueError):
        return None
    return None


def topology_from_spec(spec: Mapping[str, Any], alpha: ClassTimes = None, bandwidth: ClassRates = None) -> Topology:
    """Rebuild a topology from its ``spec`` (what schedules record in meta["topology"]); ``alpha`` and
    ``bandwidth`` (as in make_topology: one value for every link class, or some classes) override the
    recorded values."""
    if not isinstance(spec, Mapping):
        raise CollsynthError(f"a topology spec must be an object, got {spec!r}")
    if alpha is not None or bandwidth is not None:
        spec = dict(spec)
        for key, over in (("alpha", alpha), ("bandwidth", bandwidth)):
            value = class_values(over, key)
            if value is None:
                continue
            if "cluster" in spec:  # its alpha and bandwidth are per class; the rest of it stays
                cluster = dict(spec["cluster"])
                old = cluster.get(key)
                cluster[key] = _merged(old if isinstance(old, Mapping) else {}, value, always_per_class=True)
                spec["cluster"] = cluster
            else:  # a preset's are per class; a file's are None or as given to it (one value or per class)
                old = spec.get(key)
                if isinstance(old, (int, float)) and isinstance(value, dict):  # one recorded value, some classes
                    old = {c: float(old) for c in topology_from_spec(spec).classes}  # over it: name them all
                spec[key] = _merged(old if isinstance(old, Mapping) else None, value)
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


def _merged(old: Mapping[str, float] | None, new: float | dict[str, float], *,
            always_per_class: bool = False) -> float | dict[str, float]:
    """``new`` over ``old`` (per-class values or None): one value replaces every class (``always_per_class``:
    as a value for each of ``old``'s classes), a mapping only its classes."""
    if not isinstance(new, dict):
        return {c: float(new) for c in old or {}} if always_per_class else float(new)
    return {**{c: float(v) for c, v in (old or {}).items()}, **new}
