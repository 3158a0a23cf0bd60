"""Per-rank compute time of every micro-batch, for the training-step simulator (training/model.py).

A ``ComputeModel`` gives, for rank r and its k-th micro-batch, the forward+backward time

    tau(r, k) = base(r, k) * slow[r] * noise(r, k)

- ``base`` is a constant (``base_s``) or a trace of measured times (row k mod T, column r);
- ``slow[r]`` (>= 1) is a persistent slow-down of rank r (``--slow 7=1.3``), default 1;
- ``noise`` is lognormal jitter with mean 1: ``exp(sigma Z - sigma^2/2)``, Z standard normal, so
  ``sigma`` is about the coefficient of variation for small values (``--jitter 0.1``). Each rank has
  its own random stream (seeded by ``(seed, rank)``) read in fixed blocks, so tau(r, k) does not
  depend on how many micro-batches other ranks drew: every method sees the same per-rank sequence.

Without jitter nothing is drawn: tau(r, k) is computed when read, and ``ComputeStream.run_until`` (ACCO's
compute phase: groups of micro-batches until a time) skips whole periods of a rank's sequence in closed form,
so a rank that waits a million of its micro-batches for a slow one costs a few array operations. With jitter
every micro-batch is drawn and kept (training/work.py estimates how many before a run starts).

Trace files hold one row per micro-batch and one column per rank, in seconds (or with a unit,
``"101ms"``): CSV (an optional non-numeric header line) or JSON (a list of rows, or
``{"compute_s": [rows]}``). A run longer than the trace cycles through it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from collsynth.errors import CollsynthError
from collsynth.fileio import json_loads, read_text
from collsynth.units import parse_number, parse_rank_map, parse_time

_BLOCK = 4096
MAX_PERIOD = 2**16  # micro-batches of one period that ComputeStream.run_until sums to skip whole periods
MAX_BLOCK = 2**12  # groups that ComputeStream.run_until reads at once
SKIP_GROUPS = 2**14  # and more than this many groups left it skips in closed form (fewer: summed as a loop would)


def parse_slow(items: Sequence[str] | None, nranks: int) -> dict[int, float]:
    """``RANK=FACTOR`` items (repeatable or comma-separated, ``7=1.3``) into {rank: factor >= 1}."""
    def factor(text: str) -> float:
        try:
            fac = parse_number(text, flag="--slow")
        except CollsynthError:
            raise CollsynthError(f"--slow: factor {text!r} is not a number, e.g. 1.3") from None
        if fac < 1:
            raise CollsynthError(f"--slow: factor {text} is below 1; a slow rank takes FACTOR times --compute, "
                                 f"so use a factor >= 1 (e.g. 1.3 = 30% slower)")
        return fac

    return parse_rank_map(items, nranks, flag="--slow", value=factor, what="FACTOR", example="7=1.3")


def load_trace(path: str, nranks: int) -> np.ndarray:
    """A trace file (CSV or JSON, see module docstring) as a (micro-batches, nranks) array of seconds."""
    if not os.path.isfile(path):
        raise CollsynthError(f"trace file {path} does not exist: give a CSV or JSON file of per-rank times")
    text = read_text(path, what="trace file ")
    rows: list[list[Any]]
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            data = json_loads(text)
        except json.JSONDecodeError as e:
            raise CollsynthError(f"trace file {path} is not valid JSON ({e.msg} at line {e.lineno})") from None
        if isinstance(data, dict):
            if "compute_s" not in data:
                raise CollsynthError(f"trace file {path}: a JSON object needs a \"compute_s\" list of rows")
            data = data["compute_s"]
        if not isinstance(data, list) or not all(isinstance(r, list) for r in data):
            raise CollsynthError(f"trace file {path}: expected a list of rows, one time per rank in each")
        rows = data
    else:
        rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
        if rows and not _numeric(rows[0][0]):
            rows = rows[1:]  # header
    if not rows:
        raise CollsynthError(f"trace file {path} has no rows: one row per micro-batch, one column per rank")
    out = np.empty((len(rows), nranks), np.float64)
    for i, row in enumerate(rows):
        if len(row) != nranks:
            raise CollsynthError(f"trace file {path}: row {i + 1} has {len(row)} times but there are {nranks} "
                                 f"ranks: give one column per rank (or change --gpus to {len(row)})")
        for r, v in enumerate(row):
            out[i, r] = _trace_time(v, path, i, r)
    return out


def _numeric(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        try:
            parse_time(s.strip())
            return True
        except CollsynthError:
            return False


def _trace_time(v: Any, path: str, row: int, rank: int) -> float:
    try:
        if isinstance(v, bool):
            raise CollsynthError("bool")
        if isinstance(v, str):
            try:
                x = float(v)
            except ValueError:
                x = parse_time(v.strip())
        else:
            x = float(v)
    except (CollsynthError, TypeError, ValueError):
        raise CollsynthError(f"trace file {path}: row {row + 1}, rank {rank}: {v!r} is not a time") from None
    if not math.isfinite(x) or x <= 0:
        raise CollsynthError(f"trace file {path}: row {row + 1}, rank {rank}: time {v!r} must be positive")
    return x


class ComputeModel:
    """Forward+backward time of micro-batch k on rank r (seconds); see the module docstring."""

    def __init__(self, nranks: int, base_s: float | None = None, *, jitter: float = 0.0,
                 slow: Mapping[int, float] | None = None, trace: np.ndarray | None = None, seed: int = 0) -> None:
        if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < 2:
            raise CollsynthError(f"--gpus must be an integer >= 2, got {nranks!r}")
        if (base_s is None) == (trace is None):
            raise CollsynthError("give either --compute TIME or --trace FILE (exactly one)")
        if base_s is not None and not (math.isfinite(base_s) and base_s > 0):
            raise CollsynthError(f"--compute must be a positive time, got {base_s!r}")
        if not (math.isfinite(jitter) and 0 <= jitter <= 2):
            raise CollsynthError(f"--jitter must be between 0 and 2 (lognormal sigma), got {jitter!r}")
        if trace is not None:
            trace = np.asarray(trace, np.float64)
            if trace.ndim != 2 or trace.shape[1] != nranks or trace.shape[0] < 1:
                raise CollsynthError(f"the trace must have one column per rank ({nranks}), got shape {trace.shape}")
            if jitter:
                raise CollsynthError("--jitter applies to --compute, not to a --trace: drop one")
        factors = np.ones(nranks)
        for r, f in (slow or {}).items():
            if not 0 <= int(r) < nranks:
                raise CollsynthError(f"slow rank {r} does not exist with {nranks} GPUs; ranks are 0..{nranks - 1}")
            if not (math.isfinite(f) and f >= 1):
                raise CollsynthError(f"slow factor of rank {r} is {f}: use a factor >= 1")
            factors[int(r)] = float(f)
        self.nranks = nranks
        self.base_s = base_s
        self.jitter = float(jitter)
        self.slow = factors
        self.trace = trace
        self.seed = int(seed)
        self._gens = [np.random.default_rng([self.seed, r]) for r in range(nranks)]
        self._table = np.empty((nranks, 0), np.float64)  # drawn times (jitter only): columns 0 .. _have-1
        self._have = 0

    def mean_s(self) -> np.ndarray:
        """Expected time per micro-batch of each rank."""
        base = self.trace.mean(axis=0) if self.trace is not None else np.full(self.nranks, self.base_s)
        return base * self.slow

    def _grow(self, upto: int) -> None:
        """Draw every rank's times up to micro-batch ``upto`` (whole blocks; the table's capacity doubles, so
        a long run copies it a few times, not once per block)."""
        have = self._have
        if upto <= have:
            return
        nblocks = -(-(upto - have) // _BLOCK)
        if have + nblocks * _BLOCK > self._table.shape[1]:
            table = np.empty((self.nranks, max(have + nblocks * _BLOCK, 2 * self._table.shape[1])), np.float64)
            table[:, :have] = self._table[:, :have]
            self._table = table
        cols = self._table[:, have:have + nblocks * _BLOCK]
        idx = np.arange(have, have + nblocks * _BLOCK)
        for r in range(self.nranks):
            if self.trace is not None:
                base = self.trace[idx % len(self.trace), r]
            else:
                base = np.full(len(idx), self.base_s)
            if self.jitter:
                z = np.concatenate([self._gens[r].standard_normal(_BLOCK) for _ in range(nblocks)])
                base = base * np.exp(self.jitter * z - 0.5 * self.jitter ** 2)
            cols[r] = base * self.slow[r]
        self._have = have + nblocks * _BLOCK

    @property
    def deterministic(self) -> bool:
        """No jitter: every tau is read off the constant or the trace, so none is kept in a table and the
        sequence of each rank repeats (``period``)."""
        return not self.jitter

    def period(self, group: int) -> int:
        """Groups of ``group`` micro-batches after which a deterministic rank's group times repeat: the
        trace's rows (1 for a constant) over their gcd with ``group``."""
        rows = 1 if self.trace is None else len(self.trace)
        return rows // math.gcd(rows, group)

    def _direct(self, rank: int, start: int, count: int) -> np.ndarray:
        """tau(rank, start .. start+count-1) of a deterministic model, as the table would hold them."""
        if self.trace is None:
            return np.full(count, self.base_s) * self.slow[rank]
        return self.trace[np.arange(start, start + count) % len(self.trace), rank] * self.slow[rank]

    def times(self, rank: int, start: int, count: int) -> np.ndarray:
        """tau(rank, start .. start+count-1)."""
        if self.deterministic:
            return self._direct(rank, start, count)
        self._grow(start + count)
        return self._table[rank, start:start + count]

    def stream(self) -> ComputeStream:
        """A fresh reader positioned at micro-batch 0 of every rank."""
        return ComputeStream(self)

    def describe(self) -> str:
        what = "trace" if self.trace is not None else f"{self.base_s:g}s"
        slow = ",".join(f"{r}={f:g}" for r, f in enumerate(self.slow) if f != 1)
        return what + (f" jitter {self.jitter:g}" if self.jitter else "") + (f" slow {slow}" if slow else "")


class ComputeStream:
    """Per-rank cursors over a ComputeModel (each method simulation reads its own stream)."""

    def __init__(self, model: ComputeModel) -> None:
        self.model = model
        self.pos = np.zeros(model.nranks, np.int64)

    def uniform(self, count: int) -> np.ndarray:
        """The next ``count`` micro-batch times of every rank, shape (count, nranks)."""
        m = self.model
        start = int(self.pos.max())
        if m.deterministic and np.all(self.pos == start):
            if m.trace is None:
                out = np.full((count, m.nranks), m.base_s) * m.slow
            else:
                out = m.trace[np.arange(start, start + count) % len(m.trace)] * m.slow
        elif np.all(self.pos == start):
            m._grow(start + count)
            out = m._table[:, start:start + count].T.copy()
        else:
            out = np.stack([m.times(r, int(self.pos[r]), count) for r in range(m.nranks)], axis=1)
        self.pos += count
        return out

    def take(self, rank: int, count: int) -> np.ndarray:
        """The next ``count`` micro-batch times of one rank."""
        out = self.model.times(rank, int(self.pos[rank]), count)
        self.pos[rank] += count
        return out

    def run_until(self, rank: int, group: int, t: float, until: float) -> tuple[int, float]:
        """Groups of ``group`` micro-batches of ``rank`` run back to back from ``t`` up to and including the
        first that ends at or after ``until`` (at least one, as ACCO's compute phase): how many groups, and
        when the last ends. The ends are the running sums a loop ``t += group.sum()`` makes (np.cumsum adds
        in order), read a block of groups at a time. With deterministic times, when more than SKIP_GROUPS
        groups are left, whole periods of the rank's sequence (``ComputeModel.period``, up to ``MAX_PERIOD``
        micro-batches) are skipped in closed form (their sum times their count), so a rank that waits for one
        a million times slower costs a few blocks, not a million groups; its clock then differs from the
        loop's in the last bits."""
        m = self.model
        pos = int(self.pos[rank])
        t += float(m.times(rank, pos, group).sum())  # the first group alone: mostly the only one
        groups, pos, block, skipped = 1, pos + group, 4, False
        while t < until:
            sums = m.times(rank, pos, block * group).reshape(block, group).sum(axis=1)
            ends = np.cumsum(np.concatenate(([t], sums)))[1:]
            i = int(np.searchsorted(ends, until, side="left"))
            if i < block:
                groups += i + 1
                pos += (i + 1) * group
                t = float(ends[i])
                break
            if not ends[-1] > t:
                raise CollsynthError(f"rank {rank}'s micro-batches ({float(sums[0]):.3g} s a group) are below the "
                                     f"resolution of its clock at {t:.3g} s: raise --compute or --microbatches")
            groups += block
            pos += block * group
            t = float(ends[-1])
            if not skipped and m.deterministic:
                skipped = True
                p = m.period(group)
                if p * group <= MAX_PERIOD:
                    total = float(m.times(rank, pos, p * group).sum())
                    k = int((until - t) // total) - 1  # whole periods that end before ``until``
                    if k * p > SKIP_GROUPS:
                        t += k * total
                        groups += k * p
                        pos += k * p * group
            block = min(2 * block, MAX_BLOCK)
        self.pos[rank] = pos
        return groups, t


__all__ = ["MAX_BLOCK", "MAX_PERIOD", "SKIP_GROUPS", "ComputeModel", "ComputeStream", "load_trace", "parse_slow"]
