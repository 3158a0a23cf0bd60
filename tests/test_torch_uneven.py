"""Nodes of unequal size on real processes: StragglerAwareAllReduce on 8 gloo ranks treated as nodes of 5 and 3 GPUs
(a topology JSON) runs clusterstraggler's late-GPU form of the 2 x 3 core (2 blocks per part) with the two other
GPUs of the first node added around it (choose.unequal_nodes) when rank 1 is late, and the AllReduce is exact.

Correctness only (speed is not measurable on one host): integer-valued float32 data, so every summation order
gives the same bits as torch's own all_reduce.
"""

from __future__ import annotations

import pathlib
import tempfile
import time

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

from collsynth.backends.torch.launch import launch  # noqa: E402

N, SIZES, LATE = 8, (5, 3), 1.0


def topology_file() -> str:
    """Nodes of 5 and 3 GPUs (test_uneven_nodes.rail_cluster: an NVSwitch per node, NIC h on rail switch h)."""
    from test_uneven_nodes import rail_cluster

    return rail_cluster(pathlib.Path(tempfile.mkdtemp()), SIZES)[0]


def world(rank: int, n: int) -> dict:
    from collsynth.backends.torch.straggler import StragglerAwareAllReduce
    from collsynth.synth.topology import make_topology

    topo = make_topology(topology_file(), n)
    sar = StragglerAwareAllReduce(topology=topo, cluster_params={"pipeline": 2, "size": 4096}, window=0.3, timeout=60)
    out = {}
    for case, late in (("core", 1), ("extra", 4)):
        g = torch.Generator().manual_seed(7 * late + rank)
        x = torch.randint(-1000, 1000, (1003,), generator=g).float()
        ref = x.clone()
        dist.all_reduce(ref)
        dist.barrier()
        time.sleep(LATE if rank == late else 0.0)
        sar(x)
        a = sar.last
        out[case] = (a.form, a.late, a.schedule, bool(torch.equal(x, ref)))
    return out


@pytest.fixture(scope="module")
def results():
    return launch(world, N, timeout=240)


def test_a_late_core_gpu_runs_the_core_form_with_the_others_around_it_exactly(results):
    core = [results[r]["core"] for r in range(N)]
    assert all(c[:3] == ("gpu", (1,), "clusterstraggler_gpu_n8_l1") and c[3] for c in core), core
    extra = [results[r]["extra"] for r in range(N)]  # a late extra: what clusterstraggler finds there, all agree
    assert len({e[:3] for e in extra}) == 1 and all(e[3] for e in extra), extra
