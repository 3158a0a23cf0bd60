"""synth.algorithms.stragglar.family.ClusterFamily (issue 15 point 5): one verified clusterstraggler schedule
per late GPU and per late node, built lazily and cached, or all up front."""

from __future__ import annotations

from collsynth.synth.algorithms.stragglar.cluster import auto_pipeline
from collsynth.synth.algorithms.stragglar.family import ClusterFamily, write_cluster_family
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


def test_written_family_is_every_member_verified_with_its_manifest(tmp_path):
    """write_cluster_family: late_{ranks}.json per late set (each GPU, each node) and manifest.json, every file
    verifying with the hash the manifest names; the same inputs give the same bytes; the CLI writes it."""
    import hashlib
    import json

    from collsynth.cli import main
    from collsynth.synth.ir import load_schedule

    topo = cluster_topology(2, 4)
    out = tmp_path / "fam"
    manifest = write_cluster_family(topo, str(out), pipeline=2)
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted([f"late_{r}.json" for r in range(8)] + ["late_0-3.json", "late_4-7.json", "manifest.json"])
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert manifest["n"] == 8 and manifest["gpus_per_node"] == 4 and manifest["topology"] == topo.spec
    for e in manifest["schedules"]:
        text = (out / e["file"]).read_text()
        assert hashlib.sha256(text.encode()).hexdigest() == e["sha256"]
        s = load_schedule(str(out / e["file"]))
        assert verify(s).ok and s.name == e["name"] and sorted(s.meta["late"]) == e["late"]
        assert e["form"] == ("gpu" if len(e["late"]) == 1 else "node")
    mib64 = 64 << 20  # the CLI on a preset gives what the library gives
    lib = write_cluster_family(make_topology("h100-cluster", 16), str(tmp_path / "lib"), size=mib64)
    assert main(["synth", "-a", "clusterstraggler", "-n", "16", "-t", "h100-cluster", "--size", "64MiB",
                 "--straggler", "all", "-o", str(tmp_path / "cli")]) == 0
    assert len(lib["schedules"]) == 16 + 2
    for name in sorted(p.name for p in (tmp_path / "lib").iterdir()):
        assert (tmp_path / "cli" / name).read_bytes() == (tmp_path / "lib" / name).read_bytes(), name
