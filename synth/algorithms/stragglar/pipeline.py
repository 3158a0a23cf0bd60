"""StragglAR pipeline depth: K(n-1) chunks instead of n-1 (issue 9), and how K is chosen.

Phase 2 with K(n-1) chunks takes R(K) = K(n-1) - 1 + ceil(log2 n) rounds (the lower bound of
docs/stragglar.md; n = 3 takes one more for K >= 2), each moving one chunk of s/(K(n-1)) bytes per
port, so the time after the straggler arrives (phase 1 hidden) is, in the alpha-beta model,

    T(K) = R(K) (alpha + s / (K (n-1) B)).

T falls with K while the ramp-up and the last doubling rounds dominate and rises once the per-message
alpha does; the minimum sits near K* = sqrt((ceil(log2 n) - 1) s / (alpha B)) / (n-1).
``pipeline="auto"`` evaluates T(K) for K = 1..AUTO_MAX (and no more than the size allows) and takes
the K with the least T (ties, within 1e-9, go to the smaller K). Without a model it
uses the paper's: s = 1 GiB, alpha = 3 us, 450 GiB/s.

Limits on an explicit K: K >= 1; with a known size, a chunk must hold at least one element
(ELEMENT_BYTES, float32), i.e. K <= s / (4 (n-1)); and the schedule must stay buildable: K(n-1) n
<= MAX_TRANSFERS (about the number of phase-2 transfers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from collsynth.errors import CollsynthError
from collsynth.synth.algorithms.stragglar.design import lower_bound
from collsynth.units import parse_rate, parse_size, parse_time

ELEMENT_BYTES = 4  # float32, the backends' default element
AUTO_MAX = 32
MAX_TRANSFERS = 1 << 22
PAPER_MODEL = {"size": 2**30, "alpha": 3e-6, "bandwidth": 450 * 2**30}


@dataclass(frozen=True)
class PipelineChoice:
    """The depth K and, for ``auto``, the model it was chosen under (recorded in the schedule's meta)."""

    k: int
    model: dict[str, Any] | None = None


def expected_rounds(n: int, k: int) -> int:
    """Phase-2 rounds stragglar builds for n ranks and depth k (the lower bound, +1 for n = 3, k > 1)."""
    return lower_bound(n, k) + (1 if n == 3 and k > 1 else 0)


def phase2_time(n: int, k: int, size: float, alpha: float, bandwidth: float) -> float:
    """Alpha-beta time of phase 2 (after the straggler arrives, phase 1 hidden)."""
    return expected_rounds(n, k) * (alpha + size / (k * (n - 1) * bandwidth))


def max_pipeline_for_size(n: int, size: float, element_bytes: int = ELEMENT_BYTES) -> int:
    """The largest K for which a chunk of size/(K(n-1)) bytes holds at least one element (0 if none)."""
    return int(size // (element_bytes * (n - 1)))


def max_pipeline_for_build(n: int) -> int:
    """The largest K collsynth builds for n ranks (K(n-1) n <= MAX_TRANSFERS)."""
    return max(1, MAX_TRANSFERS // ((n - 1) * n))


def best_pipeline(n: int, size: float, alpha: float, bandwidth: float, kmax: int = AUTO_MAX) -> int:
    """The K in 1..kmax minimising phase2_time (the smallest on a tie)."""
    ks = np.arange(1, max(1, kmax) + 1)
    t = np.array([phase2_time(n, int(k), size, alpha, bandwidth) for k in ks])
    return int(ks[np.nonzero(t <= t.min() * (1 + 1e-9))[0][0]])


def _model(size: Any, alpha: Any, bandwidth: Any) -> tuple[float | None, float, float]:
    s = None if size is None else float(parse_size(size))
    a = PAPER_MODEL["alpha"] if alpha is None else parse_time(alpha)
    b = PAPER_MODEL["bandwidth"] if bandwidth is None else parse_rate(bandwidth)
    if not b > 0:
        raise CollsynthError(f"--bandwidth must be positive, got {bandwidth!r}")
    return s, a, b


def resolve_pipeline(n: int, pipeline: Any, size: Any = None, alpha: Any = None,
                     bandwidth: Any = None) -> PipelineChoice:
    """Check an explicit depth against the limits, or pick one for ``"auto"``."""
    s, a, b = _model(size, alpha, bandwidth)
    build_max = max_pipeline_for_build(n)
    if pipeline == "auto":
        size_for_model = s if s is not None else PAPER_MODEL["size"]
        kmax = min(AUTO_MAX, build_max)
        if s is not None:
            kmax = min(kmax, max(1, max_pipeline_for_size(n, s)))
        k = best_pipeline(n, size_for_model, a, b, kmax)
        model = {"size": size_for_model, "alpha": a, "bandwidth": b,
                 "phase2_s": phase2_time(n, k, size_for_model, a, b),
                 "phase2_s_unpipelined": phase2_time(n, 1, size_for_model, a, b)}
        return PipelineChoice(k, model)
    if isinstance(pipeline, bool) or not isinstance(pipeline, (int, np.integer)) or pipeline < 1:
        raise CollsynthError(f"--pipeline must be a positive integer or auto, got {pipeline!r}")
    k = int(pipeline)
    if k > build_max:
        raise CollsynthError(f"--pipeline {k} is too large for {n} ranks: collsynth builds at most "
                             f"{MAX_TRANSFERS} transfers (about K(n-1)n); the largest K that fits is {build_max}")
    if s is not None and k > 1:
        fit = max_pipeline_for_size(n, s)
        if k > fit:
            raise CollsynthError(f"--pipeline {k} is too large for --size {int(s)} B on {n} ranks: each of the "
                                 f"K(n-1) chunks must hold at least one {ELEMENT_BYTES}-byte element; the largest "
                                 f"K that fits is {max(fit, 1)}")
    return PipelineChoice(k)


def topology_model(topology: Any, straggler: int) -> tuple[float, float]:
    """The (alpha, bandwidth) the straggler sees on a Topology, for ``pipeline="auto"``: the largest
    route latency and the smallest route bottleneck bandwidth from the straggler to any other rank
    (on nvswitch: exactly the alpha and bandwidth it was built with)."""
    n = topology.nranks
    others = np.array([r for r in range(n) if r != straggler], np.int64)
    pairs = np.stack([np.full(len(others), straggler), others], 1)
    links, alpha = topology.pair_table(pairs)
    bw = np.where(links >= 0, topology.link_bw[np.maximum(links, 0)], np.inf).min(axis=1)
    return float(alpha.max()), float(bw.min())
