"""The fan-out form of one late GPU on 2 G nodes of G GPUs (synth/algorithms/stragglar/fanout.py, issue 15 point 1)."""

from __future__ import annotations

import bisect

import pytest
from test_cluster_algorithms import cluster

from collsynth.synth.algorithms.layout import node_grid
from collsynth.synth.algorithms.stragglar import cluster_cost as cost
from collsynth.synth.algorithms.stragglar import fanout
from collsynth.synth.algorithms.stragglar.cluster import merged_plan, plan_schedule
from collsynth.synth.algorithms.stragglar.cluster_cost import make_runs
from collsynth.synth.arrivals import arrival_vector
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.verify import verify

GiB = 2**30


def fan_schedule(topo, n: int, late: int, size: float, M: int, mult: int = 2, uneven: bool = False, G: int = 8):
    """The fan-out form with M blocks per part and root rails r_p = mult p: one unit per block (equal parts, the
    rows of equal size) or, ``uneven``, as many units per block as the plan allows (cost.fan_blocks)."""
    times = arrival_vector({late: 0.05}, n)
    units, runs = cost.fan_blocks(G, M) if uneven else (M, make_runs(M, 1, M))
    plan = merged_plan(topo, n, times, size, units, runs, runs, [late], fan=mult)
    return plan_schedule(plan, "gpu", [late], topo, size), plan


def test_applies_on_2g_nodes_of_a_power_of_two():
    assert fanout.applies(16, 8) and fanout.applies(8, 4) and fanout.applies(32, 16) and fanout.applies(256, 128)
    for N, G in ((4, 2), (8, 8), (15, 8), (12, 6), (24, 12), (512, 256)):
        assert not fanout.applies(N, G), (N, G)
    # the work estimate counts what late_gpu_plan may build: the star form and, on 16 x 8, six multipliers
    h100 = (3.4e-6, 450e9, 14e-6, 50e9)
    assert cost.late_gpu_forms(16, 8, h100) == ["gpu", "fan"] and cost.late_gpu_builds(16, 8, h100) == 7
    assert cost.late_gpu_builds(8, 8, h100) == 1


@pytest.mark.parametrize("G", [4, 8, 16, 32, 64, 128])
def test_roots_and_classes_are_permutations(G):
    """The design needs both p -> a p (each part's root rail in node a) and p -> p xor a p (each X node's class)
    to be permutations, for every multiplier a the build tries: a complete mapping of GF(G)'s additive group."""
    assert [fanout.gmul(2, p, G) for p in range(G)] == [fanout.times_x(p, G) for p in range(G)]
    assert fanout.multipliers(G) == list(range(2, G))
    for a in fanout.multipliers(G):
        roots = [fanout.gmul(a, p, G) for p in range(G)]
        assert sorted(roots) == list(range(G)), a
        assert sorted(p ^ r for p, r in enumerate(roots)) == list(range(G)), a
    # multiplication is a field's: commutative, and x^k reduces by the irreducible polynomial (x^(k-1) x != 0)
    assert all(fanout.gmul(a, b, G) == fanout.gmul(b, a, G) for a in range(G) for b in range(min(G, 16)))
    assert fanout.times_x(G // 2, G) != 0


@pytest.mark.parametrize("N,G,late", [(8, 4, 0), (8, 4, 6), (8, 4, 31), (16, 8, 5), (16, 8, 64), (16, 8, 127)])
def test_verifies_and_every_nic_moves_one_block_per_row(N, G, late):
    """Every late-GPU position verifies (each chunk ends with every contribution once), and after the arrival no
    GPU sends or receives more than one network message per block row: the class design's promise."""
    n, M = N * G, 4
    topo = cluster(N, G)
    s, plan = fan_schedule(topo, n, late, 64 * 2**20, M, G=G)
    assert s.meta["fan"] and verify(s).ok
    node = plan.node
    sends: dict[tuple[int, int], int] = {}
    recvs: dict[tuple[int, int], int] = {}
    for src, dst, chunk, count in _after_arrival(plan, n):
        if node[src] != node[dst]:
            j = bisect.bisect_right(plan.fan_rows, chunk) - 1
            assert chunk + count <= plan.fan_rows[j + 1]
            sends[src, j] = sends.get((src, j), 0) + 1
            recvs[dst, j] = recvs.get((dst, j), 0) + 1
    assert max(sends.values()) == 1 and max(recvs.values()) == 1
    assert len(sends) >= (N - 1) * G * M  # every node but one forwards on (nearly) every NIC


def test_on_16_nodes_of_h100_it_meets_its_estimate_and_beats_the_star_form():
    """h100-cluster 16 x 8, 1 GiB, rank 5 late: the fan-out form with 28 blocks per part takes its estimate
    (the NVLink front, the root's blocks, two more hops, the relay and the last row's doubling: 3.521 ms) and
    beats the star form's 3.589 ms at the same count (blocks + 3 hypercube rounds)."""
    from collsynth.synth.topology import make_topology

    t = make_topology("h100-cluster", 128)
    s, _ = fan_schedule(t, 128, 5, GiB, 28)
    after = simulate(s, GiB, t, {5: 0.05}).after_last_arrival_s
    model = cost.link_model(t, node_grid(t, 128))
    assert after == pytest.approx(fanout.estimate(8, make_runs(28, 1, 28), GiB, model, uneven=False), rel=0.002)
    times = arrival_vector({5: 0.05}, 128)
    star = plan_schedule(merged_plan(t, 128, times, GiB, 28, make_runs(28, 1, 28), make_runs(28, 1, 28), [5]),
                         "gpu", [5], t, GiB)
    assert after < simulate(star, GiB, t, {5: 0.05}).after_last_arrival_s - 50e-6


def test_built_only_where_it_is_faster():
    """On 8 nodes of 4 GPUs the fan-out form is slower than the star form (its relay and doubling take a larger
    share of each row there), and clusterstraggler keeps the star form: the candidates are simulated."""
    topo = cluster(8, 4)
    late = {6: 0.05}
    s = build_schedule("clusterstraggler", 32, arrivals=late, size=GiB, topology=topo)
    fan, _ = fan_schedule(topo, 32, 6, GiB, s.meta["pipeline"], uneven=True, G=4)
    ours = simulate(s, GiB, topo, late).after_last_arrival_s
    assert not s.meta["fan"] and verify(s).ok and ours < simulate(fan, GiB, topo, late).after_last_arrival_s


def _after_arrival(plan, n: int):
    """(src, dst, chunk, count) of the plan's moves after the arrival (those the model starts at 50 ms or later)."""
    return [m[:4] for atom, t in zip(plan.atoms, plan.est) if t >= 0.05 for m in atom]


def test_nvlink_messages_per_row_and_the_return_of_ls_own_part():
    """16 x 8, 4 blocks per part, rank 5 late. The G - 1 Y nodes gather every row by plain recursive doubling:
    G log2 G = 24 NVLink messages a row (the X nodes add their relay and, in early rows, one-part messages).
    L's own part goes back to node a's other GPUs over the network (the Y nodes' free NIC sends) in every row but
    the last, which L itself spreads over NVLink."""
    n, G, M, late = 128, 8, 4, 5
    topo = cluster(16, G)
    _, plan = fan_schedule(topo, n, late, 64 * 2**20, M)
    node = plan.node
    per = {}
    for src, dst, chunk, _ in _after_arrival(plan, n):
        if node[src] == node[dst]:
            j = bisect.bisect_right(plan.fan_rows, chunk) - 1
            per[node[dst], j] = per.get((node[dst], j), 0) + 1
    doubling_only = [b for b in range(1, 16) if all(per.get((b, j)) == G * 3 for j in range(M))]
    assert len(doubling_only) == G - 1
    own = [fanout.times_x(p, G) for p in range(G)].index(late % G)
    moves = _after_arrival(plan, n)
    firsts = sorted(c for src, _, c, _ in moves if src == late)  # L's raw sends: every part's block of every row
    own_first = sorted(c for src, dst, c, _ in moves if src == late and node[dst] != 0)  # the one over L's NIC
    assert len(own_first) == M and firsts.index(own_first[0]) == own  # row 0's blocks lie in part order
    for j in range(M):
        first = own_first[j]
        into_a = [(src, dst) for src, dst, c, _ in _after_arrival(plan, n)
                  if c == first and node[dst] == 0 and dst != late]
        assert len(into_a) == G - 1  # every other GPU of node a gets it once
        assert all((node[src] == 0) == (j == M - 1) for src, _ in into_a), j


def test_uneven_parts_end_the_roots_chains_together():
    """16 x 8 h100-cluster, 1 GiB, rank 5 late, 28 blocks of 18 units: the roots L serves later carry fewer units
    (``skew_share`` per place in L's NVLink order), so the rail chains end together and the form ends sooner than
    with equal parts (3.521 ms); every row still verifies."""
    from collsynth.synth.topology import make_topology

    t = make_topology("h100-cluster", 128)
    s, plan = fan_schedule(t, 128, 5, GiB, 28, mult=2, uneven=True)
    assert verify(s).ok and plan.M == 28 * 18
    sizes = {m[3] for atom, e in zip(plan.atoms, plan.est) if e >= 0.05 for m in atom
             if plan.node[m[0]] == 0 and plan.node[m[1]] != 0 and m[0] != 5}  # the roots' sends (not L's own part)
    assert len(sizes) > 1  # uneven parts
    after = simulate(s, GiB, t, {5: 0.05}).after_last_arrival_s
    equal, _ = fan_schedule(t, 128, 5, GiB, 28, mult=2)
    assert after < simulate(equal, GiB, t, {5: 0.05}).after_last_arrival_s - 20e-6
