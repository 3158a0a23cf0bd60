"""The hierarchical AllReduce on nodes of unequal size (synth/algorithms/uneven.py): the composition on the
core grid with the extra GPUs folded in slice by slice."""

from __future__ import annotations

import json

import numpy as np
import pytest

import collsynth as cs
from collsynth.cli import main
from collsynth.synth.algorithms.uneven import core_and_extras

GiB = 2**30


def rail_cluster(tmp_path, sizes):
    """A topology JSON of nodes of the given sizes: an NVSwitch per node (450 GB/s, 3.4 us), NIC h of every node
    on rail switch h (50 GB/s, 14 us), the rails on a spine."""
    links, nodes, r = [], [], 0
    for b, g in enumerate(sizes):
        nodes.append(list(range(r, r + g)))
        for h in range(g):
            links.append({"src": r + h, "dst": f"n{b}", "class": "nvlink", "alpha": 3.4e-6, "bandwidth": 450e9})
            links.append({"src": r + h, "dst": f"rail{h}", "class": "net", "alpha": 14e-6, "bandwidth": 50e9})
        r += g
    links += [{"src": f"rail{h}", "dst": "spine", "class": "net", "alpha": 0.0, "bandwidth": 1e12}
              for h in range(max(sizes))]
    d = {"name": "uneven", "gpus": r, "ports": {"nvlink": 1, "net": 1}, "nodes": nodes, "fabric": "rail",
         "switches": [f"n{b}" for b in range(len(sizes))] + [f"rail{h}" for h in range(max(sizes))] + ["spine"],
         "links": links}
    path = tmp_path / f"uneven-{len(sizes)}-nodes-{r}-gpus.json"
    path.write_text(json.dumps(d))
    return str(path), r


@pytest.mark.parametrize("sizes", [(8, 7), (8, 8, 8, 7), (16, 8), (12, 4), (2, 3)])
def test_unequal_nodes_get_a_verified_hierarchical_schedule_far_faster_than_ring(tmp_path, sizes):
    path, n = rail_cluster(tmp_path, sizes)
    t = cs.make_topology(path, n)
    s = cs.build_schedule("hierarchical", n, topology=t, size=GiB)
    assert cs.verify(s).ok
    core, extras = core_and_extras(t, n)
    assert core.shape == (len(sizes), min(sizes)) and len(extras) == n - core.size == s.meta["extras"]
    ours = cs.simulate(s, GiB, t).completion_s
    ring = cs.simulate(cs.build_schedule("ring", n, topology=t), GiB, t).completion_s
    assert ours < ring / 2 or n < 8  # before: a flat ring over every GPU's NIC (8 + 7 GPUs: 40.9 ms, now 8.7)
    again = cs.build_schedule("hierarchical", n, topology=t, size=GiB)
    assert again.to_json() == s.to_json()  # deterministic


def test_every_added_move_is_needed(tmp_path):
    """Dropping an extra's sends or receives (its folds and copies back, or its hops of the ring form, which
    8 + 7 GPUs take) leaves a rank without every contribution: the verifier says so."""
    path, n = rail_cluster(tmp_path, (8, 7))
    t = cs.make_topology(path, n)
    s = cs.build_schedule("hierarchical", n, topology=t, size=GiB)
    extra = int(core_and_extras(t, n)[1][0][0])
    for keep in (s.src != extra, s.dst != extra):  # its folds, its copies back
        cut = cs.Schedule.from_arrays("allreduce", n, s.nchunks, step=s.step[keep], src=s.src[keep],
                                      dst=s.dst[keep], chunk=s.chunk[keep], count=s.count[keep],
                                      reduce=s.reduce[keep], nsteps=s.nsteps, ports=s.ports)
        assert not cs.verify(cut).ok


def test_equal_nodes_and_one_gpu_nodes_keep_their_forms(tmp_path):
    for sizes in [(8, 8), (8, 1)]:
        path, n = rail_cluster(tmp_path, sizes)
        assert core_and_extras(cs.make_topology(path, n), n) is None
    assert core_and_extras(cs.make_topology("h100-cluster", 16), 16) is None
    assert core_and_extras(None, 8) is None


def test_compare_ranks_it_first_on_a_cluster_with_a_drained_gpu(tmp_path, capsys):
    path, n = rail_cluster(tmp_path, (8, 8, 8, 7))
    assert main(["compare", "--gpus", str(n), "-t", path, "--size", "1GiB", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[0]["algorithm"] == "hierarchical"
    ring = next(r for r in rows if r["algorithm"] == "ring")
    assert rows[0]["after_last_arrival_s"] < ring["after_last_arrival_s"] / 4
    assert np.isfinite(rows[0]["x_bound"]) and rows[0]["x_bound"] >= 1


@pytest.mark.parametrize("pieces", [True, False])
@pytest.mark.parametrize("sizes", [(4, 3), (3, 3, 7)])
def test_both_fold_forms_complete_any_allreduce_of_the_core(tmp_path, sizes, pieces):
    """with_extras adds the extras to any AllReduce of the core ranks (here a ring, one slice): block by block
    spread over the core GPUs, or whole slices into one partner; several extras per node take rounds."""
    from collsynth.synth.algorithms.uneven import with_extras
    path, n = rail_cluster(tmp_path, sizes)
    core, extras = core_and_extras(cs.make_topology(path, n), n)
    base = cs.build_schedule("ring", core.size)
    s = with_extras(base, n, core, extras, [0, base.nchunks], {}, pieces)
    assert cs.verify(s).ok and s.nranks == n
    assert s.ntransfers == base.ntransfers + 2 * len(extras) * (core.shape[1] if pieces else 1)


@pytest.mark.parametrize("sizes", [(8, 7), (8, 8, 8, 7)])
def test_one_extra_per_node_takes_the_ring_form_close_to_the_core_alone(tmp_path, sizes):
    """A drained GPU: the ring form (every node's ring through its extra) is kept, its list-scheduling model is
    the simulator's time, and it costs little over the N x 7 cluster without the extras (the fold forms: 1.55x
    and 1.37x)."""
    path, n = rail_cluster(tmp_path, sizes)
    t = cs.make_topology(path, n)
    s = cs.build_schedule("hierarchical", n, topology=t, size=GiB)
    assert s.meta["form"] == "ring" and cs.verify(s, topology=t).ok
    ours = cs.simulate(s, GiB, t).completion_s
    assert ours == pytest.approx(s.meta["model_s"], rel=0.01)
    path7, n7 = rail_cluster(tmp_path, (7,) * len(sizes))
    t7 = cs.make_topology(path7, n7)
    alone = cs.simulate(cs.build_schedule("hierarchical", n7, topology=t7, size=GiB), GiB, t7).completion_s
    assert alone < ours < 1.2 * alone


@pytest.mark.parametrize("kind", ["ring", "rhd", "tree", "radix"])
@pytest.mark.parametrize("sizes", [(4, 3), (3, 3, 7), (2, 3, 2, 2, 4, 2), (2, 6, 3, 4)])
def test_the_ring_form_completes_with_every_rail_allreduce(tmp_path, sizes, kind):
    """with_ring on nodes with 0 to 5 extras (nodes of 2 and 3 times G_min: their blocks in parts, regrouped),
    any rail AllReduce of the composition, ramped slices."""
    from collsynth.synth.algorithms.hierarchical import link_model
    from collsynth.synth.algorithms.uneven import node_rings, with_ring
    from collsynth.synth.composition import inter_steps
    path, n = rail_cluster(tmp_path, sizes)
    t = cs.make_topology(path, n)
    core, extras = core_and_extras(t, n)
    local = list(range(core.shape[1]))[::-1]  # any ring order of the core
    s = with_ring(n, core, local, extras, [1, 2, 1], kind, link_model(t, core), float(GiB), {})
    assert cs.verify(s, topology=t).ok and s.nranks == n
    assert set(s.src.tolist()) == set(range(n))  # every extra sends (it relays its node's blocks)
    # what hierarchical's memory estimate counts: NodeRings.transfers, the node phases' transfers per slice
    # exactly, and at most every core GPU sending in every rail step
    N, G = core.shape
    node = np.repeat(np.arange(len(sizes)), sizes)
    inside = int(np.sum(node[s.src] == node[s.dst]))
    assert inside == 3 * node_rings(core, local, extras).transfers()
    assert s.ntransfers - inside <= 3 * N * G * len(inter_steps(kind, N)[1])


def test_nodes_of_several_g_min_cut_blocks_into_parts(tmp_path):
    """16 + 8 and 12 + 4: a node of k G_min GPUs rings blocks of 1/k parts and regroups them (before: every GPU of
    the large node moved 15/8 or 11/4 s over NVLink per phase, 9.2 and 12.9 ms in the simulator)."""
    from collsynth.synth.algorithms.layout import intra_order
    from collsynth.synth.algorithms.uneven import node_rings
    for sizes, k in (((16, 8), 2), ((12, 4), 3)):
        path, n = rail_cluster(tmp_path, sizes)
        t = cs.make_topology(path, n)
        core, extras = core_and_extras(t, n)
        nr = node_rings(core, intra_order(t, core), extras)
        assert nr.split == k and len(nr.rounds) == k - 1
        assert sorted(p for p in nr.own[0]) == sorted((q, j, k) for q in range(core.shape[1]) for j in range(k))
        s = cs.build_schedule("hierarchical", n, topology=t, size=GiB)
        assert s.meta["form"] == "ring" and cs.verify(s, topology=t).ok
        assert cs.simulate(s, GiB, t).completion_s < 0.85 * (9.165e-3 if k == 2 else 12.909e-3)


def test_restricted_keeps_the_chosen_gpus_their_nodes_and_links(tmp_path):
    from collsynth.errors import CollsynthError
    from collsynth.synth.topology.restrict import restricted
    path, n = rail_cluster(tmp_path, (8, 7))
    t = cs.make_topology(path, n)
    keep = [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14]  # drop GPU 7
    sub = restricted(t, keep[::-1])
    assert sub.nranks == 14 and sub.node_of.tolist() == [0] * 7 + [1] * 7
    assert sub.local_index.tolist() == list(range(7)) * 2 and sub.switches == t.switches
    assert len(sub.link_alpha) == len(t.link_alpha) - 4  # GPU 7's NVLink and NIC, both ways
    assert sub.class_ports == t.class_ports
    # the same routes among the GPUs kept: GPU 8 (new 7) over rail 0 from GPU 0
    assert [sub.link_name(x) for x in sub.path_links(0, 7)] == ["0->rail0", "rail0->7"]
    with pytest.raises(CollsynthError, match="not distinct GPUs"):
        restricted(t, [0, 0, 1])
    with pytest.raises(CollsynthError, match="not distinct GPUs"):
        restricted(t, [0, 15])


@pytest.mark.parametrize("direct", [0, 1, 2])
@pytest.mark.parametrize("sizes", [(4, 3), (3, 3, 7)])
def test_around_adds_the_extras_to_any_allreduce_of_the_core(tmp_path, sizes, direct):
    """uneven.around: folds before the first read (never into a late core GPU), copies after the final write, the
    extras beyond ``direct`` relayed through the others (chains); dropping folds or copies leaves a rank short of
    a contribution."""
    from collsynth.synth.algorithms.uneven import around
    path, n = rail_cluster(tmp_path, sizes)
    core, extras = core_and_extras(cs.make_topology(path, n), n)
    base = cs.build_schedule("ring", core.size)
    punctual = np.ones(n, bool)
    punctual[core[0, 0]] = False
    s = around(base, n, core, extras, punctual, {}, direct=direct)
    assert cs.verify(s).ok and s.nranks == n and s.nchunks == base.nchunks
    xs = [x for x, _, _ in extras]
    folds = np.isin(s.src, xs) & s.reduce
    assert not np.any(s.dst[folds] == core[0, 0])
    copies = np.isin(s.dst, xs) & ~s.reduce
    assert np.all(np.isin(s.dst[np.isin(s.dst, xs)], xs))
    relayed = any(direct and i >= direct for _, _, i in extras)  # some extra deals with another extra
    assert np.any(copies & np.isin(s.src, xs)) == relayed and np.any(folds & np.isin(s.dst, xs)) == relayed
    for keep in (~folds, ~copies):
        cut = cs.Schedule.from_arrays("allreduce", n, s.nchunks, step=s.step[keep], src=s.src[keep],
                                      dst=s.dst[keep], chunk=s.chunk[keep], count=s.count[keep],
                                      reduce=s.reduce[keep], nsteps=s.nsteps, ports=s.ports)
        assert not cs.verify(cut).ok


def test_one_late_gpu_on_unequal_nodes_gets_the_late_gpu_form_of_the_core(tmp_path, capsys):
    """8, 8, 8 and 7 GPUs, rank 5 late by 10 ms: clusterstraggler builds the late-GPU form on the 4 x 7 core and adds
    the three eighth GPUs around it, verified, faster after the arrival than waiting for hierarchical; compare
    shows it; a late eighth GPU (an extra) falls back to the fastest synchronous schedule."""
    path, n = rail_cluster(tmp_path, (8, 8, 8, 7))
    t = cs.make_topology(path, n)
    arr = {5: 0.010}
    s = cs.build_schedule("clusterstraggler", n, topology=t, arrivals=arr, size=GiB)
    assert s.meta["form"] == "gpu" and s.meta["late"] == [5] and s.meta["extras"] == 3
    assert s.name == f"clusterstraggler_gpu_n{n}_l5" and cs.verify(s, topology=t).ok
    ours = cs.simulate(s, GiB, t, arr).after_last_arrival_s
    hier = cs.simulate(cs.build_schedule("hierarchical", n, topology=t, size=GiB), GiB, t, arr).after_last_arrival_s
    assert ours < 0.9 * hier
    assert cs.build_schedule("clusterstraggler", n, topology=t, arrivals=arr, size=GiB).to_json() == s.to_json()
    assert main(["compare", "--gpus", str(n), "-t", path, "--size", "1GiB", "--arrival", "5=10ms", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[0]["algorithm"] == "clusterstraggler" and "gpu form" in rows[0]["note"]
    late_extra = cs.build_schedule("clusterstraggler", n, topology=t, arrivals={7: 0.010}, size=GiB)
    assert late_extra.meta.get("form") != "gpu"
    two = cs.build_schedule("clusterstraggler", n, topology=t, arrivals=arr, size=GiB, pipeline=2)  # the form itself
    assert two.meta["form"] == "gpu" and two.meta["pipeline"] == 2 and cs.verify(two, topology=t).ok


def test_the_domain_form_on_a_row_of_unequal_nodes_counts_a_port_per_link_class(tmp_path):
    """5 + 8 GPUs, rank 8 the last of three late ranks, 1 MiB: the core's late-GPU form does not win, so
    clusterstraggler falls back to one row of GPUs and the broadcast form, whose moves use the NVLink and the rail
    class; it sent an NVLink and a rail message in one step under ports 1 (the verifier refused it)."""
    path, n = rail_cluster(tmp_path, (5, 8))
    t = cs.make_topology(path, n)
    arr = {8: 0.05, 2: 0.002, 12: 0.01}
    s = cs.build_schedule("clusterstraggler", n, topology=t, arrivals=arr, size=1 << 20)
    assert s.meta["form"] == "domain" and s.ports == 2
    assert cs.verify(s).ok and cs.verify(s, topology=t).ok
    one = cs.build_schedule("clusterstraggler", 72, topology="gb200-nvl72", arrivals={8: 0.05}, size=1 << 20)
    assert one.meta["form"] == "domain" and one.ports == 1 and cs.verify(one).ok  # one class: one port


def test_several_late_gpus_and_a_late_node_on_unequal_nodes_take_the_cores_forms(tmp_path):
    """Two late GPUs on 8 + 7 (the funnel form of the core) and the 7-GPU node of seven 8s and a 7 (the late-node
    form of the core, the eighth GPUs of the other nodes around it): verified, faster after the last arrival than
    waiting; a node whose core GPUs are all late while its eighth is not has none to fold into: another form."""
    from collsynth.synth.algorithms import synchronous
    for sizes, arr, form in (((8, 7), {5: 0.010, 12: 0.004}, "funnel"),
                             ((8,) * 7 + (7,), {r: 0.020 for r in range(56, 63)}, "node")):
        path, n = rail_cluster(tmp_path, sizes)
        t = cs.make_topology(path, n)
        s = cs.build_schedule("clusterstraggler", n, topology=t, arrivals=arr, size=GiB)
        assert s.meta["form"] == form and s.meta["late"] == sorted(arr) and cs.verify(s, topology=t).ok
        assert s.name == f"clusterstraggler_{form}_n{n}_" + ("node7" if form == "node" else "l5")
        times = np.array([arr.get(r, 0.0) for r in range(n)])
        ours = cs.simulate(s, GiB, t, arr).completion_s
        assert ours < synchronous.fastest(n, t, GiB, times).completion_s
    path, n = rail_cluster(tmp_path, (8, 7))
    t = cs.make_topology(path, n)
    s = cs.build_schedule("clusterstraggler", n, topology=t, arrivals={r: 0.01 for r in range(7)}, size=GiB)
    assert s.meta.get("form") not in ("gpu", "node", "waves", "funnel") or "extras" not in s.meta
    assert cs.verify(s).ok


def test_many_extras_next_to_the_late_gpu_go_through_a_chain(tmp_path):
    """16 + 8 GPUs, rank 5 late by 10 ms: the eight extras of the late GPU's node fold and get their copies through
    one chain (each reduces into the one before, the first into the core), so the core GPUs serve one extra:
    the late-GPU form of the 2 x 8 core beats waiting (6.2 ms; the extras all served by the core took 6.5)."""
    from collsynth.synth.algorithms import synchronous
    from collsynth.synth.algorithms.uneven import packed
    path, n = rail_cluster(tmp_path, (16, 8))
    t = cs.make_topology(path, n)
    arr = {5: 0.010}
    s = cs.build_schedule("clusterstraggler", n, topology=t, arrivals=arr, size=GiB)
    assert s.meta["form"] == "gpu" and s.meta["extras"] == 8 and cs.verify(s, topology=t).ok
    relays = np.isin(s.src, range(8, 16)) & np.isin(s.dst, range(8, 16))
    assert relays.any()  # extras send to extras
    times = np.array([arr.get(r, 0.0) for r in range(n)])
    waiting = synchronous.fastest(n, t, GiB, times).completion_s - 0.010
    assert cs.simulate(s, GiB, t, arr).after_last_arrival_s < 0.8 * waiting
    # a relay forwards only in a step after it received: 1 -> 2 after 0 -> 1, though the ports would allow one step
    assert packed([(0, 1, 0, 1, False), (1, 2, 0, 1, False), (3, 4, 0, 1, False)]) == [
        [(0, 1, 0, 1, False), (3, 4, 0, 1, False)], [(1, 2, 0, 1, False)]]


def test_the_last_rank_alone_on_nodes_of_two_gpus_gets_the_late_gpu_form(tmp_path):
    """choose.last_alone (several late ranks, the last one long after the others) needs nodes of at least two
    GPUs, not more: 4 nodes of 2 (a topology file), rank 2 a microsecond late and rank 5 far behind."""
    from collsynth.synth.algorithms.stragglar import choose, funnel
    path, n = rail_cluster(tmp_path, (2, 2, 2, 2))
    t = cs.make_topology(path, n)
    times = np.zeros(n)
    times[2], times[5] = 1e-6, 3 * choose.GPU_FORM_GAP_T * funnel.rail_time(t, n, 2**26)
    s = choose.last_alone(n, times, 2**26, t)
    assert s is not None and s.meta["form"] == "gpu" and s.meta["late"] == [5] and cs.verify(s, topology=t).ok
    assert s.meta["present_late"] == [[2, 1e-6]]
