"""StragglerAwareAllReduce: pick the StragglAR schedule for whichever rank turns out late, at run time.

The StragglAR paper fixes the straggler ahead of time; here each call finds it. Mechanism (one atomic
counter in the process group's store, the rendezvous service torch.distributed already has):

1. Arrival: rank r does ``v = store.add(mask_key, 1 << r)``. The returned value is the set of ranks
   that have arrived, so ``popcount(v)`` is r's arrival order and no second message is needed. (For
   more than 62 ranks the mask is split over several keys plus a counter; same protocol.)
2. Decision: the rank whose add makes ``n - 1`` arrivals knows the missing rank at once and proposes
   ``"<missing>"`` with ``compare_set`` (atomic: the first proposal wins, every rank reads the same
   value). If all n have arrived by then there is no straggler and it proposes ``"ring"``.
3. Two late ranks: the rank that arrives (n-2)-th waits ``window`` seconds for a decision; if none
   comes, both remaining ranks are late together, and it proposes ``"ring"`` (StragglAR needs n-1
   punctual ranks; ring is correct for any arrival order). compare_set settles the race with a
   late (n-1)-th arrival.
4. Everyone else reads the decision key (blocking) and runs the chosen schedule; the late rank reads
   it when it arrives and joins the schedule at its first transfer.

Cost on the critical path after the straggler arrives: two store round trips for the late rank
(add + get of a value already set), measured in ``last.agree_s``. A cheaper data-plane signal (p2p
"I am here" messages) would need n-1 messages per rank and a second round to agree; the store gives
agreement with one atomic op. Keys of call i-2 are deleted during call i, so the store stays small.

On a cluster (issue 15 point 5: ``topology=`` a Topology or preset with nodes, or ``gpus_per_node=G``) the
family is synth.algorithms.stragglar.family's ``ClusterFamily``: clusterstraggler's late-GPU form for
every rank and its late-node form for every node, built and verified lazily (the first call that needs
a member builds it on every rank, deterministically; ``prebuild=True`` builds all n + N up front). The
same protocol chooses the form: the (n-1)-th arrival proposes the late-GPU form for the missing rank;
the (n-G)-th arrival, when the G missing ranks are exactly one node, waits ``window`` seconds and, if
nobody else arrived meanwhile, proposes that node's form (a later decision, e.g. the (n-1)-th arrival's,
wins by compare_set otherwise). Every schedule is correct for any arrival order, so a race only costs
speed, never the result.

In one NVLink domain (``topology=`` "gb200-nvl72", "dgx-h100", "nvswitch" or another topology without nodes)
the family serves each late GPU with what clusterstraggler builds for it there at ``cluster_params``'s
``size``: the broadcast form of synth/algorithms/stragglar/domain.py where it is fastest (gb200-nvl72 at
64 MiB: 0.173 ms after the arrival, where StragglAR's schedule takes 0.343), else multistraggler's flat
form or a synchronous schedule; ``last.form`` says which ("domain", "multistraggler", "synchronous").
"""

from __future__ import annotations

import datetime
import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from collsynth.backends.torch.executor import (
    DEFAULT_TIMEOUT_S,
    CollectiveError,
    allreduce,
    check_schedule,
    ensure_verified,
    require_torch,
)
from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.stragglar.family import ClusterFamily, build_family
from collsynth.synth.ir import Schedule
from collsynth.synth.registry import build_schedule
from collsynth.synth.topology import Topology, cluster_topology, make_topology

_BITS = 62
_INSTANCES = itertools.count()


@dataclass(frozen=True)
class Agreement:
    """What one rank learned in one call."""

    call: int
    rank: int
    order: int  # 1 = first to arrive
    straggler: int | None  # the one late rank (StragglAR, or the cluster's late-GPU form); else None
    schedule: str
    agree_s: float  # from this rank's arrival until it knew the schedule
    late: tuple[int, ...] = ()  # the late set the schedule is for; () when the fallback (ring) ran
    form: str = "fallback"  # stragglar | gpu | node (cluster forms) | domain | multistraggler | synchronous | fallback


class StragglerAwareAllReduce:
    """AllReduce that runs StragglAR for whichever rank arrives last, detected at run time.

    ``family`` maps straggler rank -> StragglAR schedule (default: synth.algorithms.stragglar's
    ``build_family(n)``); ``fallback`` (default ring) runs when no single rank is late. All ranks must
    create their instances in the same order (like process groups). ``window`` is how long the
    (n-2)-th arrival waits for the (n-1)-th before deciding that two ranks are late together.

    On a cluster give ``topology`` (a Topology, or a preset name built for n ranks, with nodes) or
    ``gpus_per_node`` (an ``n // gpus_per_node`` x ``gpus_per_node`` rail cluster, synth.topology
    ``cluster_topology``) instead of ``family``: the late-GPU or late-node clusterstraggler schedule runs
    for whoever is late (module docstring); ``cluster_params`` (``size``, ``pipeline``) go to
    clusterstraggler; ``prebuild`` builds the whole family up front instead of lazily. A ``topology`` of one
    NVLink domain (gb200-nvl72, dgx-h100) serves each late GPU with clusterstraggler's fastest schedule there.
    """

    def __init__(self, group: Any = None, n: int | None = None, *, family: Mapping[int, Schedule] | None = None,
                 fallback: Schedule | None = None, store: Any = None, window: float = 0.1,
                 timeout: float | None = None, topology: Topology | str | None = None,
                 gpus_per_node: int | None = None, cluster_params: Mapping[str, Any] | None = None,
                 prebuild: bool = False, _bits: int = _BITS) -> None:
        torch, dist = require_torch()
        if not dist.is_initialized():
            raise CollsynthError("torch.distributed is not initialized: call init_process_group first")
        world = dist.get_world_size(group)
        n = world if n is None else n
        if n != world:
            raise CollsynthError(f"StragglerAwareAllReduce for {n} ranks but the process group has {world}: "
                                 f"pass n={world}")
        if not window > 0:
            raise CollsynthError(f"window must be positive seconds, got {window!r}")

        self.cluster = cluster_family(n, topology, gpus_per_node, cluster_params, family)
        if self.cluster is not None:
            family = {}
            if prebuild:
                for sched in self.cluster.build_all().values():
                    check_schedule(sched, n, "allreduce")
                    ensure_verified(sched)
        elif family is None:
            family = build_family(n)
        if fallback is None:
            fallback = build_schedule("ring", n)
        for r, s in family.items():
            if not 0 <= int(r) < n:
                raise CollsynthError(f"family has a schedule for rank {r}, which does not exist (ranks 0..{n - 1})")
            check_schedule(s, n, "allreduce")
            ensure_verified(s)
        check_schedule(fallback, n, "allreduce")
        ensure_verified(fallback)
        if store is None:
            from torch.distributed.distributed_c10d import _get_process_group_store

            store = _get_process_group_store(group if group is not None else dist.group.WORLD)
        self.group, self.n, self.rank = group, n, dist.get_rank(group)
        self.family = {int(r): s for r, s in family.items()}
        self.fallback = fallback
        self.window = float(window)
        self.timeout = DEFAULT_TIMEOUT_S if timeout is None else float(timeout)
        self._store = dist.PrefixStore(f"collsynth/sar{next(_INSTANCES)}/", store)
        self._bits = int(_bits)  # ranks per mask key (smaller only to test the several-key path)
        self._words = (n + self._bits - 1) // self._bits
        self._calls = 0
        self.last: Agreement | None = None

    # ------------------------------------------------------------------ agreement
    def _watched(self) -> set[int]:
        """How many ranks may be missing when an arrival needs the arrival mask: 1, and the node size."""
        return {1} if self.cluster is None else self.cluster.missing_counts()

    def _arrive(self, call: int) -> tuple[int, int]:
        """Register arrival; returns (arrival order, bit set of arrived ranks). The bit set is read only
        where this rank may have to name the missing ranks (0 otherwise, and for >62 ranks it may hold
        ranks that arrived after this one)."""
        st, r = self._store, self.rank
        bit = 1 << (r % self._bits)
        if self._words == 1:
            v = st.add(f"{call}/m0", bit)
            return bin(v).count("1"), v
        st.add(f"{call}/m{r // self._bits}", bit)
        order = st.add(f"{call}/count", 1)
        if self.n - order not in self._watched():
            return order, 0
        mask = 0
        for w in range(self._words):
            mask |= st.add(f"{call}/m{w}", 0) << (w * self._bits)
        return order, mask

    def _arrived(self, call: int) -> int:
        """How many ranks have arrived so far."""
        if self._words == 1:
            return bin(self._store.add(f"{call}/m0", 0)).count("1")
        return int(self._store.add(f"{call}/count", 0))

    def _proposal(self, missing: list[int]) -> str | None:
        """The decision naming ``missing`` as the late set, or None when no schedule serves it."""
        if self.cluster is not None:
            return ",".join(map(str, missing)) if self.cluster.serves(frozenset(missing)) else None
        return f"{missing[0]}" if len(missing) == 1 and missing[0] in self.family else None

    def _decide(self, call: int) -> tuple[str, int]:
        st, n = self._store, self.n
        key = f"{call}/decision"
        order, mask = self._arrive(call)
        left = n - order
        missing = sorted(r for r in range(n) if not mask >> r & 1) if left in self._watched() else []
        if left == 1:
            proposal = self._proposal(missing) if len(missing) == 1 else None
            return st.compare_set(key, "", proposal or "ring").decode(), order
        # a larger late set (a whole node) is proposed by the arrival that leaves exactly it missing
        watch = self._proposal(missing) if left >= 2 and len(missing) == left else None
        if n > 2 and (left == 2 or watch is not None):
            # poll rather than wait(timeout): a timed-out wait makes c10d log a warning every call
            deadline = time.perf_counter() + self.window
            while not st.check([key]):
                if time.perf_counter() >= deadline:
                    if left == 2 and watch is None:  # the last two ranks are late together
                        st.compare_set(key, "", "ring")
                    elif watch is not None and (left == 2 or self._arrived(call) == order):
                        st.compare_set(key, "", watch)  # nobody else came: that node is late
                    break
                time.sleep(0.001)
        try:
            st.wait([key], datetime.timedelta(seconds=self.timeout))
        except Exception as e:
            raise CollectiveError(f"collsynth StragglerAwareAllReduce: rank {self.rank} saw no decision within "
                                  f"{self.timeout:g} s; at most {order} of {n} ranks arrived "
                                  f"(a rank died or is later than the timeout)") from e
        return st.get(key).decode(), order

    def _schedule(self, decision: str) -> tuple[Schedule, tuple[int, ...], str]:
        """(schedule, late set, form) for an agreed decision."""
        if decision == "ring":
            return self.fallback, (), "fallback"
        late = tuple(int(x) for x in decision.split(","))
        if self.cluster is None:
            return self.family[late[0]], late, "stragglar"
        sched = self.cluster.get(late)
        if sched is None:  # pragma: no cover - only a served set is ever proposed
            raise CollectiveError(f"collsynth StragglerAwareAllReduce: no cluster schedule for late ranks {late}")
        check_schedule(sched, self.n, "allreduce")
        ensure_verified(sched)
        return sched, late, self.cluster.form_of(sched)

    def _collect(self, call: int) -> None:
        """Drop call-2's keys: every rank has finished call-1, so nobody reads them again."""
        if call < 2 or self.rank != 0:
            return
        keys = [f"{call - 2}/decision", *(f"{call - 2}/m{w}" for w in range(self._words))]
        if self._words > 1:
            keys.append(f"{call - 2}/count")
        for k in keys:
            try:
                self._store.delete_key(k)
            except Exception:  # some stores cannot delete; they just grow
                pass

    # ------------------------------------------------------------------ call
    def __call__(self, tensor: Any) -> Any:
        """Sum ``tensor`` in place over the group; returns it. ``self.last`` says what ran."""
        call = self._calls
        self._calls += 1
        t0 = time.perf_counter()
        if self.n < 3:
            decision, order = "ring", 0
        else:
            decision, order = self._decide(call)
        agree = time.perf_counter() - t0
        schedule, late, form = self._schedule(decision)
        straggler = late[0] if len(late) == 1 else None
        self.last = Agreement(call, self.rank, order, straggler, schedule.name or decision, agree, late, form)
        allreduce(tensor, schedule, self.group, timeout=self.timeout)
        self._collect(call)
        return tensor


def cluster_family(n: int, topology: Topology | str | None, gpus_per_node: int | None,
                    params: Mapping[str, Any] | None, family: Mapping[int, Schedule] | None) -> ClusterFamily | None:
    """The ClusterFamily StragglerAwareAllReduce runs for ``topology`` / ``gpus_per_node`` (its arguments), or
    None when neither is given; CollsynthError naming the argument to change when they do not fit n ranks."""
    if topology is None and gpus_per_node is None:
        if params:
            raise CollsynthError("cluster_params need topology= or gpus_per_node=")
        return None
    if family is not None:
        raise CollsynthError("give either family (one StragglAR schedule per rank) or topology/gpus_per_node "
                             "(the cluster forms), not both")
    if topology is not None and gpus_per_node is not None:
        raise CollsynthError("give either topology or gpus_per_node, not both")
    if gpus_per_node is not None:
        g = gpus_per_node
        if isinstance(g, bool) or not isinstance(g, int) or g < 2 or n % g or n // g < 2:
            raise CollsynthError(f"gpus_per_node must be an integer >= 2 that divides the {n} ranks into 2 or "
                                 f"more nodes, got {g!r}")
        topo = cluster_topology(n // g, g)
    elif isinstance(topology, str):
        topo = make_topology(topology, n)
    else:
        assert topology is not None  # one of the two is given
        topo = topology
        if int(topo.nranks) != n:
            raise CollsynthError(f"topology {topo.name!r} has {topo.nranks} GPUs but the group has {n} ranks: "
                                 f"give a topology for {n} GPUs")
    return ClusterFamily(topo, **dict(params or {}))
