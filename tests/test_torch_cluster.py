"""Issue 15 point 5 on real processes: StragglerAwareAllReduce on 8 gloo ranks treated as 2 nodes x 4 GPUs
picks clusterstraggler's late-GPU or late-node form from who is late, and the AllReduce is exact; treated as
one NVLink domain (dgx-h100) it runs the broadcast form for the late GPU.

Correctness only (speed is not measurable on one host): integer-valued float32 data, so every summation
order gives the same bits as torch's own all_reduce. The late ranks sleep far longer than the agreement
window, so which form is agreed on does not depend on scheduling noise.
"""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

from collsynth.backends.torch.launch import launch  # noqa: E402
from collsynth.errors import CollsynthError  # noqa: E402

N, G = 8, 4
LATE = 1.0  # seconds; the window is 0.3 (an arrival 0.3 s behind its peers would be taken for late)
CASES = (("gpu", {5: LATE}), ("node", {r: LATE for r in range(4, 8)}), ("node0", {r: LATE for r in range(4)}),
         ("none", {}))


def world(rank: int, n: int) -> dict:
    from collsynth.backends.torch.straggler import StragglerAwareAllReduce

    sar = StragglerAwareAllReduce(gpus_per_node=G, cluster_params={"pipeline": 2, "size": 4096}, window=0.3,
                                  timeout=60)
    out = {}
    for i, (case, late) in enumerate(CASES):
        g = torch.Generator().manual_seed(1000 * i + rank)
        x = torch.randint(-1000, 1000, (1003,), generator=g).float()  # 1003: uneven over the chunks
        ref = x.clone()
        dist.all_reduce(ref)
        dist.barrier()
        time.sleep(late.get(rank, 0.0))
        sar(x)
        a = sar.last
        out[case] = (a.form, a.late, a.straggler, a.schedule, bool(torch.equal(x, ref)))
    # the same from a Topology object, the family built up front
    from collsynth.synth.topology import cluster_topology

    sar = StragglerAwareAllReduce(topology=cluster_topology(2, G), cluster_params={"pipeline": 2}, prebuild=True,
                                  window=0.3, timeout=60)
    x = torch.arange(1003, dtype=torch.float32) * (rank + 1)
    dist.barrier()
    time.sleep(LATE if rank == 6 else 0.0)
    sar(x)
    out["prebuilt"] = (sar.last.form, sar.last.late, bool(torch.equal(x, torch.arange(1003.0) * 36)))
    # one NVLink domain: the broadcast form of the late GPU (at 64 MiB, what the family is built for)
    sar = StragglerAwareAllReduce(topology="dgx-h100", cluster_params={"size": 64 << 20}, window=0.3, timeout=60)
    x = torch.arange(1003, dtype=torch.float32) * (rank + 1)
    dist.barrier()
    time.sleep(LATE if rank == 2 else 0.0)
    sar(x)
    out["domain"] = (sar.last.form, sar.last.late, sar.last.straggler, sar.last.schedule,
                     bool(torch.equal(x, torch.arange(1003.0) * 36)))
    return out


@pytest.fixture(scope="module")
def results():
    return launch(world, N, timeout=240)


def test_late_gpu_and_late_node_forms_are_chosen_and_exact(results):
    expect = {"gpu": ("gpu", (5,), 5), "node": ("node", (4, 5, 6, 7), None), "node0": ("node", (0, 1, 2, 3), None)}
    for case, (form, late, straggler) in expect.items():
        got = [results[r][case] for r in range(N)]
        assert all(g[:3] == (form, late, straggler) for g in got), (case, got)
        assert len({g[3] for g in got}) == 1 and got[0][3].startswith(f"clusterstraggler_{form}_n8"), got
        assert all(g[4] for g in got), case  # exact: bit-identical to torch's all_reduce
    assert all(results[r]["prebuilt"] == ("gpu", (6,), True) for r in range(N)), [results[r]["prebuilt"]
                                                                                 for r in range(N)]
    assert all(results[r]["domain"] == ("domain", (2,), 2, "clusterstraggler_domain_n8_l2", True) for r in range(N)), \
        [results[r]["domain"] for r in range(N)]
    none = [results[r]["none"] for r in range(N)]
    assert len({g[:4] for g in none}) == 1 and all(g[4] for g in none)  # whatever was agreed, all agree


def test_cluster_arguments_are_checked():
    from collsynth.backends.torch.straggler import cluster_family
    from collsynth.synth.topology import make_topology

    assert cluster_family(8, None, None, None, None) is None
    fam = cluster_family(16, "h100-cluster", None, None, None)
    assert fam is not None and fam.gpus_per_node == 8 and len(fam.late_sets()) == 16 + 2
    one = cluster_family(8, make_topology("nvswitch", 8), None, None, None)  # one NVLink domain: each GPU alone
    assert one is not None and one.one_domain and len(one.late_sets()) == 8
    for args, msg in (((8, None, 3, None, None), "divides"), ((8, None, 8, None, None), "2 or more nodes"),
                      ((8, None, 4, None, {0: None}), "not both"),
                      ((8, make_topology("h100-cluster", 16), None, None, None), "16 GPUs"),
                      ((8, None, None, {"pipeline": 2}, None), "need topology"),
                      ((8, None, 4, {"ports": 2}, None), "not 'ports'")):
        with pytest.raises(CollsynthError, match=msg):
            cluster_family(*args)
