"""Plots a person can read: the accuracy/recompute trade-off and accuracy over time."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgedrift.metrics import downsample_curve, windowed_accuracy, windowed_rmse
from edgedrift_eval.peers import RIVER_PEERS
from edgedrift_eval.runner import BASELINES
from edgedrift_eval.strategies import STRATEGIES


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def tradeoff_plot(
    entries: Sequence[dict[str, Any]], path: Path, title: str, metric: str = "accuracy"
) -> None:
    """Mean metric against mean recomputes (symmetric log x so that 0 recomputes shows), ± sd bars."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 6.5))
    scale = 100.0 if metric == "accuracy" else 1.0
    curves: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        curves[e["strategy"]].append(e)
    cmap = plt.get_cmap("tab20")
    for i, (name, es) in enumerate(sorted(curves.items())):
        if name in BASELINES:
            ax.axhline(es[0][metric] * scale, ls=":", color="grey", lw=1)
            ax.text(
                0.02,
                es[0][metric] * scale,
                f" {name}",
                va="bottom",
                fontsize=8,
                color="grey",
                transform=ax.get_yaxis_transform(),
            )
            continue
        es = sorted(es, key=lambda e: e["recomputes"])
        x = np.array([e["recomputes"] for e in es])
        y = np.array([e[metric] for e in es]) * scale
        sd = np.array([e.get(f"{metric}_sd", 0.0) for e in es]) * scale
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
    runs: Sequence[dict[str, Any]],
    y_true: np.ndarray,
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
        preds = run["predictions"]
        if task == "classification":
            curve = 100.0 * windowed_accuracy(preds == y_true, window)
        else:
            curve = windowed_rmse(preds - y_true, window)
        idx, vals = downsample_curve(curve, 3000)
        label = f"{run['strategy']} {run['params'] or ''} ({run['recomputes']} recomputes)"
        color = cmap(i % 10)
        ax.plot(idx + start, vals, lw=1.0, color=color, label=label)
        if run["recompute_at"]:
            lane = 0.02 + 0.025 * i  # one lane of ticks per run, in axes coordinates
            ax.plot(
                run["recompute_at"],
                np.full(len(run["recompute_at"]), lane),
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
