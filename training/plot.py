"""Picture of a train-sim run: throughput per method and algorithm, and per-rank timelines.

Top: grouped bars, one group per method, one bar per algorithm, labelled with samples/s. Below: for
each method, the recorded steps of its fastest algorithm (within 0.5%: the one listed first), one row
per rank. The lower lane of a row
is the compute stream (micro-batches, optimizer, ACCO buffer swap; idle in red), the upper lane the
communication (transfers in orange, grey while the rank waits inside a collective for its peers).
All timelines share one time scale, starting at the first recorded step, so lengths compare.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from collsynth.errors import CollsynthError
from collsynth.fileio import save_figure
from collsynth.training.model import MethodResult

COLORS = {"compute": "#4C72B0", "optimizer": "#55A868", "swap": "#8172B2", "idle": "#E8A0A0",
          "comm": "#DD8452", "wait": "#C8C8C8"}
MAX_RANKS = 16


def _ranks_shown(n: int) -> list[int]:
    if n <= MAX_RANKS:
        return list(range(n))
    half = MAX_RANKS // 2
    return list(range(half)) + list(range(n - half, n))


def _merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1] + 1e-12:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def plot_training(results: Sequence[MethodResult], path: str, title: str = "") -> None:
    """Write the PNG to ``path`` atomically (nothing is left behind on failure)."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CollsynthError(f"cannot write {path}: directory {directory} does not exist")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    methods = list(dict.fromkeys(r.method for r in results))
    algs = list(dict.fromkeys(r.algorithm for r in results))
    best = {}
    for m in methods:  # the fastest algorithm; within 0.5% of it, the one listed first
        rs = [r for r in results if r.method == m]
        top_m = max(r.throughput for r in rs)
        best[m] = next(r for r in rs if r.throughput >= top_m * 0.995)
    n = 1 + max((e["rank"] for r in results for e in r.timeline), default=0)
    ranks = _ranks_shown(n)
    row_h = 0.32 * len(ranks) + 0.9
    fig = plt.figure(figsize=(11, 3.4 + row_h * len(methods)))
    gs = fig.add_gridspec(1 + len(methods), 1, height_ratios=[3.0] + [row_h] * len(methods), hspace=0.42)

    # ---- throughput bars
    ax = fig.add_subplot(gs[0])
    width = 0.8 / max(1, len(algs))
    cmap = plt.get_cmap("tab10")
    top = max(r.throughput for r in results)
    for j, a in enumerate(algs):
        xs, ys = [], []
        for i, m in enumerate(methods):
            r = next((r for r in results if r.method == m and r.algorithm == a), None)
            if r is not None:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(r.throughput)
        bars = ax.bar(xs, ys, width * 0.92, label=a, color=cmap(j))
        for b, y in zip(bars, ys):
            ax.text(b.get_x() + b.get_width() / 2, y + top * 0.01, f"{y:.4g}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(methods)))
    ax.set_xticklabels(methods)
    ax.set_ylabel("throughput (samples/s)")
    ax.set_ylim(0, top * 1.3)
    ax.legend(title="algorithm", fontsize=8, title_fontsize=8, loc="upper left", ncol=max(1, len(algs)))
    ax.set_title(title or "simulated training throughput (higher is better)", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)

    # ---- timelines (shared time scale)
    span = 0.0
    windows = {}
    for m in methods:
        tl = best[m].timeline
        if tl:
            # the window in which every rank's recorded steps are under way, so edges show no false idle
            t0 = max(min(e["start_s"] for e in tl if e["rank"] == q) for q in {e["rank"] for e in tl})
            t1 = min(max(e["end_s"] for e in tl if e["rank"] == q) for q in {e["rank"] for e in tl})
            if t1 > t0:
                windows[m] = (t0, t1)
                span = max(span, t1 - t0)
    scale, unit = (1e3, "ms") if span < 2 else (1.0, "s")
    first = None
    for k, m in enumerate(methods):
        r = best[m]
        axt = fig.add_subplot(gs[1 + k], sharex=first)
        first = first or axt
        if m not in windows:
            axt.text(0.5, 0.5, "no timeline recorded", ha="center", transform=axt.transAxes)
            continue
        t0, t1 = windows[m]
        for y, rank in enumerate(ranks):
            ev = [e for e in r.timeline if e["rank"] == rank and e["end_s"] > t0 and e["start_s"] < t1]
            busy = []
            for kind, lane_y, lane_h in (("compute", y, 0.5), ("optimizer", y, 0.5), ("swap", y, 0.5),
                                         ("wait", y + 0.52, 0.3), ("comm", y + 0.52, 0.3)):
                spans = [(max(e["start_s"], t0), min(e["end_s"], t1)) for e in ev if e["kind"] == kind]
                if kind in ("compute", "optimizer", "swap"):
                    busy += spans
                if kind != "compute":
                    spans = _merge(spans)
                if spans:  # micro-batches keep thin white borders so that they can be counted
                    axt.broken_barh([((a - t0) * scale, (b - a) * scale) for a, b in spans], (lane_y, lane_h),
                                    facecolors=COLORS[kind], edgecolors="white",
                                    linewidth=0.6 if kind == "compute" else 0)
            gaps, cur = [], t0
            for lo, hi in _merge(busy):
                if lo > cur:
                    gaps.append((cur, lo))
                cur = max(cur, hi)
            if cur < t1:
                gaps.append((cur, t1))
            if gaps:
                axt.broken_barh([((a - t0) * scale, (b - a) * scale) for a, b in gaps], (y, 0.5),
                                facecolors=COLORS["idle"], linewidth=0)
        axt.set_yticks([y + 0.4 for y in range(len(ranks))])
        axt.set_yticklabels([f"rank {q}" for q in ranks], fontsize=7)
        axt.set_ylim(-0.15, len(ranks))
        axt.invert_yaxis()
        idle = sum(r.idle_fraction) / len(r.idle_fraction)
        axt.set_title(f"{m} with {r.algorithm}: {r.throughput:.4g} samples/s, mean idle {idle:.0%} "
                      f"(recorded steps)", fontsize=9, loc="left")
        axt.grid(True, axis="x", alpha=0.3)
    if first is not None:
        first.set_xlim(0, span * scale * 1.01 if span > 0 else 1)
        fig.axes[-1].set_xlabel(f"time from the first recorded step ({unit})")
    handles = [Patch(color=COLORS[k], label=lab) for k, lab in (
        ("compute", "compute (micro-batch)"), ("optimizer", "optimizer step"), ("swap", "ACCO swap"),
        ("idle", "compute idle"), ("comm", "communicating"), ("wait", "waiting for peers in a collective"))]
    fig.legend(handles=handles, loc="lower center", ncol=6, fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.96, bottom=0.35 / (3.4 + row_h * len(methods)) + 0.03)
    try:
        save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)


__all__ = ["plot_training"]
