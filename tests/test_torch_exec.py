"""The torch.distributed executor, run-time straggler detection and the DDP hook, on real gloo processes.

One 4-rank world (spawned once per module, loopback only) runs every scenario and returns what it saw;
the tests below check those results. Nothing here asserts a speed: only values, agreement and order.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

from collsynth.backends.torch.launch import launch  # noqa: E402
from collsynth.errors import CollsynthError  # noqa: E402
from collsynth.synth.algorithms.patterns import add_ring_allgather, add_ring_reducescatter  # noqa: E402
from collsynth.synth.ir import ScheduleBuilder  # noqa: E402
from collsynth.synth.registry import algorithms, build_schedule  # noqa: E402
from collsynth.synth.verify import check  # noqa: E402

N = 4
LENGTHS = (1, 7, 1003)  # shorter than the chunk count, uneven, long and uneven
DTYPES = ("float32", "float16", "bfloat16")


def toy_stragglar(n: int, s: int):
    """A small straggler schedule with StragglAR's shape: ring ReduceScatter among the punctual ranks
    (phase waiting only for them), then one two-way reduce exchange per punctual rank with the
    straggler, then a ring AllGather among the punctual ranks."""
    g = [r for r in range(n) if r != s]
    m = len(g)
    b = ScheduleBuilder("allreduce", n, m, name=f"toy_stragglar_n{n}_s{s}")
    b.begin_phase("punctual-reducescatter", g)
    add_ring_reducescatter(b, g, list(range(m)))
    b.begin_phase("completion", range(n))
    for i in range(m):
        b.new_step()
        b.add(g[i], s, i, 1, True)
        b.add(s, g[i], i, 1, True)
    add_ring_allgather(b, g, list(range(m)))
    b.end_phase()
    return check(b.build())


def straggler_schedule(n: int, s: int):
    """The real StragglAR schedule when it is registered, else the toy one."""
    if "stragglar" in algorithms():
        return check(build_schedule("stragglar", n, straggler=s))
    return toy_stragglar(n, s)


def domain_schedule(n: int, late: int):
    """clusterstraggler's one-domain broadcast form (domain.py) for one late rank on the nvswitch preset."""
    import numpy as np

    from collsynth.synth.algorithms.stragglar import domain
    from collsynth.synth.topology import make_topology

    times = np.zeros(n)
    times[late] = 0.01
    s = domain.build(n, times, 2.0**20, make_topology("nvswitch", n))
    assert s is not None and s.meta["form"] == "domain"
    return check(s)


def straggler_family(n: int):
    try:
        from collsynth.synth.algorithms.stragglar.family import build_family
    except ImportError:
        return {r: toy_stragglar(n, r) for r in range(n)}
    return build_family(n)


def _data(rank: int, length: int, seed: int, dtype: str):
    g = torch.Generator().manual_seed(seed * 1009 + rank * 17 + length)
    return torch.randn(length, generator=g).to(getattr(torch, dtype))


def _digest(t) -> str:
    import hashlib

    return hashlib.sha256(t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def _err(kind, fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the test inspects the type
        return (type(e).__name__, isinstance(e, ValueError), isinstance(e, CollsynthError), str(e))
    return None


# ------------------------------------------------------------------------------------------ the world
def world(rank: int, n: int) -> dict:
    import collsynth.backends.torch as te
    from collsynth.backends.torch.straggler import StragglerAwareAllReduce

    out: dict = {"allreduce": {}, "digests": {}}
    # 1. AllReduce: every algorithm, odd lengths, three dtypes, against torch's all_reduce
    scheds = {a: build_schedule(a, n) for a in ("ring", "rhd", "direct", "twoshot")}
    scheds["toy_stragglar"] = toy_stragglar(n, n - 1)
    if "stragglar" in algorithms():
        scheds["stragglar"] = straggler_schedule(n, 1)
    scheds["clusterstraggler_domain"] = domain_schedule(n, 2)
    for name, s in scheds.items():
        for length in LENGTHS:
            for dt in DTYPES:
                x = _data(rank, length, 1, dt)
                ref64 = x.double()
                dist.all_reduce(ref64)
                ref = x.clone()
                dist.all_reduce(ref)
                y = x.clone()
                assert te.allreduce(y, s) is y
                scale = float(ref64.abs().max()) or 1.0
                out["allreduce"][(name, length, dt)] = (
                    float((y.double() - ref64).abs().max()) / scale,
                    float((y.double() - ref.double()).abs().max()) / scale)
                out["digests"][(name, length, dt)] = _digest(y)
    # 2. a non-contiguous 2-D tensor stays in place and correct
    x = _data(rank, 30, 2, "float32").view(6, 5).t()
    ref = x.contiguous()
    dist.all_reduce(ref)
    te.allreduce(x, scheds["ring"])
    out["noncontig"] = float((x - ref).abs().max())
    # 3. ReduceScatter and AllGather schedules
    for alg in ("ring", "direct"):
        rs = build_schedule(alg, n, "reducescatter")
        x = _data(rank, 1001, 3, "float32")
        ref = x.clone()
        dist.all_reduce(ref)
        te.reduce_scatter(x, rs)
        mine = [c for c in range(rs.nchunks) if rs.owner[c] == rank]
        errs = []
        for c in mine:
            lo, hi = te.chunk_bounds(x.numel(), rs.nchunks, c)
            errs.append(float((x[lo:hi] - ref[lo:hi]).abs().max()) if hi > lo else 0.0)
        out[("rs", alg)] = max(errs)
        ag = build_schedule(alg, n, "allgather")
        full = torch.arange(1001, dtype=torch.float32)
        y = torch.full_like(full, float("nan"))
        for c in range(ag.nchunks):
            if ag.owner[c] == rank:
                lo, hi = te.chunk_bounds(1001, ag.nchunks, c)
                y[lo:hi] = full[lo:hi]
        te.all_gather(y, ag)
        out[("ag", alg)] = bool(torch.equal(y, full))
    # 4. a subgroup: ranks 1 and 3 run a 2-rank ring on their own group
    sub = dist.new_group([1, 3])
    if rank in (1, 3):
        x = torch.full((5,), float(rank))
        te.allreduce(x, build_schedule("ring", 2), group=sub)
        out["subgroup"] = x.tolist()
    # 5. bad input: one-line ValueError subclasses naming what to change
    ring = scheds["ring"]
    out["bad"] = {
        "ranks": _err("ranks", lambda: te.allreduce(torch.ones(4), build_schedule("ring", n + 1))),
        "collective": _err("coll", lambda: te.allreduce(torch.ones(4), build_schedule("ring", n, "allgather"))),
        "dtype": _err("dtype", lambda: te.allreduce(torch.ones(4, dtype=torch.bool), ring)),
        "timeout": _err("timeout", lambda: te.allreduce(torch.ones(4), ring, timeout=0)),
        "not_tensor": _err("tensor", lambda: te.allreduce([1.0, 2.0], ring)),
    }
    # 6. a phase that waits for the punctual ranks starts without the late rank
    for label, s in (("toy", toy_stragglar(n, n - 1)), ("real", straggler_schedule(n, n - 1))):
        first_late_step = s.phases[0].stop
        stamps: dict[int, float] = {}
        x = _data(rank, 4096, 4, "float32")
        ref = x.clone()
        dist.all_reduce(ref)
        dist.barrier()
        if rank == n - 1:
            time.sleep(1.0)
        arrive = time.perf_counter()
        te.run_schedule(x, s, _before_step=lambda k: stamps.setdefault(k, time.perf_counter()))
        late_steps = [t for k, t in stamps.items() if k >= first_late_step]
        out[("phase", label)] = {"arrive": arrive, "rs_done": min(late_steps) if late_steps else None,
                                 "err": float((x - ref).abs().max())}
    # 7. run-time straggler detection (window 0.15 s: only a punctual rank held up that long on a loaded
    # machine would be taken for late; the late ranks sleep 0.4-0.5 s)
    sar = StragglerAwareAllReduce(family=straggler_family(n), window=0.15, timeout=30)
    out["sar"] = []
    for case, late in (("one", {2: 0.4}), ("first", {0: 0.4}), ("two", {1: 0.5, 3: 0.5}), ("none", {})):
        x = _data(rank, 5000, 5, "float32")
        ref = x.clone()
        dist.all_reduce(ref)
        dist.barrier()
        time.sleep(late.get(rank, 0.0))
        sar(x)
        out["sar"].append((case, sar.last.straggler, sar.last.schedule, sar.last.order, sar.last.agree_s,
                           float((x - ref).abs().max()), _digest(x)))
    # 7b. the several-key arrival mask used beyond 62 ranks (here 1 rank per key)
    sar = StragglerAwareAllReduce(family=straggler_family(n), window=0.15, timeout=30, _bits=1)
    x = _data(rank, 5000, 6, "float32")
    ref = x.clone()
    dist.all_reduce(ref)
    dist.barrier()
    time.sleep(0.4 if rank == 1 else 0.0)
    sar(x)
    out["sar_multiword"] = (sar.last.straggler, float((x - ref).abs().max()))
    # 7c. a family without the late rank's schedule: every rank falls back to ring (no KeyError)
    fam = straggler_family(n)
    sar = StragglerAwareAllReduce(family={r: fam[r] for r in (0, 1)}, window=0.15, timeout=30)
    out["sar_partial"] = []
    for late_rank in (2, 1):
        x = _data(rank, 5000, 7, "float32")
        ref = x.clone()
        dist.all_reduce(ref)
        dist.barrier()
        time.sleep(0.4 if rank == late_rank else 0.0)
        sar(x)
        out["sar_partial"].append((late_rank, sar.last.straggler, float((x - ref).abs().max())))
    # 8. DDP: a comm hook equals plain DDP after a few steps
    from torch.nn.parallel import DistributedDataParallel as DDP

    out["ddp"] = {}
    for alg in ("ring", "rhd"):
        torch.manual_seed(0)
        base = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
        import copy

        a, b = DDP(copy.deepcopy(base)), DDP(copy.deepcopy(base))
        b.register_comm_hook(te.CommHookState(alg), te.comm_hook)
        oa = torch.optim.SGD(a.parameters(), lr=0.1)
        ob = torch.optim.SGD(b.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(100 + rank)
        for _ in range(3):
            xb, yb = torch.randn(8, 10, generator=g), torch.randn(8, 3, generator=g)
            for model, opt in ((a, oa), (b, ob)):
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(xb), yb).backward()
                opt.step()
        out["ddp"][alg] = max(float((p - q).abs().max()) for p, q in zip(a.parameters(), b.parameters()))
        out["ddp_moved"] = max(float((p - q).abs().max()) for p, q in zip(a.parameters(), base.parameters()))
    return out


@pytest.fixture(scope="module")
def results():
    return launch(world, N, timeout=240)


# ------------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("dt,tol", [("float32", 1e-6), ("float16", 4e-3), ("bfloat16", 3e-2)])
def test_allreduce_matches_torch(results, dt, tol):
    for key, (_err64, _err_torch) in results[0]["allreduce"].items():
        if key[2] != dt:
            continue
        worst = max(results[r]["allreduce"][key][0] for r in range(N))
        assert worst <= tol, (key, worst)
        assert max(results[r]["allreduce"][key][1] for r in range(N)) <= 2 * tol, key


def test_allreduce_bitwise_identical_across_ranks(results):
    keys = results[0]["digests"].keys()
    assert len(keys) >= 4 * len(LENGTHS) * len(DTYPES)
    for key in keys:
        assert len({results[r]["digests"][key] for r in range(N)}) == 1, key


def test_noncontiguous_reducescatter_allgather_subgroup(results):
    for r in range(N):
        assert results[r]["noncontig"] < 1e-5
        for alg in ("ring", "direct"):
            assert results[r][("rs", alg)] < 1e-5
            assert results[r][("ag", alg)]
    assert results[1]["subgroup"] == [4.0] * 5 and results[3]["subgroup"] == [4.0] * 5


def test_bad_input_is_one_line_valueerror(results):
    bad = results[0]["bad"]
    for what, got in bad.items():
        assert got is not None, what
        name, is_value_error, is_collsynth, msg = got
        assert is_value_error and is_collsynth, got
        assert "\n" not in msg
    assert f"{N + 1} ranks" in bad["ranks"][3] and f"has {N}" in bad["ranks"][3]
    assert "allgather" in bad["collective"][3]
    assert "timeout" in bad["timeout"][3]


@pytest.mark.parametrize("label", ["toy", "real"])
def test_punctual_phase_starts_without_the_late_rank(results, label):
    late = results[N - 1][("phase", label)]
    for r in range(N - 1):
        mine = results[r][("phase", label)]
        assert mine["err"] < 1e-4
        # the punctual ranks were done with their ReduceScatter before the late rank even arrived
        assert mine["rs_done"] is not None and mine["rs_done"] < late["arrive"], (r, mine, late)
    assert late["err"] < 1e-4


def test_straggler_detected_at_run_time(results):
    cases = {c[0]: i for i, c in enumerate(results[0]["sar"])}
    for case, expect in (("one", 2), ("first", 0), ("two", None)):
        got = [results[r]["sar"][cases[case]] for r in range(N)]
        assert {g[1] for g in got} == {expect}, (case, got)
        assert all(g[5] < 1e-4 for g in got), case
        assert len({g[6] for g in got}) == 1, case  # bitwise identical everywhere
    one = [results[r]["sar"][cases["one"]] for r in range(N)]
    assert one[2][3] == N  # the late rank arrived last and learned it is the straggler
    two = [results[r]["sar"][cases["two"]] for r in range(N)]
    assert all(g[2].startswith("ring") for g in two)
    assert all(results[r]["sar_multiword"][0] == 1 and results[r]["sar_multiword"][1] < 1e-4 for r in range(N))
    none = [results[r]["sar"][cases["none"]] for r in range(N)]
    assert len({(g[1], g[2]) for g in none}) == 1 and all(g[5] < 1e-4 for g in none)


def test_partial_family_falls_back_to_ring_for_a_rank_without_a_schedule(results):
    for r in range(N):
        (late_a, got_a, err_a), (late_b, got_b, err_b) = results[r]["sar_partial"]
        assert (late_a, got_a) == (2, None) and err_a < 1e-4  # rank 2 has no schedule: ring
        assert (late_b, got_b) == (1, 1) and err_b < 1e-4  # rank 1 has one: StragglAR for it


def test_ddp_comm_hook_equals_plain_ddp(results):
    for r in range(N):
        assert results[r]["ddp_moved"] > 1e-3  # training changed the parameters
        for alg, diff in results[r]["ddp"].items():
            assert diff < 1e-5, (r, alg, diff)


def test_chunk_bounds_cover_without_padding():
    from collsynth.backends.torch.executor import chunk_bounds

    for length in (1, 2, 7, 8, 9, 1003):
        for nchunks in (1, 3, 8):
            spans = [chunk_bounds(length, nchunks, c) for c in range(nchunks)]
            assert spans[0][0] == 0 and spans[-1][1] == length
            assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
            assert chunk_bounds(length, nchunks, 0, nchunks) == (0, length)


def test_uninitialized_group_is_a_clear_error():
    from collsynth.backends.torch.executor import allreduce

    if dist.is_initialized():  # pragma: no cover
        pytest.skip("a process group is already initialized in this process")
    with pytest.raises(CollsynthError, match="init_process_group"):
        allreduce(torch.ones(3), build_schedule("ring", 2))


def test_toy_schedule_has_the_exchange_step():
    s = toy_stragglar(4, 3)
    step = s.phases[0].stop
    ts = list(s.transfers(step))
    assert {(t.src, t.dst) for t in ts} == {(0, 3), (3, 0)} and all(t.reduce for t in ts)
    assert np.all(s.src[s.step < step] != 3) and np.all(s.dst[s.step < step] != 3)
