"""synth.algorithms.stragglar.family.ClusterFamily (issue 15 point 5): one verified clusterstraggler schedule
per late GPU and per late node, built lazily and cached, or all up front."""

from __future__ import annotations

from collsynth.synth.algorithms.stragglar.cluster import auto_pipeline
from collsynth.synth.algorithms.stragglar.family import ClusterFamily
from collsynth.synth.topology import cluster_topology, make_topology
from collsynth.synth.verify import verify


def test_every_member_is_verified_and_has_the_form_of_its_late_set():
    fam = ClusterFamily(cluster_topology(2, 4), pipeline=2)
    assert fam.late_sets() == [frozenset((r,)) for r in range(8)] + [frozenset(range(4)), frozenset(range(4, 8))]
    lazy = fam.get([5])
    assert lazy is not None and fam.get((5,)) is lazy  # built once, then cached
    members = fam.build_all()
    assert members[frozenset((5,))] is lazy and len(members) == 10
    for late, s in members.items():
        assert verify(s).ok
        assert s.meta["form"] == ("gpu" if len(late) == 1 else "node") and set(s.meta["late"]) == late
        # the late ranks take no part before the punctual ranks' phase is over
        first = s.phases[0]
        assert late.isdisjoint(first.waits_for) and set(first.waits_for) | late == set(range(8))
    assert len({s.name for s in members.values()}) == 10
    assert fam.get([4, 5]) is None and fam.get([]) is None and fam.get([8]) is None


def test_default_pipeline_builds_the_late_forms():
    """Without a pipeline the family still holds the late-GPU and late-node forms (clusterstraggler's auto entry
    point may return the synchronous schedule, which no late set can run as its own form), with auto's M."""
    topo = cluster_topology(2, 4)
    fam = ClusterFamily(topo)
    gpu, node = fam.get([5]), fam.get([4, 5, 6, 7])
    assert gpu.meta["form"] == "gpu" and gpu.meta["late"] == [5]
    assert node.meta["form"] == "node" and node.meta["late"] == [4, 5, 6, 7]
    assert gpu.meta["pipeline"] == auto_pipeline(8, topo, "gpu") and node.meta["pipeline"] == auto_pipeline(8, topo,
                                                                                                             "node")


def test_one_nvlink_domain_serves_each_gpu_with_the_fastest_form_there():
    """Without nodes (dgx-h100, nvswitch) each late GPU gets what clusterstraggler returns for it: the broadcast
    form at 64 MiB, the synchronous twoshot at 1 MiB on nvswitch, multistraggler's flat form at 1 GiB."""
    mib = 1 << 20
    fam = ClusterFamily(make_topology("dgx-h100", 8), size=64 * mib)
    assert fam.one_domain and fam.late_sets() == [frozenset((r,)) for r in range(8)]
    s = fam.get([3])
    assert s is not None and fam.get((3,)) is s and verify(s).ok
    assert fam.form_of(s) == "domain" and s.meta["late"] == [3] and s.name == "clusterstraggler_domain_n8_l3"
    assert 3 not in s.phases[0].waits_for  # the others start without it
    for size, form, name in ((mib, "synchronous", "twoshot_allreduce_n8"), (1 << 30, "multistraggler",
                                                                             "multistraggler_n8_l1_s6")):
        s = ClusterFamily(make_topology("nvswitch", 8), size=size).get([6])
        assert s is not None and verify(s).ok and (ClusterFamily.form_of(s), s.name) == (form, name)
