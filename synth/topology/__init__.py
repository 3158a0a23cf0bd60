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
     "ports": 1,                    # optional: messages per rank per step, 1..1024, or {"nvlink": 1, "net": 1}
     "nodes": [[0, 1], [2, 3]],     # optional: server nodes, each GPU once, in local order (default: one node)
     "fabric": "rail",              # optional, informational: "rail" or "fat-tree"
     "routing": "shortest",         # optional: files route by shortest paths only
     "gpu": {"name": "H100 SXM5", "sms": 132},  # optional: the GPU model (gpus.py), for per-GPU limits
     "links": [{"src": 0, "dst": "sw0", "alpha": "1.5us", "bandwidth": "450GiB/s",
                "class": "default", "bidirectional": true}]}   # class defaults to "default"

Times are "3us"-style strings or float seconds; bandwidths "450GiB/s" strings or float bytes/s.
With several link classes "ports" must be an object naming each class (default 1 per class).
``alpha``/``bandwidth`` arguments of ``make_topology`` override every link of a file (one value) or
the links of the named classes (per class).
Every GPU must reach every other GPU.

Modules: ``model`` (the Topology class), ``links`` (shared checks and parsers), ``cluster`` (server
clusters), ``presets`` (the named presets, ``make_topology``, ``topology_from_spec``), ``files`` (JSON files),
``gpus`` (the GPU model a topology names).
"""

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
from collsynth.synth.topology.model import (
                                              DEFAULT_ALPHA,
                                              DEFAULT_BANDWIDTH,
                                              DEFAULT_CLASS,
                                              FABRICS,
                                              Topology,
                                              TopologySummary,
)
from collsynth.synth.topology.presets import (
                                              DEFAULT_TOPOLOGY,
                                              DGX1_ALPHA,
                                              DGX1_BANDWIDTH,
                                              DGX1_LINKS,
                                              make_topology,
                                              preset_gpus_per_node,
                                              resized,
                                              topology_for,
                                              topology_from_spec,
                                              topology_presets,
                                              torus_shape,
)

__all__ = [
    "DEFAULT_ALPHA", "DEFAULT_BANDWIDTH", "DEFAULT_CLASS", "DEFAULT_TOPOLOGY", "DGX1_ALPHA", "DGX1_BANDWIDTH",
    "DGX1_LINKS", "FABRICS", "GB200_NET_ALPHA", "GB200_NET_BANDWIDTH", "GB200_NVLINK_ALPHA", "GB200_NVLINK_BANDWIDTH",
    "H100_NET_ALPHA", "H100_NET_BANDWIDTH", "H100_NVLINK_ALPHA", "H100_NVLINK_BANDWIDTH", "Topology",
    "TopologySummary", "cluster_topology", "load_topology", "make_topology", "preset_gpus_per_node", "resized",
    "topology_for", "topology_from_dict", "topology_from_spec", "topology_presets", "torus_shape",
]
