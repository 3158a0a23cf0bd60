"""clusterstraggler's funnel form (issue 15, point 3): reduce toward the last rank's node, then broadcast.

Every schedule is verified (each contribution exactly once, the per-class ports of the topology) and
simulated; arrival patterns: random, late ranks in one node, in the last rank's node, the last two equal,
one late rank; on synthetic clusters, both cluster presets (rail and fat-tree) and a topology JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_cluster_algorithms import cluster

from collsynth.cli import main as cli_main
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.stragglar import funnel
from collsynth.synth.algorithms.stragglar.bcast import muted_cube_rounds
from collsynth.synth.registry import build_schedule
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import make_topology
from collsynth.synth.trees import heap_two_trees
from collsynth.synth.verify import verify

GiB = 2**30


def _check(n, arr, t, M, trees, fan=1, pxn=True, tail=True):
    s = funnel.construct(n, arr, GiB, t, M, fan, trees, pxn, tail)
    r = verify(s)
    assert r.ok, (arr, M, trees, fan, pxn, tail, r.message)
    assert s.ports == 2 and s.meta["form"] == "funnel" and s.nchunks == t.nranks // s.meta["nodes"] * M
    last = max(arr.values()) if arr else 0.0
    res = simulate(s, GiB, t, arr)
    assert res.completion_s > last
    return s, res


@pytest.mark.parametrize("N,G,seed", [(2, 2, 0), (2, 4, 1), (3, 3, 2), (4, 4, 3), (5, 2, 4), (8, 2, 5)])
@pytest.mark.parametrize("M,trees,fan,pxn,tail", [(1, True, 1, True, True), (3, False, 1, False, True),
                                                  (4, True, 2, True, False), (2, True, 1, False, False)])
def test_random_arrivals_verify(N, G, seed, M, trees, fan, pxn, tail):
    rng = np.random.default_rng(seed)
    n = N * G
    t = cluster(N, G)
    for _ in range(2):
        ranks = rng.choice(n, size=int(rng.integers(1, n)), replace=False)
        arr = {int(r): float(rng.uniform(0, 0.01)) for r in ranks}
        _check(n, arr, t, M, trees, fan, pxn, tail)


def _patterns(N, G):
    """Late ranks in one node; in the last rank's node and elsewhere; the last two equal (one node, two
    nodes); one late rank; a whole late node; nobody late."""
    n = N * G
    return [{1: 0.004, 2: 0.006, 3: 0.008},
            {G + 1: 0.009, G + 2: 0.003, 2 * G % n: 0.005},
            {1: 0.007, G + 1: 0.007},
            {1: 0.007, 2: 0.007},
            {n - 1: 0.005},
            {r: 0.006 for r in range(G)},
            {}]


@pytest.mark.parametrize("N,G", [(2, 4), (4, 2), (4, 4)])
@pytest.mark.parametrize("trees,pxn,tail", [(True, True, True), (False, False, False), (True, False, True)])
def test_arrival_patterns_verify(N, G, trees, pxn, tail):
    t = cluster(N, G)
    for arr in _patterns(N, G):
        s, _ = _check(N * G, arr, t, 4, trees, 1, pxn, tail)
        if arr:
            last = max(arr, key=lambda r: (arr[r], r))
            assert s.meta["last"] == last


@pytest.mark.parametrize("spec", ["h100-cluster", "h100-cluster:fabric=fat-tree"])
def test_presets(spec):
    t = make_topology(spec, 32)
    arr = {3: 0.002, 12: 0.008, 29: 0.0075}
    for trees in (True, False):
        _check(32, arr, t, 4, trees)


def test_topology_json(tmp_path):
    N, G = 2, 4
    links = []
    for r in range(N * G):
        links.append({"src": r, "dst": f"nvsw{r // G}", "class": "nvlink", "alpha": "1.7us", "bandwidth": "450GB/s"})
        links.append({"src": r, "dst": f"rail{r % G}", "class": "net", "alpha": "7us", "bandwidth": "50GB/s"})
    d = {"name": "json-2x4", "gpus": N * G, "links": links, "ports": {"nvlink": 1, "net": 1},
         "switches": [f"nvsw{a}" for a in range(N)] + [f"rail{g}" for g in range(G)],
         "nodes": [list(range(a * G, (a + 1) * G)) for a in range(N)], "fabric": "rail"}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(d))
    t = make_topology(str(path), 8)
    for arr in _patterns(N, G):
        _check(8, arr, t, 3, True)
    out = tmp_path / "s.json"
    assert cli_main(["synth", "-a", "clusterstraggler", "-n", "8", "-t", str(path), "--size", "1GiB",
                     "--arrival", "1=2ms,6=9ms,5=8ms", "-o", str(out)]) == 0
    assert cli_main(["verify", str(out)]) == 0


def test_close_arrivals_never_slower_than_waiting_for_everyone():
    """Two late GPUs in two nodes, 0.5 ms apart, long after the others: the form auto picks finishes no later
    after the last arrival than the synchronous schedule started then."""
    t = make_topology("h100-cluster", 64)
    arr = {5: 0.009, 20: 0.0085, 40: 0.003}
    s = build_schedule("clusterstraggler", 64, arrivals=arr, size=GiB, topology=t)
    assert verify(s).ok
    ours = simulate(s, GiB, t, arr).after_last_arrival_s
    hier = simulate(build_schedule("hierarchical", 64, size=GiB, topology=t), GiB, t, arr).after_last_arrival_s
    assert ours <= hier * (1 + 1e-9)


def test_chain_ahead_after_arrival_near_the_late_gpu_bound():
    """The other late ranks long before the last: after the last arrival about the late-GPU form's work (L's
    s bytes over NVLink, one part per rail out of its node, the broadcast's extra hops), within 1.6x of the
    late-GPU bound max(s/(B_nv + B_net), s/(G B_net)) (brief's clusters.md section 4)."""
    t = make_topology("h100-cluster", 64)
    arr = {5: 0.009, 20: 0.005, 40: 0.003}
    bound = max(GiB / (450e9 + 50e9), GiB / (8 * 50e9))
    best = min(simulate(funnel.construct(64, arr, GiB, t, 16, 1, trees, pxn), GiB, t, arr).after_last_arrival_s
               for trees in (True, False) for pxn in (True, False))
    assert bound <= best < 1.6 * bound


@pytest.mark.parametrize("N,G", [(2, 4), (4, 2), (4, 4), (5, 2)])
@pytest.mark.parametrize("trees,pxn,tail,leaves,rows,inline", [(False, True, False, 0.01, True, False),
                                                               (False, False, True, 0.003, False, True),
                                                               (True, False, True, 0.0, True, True),
                                                               (False, True, True, 0.0, False, False),
                                                               (True, True, False, 0.0, False, True)])
def test_spread_leaves_rows_inline_verify(N, G, trees, pxn, tail, leaves, rows, inline):
    """A late rail GPU spreading its final blocks itself (``spread``), busy nodes as broadcast leaves
    (``leaves``), rows spread by recursive doubling (``rows``; G a power of two), late-rail nodes inside
    the chains (``inline``): every pattern verifies (each contribution exactly once) and is recorded in
    meta."""
    n = N * G
    t = cluster(N, G)
    rng = np.random.default_rng(N * 10 + G)
    pats = _patterns(N, G)[:-1] + [{int(r): float(rng.uniform(0, 0.01))
                                    for r in rng.choice(n, size=int(rng.integers(2, n)), replace=False)}]
    for arr in pats:
        s = funnel.construct(n, arr, GiB, t, 3, 1, trees, pxn, tail, spread=True, leaves=leaves, rows=rows,
                             inline=inline)
        r = verify(s)
        assert r.ok, (arr, r.message)
        assert s.meta["spread"] is True and s.meta["leaves_s"] == leaves and s.meta["rows"] == rows
        assert s.meta["inline"] == inline
        assert simulate(s, GiB, t, arr).completion_s > max(arr.values())


def test_rows_by_recursive_doubling():
    """With ``rows`` an idle node spreads a final row in log2 G messages per GPU, some carrying several
    parts (count > 1); without it every spread message carries one part."""
    t = make_topology("h100-cluster", 32)
    arr = {3: 0.002, 12: 0.004, 29: 0.009}
    s = funnel.construct(32, arr, GiB, t, 4, rows=True)
    assert verify(s).ok and int(s.count.max()) == 4
    assert int(funnel.construct(32, arr, GiB, t, 4).count.max()) == 1


def test_leaves_fed_by_the_others():
    """A node ready shortly before the last rank is a leaf of the hypercube broadcast: it sends nothing
    after its own stream (only receives the final blocks), and the schedule still verifies."""
    t = make_topology("h100-cluster", 32)
    arr = {3: 0.002, 12: 0.0085, 29: 0.009}  # node 1 (rank 12) ready 0.5 ms before L (rank 29, node 3)
    s = funnel.construct(32, arr, GiB, t, 4, 1, False, True, False, leaves=0.003)
    assert verify(s).ok
    node1 = set(range(8, 16))
    out = [int(b) // 8 for a, b in zip(s.src, s.dst) if int(a) in node1 and int(b) not in node1]
    assert out and set(out) == {3}  # node 1 sends across nodes only its stream into L's node 3
    plain = funnel.construct(32, arr, GiB, t, 4, 1, False, True, False)
    assert any(int(a) in node1 and int(b) // 8 not in (1, 3) for a, b in zip(plain.src, plain.dst))


def test_choices_when_another_node_streams_after_the_last_arrival():
    """Four late ranks, the second-last node ready 1.3 ms before the last rank (its NICs still send its own
    stream after the last arrival): the best of waves.FUNNEL_CHOICES (24 or 32 blocks, spread, inline) finishes
    within 1.55x of the late-GPU bound after the last arrival, at least 10% before the best of the 16-block
    choices without spread that auto used before (model; bench/bench_random_arrivals.py, vector 2)."""
    from collsynth.synth.algorithms.stragglar.waves import FUNNEL_CHOICES, funnel_candidate

    t = make_topology("h100-cluster", 64)
    arr = {46: 0.002485, 49: 0.002585, 56: 0.006726, 50: 0.008001}
    bound = max(GiB / (450e9 + 50e9), GiB / (8 * 50e9))

    T = funnel.rail_time(t, 64, GiB)

    def after(M, trees, pxn, tail):
        s = funnel.construct(64, arr, GiB, t, M, 1, trees, pxn, tail)
        return simulate(s, GiB, t, arr).after_last_arrival_s

    new = min(simulate(funnel_candidate(64, arr, GiB, t, c, T), GiB, t, arr).after_last_arrival_s
              for c in FUNNEL_CHOICES)
    old = min(after(*c) for c in ((16, True, False, True), (16, True, False, False), (16, False, True, False)))
    assert bound < new <= 1.55 * bound and new <= 0.9 * old


def test_inline_one_stream_in_per_chain_node():
    """A node whose rail GPU is late in the middle of the ready order (node 2 here): without ``inline`` it
    sends straight into the next chain node, whose rail GPU then takes two streams in; with ``inline`` it is
    a chain node itself, fewer GPUs take reduces from two nodes, and the model finishes sooner after the
    last arrival (bench/bench_random_arrivals.py, vector 26)."""
    t = make_topology("h100-cluster", 64)
    arr = {39: 0.001575, 16: 0.002503, 37: 0.004025, 63: 0.006153}

    def two_in(s):
        srcs: dict[int, set[int]] = {}
        for a, b, red in zip(s.src, s.dst, s.reduce):
            if red and int(a) // 8 != int(b) // 8:
                srcs.setdefault(int(b), set()).add(int(a) // 8)
        return sum(len(v) > 1 for v in srcs.values())

    plain = funnel.construct(64, arr, GiB, t, 24, 1, True, False, True, spread=True)
    inl = funnel.construct(64, arr, GiB, t, 24, 1, True, False, True, spread=True, inline=True)
    assert verify(inl).ok
    assert two_in(inl) < two_in(plain)
    assert simulate(inl, GiB, t, arr).after_last_arrival_s < simulate(plain, GiB, t, arr).after_last_arrival_s


def test_deterministic():
    t = cluster(4, 4)
    arr = {1: 0.004, 6: 0.009, 13: 0.0085}
    a = funnel.construct(16, arr, GiB, t, 4)
    b = funnel.construct(16, arr, GiB, t, 4)
    assert a.to_json() == b.to_json()
    a = funnel.construct(16, arr, GiB, t, 4, 1, False, True, False, spread=True, leaves=0.002)
    b = funnel.construct(16, arr, GiB, t, 4, 1, False, True, False, spread=True, leaves=0.002)
    assert a.to_json() == b.to_json()


def test_two_trees_disjoint_interiors():
    for R in range(1, 12):
        for edges in heap_two_trees(list(range(R))):
            assert sorted(c for _, c in edges) == list(range(R))
            seen = {-1}
            for p, c in edges:  # parents come before their children
                assert p in seen
                seen.add(c)
        a, b = ({p for p, _ in e if p >= 0} for e in heap_two_trees(list(range(R))))
        if R > 1:
            assert not a & b and len(a) + len(b) <= R
        if R > 2 and R % 2:  # the busiest node (last) forwards nothing
            assert R - 1 not in a | b


def test_bad_input():
    t = cluster(2, 4)
    with pytest.raises(CollsynthError, match="blocks per part"):
        funnel.construct(8, {1: 0.1}, GiB, t, 0)
    with pytest.raises(CollsynthError, match="2 nodes"):
        funnel.construct(4, {1: 0.1}, GiB, cluster(1, 4), 2)
    with pytest.raises(CollsynthError, match="ranks are 0..7"):
        funnel.construct(8, {8: 0.1}, GiB, t, 2)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(CollsynthError, match="leaf window"):
            funnel.construct(8, {1: 0.1}, GiB, t, 2, leaves=bad)
    assert cli_main(["synth", "-a", "clusterstraggler", "-n", "16", "-t", "h100-cluster", "--arrival",
                     "1=2ms,3=inf"]) == 2


def _check_rounds(N, nb, mute, rounds):
    """Every node gets every block, one send and one receive per node and round, from a holder; the muted
    nodes never send."""
    have = [set(range(nb))] + [set() for _ in range(N - 1)]
    for rnd in rounds:
        srcs = [x for x, _, _ in rnd]
        dsts = [y for _, y, _ in rnd]
        assert len(set(srcs)) == len(srcs) and len(set(dsts)) == len(dsts)
        assert not set(srcs) & set(mute) and 0 not in dsts
        for x, _, j in rnd:
            assert j in have[x]
        for _, y, j in rnd:
            have[y].add(j)
    assert all(h == set(range(nb)) for h in have)


@pytest.mark.parametrize("N", [2, 3, 5, 6, 7, 8, 12, 16])
def test_muted_rounds(N):
    """bcast.muted_cube_rounds: a valid one-port broadcast for any muted set (not the root), at the one-port
    optimum nblocks - 1 + ceil(log2 N) without muted nodes on powers of two and, with one muted node, at
    8 nodes (the funnel's 8 x 8 case: 7 senders for 7 receivers per round)."""
    q = max(1, (N - 1).bit_length())
    for nb in (1, 4, 9, 24):
        for mute in [(), (N - 1,), (1, N - 1)]:
            mute = tuple(sorted({m for m in mute if 0 < m < N}))
            if len(mute) >= N - 1:
                continue
            rounds = muted_cube_rounds(N, nb, frozenset(mute))
            _check_rounds(N, nb, mute, rounds)
            if not mute and N & (N - 1) == 0:
                assert len(rounds) == nb - 1 + q
    assert len(muted_cube_rounds(8, 24, frozenset({7}))) == 24 - 1 + 3
    assert len(muted_cube_rounds(8, 24, frozenset({3}))) == 24 - 1 + 3


@pytest.mark.parametrize("N,G,late", [(2, 4, 2), (4, 4, 3), (8, 8, 2), (8, 8, 3)])
@pytest.mark.parametrize("pxn,tail,leaves", [(False, True, 0.003), (False, False, 0.01), (True, False, 0.002)])
def test_mute_verify(N, G, late, pxn, tail, leaves):
    """``mute``: the nodes ready within the leaf window before the last rank sit inside the hypercube's
    rounds and only receive; verified on random arrivals with 2-3 late ranks, recorded in meta."""
    n = N * G
    t = cluster(N, G) if N < 8 else make_topology("h100-cluster", n)
    rng = np.random.default_rng(N * 100 + G * 10 + late)
    for _ in range(2):
        arr = {int(r): float(rng.uniform(0, 0.01)) for r in rng.choice(n, size=late, replace=False)}
        s = funnel.construct(n, arr, GiB, t, 3 if N < 8 else 8, 1, False, pxn, tail, spread=True, leaves=leaves,
                             inline=True, mute=True)
        r = verify(s)
        assert r.ok, (arr, r.message)
        assert s.meta["mute"] is True and s.meta["leaves_s"] == leaves
        assert simulate(s, GiB, t, arr).completion_s > max(arr.values())


def test_mute_leaf_sends_only_its_stream():
    """A node ready 0.6 ms before the last rank (node 7 here, still sending its own stream into L's node 1)
    is a muted node of the broadcast: across nodes it sends only into node 1; without ``mute`` it forwards
    final blocks too. In the model the muted rounds finish at least 10% before the fed leaf (``leaves``
    alone) and the best of the two-tree choices (bench/bench_random_arrivals.py, vector 1)."""
    t = make_topology("h100-cluster", 64)
    arr = {23: 0.00331, 26: 0.004673, 63: 0.009086, 14: 0.009673}
    s = funnel.construct(64, arr, GiB, t, 24, 1, False, False, False, spread=True, leaves=0.0027, inline=True,
                         mute=True)
    assert verify(s).ok
    node7 = set(range(56, 64))
    out = {int(b) // 8 for a, b in zip(s.src, s.dst) if int(a) in node7 and int(b) not in node7}
    assert out == {1}
    plain = funnel.construct(64, arr, GiB, t, 24, 1, False, False, False, spread=True, inline=True)
    assert any(int(a) in node7 and int(b) // 8 not in (1, 7) for a, b in zip(plain.src, plain.dst))

    def after(sch):
        return simulate(sch, GiB, t, arr).after_last_arrival_s

    fed = funnel.construct(64, arr, GiB, t, 24, 1, False, False, False, spread=True, leaves=0.0027, inline=True)
    trees = min(after(funnel.construct(64, arr, GiB, t, M, 1, True, False, tail, spread=True, inline=True))
                for M, tail in ((24, True), (32, False)))
    assert after(s) <= 0.9 * min(after(fed), trees)


def test_auto_never_slower_than_a_candidate():
    """clusterstraggler auto (waves.build up to SEARCH_MAX_GPUS) keeps the fastest verified schedule it weighs:
    in the model it completes no later than any funnel candidate of waves.FUNNEL_CHOICES (leaf windows in
    units of funnel.rail_time) or the synchronous hierarchical schedule."""
    from collsynth.synth.algorithms.stragglar.waves import FUNNEL_CHOICES, funnel_candidate

    t = cluster(4, 4)
    T = funnel.rail_time(t, 16, GiB)
    for arr in ({1: 0.004, 6: 0.009, 13: 0.0085}, {2: 0.001, 9: 0.006, 14: 0.0065, 7: 0.007}):
        s = build_schedule("clusterstraggler", 16, arrivals=arr, size=GiB, topology=t)
        assert verify(s).ok
        ours = simulate(s, GiB, t, arr).completion_s
        for choice in FUNNEL_CHOICES:
            f = funnel_candidate(16, arr, GiB, t, choice, T)
            assert verify(f).ok
            assert ours <= simulate(f, GiB, t, arr).completion_s * (1 + 1e-12)
        hier = build_schedule("hierarchical", 16, size=GiB, topology=t)
        assert ours <= simulate(hier, GiB, t, arr).completion_s * (1 + 1e-12)


def _model_end(n, arr, t, M, trees, pxn, tail, **kw):
    """The list-scheduling model's last end for these options (funnel._Funnel, as construct builds it)."""
    from collsynth.synth.algorithms.layout import node_grid
    from collsynth.synth.arrivals import arrival_vector

    p = funnel._Funnel(node_grid(t, n), arrival_vector(arr, n), M, GiB, t, 1, pxn, tail, kw.get("inline", False),
                       kw.get("spread", False), 0.0, False, False, kw.get("early", False), kw.get("relay", False))
    p.funnel(trees)
    return max(p.tl.end)


def test_early_order_upstream_not_behind_late_gpu():
    """``early``: node m's reductions are listed by their modelled start, so an upstream block whose data
    is ready is reduced at once instead of queueing behind the last rank's own block of that row (whose
    NVLink port is still busy with earlier rows). 8 late ranks in 6 nodes, the second-last node ready 3.1 ms
    before the last rank (bench/bench_random_arrivals.py, vector 37): verified, deterministic, simulated as
    the model predicts, and at least 10% faster after the last arrival than without ``early``."""
    t = make_topology("h100-cluster", 64)
    arr = {3: 0.009053, 6: 0.00269, 4: 0.00415, 11: 0.00594, 23: 0.00132, 27: 0.00493, 35: 0.00028, 44: 0.00427}
    kw = {"spread": True, "inline": True}
    s = funnel.construct(64, arr, GiB, t, 24, 1, False, True, False, early=True, **kw)
    assert verify(s).ok and s.meta["early"] is True
    assert s.to_json() == funnel.construct(64, arr, GiB, t, 24, 1, False, True, False, early=True, **kw).to_json()
    res = simulate(s, GiB, t, arr)
    assert res.completion_s == pytest.approx(_model_end(64, arr, t, 24, False, True, False, early=True, **kw),
                                             rel=1e-3)
    plain = funnel.construct(64, arr, GiB, t, 24, 1, False, True, False, **kw)
    assert plain.meta["early"] is False
    assert res.after_last_arrival_s <= 0.9 * simulate(plain, GiB, t, arr).after_last_arrival_s


@pytest.mark.parametrize("N,G,seed", [(2, 4, 0), (4, 4, 1), (3, 2, 2)])
def test_early_random_verify(N, G, seed):
    """``early`` (with and without ``relay``) on random arrivals (both broadcasts, with and without pxn):
    every schedule verified."""
    rng = np.random.default_rng(seed)
    n = N * G
    t = cluster(N, G)
    for trees, pxn in ((True, True), (False, False)):
        ranks = rng.choice(n, size=int(rng.integers(2, n)), replace=False)
        arr = {int(r): float(rng.uniform(0, 0.01)) for r in ranks}
        for relay in (False, True):
            s = funnel.construct(n, arr, GiB, t, 3, 1, trees, pxn, True, spread=True, inline=True, early=True,
                                 relay=relay)
            assert verify(s).ok, (arr, relay)


def test_relay_frees_the_late_gpu_port():
    """``relay``: a block for a GPU off the sender's rail (a late rail GPU's helper in the next node) goes
    over NVLink to the sender node's GPU on that rail and then over its NIC, instead of one PXN message that
    holds the sender's NVLink port for a whole network transfer (same vector as above, the hypercube with
    L's part at its helpers: node m's helpers take blocks off their rails). No PXN message is left, the
    schedule is verified, deterministic, simulated as the model predicts and at least 10% faster after the
    last arrival."""
    t = make_topology("h100-cluster", 64)
    arr = {3: 0.009053, 6: 0.00269, 4: 0.00415, 11: 0.00594, 23: 0.00132, 27: 0.00493, 35: 0.00028, 44: 0.00427}
    kw = {"spread": True, "inline": True, "early": True}
    s = funnel.construct(64, arr, GiB, t, 24, 1, False, True, False, relay=True, **kw)
    assert verify(s).ok and s.meta["relay"] is True
    again = funnel.construct(64, arr, GiB, t, 24, 1, False, True, False, relay=True, **kw)
    assert s.to_json() == again.to_json()

    def pxn(sch):
        return sum(int(a) // 8 != int(b) // 8 and int(a) % 8 != int(b) % 8 for a, b in zip(sch.src, sch.dst))

    plain = funnel.construct(64, arr, GiB, t, 24, 1, False, True, False, **kw)
    assert pxn(plain) > 0 and pxn(s) == 0
    res = simulate(s, GiB, t, arr)
    assert res.completion_s == pytest.approx(_model_end(64, arr, t, 24, False, True, False, relay=True, **kw),
                                             rel=1e-3)
    assert res.after_last_arrival_s <= 0.9 * simulate(plain, GiB, t, arr).after_last_arrival_s


def test_inline_last_ready_node_done_before_the_last_arrival():
    """``inline`` with the node ready last before L (node 5, rank 45 at 1.62 ms) done streaming long before
    L (rank 59, 5.27 ms): node 5 is a chain node on its late rail too, so node m's rail-5 GPU 61 takes one
    stream in (node 5's), not node 6's and node 5's one after the other (bench/bench_random_arrivals.py,
    vector 79). Verified, simulated as the model predicts, within 1.33x of T = s/(G B_net) after L."""
    t = make_topology("h100-cluster", 64)
    arr = {59: 0.00526878, 45: 0.00161960}
    T = funnel.rail_time(t, 64, GiB)
    kw = {"spread": True, "inline": True, "early": True, "relay": True}
    s = funnel.construct(64, arr, GiB, t, 20, 1, False, False, False, leaves=1.5 * T, mute=True, **kw)
    assert verify(s).ok
    assert {int(a) // 8 for a, b in zip(s.src, s.dst) if int(b) == 61 and int(a) // 8 != 7} == {5}
    res = simulate(s, GiB, t, arr)
    assert res.after_last_arrival_s <= 1.33 * T


def test_mute_feeders_of_the_last_rank_rail():
    """``mute`` without ``pxn``: the node sending rail lL's blocks into the last rank L itself (after L's
    arrival, so its NIC is busy through the whole broadcast on that rail) only receives in the rounds, even
    with a leaf window of 0. Two late ranks, 2.8 ms apart (bench/bench_random_arrivals.py, vector 40: L = 27
    in node 3, rank 60 in node 7): verified, deterministic, the feeder sends across nodes only into node 3,
    simulated as the model predicts and at least 25% faster after L than the unmuted hypercube."""
    from collsynth.synth.algorithms.layout import node_grid
    from collsynth.synth.arrivals import arrival_vector

    t = make_topology("h100-cluster", 64)
    arr = {27: 0.0075435883, 60: 0.0047509225}
    kw = {"spread": True, "inline": True, "early": True, "relay": True}
    s = funnel.construct(64, arr, GiB, t, 20, 1, False, False, True, leaves=0.0, mute=True, **kw)
    assert verify(s).ok and s.meta["mute"] is True
    assert s.to_json() == funnel.construct(64, arr, GiB, t, 20, 1, False, False, True, leaves=0.0, mute=True,
                                           **kw).to_json()
    p = funnel._Funnel(node_grid(t, 64), arrival_vector(arr, 64), 20, GiB, t, 1, False, True, True, True, 0.0,
                       False, True, True, True)
    feeders = p.upstream[(p.m, p.lL, 0)]  # (one chain order: p = 0)
    assert p.m == 3 and feeders
    for f in feeders:
        out = {int(b) // 8 for a, b in zip(s.src, s.dst) if int(a) // 8 == f and int(b) // 8 != f}
        assert out == {3}
    p.funnel(False)
    res = simulate(s, GiB, t, arr)
    assert res.completion_s == pytest.approx(max(p.tl.end), rel=1e-3)
    plain = funnel.construct(64, arr, GiB, t, 20, 1, False, False, True, **kw)
    assert res.after_last_arrival_s <= 0.75 * simulate(plain, GiB, t, arr).after_last_arrival_s


@pytest.mark.parametrize("N,G,seed", [(2, 4, 0), (4, 4, 1), (3, 2, 2), (8, 2, 3)])
def test_ahead_rows_random_verify(N, G, seed):
    """``ahead`` (the broadcast's rounds listed interleaved with the funnel) with ``rows`` 0, 1, 2 (every
    node but L's spreads whole rows) and 3 (the last funnel.TAIL_ROWS rows too), both broadcasts, with and
    without pxn, on random arrivals: every schedule verified and recorded in meta."""
    rng = np.random.default_rng(seed)
    n = N * G
    t = cluster(N, G)
    for trees, pxn, rows, ahead in ((True, True, 1, 0), (False, False, 2, 2), (False, True, 1, 3),
                                    (False, False, 0, 1), (True, False, 2, 0), (False, False, 3, -1),
                                    (True, True, 3, 2)):
        ranks = rng.choice(n, size=int(rng.integers(2, n)), replace=False)
        arr = {int(r): float(rng.uniform(0, 0.01)) for r in ranks}
        s = funnel.construct(n, arr, GiB, t, 3, 1, trees, pxn, True, spread=True, inline=True, mute=not trees,
                             leaves=0.002, early=True, relay=True, rows=rows, ahead=ahead)
        assert verify(s).ok, (arr, trees, pxn, rows, ahead)
        assert s.meta.get("ahead", -1) == ahead and s.meta["rows"] == (rows if rows > 1 else bool(rows))
    with pytest.raises(CollsynthError, match="rows must be"):
        funnel.construct(n, arr, GiB, t, 3, rows=4)
    with pytest.raises(CollsynthError, match="ahead must be"):
        funnel.construct(n, arr, GiB, t, 3, ahead=-2)


def test_ahead_at_the_floor():
    """The other late ranks done long before the last one (4 late ranks at 2.0-4.6 ms, L = rank 22 at 9.98
    ms; bench/bench_random_arrivals.py, vector 5): with ``ahead`` L's reductions into its node peers and the
    final blocks' spreads share its NVLink port block by block and L's own block goes to its helper first,
    and the idle nodes spread whole rows (``rows``). 22 blocks per part: verified, deterministic, simulated
    as the model predicts, within 1.31x of T = s/(G B_net) after L and at least 1% faster than the choices
    before (24 blocks, 3.543 ms); at 28 blocks without pxn the interleaving alone takes 4% off."""
    from collsynth.synth.algorithms.layout import node_grid
    from collsynth.synth.arrivals import arrival_vector

    t = make_topology("h100-cluster", 64)
    arr = {22: 0.009978741, 36: 0.004574722, 59: 0.00200712, 56: 0.002582307, 52: 0.00381677}
    T = funnel.rail_time(t, 64, GiB)
    kw = {"spread": True, "inline": True, "early": True, "relay": True, "mute": True}
    s = funnel.construct(64, arr, GiB, t, 22, 1, False, True, True, leaves=1.5 * T, rows=1, ahead=2, **kw)
    assert verify(s).ok and s.meta["ahead"] == 2
    assert s.to_json() == funnel.construct(64, arr, GiB, t, 22, 1, False, True, True, leaves=1.5 * T, rows=1,
                                           ahead=2, **kw).to_json()
    p = funnel._Funnel(node_grid(t, 64), arrival_vector(arr, 64), 22, GiB, t, 1, True, True, True, True,
                       1.5 * T, 1, True, True, True, 2)
    p.funnel(False)
    res = simulate(s, GiB, t, arr)
    assert res.completion_s == pytest.approx(max(p.tl.end), rel=1e-3)
    assert res.after_last_arrival_s <= 1.31 * T
    before = funnel.construct(64, arr, GiB, t, 24, 1, False, True, True, leaves=1.5 * T, **kw)
    assert res.after_last_arrival_s <= 0.99 * simulate(before, GiB, t, arr).after_last_arrival_s

    def after(ahead):
        return simulate(funnel.construct(64, arr, GiB, t, 28, 1, False, False, True, leaves=0.0, rows=1,
                                         ahead=ahead, **kw), GiB, t, arr).after_last_arrival_s
    assert after(2) <= 0.96 * after(-1)


def test_one_late_gpu_on_8_nodes_takes_the_funnel_with_24_or_26_blocks():
    """waves.FUNNEL_CHOICES has 24 and 26 blocks with ``ahead`` and ``first`` (docs/stragglar.md section 11):
    on 8 x 8, 1 GiB, rank 5 10 ms late, the best of them finishes 3.477 ms after the arrival, under the
    late-GPU form built for the same arrivals (3.479 ms; before these choices the funnel's best took 3.488
    and the late-GPU form was returned), so clusterstraggler returns that funnel, verified."""
    from collsynth.synth.algorithms.stragglar import cluster, waves

    n, size, arr = 64, 2**30, {5: 0.01}
    topo = make_topology("h100-cluster", n)
    T = funnel.rail_time(topo, n, size)
    s = build_schedule("clusterstraggler", n, arrivals=arr, size=size, topology=topo)
    assert s.meta["form"] == "funnel" and verify(s).ok
    ours = simulate(s, size, topo, arr).completion_s
    late = simulate(cluster.build(n, arrivals=arr, size=size, topology=topo), size, topo, arr).completion_s
    assert ours < late
    assert s.meta["pipeline"] in (24, 26) and s.meta["ahead"] == 3 and s.meta["first"]
    best = min(simulate(waves.funnel_candidate(n, arr, size, topo, c, T), size, topo, arr).completion_s
               for c in waves.FUNNEL_CHOICES if c.M in (24, 26) and c.ahead >= 0)
    assert ours == best


def test_last_alone_late_gpu_form():
    """Several late ranks, the others all in long before the last one (rank 3 at 1 ms, the last rank 12 at
    12 ms on 2 x 8; gap over choose.GPU_FORM_GAP_T T): clusterstraggler auto also weighs the late-GPU form for
    the last rank with rank 3 in the AllReduce before it, and returns it (verified) as it finishes first: as
    fast after the arrival as with rank 12 the only late rank, and no slower than any funnel candidate. With
    rank 3 at 8 ms (gap 4 ms, the AllReduce would not end before 12 ms) it is not weighed. (On 4 x 8 a
    funnel candidate is 2 us faster than the late-GPU form since L takes its part in from its helpers.)"""
    from collsynth.synth.algorithms.stragglar.waves import FUNNEL_CHOICES, funnel_candidate

    t = make_topology("h100-cluster", 16)
    T = funnel.rail_time(t, 16, GiB)
    arr = {3: 0.001, 12: 0.012}
    s = build_schedule("clusterstraggler", 16, arrivals=arr, size=GiB, topology=t)
    assert verify(s).ok and s.meta["form"] == "gpu" and s.meta["late"] == [12]
    assert s.meta["present_late"] == [[3, 0.001]]
    res = simulate(s, GiB, t, arr)
    alone = build_schedule("clusterstraggler", 16, arrivals={12: 0.012}, size=GiB, topology=t)
    assert res.after_last_arrival_s == pytest.approx(simulate(alone, GiB, t, {12: 0.012}).after_last_arrival_s,
                                                     rel=1e-9)
    for choice in FUNNEL_CHOICES:
        assert res.completion_s <= simulate(funnel_candidate(16, arr, GiB, t, choice, T), GiB, t,
                                            arr).completion_s * (1 + 1e-12)
    near = build_schedule("clusterstraggler", 16, arrivals={3: 0.008, 12: 0.012}, size=GiB, topology=t)
    assert near.meta["form"] != "gpu"
    # "at least GPU_FORM_GAP_T T before the last rank": the gap itself counts, a hair less does not
    from collsynth.synth.algorithms.stragglar import choose
    gap = np.zeros(16)
    gap[12] = choose.GPU_FORM_GAP_T * T
    assert choose.last_alone(16, gap, GiB, t) is not None
    gap[12] = np.nextafter(gap[12], 0.0)
    assert choose.last_alone(16, gap, GiB, t) is None


def test_tail_rows():
    """``rows`` = 3: every node but L's spreads its last funnel.TAIL_ROWS rows by recursive doubling, also a
    node still streaming when L arrives (node 4, rank 32 at 7.83 ms, L = rank 16 at 9.04 ms; bench vector
    66), whose star spread of the last block was the tail. Verified, deterministic, messages of half a row
    (4 blocks) only in the last rows, and at least 1.5% faster after L than without rows."""
    t = make_topology("h100-cluster", 64)
    arr = {16: 0.009041312, 1: 0.001724908, 8: 0.001292141, 32: 0.007833551, 31: 0.002613544, 61: 0.000886588}
    kw = {"spread": True, "inline": True, "early": True, "relay": True, "mute": True}
    s = funnel.construct(64, arr, GiB, t, 20, 1, False, False, True, rows=3, **kw)
    assert verify(s).ok and s.meta["rows"] == 3
    assert s.to_json() == funnel.construct(64, arr, GiB, t, 20, 1, False, False, True, rows=3, **kw).to_json()
    node4 = range(32, 40)
    halves = {int(c) // 8 for a, b, c, k in zip(s.src, s.dst, s.chunk, s.count)
              if int(a) in node4 and int(b) in node4 and int(k) == 4}
    assert halves == set(range(20 - funnel.TAIL_ROWS, 20))
    plain = funnel.construct(64, arr, GiB, t, 20, 1, False, False, True, **kw)
    assert simulate(s, GiB, t, arr).after_last_arrival_s <= 0.985 * simulate(plain, GiB, t, arr).after_last_arrival_s


def test_rotate_two_streaming_nodes_take_turns():
    """``rotate`` = 2: the two nodes still streaming when L arrives (node 3 ready 1.32 ms and node 5 0.42 ms
    before L = rank 56 in node 7; bench vector 75) take turns at the chains' end, so node 7's rail GPUs
    take even blocks from one and odd blocks from the other, and neither takes in the other's whole stream
    before the broadcast: verified, deterministic, recorded in meta, at least 10% faster after L than one
    chain order (5.61 -> 4.81 ms in the model). Where fewer than two nodes stream when L arrives nothing
    rotates: the same schedule as rotate = 1."""
    t = make_topology("h100-cluster", 64)
    tL = 0.009509
    arr = {2: tL - 0.0091, 33: tL - 0.00815, 38: tL - 0.00732, 27: tL - 0.00199, 29: tL - 0.00132,
           44: tL - 0.00042, 56: tL}
    kw = {"spread": True, "inline": True, "early": True, "relay": True, "mute": True, "rows": 3}
    s = funnel.construct(64, arr, GiB, t, 24, 1, False, False, False, rotate=2, **kw)
    assert verify(s).ok and s.meta["rotate"] == 2 and s.meta["chain"][-3:] == [3, 5, 7]
    assert s.to_json() == funnel.construct(64, arr, GiB, t, 24, 1, False, False, False, rotate=2, **kw).to_json()
    senders: dict[int, set[int]] = {0: set(), 1: set()}
    for a, b, c in zip(s.src, s.dst, s.chunk):  # along rails 0-2, 6, 7 (punctual GPUs in nodes 3 and 5) into node 7
        if int(b) // 8 == 7 and int(a) // 8 in (3, 5) and int(a) % 8 == int(c) % 8 not in (3, 4, 5):
            senders[(int(c) // 8) % 2].add(int(a) // 8)
    assert senders == {0: {5}, 1: {3}} or senders == {0: {3}, 1: {5}}
    one = funnel.construct(64, arr, GiB, t, 24, 1, False, False, False, **kw)
    assert "rotate" not in one.meta
    assert simulate(s, GiB, t, arr).after_last_arrival_s <= 0.9 * simulate(one, GiB, t, arr).after_last_arrival_s
    early = {2: 0.001, 33: 0.002, 56: 0.009}  # every other node done long before L: one order
    a = funnel.construct(64, early, GiB, t, 24, 1, False, False, False, rotate=2, **kw)
    assert "rotate" not in a.meta
    assert a.to_json() == funnel.construct(64, early, GiB, t, 24, 1, False, False, False, **kw).to_json()


@pytest.mark.parametrize("N,G,seed", [(3, 2, 0), (4, 4, 1), (5, 2, 2), (8, 2, 3)])
def test_rotate_random_verify(N, G, seed):
    """``rotate`` 2 and 3 with both broadcasts, with and without pxn, tail and ahead, on random arrivals with
    several late ranks close together: every schedule verified."""
    rng = np.random.default_rng(100 + seed)
    n = N * G
    t = cluster(N, G)
    for trees, pxn, tail, ahead, rotate in ((False, False, True, -1, 2), (True, True, False, 2, 3),
                                            (False, True, True, 3, 2), (False, False, False, 0, 3)):
        ranks = rng.choice(n, size=int(rng.integers(2, n)), replace=False)
        arr = {int(r): float(0.008 + rng.uniform(0, 0.002)) for r in ranks}
        s = funnel.construct(n, arr, GiB, t, 4, 1, trees, pxn, tail, spread=True, inline=True, mute=not trees,
                             early=True, relay=True, rows=3, ahead=ahead, rotate=rotate)
        assert verify(s).ok, (arr, trees, pxn, tail, ahead, rotate)
        assert s.meta.get("rotate", 1) <= rotate
    for bad in (0, -1, True, 1.5):
        with pytest.raises(CollsynthError, match="rotate must be"):
            funnel.construct(n, arr, GiB, t, 3, rotate=bad)


# bench vector 5 (bench/bench_random_arrivals.py): L = rank 22 (node 2, local 6) 5.4 ms after the others
_V5 = {22: 0.009979, 36: 0.004575, 52: 0.003817, 56: 0.002582, 59: 0.002007}
_C5 = {"spread": True, "rows": 3, "inline": True, "mute": True, "early": True, "relay": True, "ahead": 2}
_C6 = {"spread": True, "rows": 3, "inline": True, "mute": True, "early": True, "relay": True, "ahead": 3,
       "first": True}


def _first_net_send(s, t, arr, x):
    """When rank x's first network send starts, after the last arrival (simulated)."""
    r = simulate(s, GiB, t, arr)
    net = (s.src // 8) != (s.dst // 8)
    k = np.nonzero((s.src == x) & net)[0]
    return float(r.start_s[k].min()) - max(arr.values()), r.after_last_arrival_s


def test_pxn_last_rank_takes_its_part_in():
    """With ``pxn`` the sums of L's part wait at its helpers and L takes each in over NVLink and adds its own
    block: it never sends its raw part (no reduce from L in its own part), its NVLink port sends only the
    7 other parts, so its own rail's broadcast starts one NVLink message after it arrives and the whole
    schedule ends within 1.3x the late-GPU bound (3.488 ms after L at 8 x 8, 1 GiB; L sending its part to
    its helper first gave 3.505)."""
    t = make_topology("h100-cluster", 64)
    T = funnel.rail_time(t, 64, GiB)
    s = funnel.construct(64, _V5, GiB, t, 22, 1, False, True, True, leaves=1.5 * T, **_C5)
    assert verify(s).ok
    mine = (s.src == 22) & (s.chunk % 8 == 6)
    assert not np.any(s.reduce[mine]) and np.any((s.dst == 22) & (s.chunk % 8 == 6) & s.reduce)
    start, after = _first_net_send(s, t, _V5, 22)
    assert 0 < start < 20e-6  # one NVLink message of 6.1 MB (a network message takes 136 us)
    assert after <= 1.3 * GiB / 8 / 50e9


def test_pxn_first_blocks_start_the_last_ranks_rail():
    """Without ``pxn`` L takes the sums of its part in on its NIC, so its rail's broadcast waits one network
    message; ``pxn_first`` = 2 sends the first two through its helpers (bench vector 1: node 7 still
    streaming when L = rank 14 arrives): the rail starts one NVLink message after L, 3.522 -> 3.488 ms.
    Verified for 0 to M blocks; recorded in meta; bad values exit with one line."""
    t = make_topology("h100-cluster", 64)
    arr = {14: 0.009673, 23: 0.00331, 26: 0.004673, 63: 0.009086}
    base = funnel.construct(64, arr, GiB, t, 22, 1, False, False, True, **_C6)
    s = funnel.construct(64, arr, GiB, t, 22, 1, False, False, True, pxn_first=2, **_C6)
    assert verify(s).ok and s.meta["pxn_first"] == 2 and "pxn_first" not in base.meta
    start0, after0 = _first_net_send(base, t, arr, 14)
    start2, after2 = _first_net_send(s, t, arr, 14)
    assert start0 > 130e-6 and start2 < 20e-6 and after2 < after0 - 30e-6
    assert verify(funnel.construct(64, arr, GiB, t, 22, 1, False, False, True, pxn_first=22, **_C6)).ok
    for bad in (-1, 23, True, 1.5):
        with pytest.raises(CollsynthError, match="pxn_first must be"):
            funnel.construct(64, arr, GiB, t, 22, pxn_first=bad)


def test_settled_late_gpu_holds_its_own_part():
    """Node m's rank 29 arrived 6.7 ms before L = rank 30 (bench vector 80): with ``settled`` = T it has no
    helpers, so L's blocks of part 5 go straight to it (one NVLink message each, not to a helper and back
    to 29): 3.505 -> 3.488 ms after L; meta lists it; a GPU that arrived later than the window keeps its
    helpers. Bad values exit with one line."""
    t = make_topology("h100-cluster", 64)
    T = funnel.rail_time(t, 64, GiB)
    arr = {29: 0.00048, 30: 0.007171}
    kw = {"leaves": 1.5 * T, **_C5}
    base = funnel.construct(64, arr, GiB, t, 22, 1, False, True, True, **kw)
    s = funnel.construct(64, arr, GiB, t, 22, 1, False, True, True, settled=T, **kw)
    assert verify(s).ok and s.meta["settled"] == [29] and "settled" not in base.meta
    part5 = (s.src == 30) & (s.chunk % 8 == 5)
    assert set(s.dst[part5].tolist()) == {29}
    assert 29 not in set(base.dst[(base.src == 30) & (base.chunk % 8 == 5)].tolist())
    after = simulate(s, GiB, t, arr).after_last_arrival_s
    assert after < simulate(base, GiB, t, arr).after_last_arrival_s - 10e-6 and after <= 1.3 * GiB / 8 / 50e9
    late = funnel.construct(64, arr, GiB, t, 22, 1, False, True, True, settled=0.007, **kw)
    assert "settled" not in late.meta and late.to_json() == base.to_json()
    for bad in (-1.0, True, float("nan"), "1ms"):
        with pytest.raises(CollsynthError, match="settled must be"):
            funnel.construct(64, arr, GiB, t, 22, settled=bad)


def test_settled_in_another_node_takes_its_rail_in():
    """``settled`` in any node: node 2's rank 16 arrived 3.55 ms (more than T) before its node's last
    arrival, rank 22 (bench vector 19, L = rank 48 in node 6), so it holds its own part: node 5's blocks of
    part 0 come in on its own NIC, not to its helpers on the other rails, whose ingress then carried them
    on top of their own chains (rail 1's ran 427 us past L's arrival): 3.525 -> 3.488 ms after L, within
    1.3x the bound. Rank 22, the node's last, keeps its helpers."""
    t = make_topology("h100-cluster", 64)
    T = funnel.rail_time(t, 64, GiB)
    arr = {39: 0.004291, 48: 0.009738, 41: 0.005904, 22: 0.00814, 16: 0.004589}
    kw = {"pxn_first": 1, **_C6}
    base = funnel.construct(64, arr, GiB, t, 22, 1, False, False, True, **kw)
    s = funnel.construct(64, arr, GiB, t, 22, 1, False, False, True, settled=T, **kw)
    assert verify(s).ok and s.meta["settled"] == [16] and "settled" not in base.meta

    def part0_into_node2(x):
        src, dst = np.asarray(x.src), np.asarray(x.dst)
        net = (src // 8 != dst // 8) & (dst // 8 == 2) & (np.asarray(x.chunk) % 8 == 0)
        return set(dst[net].tolist())

    assert part0_into_node2(s) == {16} and len(part0_into_node2(base) - {16}) >= 2
    after = simulate(s, GiB, t, arr).after_last_arrival_s
    assert after < simulate(base, GiB, t, arr).after_last_arrival_s - 30e-6 and after <= 1.3 * GiB / 8 / 50e9


@pytest.mark.parametrize("N,G,seed", [(3, 2, 0), (4, 4, 1), (5, 2, 2), (8, 2, 3)])
def test_pxn_first_and_settled_random_verify(N, G, seed):
    """``pxn_first`` and ``settled`` with both broadcasts, with and without pxn, tail and ahead, on random
    arrivals (several late ranks in the last rank's node among them): every schedule verified."""
    rng = np.random.default_rng(200 + seed)
    n = N * G
    t = cluster(N, G)
    for trees, pxn, tail, ahead, q, settled in ((False, False, True, -1, 1, 0.0), (True, True, False, 2, 0, 0.001),
                                                 (False, False, True, 3, 4, 0.002), (True, False, False, 0, 2, 0.0)):
        ranks = rng.choice(n, size=int(rng.integers(2, n)), replace=False)
        arr = {int(r): float(rng.uniform(0, 0.01)) for r in ranks}
        s = funnel.construct(n, arr, GiB, t, 4, 1, trees, pxn, tail, spread=True, inline=True, mute=not trees,
                             early=True, relay=True, rows=3, ahead=ahead, pxn_first=q, settled=settled)
        assert verify(s).ok, (arr, trees, pxn, tail, ahead, q, settled)


def test_backnow_sends_the_final_block_back_between_rows():
    """``backnow`` (with ``pxn``): L sends each final block of its own part back to the helper it took the
    sum from right after summing it, not when the broadcast spreads it; without it several copies waited
    for the rounds and then took L's NVLink port together, delaying the next rows' parts (bench vector 38,
    22 blocks, the last of waves.FUNNEL_CHOICES: 3.629 -> 3.488 ms after L, 1.2995x the bound). Verified,
    in meta; every copy of L's own part leaves L before L's parts of the row after next."""
    from collsynth.synth.algorithms.stragglar.waves import FUNNEL_CHOICES, funnel_candidate

    t = make_topology("h100-cluster", 64)
    T = funnel.rail_time(t, 64, GiB)
    arr = {52: 0.00255, 60: 0.003471, 46: 0.003638, 37: 0.005967, 39: 0.007515, 38: 0.009125}
    on = FUNNEL_CHOICES[-1]
    assert on.backnow and on.pxn
    s = funnel_candidate(64, arr, GiB, t, on, T)
    off = funnel_candidate(64, arr, GiB, t, on._replace(backnow=False), T)
    assert verify(s).ok and s.meta["backnow"] is True and "backnow" not in off.meta
    r = simulate(s, GiB, t, arr)
    after = r.after_last_arrival_s
    assert after <= 1.3 * T and after < simulate(off, GiB, t, arr).after_last_arrival_s - 10e-6
    nv = (s.src // 8) == (s.dst // 8)
    own = np.nonzero((s.src == 38) & nv & (s.chunk % 8 == 6))[0]  # L's copies of its own part
    for k in own:
        row = int(s.chunk[k]) // 8
        later = np.nonzero((s.src == 38) & nv & (s.chunk // 8 == row + 2) & (s.chunk % 8 != 6))[0]
        assert all(r.start_s[k] < r.start_s[q] for q in later)


def test_reduce_trees_take_the_punctual_nodes_off_the_chains():
    """``reduce_trees``: the nodes whose GPUs are all punctual reduce by two binary trees into the chain of
    the other nodes instead of heading it (T + O(log N) block times instead of T + N). 24 nodes of 2 GPUs,
    64 MiB, ranks 7 (node 3) and 15 (node 7, the last) late: both verified, the tree nodes are every node
    but those two (meta), each of their GPUs takes in at most 2 M network messages (M while reducing, as in
    the chain, since every node is interior in one tree only; M from the broadcast), and the time after the
    last arrival drops (model: 5.08 -> 2.43 ms at 4 blocks, 2.21 -> 1.76 ms at 8)."""
    n, size = 48, 2**26
    t = cluster(24, 2)
    arr = {7: 1e-3, 15: 2e-3}
    for M in (4, 8):
        chain = funnel.construct(n, arr, size, t, M)
        trees = funnel.construct(n, arr, size, t, M, reduce_trees=True)
        assert verify(chain).ok and verify(trees).ok
        assert "reduce_trees" not in chain.meta
        assert trees.meta["reduce_trees"] == [b for b in range(24) if b not in (3, 7)]
        net = (trees.src // 2) != (trees.dst // 2)
        received = np.bincount(trees.dst[net], minlength=n)
        assert max(int(received[2 * b + g]) for b in trees.meta["reduce_trees"] for g in range(2)) <= 2 * M
        t_chain, t_trees = (simulate(x, size, t, arr).after_last_arrival_s for x in (chain, trees))
        assert t_trees < 0.85 * t_chain, (M, t_trees, t_chain)
    few = {r: 1e-3 for r in range(2, 42)}  # only 3 fully punctual nodes but the last rank's: the chain stays
    few[47] = 2e-3
    assert "reduce_trees" not in funnel.construct(n, few, size, t, 4, reduce_trees=True).meta


@pytest.mark.parametrize("N,G,seed", [(5, 2, 0), (6, 4, 1), (9, 2, 2), (12, 3, 3)])
def test_reduce_trees_random_verify(N, G, seed):
    """``reduce_trees`` with both broadcasts, with and without pxn, tail, ahead (with first), rotate,
    pxn_first and settled, on random arrivals with 1 to N - 2 late ranks: every schedule verified, the tree
    nodes exactly the fully punctual nodes other than the last rank's (when at least TREE_MIN_NODES), and
    byte-identical when built twice."""
    rng = np.random.default_rng(300 + seed)
    n = N * G
    t = cluster(N, G)
    for trees, pxn, tail, ahead, rotate, q, settled in ((False, False, True, -1, 1, 2, math.inf),
                                                        (True, True, False, 2, 2, 0, 0.0),
                                                        (False, True, True, 3, 3, 0, 0.001),
                                                        (False, False, False, 0, 2, 1, math.inf)):
        ranks = rng.choice(n, size=int(rng.integers(1, N - 1)), replace=False)
        arr = {int(r): float(rng.uniform(0, 0.01)) for r in ranks}
        kw = dict(spread=True, inline=True, mute=not trees, early=True, relay=True, rows=3, ahead=ahead,
                  first=ahead >= 0, rotate=rotate, pxn_first=q, settled=settled, reduce_trees=True)
        s = funnel.construct(n, arr, GiB, t, 4, 1, trees, pxn, tail, **kw)
        assert verify(s).ok, (arr, trees, pxn, tail, ahead, rotate)
        last = max(arr, key=lambda r: (arr[r], r))
        punct = [b for b in range(N) if b != last // G and not any(b * G <= r < b * G + G for r in arr)]
        assert s.meta.get("reduce_trees", []) == (punct if len(punct) >= funnel.TREE_MIN_NODES else [])
        assert s.to_json() == funnel.construct(n, arr, GiB, t, 4, 1, trees, pxn, tail, **kw).to_json()
