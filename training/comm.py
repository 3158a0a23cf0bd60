"""Collectives for the training-step simulator: cached, verified schedules and fast repeated simulation.

``CollectiveModel.run(algorithm, collective, size, arrivals)`` returns every rank's finish time of one
collective, as ``synth.simulate.simulate`` computes it for those arrivals. A training run simulates
tens of thousands of collectives, so it uses a closed form of the simulator that is exact for
one-port schedules (``schedule.ports == 1``: ring, rhd, StragglAR):

With one send and one receive slot per rank, every quantity in the simulator's step loop is a max
of (arrival + constant) and (earlier end + constant): phase gates, RAW/WAW/WAR hazards, port slots
and link FIFOs are all fixed by the schedule, and link sharing fixes each duration. So each rank's
finish is max-plus linear in the arrival vector,

    finish[i] = max_r (arrival[r] + D[r, i]),

and D (n x n, -inf where rank r does not reach rank i) is read off n runs of ``simulate`` with one
rank arriving very late. Multi-port schedules (direct, twoshot) assign port slots by sorting end
times, which is not linear: they call ``simulate`` every time. ``exact=True`` forces that too.

Algorithm choice per call:
- ``stragglar`` (AllReduce): the straggler is the rank that arrives last, as the run-time detector
  ``backends.torch.straggler.StragglerAwareAllReduce`` decides. When the second-to-last rank arrives
  more than ``window_s`` after the third-to-last, the last two are late together and ring runs (the
  detector's fallback). ``agree_s`` (the detector's store round trips) delays the straggler's start.
- An algorithm without a ReduceScatter (stragglar, rhd, twoshot) runs its AllReduce in place of the
  ReduceScatter (every rank then holds its shard, summed) and ring for the AllGather.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from collsynth.errors import CollsynthError
from collsynth.synth.ir import Schedule
from collsynth.synth.registry import build_schedule, get_algorithm
from collsynth.synth.simulate import simulate
from collsynth.synth.topology import Topology
from collsynth.synth.verify import check

COLLECTIVES = ("allreduce", "reducescatter", "allgather")


@dataclass(frozen=True)
class CommResult:
    """One simulated collective."""

    finish: np.ndarray  # per rank: end of its last transfer (its arrival if it has none)
    label: str  # what ran, e.g. "stragglar@7", "ring", "stragglar-as-rs@3"
    first_start: np.ndarray | None = None  # per rank: start of its first transfer (detail runs only)


class CollectiveModel:
    """Schedules per (algorithm, collective, straggler), verified once, simulated on one Topology."""

    def __init__(self, topology: Topology, *, exact: bool = False, window_s: float = 0.1,
                 agree_s: float = 0.0) -> None:
        self.topology = topology
        self.n = topology.nranks
        self.exact = bool(exact)
        self.window_s = float(window_s)
        self.agree_s = float(agree_s)
        self._schedules: dict[tuple[str, str, int | None], Schedule] = {}
        self._dmat: dict[tuple[int, float], np.ndarray] = {}
        self._collectives: dict[str, tuple[str, ...]] = {}

    # ------------------------------------------------------------------ schedules
    def collectives_of(self, algorithm: str) -> tuple[str, ...]:
        if algorithm not in self._collectives:
            self._collectives[algorithm] = get_algorithm(algorithm).collectives
        return self._collectives[algorithm]

    def check_algorithm(self, algorithm: str, build: bool = True) -> None:
        """CollsynthError unless ``algorithm`` builds an AllReduce (for this many ranks: ``build`` builds it)."""
        if "allreduce" not in self.collectives_of(algorithm):
            raise CollsynthError(f"algorithm {algorithm!r} builds no AllReduce: choose one that does "
                                 f"(see `collsynth algorithms`)")
        if build:
            self.schedule(algorithm, "allreduce", self.n - 1 if algorithm == "stragglar" else None)

    def schedule(self, algorithm: str, collective: str, straggler: int | None = None) -> Schedule:
        """The verified schedule (cached)."""
        key = (algorithm, collective, straggler)
        s = self._schedules.get(key)
        if s is None:
            params: dict[str, Any] = {} if straggler is None else {"straggler": straggler}
            s = check(build_schedule(algorithm, self.n, collective, **params))
            self._schedules[key] = s
        return s

    def _matrix(self, s: Schedule, size: float) -> np.ndarray | None:
        """D for the max-plus closed form, or None when it does not apply."""
        if self.exact or s.ports != 1:
            return None
        key = (id(s), float(size))
        d = self._dmat.get(key)
        if d is None:
            base = simulate(s, size, self.topology).completion_s
            big = 4.0 * base + 1.0  # > every path that avoids rank r, so r's late arrival dominates
            d = np.empty((self.n, self.n), np.float64)
            arr = np.zeros(self.n)
            for r in range(self.n):
                arr[r] = big
                fin = np.asarray(simulate(s, size, self.topology, arr).rank_finish_s) - big
                arr[r] = 0.0
                d[r] = np.where(fin < -0.5 * big, -np.inf, fin)
            d.flags.writeable = False
            self._dmat[key] = d
        return d

    # ------------------------------------------------------------------ run
    def pick(self, algorithm: str, collective: str, arrivals: np.ndarray) -> tuple[Schedule, str, np.ndarray]:
        """The schedule that runs for these arrivals, its label, and the (possibly adjusted) arrivals."""
        coll = collective
        as_ar = collective == "reducescatter" and collective not in self.collectives_of(algorithm)
        if collective == "allgather" and collective not in self.collectives_of(algorithm):
            return self.schedule("ring", "allgather"), "ring", arrivals
        if as_ar:
            coll = "allreduce"
        suffix = "-as-rs" if as_ar else ""
        if algorithm != "stragglar":
            return self.schedule(algorithm, coll), algorithm + suffix, arrivals
        order = np.argsort(arrivals, kind="stable")
        last = int(order[-1])
        if self.n >= 3 and arrivals[order[-2]] - arrivals[order[-3]] > self.window_s:
            return self.schedule("ring", coll), "ring (two late)", arrivals
        if self.agree_s:
            arrivals = arrivals.copy()
            arrivals[last] += self.agree_s
        return self.schedule("stragglar", coll, last), f"stragglar{suffix}@{last}", arrivals

    def run(self, algorithm: str, collective: str, size: float, arrivals: np.ndarray,
            detail: bool = False) -> CommResult:
        """Finish time of every rank for one collective started at ``arrivals`` (seconds)."""
        s, label, arr = self.pick(algorithm, collective, np.asarray(arrivals, np.float64))
        if not detail:
            d = self._matrix(s, size)
            if d is not None:
                return CommResult((arr[:, None] + d).max(axis=0), label)
        res = simulate(s, size, self.topology, arr)
        finish = np.asarray(res.rank_finish_s)
        first = None
        if detail:
            first = finish.copy()
            if s.ntransfers:
                assert res.start_s is not None  # simulate always sets it
                np.minimum.at(first, s.src, res.start_s)
                np.minimum.at(first, s.dst, res.start_s)
        return CommResult(finish, label, first)

__all__ = ["COLLECTIVES", "CollectiveModel", "CommResult"]
