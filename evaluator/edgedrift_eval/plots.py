"""Plots a person can read: the accuracy/recompute trade-off and accuracy over time."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgedrift.metrics import downsample_curve, windowed_accuracy, windowed_rmse
from edgedrift.models.losses import FloatArray
from edgedrift_eval.peers import RIVER_PEERS
from edgedrift_eval.results import RunResult, SweepEntry
from edgedrift_eval.runner import BASELINES
from edgedrift_eval.strategies import STRATEGIES


def _plt() -> Any:
    """matplotlib.pyplot on the file-only Agg backend (matplotlib is untyped here: ``Any``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def tradeoff_plot(entries: Sequence[SweepEntry], path: Path, title: str, metric: str = "accuracy") -> None:
    """Mean metric against mean recomputes (symmetric log x so that 0 recomputes shows), ± sd bars."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 6.5))
    scale = 100.0 if metric == "accuracy" else 1.0
    curves: dict[str, list[SweepEntry]] = defaultdict(list)
    for e in entries:
        curves[e.strategy].append(e)
    cmap = plt.get_cmap("tab20")
    for i, (name, es) in enumerate(sorted(curves.items())):
        if name in BASELINES:
            ax.axhline(es[0].metric(metric) * scale, ls=":", color="grey", lw=1)
            ax.text(
                0.02,
                es[0].metric(metric) * scale,
                f" {name}",
                va="bottom",
                fontsize=8,
                color="grey",
                transform=ax.get_yaxis_transform(),
            )
            continue
        es = sorted(es, key=lambda e: e.recomputes)
        x = np.array([e.recomputes for e in es])
        y = np.array([e.metric(metric) for e in es]) * scale
        sd = np.array([e.sd.get(metric, 0.0) for e in es]) * scale
        own = STRATEGIES.get(name) is not None and STRATEGIES[name].edgedrift
        style = dict(
            lw=2.4 if own else 1.2,
            ms=6 if own else 4,
            color=cmap(i % 20),
            marker="o" if own else ("s" if name in RIVER_PEERS else "."),
        )
        ax.errorbar(x, y, yerr=sd, label=name, capsize=2, **style)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("batch recomputes (mean over label offsets; symmetric log scale)")
    ax.set_ylabel(f"{metric} (%)" if metric == "accuracy" else metric)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def over_time_plot(
    runs: Sequence[RunResult],
    y_true: FloatArray,
    start: int,
    path: Path,
    title: str,
    drift_points: Sequence[int] = (),
    window: int = 2000,
    task: str = "classification",
) -> None:
    """Sliding-window accuracy (or RMSE) over the stream, with recompute ticks and true drift lines."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(15, 5.5))
    cmap = plt.get_cmap("tab10")
    for i, run in enumerate(runs):
        preds = run.scored_predictions()
        if task == "classification":
            curve = 100.0 * windowed_accuracy(preds == y_true, window)
        else:
            curve = windowed_rmse(preds - y_true, window)
        idx, vals = downsample_curve(curve, 3000)
        label = f"{run.strategy} {run.params or ''} ({run.recomputes} recomputes)"
        color = cmap(i % 10)
        ax.plot(idx + start, vals, lw=1.0, color=color, label=label)
        if run.recompute_at:
            lane = 0.02 + 0.025 * i  # one lane of ticks per run, in axes coordinates
            ax.plot(
                run.recompute_at,
                np.full(len(run.recompute_at), lane),
                "|",
                color=color,
                ms=8,
                transform=ax.get_xaxis_transform(),
            )
    for dp in drift_points:
        ax.axvline(dp, color="black", ls="--", lw=0.8, alpha=0.6)
    ax.set_xlabel("sample (ticks at the bottom: recomputes; dashed: true drifts)")
    ax.set_ylabel(
        f"accuracy over the last {window} samples (%)"
        if task == "classification"
        else f"RMSE over the last {window} samples"
    )
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cost_plot(
    entries: Sequence[SweepEntry],
    path: Path,
    title: str,
    metric: str = "accuracy",
    budgets: Sequence[float] = (0, 5, 10, 20),
) -> None:
    """The trade-off plot's companion: each strategy's best metric within each recompute budget against
    the edge's cost (µs per sample, log x), so a user can pick the learner for their device."""
    from edgedrift_eval.sweep import best_within

    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 6.5))
    scale = 100.0 if metric == "accuracy" else 1.0
    names = sorted({e.strategy for e in entries} - set(BASELINES))
    markers = "osD^v<>"
    cmap = plt.get_cmap("tab20")
    for i, name in enumerate(names):
        pts = [(b, best_within(entries, b, [name], metric)) for b in budgets]
        kept = [(b, e) for b, e in pts if e is not None]
        for j, (b, e) in enumerate(kept):
            ax.scatter(
                max(e.edge_us_per_sample, 0.1),
                e.metric(metric) * scale,
                color=cmap(i % 20),
                marker=markers[budgets.index(b) % len(markers)],
                label=name if j == 0 else None,
                s=40,
            )
    for b, m in zip(budgets, markers, strict=False):
        ax.scatter([], [], color="grey", marker=m, label=f"≤ {b:g} recomputes")
    ax.set_xscale("log")
    ax.set_xlabel("edge cost: µs per sample (predict + learn, without the cloud's time)")
    ax.set_ylabel(f"{metric} (%)" if metric == "accuracy" else metric)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
