"""Server clusters (docs/topologies.md, the brief's clusters.md sections 1 and 3): NVSwitch nodes on a
rail-optimized or fat-tree fabric, with arithmetic routes (PXN or spine) so that 8,192 GPUs route as fast as 8."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from collsynth.errors import CollsynthError
from collsynth.synth.topology.links import check_link_params
from collsynth.synth.topology.model import FABRICS, Topology

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


MAX_OVERSUBSCRIPTION = 1000.0  # spine links at 1/1000 of the NICs below: far past any real fabric (2:1 to 8:1)


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
    if not (math.isfinite(ov) and 1.0 <= ov <= MAX_OVERSUBSCRIPTION):
        raise CollsynthError(f"{where}: oversubscription {oversubscription!r} must be a number from 1 (non-blocking) "
                             f"to {MAX_OVERSUBSCRIPTION:g}")
    check_link_params(float(nvlink_alpha), float(nvlink_bandwidth), f"{where} class nvlink")
    check_link_params(float(net_alpha), float(net_bandwidth), f"{where} class net")
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
