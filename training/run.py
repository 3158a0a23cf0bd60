"""Real data-parallel training on torch.distributed, for checking the training-step model.

The model is an embedding bag plus a small MLP (``EmbBagMLP``) regressing synthetic data (``TrainData``:
the mean of a fixed random value per token id; ids skewed so that frequent embeddings learn). Its
gradient is dominated by the dense embedding gradient, so the gradient bytes are set by the table
size while forward+backward stays cheap; each micro-batch is then padded with ``time.sleep`` up to
``tau(rank, k)`` of a ``training.compute.ComputeModel`` (the injected per-rank delay), so the
compute times are the ones ``train-sim`` is given. Micro-batch k of rank r always sees the same data.

Runs (``METHOD:ALGORITHM``):
- ``ddp:torch``: DistributedDataParallel (one bucket), torch's own all_reduce (a thin hook around
  ``dist.all_reduce`` that stamps when the bucket is ready);
- ``ddp:<alg>``: DDP with the collsynth comm hook (``backends.torch.hook.comm_hook``); ``ddp:stragglar``
  detects the late rank at run time (``StragglerAwareAllReduce``);
- ``acco:<alg>``: the ACCO loop (Nabli et al., arXiv 2406.02613; docs/acco.md 1.2-1.4 and 2). A
  communication thread runs ReduceScatter (collsynth ``reduce_scatter``; an algorithm without one runs
  its AllReduce), the AdamW step on this rank's fp32 shard, and the AllGather, while the main thread
  keeps computing groups of A micro-batches and swaps buffers after the first group that ends once
  the round's communication is done. Rounds alternate estimate (tentative step, optimizer state
  restored) and commit (real step on the gradients of both halves), each averaged by the global
  micro-batch count. The count travels in the gradient buffer (one slot per chunk, acco.md 5.3), so
  no barrier precedes the ReduceScatter. ``fixed_groups`` runs exactly one group per round
  (deterministic: used to compare losses).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from collsynth.backends.torch.bench import calibrate_in_group
from collsynth.backends.torch.executor import all_gather, allreduce, reduce_scatter
from collsynth.backends.torch.hook import CommHookState, comm_hook
from collsynth.backends.torch.straggler import StragglerAwareAllReduce
from collsynth.synth.registry import build_schedule, get_algorithm
from collsynth.synth.verify import check
from collsynth.training.compute import ComputeModel

RUN_METHODS = ("ddp", "acco")


@dataclass(frozen=True)
class TrainSpec:
    """One real training job (all runs share it)."""

    nranks: int
    runs: tuple[tuple[str, str], ...]  # (method, algorithm)
    steps: int
    warmup: int
    microbatches: int
    batch: int  # samples per micro-batch
    vocab: int
    dim: int = 32
    hidden: int = 64
    tokens: int = 16
    compute_s: float | None = 0.05
    jitter: float = 0.0
    slow: tuple[tuple[int, float], ...] = ()
    seed: int = 0
    lr: float = 1e-2
    window_s: float = 0.25
    timeout_s: float = 120.0
    fixed_groups: bool = False
    eval_samples: int = 512
    trace: Any = None  # optional (micro-batches, nranks) array instead of compute_s
    calib_sizes: tuple[int, ...] = ()  # before each collsynth run: `collsynth calibrate`'s ring pattern
    torch_sizes: tuple[int, ...] = ()  # before each torch run: time dist.all_reduce at these sizes
    calib_reps: int = 5

    @property
    def params(self) -> int:
        return self.vocab * self.dim + self.dim * self.hidden + self.hidden + self.hidden + 1

    def compute_model(self) -> Any:
        return ComputeModel(self.nranks, self.compute_s, jitter=self.jitter, slow=dict(self.slow),
                            trace=self.trace, seed=self.seed)


def vocab_for(grad_bytes: int, dim: int = 32, hidden: int = 64) -> int:
    """Embedding rows so that the fp32 gradient is about ``grad_bytes``."""
    rest = dim * hidden + 2 * hidden + 1
    return max(16, int(round((grad_bytes / 4 - rest) / dim)))

# ---------------------------------------------------------------------------------------------- model/data
def make_model(spec: TrainSpec, seed: int) -> Any:
    import torch
    from torch import nn

    class EmbBagMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.EmbeddingBag(spec.vocab, spec.dim, mode="mean")
            self.fc1 = nn.Linear(spec.dim, spec.hidden)
            self.fc2 = nn.Linear(spec.hidden, 1)

        def forward(self, idx: Any) -> Any:
            return self.fc2(torch.relu(self.fc1(self.emb(idx)))).squeeze(-1)

    torch.manual_seed(seed)
    return EmbBagMLP()


class TrainData:
    """Deterministic synthetic samples: micro-batch k of rank r, and a fixed evaluation set.

    A sample is ``tokens`` ids drawn as floor(vocab * u^6), u uniform (about half of them among the
    first 1% of ids, so frequent embeddings learn quickly); its target is the mean of a fixed random
    value per id plus 5% noise, scaled to unit variance.
    """

    def __init__(self, spec: TrainSpec) -> None:
        import torch

        self.spec = spec
        g = torch.Generator().manual_seed(int(np.random.SeedSequence([spec.seed, 7919]).generate_state(1)[0]))
        self.value = torch.randn(spec.vocab, generator=g)
        self.scale = 1.0
        x, _ = self._make(np.random.SeedSequence([spec.seed, 99991]), spec.eval_samples)
        clean = self.value[x].mean(dim=1)
        self.scale = float(clean.std()) or 1.0
        self.eval_x, self.eval_y = x, clean / self.scale  # evaluated without the noise

    def _make(self, ss: Any, count: int) -> tuple[Any, Any]:
        import torch

        g = torch.Generator().manual_seed(int(ss.generate_state(1)[0]))
        u = torch.rand(count, self.spec.tokens, generator=g)
        idx = (u ** 6 * self.spec.vocab).long().clamp_(max=self.spec.vocab - 1)
        y = self.value[idx].mean(dim=1) / self.scale
        return idx, y + 0.05 * torch.randn(count, generator=g)

    def batch(self, rank: int, k: int) -> tuple[Any, Any]:
        return self._make(np.random.SeedSequence([self.spec.seed, rank, k]), self.spec.batch)

    def eval_loss(self, model: Any) -> float:
        import torch

        with torch.no_grad():
            return float(torch.nn.functional.mse_loss(model(self.eval_x), self.eval_y))


class _Pad:
    """Run a micro-batch, sleeping first so that it lasts about tau (estimate of the real part: EMA).

    ``durations`` keeps what each micro-batch really took (sleep + forward + backward), in order: when
    the machine is too loaded for the real part to fit in tau, these are the compute times that
    happened, and ``train-bench`` predicts from them too (a measured trace).
    """

    def __init__(self, spec: TrainSpec, rank: int) -> None:
        self.cm = spec.compute_model()
        self.rank = rank
        self.est = 0.0
        self.over: list[float] = []  # seconds by which a measured micro-batch exceeded its target
        self.durations: list[float] = []

    def sleep_for(self, k: int) -> float:
        target = float(self.cm.times(self.rank, k, 1)[0])
        pad = target - self.est
        if pad > 0:
            time.sleep(pad)
        return target

    def measured(self, t0: float, target: float, t_real0: float, t1: float) -> None:
        self.est = (t1 - t_real0) if self.est == 0 else 0.8 * self.est + 0.2 * (t1 - t_real0)
        self.over.append(max(0.0, (t1 - t0) - target))
        self.durations.append(t1 - t0)

    def report(self) -> dict[str, Any]:
        return {"over_s": float(np.mean(self.over)) if self.over else 0.0, "compute_s": self.durations}

# ---------------------------------------------------------------------------------------------- DDP
def _stamp_hook(inner: Any, stamps: list[float]) -> Any:
    def hook(state, bucket):  # unannotated: DDP rejects non-torch annotations
        stamps.append(time.perf_counter())
        return inner(state, bucket)
    return hook


def _torch_allreduce_hook(state, bucket):  # unannotated: DDP rejects non-torch annotations
    import torch.distributed as dist

    buf = bucket.buffer()
    buf.div_(dist.get_world_size())
    return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])


def _run_ddp(spec: TrainSpec, rank: int, algorithm: str, data: TrainData) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    net = make_model(spec, spec.seed)
    cap = max(1, math.ceil(spec.params * 4 / 2**20) + 1)  # one bucket
    ddp = DDP(net, bucket_cap_mb=cap)
    arrive: list[float] = []
    runner = None
    if algorithm == "torch":
        ddp.register_comm_hook(None, _stamp_hook(_torch_allreduce_hook, arrive))
    else:
        if algorithm == "stragglar":
            runner = StragglerAwareAllReduce(timeout=spec.timeout_s, window=spec.window_s)
            state = CommHookState(runner, timeout=spec.timeout_s)
        else:
            state = CommHookState(algorithm, timeout=spec.timeout_s)
        ddp.register_comm_hook(state, _stamp_hook(comm_hook, arrive))
    opt = torch.optim.AdamW(ddp.parameters(), lr=spec.lr, fused=True)
    pad = _Pad(spec, rank)
    A = spec.microbatches
    steps, agree, chosen = [], [], []
    dist.barrier()
    k = 0
    for _step in range(spec.steps):
        t_start = time.perf_counter()
        n_arr = len(arrive)
        for j in range(A):
            t0 = time.perf_counter()
            target = pad.sleep_for(k)
            x, y = data.batch(rank, k)
            k += 1
            t1 = time.perf_counter()
            if j < A - 1:
                with ddp.no_sync():
                    (torch.nn.functional.mse_loss(ddp(x), y) / A).backward()
                pad.measured(t0, target, t1, time.perf_counter())
            else:
                (torch.nn.functional.mse_loss(ddp(x), y) / A).backward()
                if len(arrive) > n_arr:  # the hook ran when the gradients were ready: end of compute
                    pad.measured(t0, target, t1, arrive[n_arr])
        t_comm = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=False)
        t_end = time.perf_counter()
        if len(arrive) == n_arr:
            raise RuntimeError("the DDP communication hook did not run")
        steps.append({"start": t_start, "arrive": arrive[n_arr], "buckets": len(arrive) - n_arr,
                      "comm_done": t_comm, "opt_s": t_end - t_comm, "end": t_end})
        if runner is not None and runner.last is not None:
            agree.append(runner.last.agree_s)
            chosen.append(runner.last.schedule)
    loss = data.eval_loss(net)
    dist.barrier()
    return {"steps": steps, "loss": loss, "agree_s": agree, "chosen": chosen, **pad.report()}

# ---------------------------------------------------------------------------------------------- ACCO
class _AccoComm:
    """The communication thread's state: buffer layout, shard optimizer, one round per ``start``."""

    def __init__(self, spec: TrainSpec, rank: int, algorithm: str, params: Any) -> None:
        import torch

        n = spec.nranks
        self.rank, self.spec = rank, spec
        self.P = int(sum(p.numel() for p in params))
        self.rs_sched = check(build_schedule("ring", n, "reducescatter"))
        self.ag_sched = check(build_schedule("ring", n, "allgather"))
        self.runner: StragglerAwareAllReduce | Callable[[Any], Any] | None = None
        if "reducescatter" in get_algorithm(algorithm).collectives:
            self.rs_sched = check(build_schedule(algorithm, n, "reducescatter"))
            if "allgather" in get_algorithm(algorithm).collectives:
                self.ag_sched = check(build_schedule(algorithm, n, "allgather"))
        elif algorithm == "stragglar":
            self.runner = StragglerAwareAllReduce(timeout=spec.timeout_s, window=spec.window_s)
        else:
            ar = check(build_schedule(algorithm, n, "allreduce"))

            self.runner = lambda t: allreduce(t, ar, timeout=spec.timeout_s)
        rs_owner, ag_owner = self.rs_sched.owner, self.ag_sched.owner
        assert rs_owner is not None and ag_owner is not None  # Schedule sets them for these collectives
        if list(rs_owner) != list(ag_owner):
            raise RuntimeError("ReduceScatter and AllGather chunk owners differ")
        self.nch = self.rs_sched.nchunks
        self.mine = [c for c in range(self.nch) if rs_owner[c] == rank]
        self.m = -(-self.P // self.nch) + 1  # per chunk: data, then one count slot
        self.buf = torch.zeros(self.nch * self.m)
        self.bufm = self.buf.view(self.nch, self.m)
        # the model lives in one flat vector and its gradients in another (acco.md 1.1): parameters and
        # .grad are views, so backward accumulates straight into ``gflat`` and a swap is one copy each way
        self.flat = torch.nn.utils.parameters_to_vector(params).detach().clone()
        self.gflat = torch.zeros_like(self.flat)
        off = 0
        for p in params:
            k = p.numel()
            p.data = self.flat[off:off + k].view_as(p)
            p.grad = self.gflat[off:off + k].view_as(p)
            off += k
        self.all_spans = [(c, min(c * (self.m - 1), self.P), min((c + 1) * (self.m - 1), self.P))
                          for c in range(self.nch)]
        self.spans = [self.all_spans[c] for c in self.mine]
        self.shard = torch.nn.Parameter(torch.cat([self.flat[lo:hi] for _, lo, hi in self.spans]).clone())
        self.opt = torch.optim.AdamW([self.shard], lr=spec.lr, fused=True)
        self.start_evt, self.done_evt = threading.Event(), threading.Event()
        self.estimate = True
        self.stop = False
        self.error: BaseException | None = None
        self.rounds: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    # gradients -> buffer, buffer -> parameters (chunk c: its slice, then the count slot)
    def pack(self, count: int) -> None:
        for c, lo, hi in self.all_spans:
            self.bufm[c, :hi - lo] = self.gflat[lo:hi]
        self.bufm[:, self.m - 1] = float(count)

    def unpack(self) -> None:
        for c, lo, hi in self.all_spans:
            self.flat[lo:hi] = self.bufm[c, :hi - lo]

    def launch(self, estimate: bool) -> None:
        self.estimate = estimate
        self.done_evt.clear()
        self.start_evt.set()

    def _loop(self) -> None:
        try:
            while True:
                self.start_evt.wait()
                self.start_evt.clear()
                if self.stop:
                    return
                self._round()
                self.done_evt.set()
        except BaseException as e:  # surfaced by the main thread
            self.error = e
            self.done_evt.set()

    def _round(self) -> None:
        import torch

        t0 = time.perf_counter()
        if self.runner is not None:
            self.runner(self.buf)
        else:
            reduce_scatter(self.buf, self.rs_sched, timeout=self.spec.timeout_s)
        t1 = time.perf_counter()
        count = float(self.bufm[self.mine[0], self.m - 1])
        grad = torch.cat([self.bufm[c, :hi - lo] for c, lo, hi in self.spans]) / count
        p = self.shard
        if self.estimate:
            saved = p.detach().clone()
            state = {k: v.clone() for k, v in self.opt.state[p].items()} if p in self.opt.state else None
        p.grad = grad
        self.opt.step()
        off = 0
        for c, lo, hi in self.spans:
            self.bufm[c, :hi - lo] = p.detach()[off:off + hi - lo]
            off += hi - lo
        if self.estimate:
            with torch.no_grad():
                p.copy_(saved)
            if state is None:
                self.opt.state.pop(p, None)
            else:
                self.opt.state[p] = state
        t2 = time.perf_counter()
        all_gather(self.buf, self.ag_sched, timeout=self.spec.timeout_s)
        t3 = time.perf_counter()
        rec = {"launch": t0, "rs_done": t1, "opt_s": t2 - t1, "done": t3, "count": int(round(count)),
               "estimate": self.estimate}
        last = getattr(self.runner, "last", None)  # what StragglerAwareAllReduce detected
        if last is not None:
            rec["agree_s"] = last.agree_s
            rec["chosen"] = last.schedule
        self.rounds.append(rec)

    def close(self) -> None:
        self.stop = True
        self.start_evt.set()
        self.thread.join(5)


def _run_acco(spec: TrainSpec, rank: int, algorithm: str, data: TrainData) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    net = make_model(spec, spec.seed)
    params = list(net.parameters())
    comm = _AccoComm(spec, rank, algorithm, params)
    pad = _Pad(spec, rank)
    A = spec.microbatches
    k = 0
    count = 0
    groups: list[int] = []
    swaps: list[float] = []

    def group() -> None:
        nonlocal k, count
        for _ in range(A):
            t0 = time.perf_counter()
            target = pad.sleep_for(k)
            x, y = data.batch(rank, k)
            k += 1
            t1 = time.perf_counter()
            torch.nn.functional.mse_loss(net(x), y).backward()
            pad.measured(t0, target, t1, time.perf_counter())
            count += 1

    try:
        dist.barrier()
        group()  # seed: gradients at theta_0 fill the first buffer (not zeroed)
        comm.pack(count)
        comm.launch(estimate=True)
        for r in range(2 * spec.steps):
            g = 0
            while True:
                group()
                g += 1
                if spec.fixed_groups:
                    comm.done_evt.wait()
                    break
                if comm.done_evt.is_set():
                    break
            if comm.error is not None:
                raise comm.error
            t0 = time.perf_counter()
            with torch.no_grad():
                comm.unpack()
            if r == 2 * spec.steps - 1:
                groups.append(g)
                break
            comm.pack(count)
            if r % 2 == 0:  # an estimate round ended: the next (commit) round takes both halves
                comm.gflat.zero_()
                count = 0
            comm.launch(estimate=(r + 1) % 2 == 0)
            swaps.append(time.perf_counter() - t0)
            groups.append(g)
    finally:
        comm.done_evt.wait(spec.timeout_s)
        comm.close()
    if comm.error is not None:
        raise comm.error
    loss = data.eval_loss(net)
    check = float(comm.flat.double().sum())
    dist.barrier()
    return {"rounds": comm.rounds, "groups": groups, "swap_s": swaps, "loss": loss, "param_sum": check,
            **pad.report()}

# ---------------------------------------------------------------------------------------------- worker
def _time_torch_allreduce(spec: TrainSpec) -> dict[str, list[float]]:
    """Seconds per ``dist.all_reduce`` of each size (after a barrier; one list entry per repetition)."""
    import torch
    import torch.distributed as dist

    out: dict[str, list[float]] = {}
    for size in spec.torch_sizes:
        x = torch.ones(max(1, size // 4))
        dist.all_reduce(x)
        times = []
        for _ in range(spec.calib_reps):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            times.append(time.perf_counter() - t0)
        out[str(size)] = times
    return out


def train_worker(rank: int, nranks: int, spec: TrainSpec) -> dict[str, Any]:
    """Every run of ``spec`` in turn on this rank (module level: spawned by backends.torch.launch.launch)."""

    data = TrainData(spec)
    out: dict[str, Any] = {}
    for method, algorithm in spec.runs:
        # calibrate right before each run, in the same processes, so that the model sees this load
        cal: dict[str, Any] = {}
        if algorithm == "torch" and spec.torch_sizes:
            cal["torch_allreduce_s"] = _time_torch_allreduce(spec)
        elif algorithm != "torch" and spec.calib_sizes:
            cal["calibrate_s"] = calibrate_in_group(rank, nranks, "gloo", list(spec.calib_sizes), spec.calib_reps,
                                               "ring", False)
        fn = _run_ddp if method == "ddp" else _run_acco
        out[f"{method}:{algorithm}"] = {**fn(spec, rank, algorithm, data), **cal}
    return out

__all__ = ["RUN_METHODS", "TrainSpec", "train_worker", "vocab_for"]
