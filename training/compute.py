"""Per-rank compute time of every micro-batch, for the training-step simulator (training/model.py).

A ``ComputeModel`` gives, for rank r and its k-th micro-batch, the forward+backward time

    tau(r, k) = base(r, k) * slow[r] * noise(r, k)

- ``base`` is a constant (``base_s``) or a trace of measured times (row k mod T, column r);
- ``slow[r]`` (>= 1) is a persistent slow-down of rank r (``--slow 7=1.3``), default 1;
- ``noise`` is lognormal jitter with mean 1: ``exp(sigma Z - sigma^2/2)``, Z standard normal, so
  ``sigma`` is about the coefficient of variation for small values (``--jitter 0.1``). Each rank has
  its own random stream (seeded by ``(seed, rank)``) read in fixed blocks, so tau(r, k) does not
  depend on how many micro-batches other ranks drew: every method sees the same per-rank sequence.

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
        self._table = np.empty((nranks, 0), np.float64)

    def mean_s(self) -> np.ndarray:
        """Expected time per micro-batch of each rank."""
        base = self.trace.mean(axis=0) if self.trace is not None else np.full(self.nranks, self.base_s)
        return base * self.slow

    def _grow(self, upto: int) -> None:
        have = self._table.shape[1]
        if upto <= have:
            return
        nblocks = -(-(upto - have) // _BLOCK)
        cols = np.empty((self.nranks, nblocks * _BLOCK), np.float64)
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
        self._table = np.concatenate([self._table, cols], axis=1)

    def times(self, rank: int, start: int, count: int) -> np.ndarray:
        """tau(rank, start .. start+count-1)."""
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
        if np.all(self.pos == start):
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


__all__ = ["ComputeModel", "ComputeStream", "load_trace", "parse_slow"]
