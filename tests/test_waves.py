"""clusterstraggler's waves form (issue 15, point 3): several late ranks with any arrival times on a cluster.

Clusters as in tests/test_cluster_algorithms.py; every schedule is verified and simulated. Times are model
results, checked against the bounds of the brief's clusters.md section 4 and the synchronous schedules."""

from __future__ import annotations

import numpy as np
import pytest
from test_cluster_algorithms import cluster

from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.stragglar import waves
from collsynth.synth.compare import compare, late_ranks_text
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.trees import inorder_edges
from collsynth.synth.verify import verify

GiB = 2**30


@pytest.mark.parametrize("N,G,seed", [(2, 4, 0), (3, 3, 1), (4, 4, 2), (2, 2, 3), (4, 2, 4)])
@pytest.mark.parametrize("M,tree", [(3, False), (4, True)])
def test_random_arrivals_verify(N, G, seed, M, tree):
    rng = np.random.default_rng(seed)
    n = N * G
    t = cluster(N, G)
    for _ in range(3):
        ranks = rng.choice(n, size=int(rng.integers(2, n)), replace=False)
        arr = {int(r): float(rng.uniform(0, 0.01)) for r in ranks}
        for cutoff in (None, float(np.median(list(arr.values())))):
            s = waves.construct(n, arr, GiB, t, M, 1, tree, cutoff)
            r = verify(s)
            assert r.ok, (arr, cutoff, r.message)
            assert s.ports == 2 and s.meta["form"] == "waves"


def test_two_late_ranks_in_two_nodes_cost_about_one_late_rank():
    """Two late GPUs in two nodes at once, long after the others: one wave (the first collector's sum goes
    along the rail into the second, which sends the wave's sum on), merged in about the time of one late
    GPU (every node receives the final sum once), well under the synchronous schedule."""
    N, G = 4, 4
    t = cluster(N, G)
    n = N * G
    one = {1: 0.05}
    two = {1: 0.05, 6: 0.05}
    a1 = simulate(build_schedule("clusterstraggler", n, arrivals=one, size=GiB, topology=t), GiB, t,
                  one).after_last_arrival_s
    s2 = build_schedule("clusterstraggler", n, arrivals=two, size=GiB, topology=t)
    assert verify(s2).ok and s2.meta["form"] in ("waves", "funnel")  # (the funnel with a muted leaf: faster)
    a2 = simulate(s2, GiB, t, two).after_last_arrival_s
    one_wave = waves.construct(n, two, GiB, t, 16, 1, False)
    assert verify(one_wave).ok and a2 <= simulate(one_wave, GiB, t, two).after_last_arrival_s * (1 + 1e-12)
    hier = simulate(build_schedule("hierarchical", n, size=GiB, topology=t), GiB, t, two).after_last_arrival_s
    assert a2 < 0.8 * hier
    assert a2 < 1.25 * a1


def test_never_slower_than_hierarchical():
    """Three late GPUs in three nodes at once: the middle node of the rail chain receives twice, so the
    synchronous schedule is as fast; the form chosen is never slower than it."""
    t = cluster(4, 4)
    three = {1: 0.05, 6: 0.05, 11: 0.05}
    s = build_schedule("clusterstraggler", 16, arrivals=three, size=GiB, topology=t)
    assert verify(s).ok and s.meta["form"] in ("waves", "funnel", "synchronous")
    ours = simulate(s, GiB, t, three).after_last_arrival_s
    hier = simulate(build_schedule("hierarchical", 16, size=GiB, topology=t), GiB, t, three).after_last_arrival_s
    assert ours <= hier * (1 + 1e-9)


def test_spread_arrivals_beat_waiting_for_everyone():
    """Late ranks spread over time: each is merged as it arrives, so after the last arrival less remains than a
    synchronous AllReduce started then."""
    t = cluster(4, 4)
    arr = {2: 0.02, 7: 0.03, 13: 0.04}
    s = build_schedule("clusterstraggler", 16, arrivals=arr, size=GiB, topology=t)
    assert verify(s).ok and s.meta["form"] in ("waves", "funnel")
    ours = simulate(s, GiB, t, arr).after_last_arrival_s
    hier = simulate(build_schedule("hierarchical", 16, size=GiB, topology=t), GiB, t, arr).after_last_arrival_s
    assert ours < hier


def test_deterministic_and_compare_row():
    t = cluster(2, 4)
    arr = {1: 0.004, 6: 0.009}
    a = build_schedule("clusterstraggler", 8, arrivals=arr, size=GiB, topology=t)
    b = build_schedule("clusterstraggler", 8, arrivals=arr, size=GiB, topology=t)
    assert a.to_json() == b.to_json()
    rows = {r["algorithm"]: r for r in compare(8, GiB, t, arr)}
    assert "clusterstraggler" in rows and rows["clusterstraggler"]["x_bound"] >= 1 - 1e-9
    assert rows["clusterstraggler"]["note"].startswith("synchronous (hierarchical: waiting is faster)")
    arr = {5: 0.004, 12: 0.009}
    row = compare(16, GiB, "h100-cluster", arr, algorithms=["clusterstraggler", "ring"])[0]
    assert row["note"].startswith("funnel form, late 5 (4.000 ms), 12 (9.000 ms) K="), row  # form, who, when


def test_late_ranks_text_groups_ranks_that_arrive_together():
    whole = [[r, 0.01] for r in range(8, 16)]
    assert late_ranks_text(whole, {}) == "8-15 (10.000 ms)"
    assert late_ranks_text([5, 9], {5: 0.004}) == "5 (4.000 ms), 9"  # ranks only: times from the arrivals
    assert late_ranks_text(3, {3: 2e-6}) == "3 (2.000 us)"
    many = late_ranks_text([[r, r * 1e-3] for r in range(1, 20, 2)], {})
    assert many.count(" ms)") == 6 and many.endswith(", ... (10 late)")


def test_tree_edges_cover_every_receiver_once():
    for R in range(1, 12):
        for mirror in (False, True):
            e = inorder_edges(R, mirror)
            assert sorted(c for _, c in e) == list(range(R))
            seen = {-1}
            for p, c in e:  # parents come before their children
                assert p in seen
                seen.add(c)


def test_bad_pipeline():
    t = cluster(2, 4)
    with pytest.raises(CollsynthError, match="pipeline"):
        build_schedule("clusterstraggler", 8, arrivals={1: 0.1, 2: 0.2}, size=GiB, topology=t, pipeline=0)
