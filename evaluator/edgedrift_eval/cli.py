"""``edgedrift evaluate``: replay a stream through every strategy and write tables and plots."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from edgedrift.data import load_dataset
from edgedrift.models.losses import FloatArray
from edgedrift_eval.command import register
from edgedrift_eval.protocol import get_protocol
from edgedrift_eval.results import RunResult, SweepEntry
from edgedrift_eval.runner import BASELINES, RunSpec, run_one
from edgedrift_eval.strategies import STRATEGIES, expand
from edgedrift_eval.sweep import aggregate, best_within, plan, run_sweep, write_outputs

__all__ = ["evaluate", "register", "summarize", "write_curves"]

BUDGETS = (0, 5, 10, 20, 50, 100)


def _parse_grids(items: list[str]) -> dict[str, list[float]]:
    grids: dict[str, list[float]] = {}
    for item in items:
        name, _, values = item.partition("=")
        if name not in STRATEGIES or not values:
            raise ValueError(f"--grid expects NAME=V1,V2 with a known strategy, got {item!r}")
        grids[name] = [float(v) for v in values.split(",")]
    return grids


def evaluate(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    stream = load_dataset(args.dataset, target=args.target, seed=args.seed)
    if args.shuffle is not None:
        stream = stream.shuffled(args.shuffle)
    protocol = get_protocol(
        args.protocol, every=args.every, window=args.window, delay=args.delay, batch=args.batch_size
    )
    if args.window is None and protocol.fitted(len(stream)) is not protocol:
        protocol = protocol.fitted(len(stream))
        print(
            f"{stream.name}: {len(stream)} samples, fewer than twice the protocol's window: the first window "
            f"is {protocol.window} samples (--window sets it)",
            file=sys.stderr,
        )
    names = expand([s.strip() for s in args.strategies.split(",") if s.strip()])
    offsets = None
    if args.offsets:
        lo, _, hi = args.offsets.partition("-")
        offsets = list(range(int(lo), int(hi) + 1)) if hi else [int(v) for v in args.offsets.split(",")]
    specs = plan(names, stream, protocol, _parse_grids(args.grid), offsets)
    print(
        f"{stream.name}: {len(stream)} samples, {stream.n_features} features, {stream.task}; "
        f"protocol {protocol}; {len(specs)} runs",
        file=sys.stderr,
    )
    rows = run_sweep(stream, protocol, specs, args.jobs, progress=not args.no_progress)
    entries = aggregate(rows, stream.task)
    metric = "accuracy" if stream.task == "classification" else "rmse"
    meta: dict[str, object] = {
        "dataset": stream.name,
        "n": len(stream),
        "n_features": stream.n_features,
        "task": stream.task,
        "protocol": protocol.__dict__,
        "strategies": names,
        "wall_s": time.perf_counter() - t0,
        "drift_points": list(stream.drift_points),
    }
    write_outputs(args.out, entries, rows, meta)

    from edgedrift_eval.plots import cost_plot, over_time_plot, tradeoff_plot

    n_offsets = len({r.offset for r in rows})
    title = f"{stream.name}: {metric} vs batch recomputes ({protocol.name} protocol, {n_offsets} offsets)"
    tradeoff_plot(entries, args.out / "tradeoff.png", title, metric)
    cost_plot(entries, args.out / "edge_cost.png", f"{stream.name}: {metric} vs edge cost per budget", metric)
    picked = _pick_for_time_plot(entries, metric)
    first = offsets[0] if offsets else protocol.offsets[0]
    curves = [run_one(stream, protocol, RunSpec(e.strategy, e.param, first), curves=True) for e in picked]
    write_curves(curves, stream.y[protocol.window :], protocol.window, args.out / "curves.csv", stream.task)
    over_time_plot(
        curves,
        stream.y[protocol.window :],
        protocol.window,
        args.out / "over_time.png",
        f"{stream.name}: {metric} over time (offset {first})",
        stream.drift_points,
        task=stream.task,
    )
    summary = summarize(entries, metric)
    (args.out / "summary.md").write_text(summary)
    print(summary)
    print(
        f"wrote {args.out}/results.json, runs.csv, curves.csv, tradeoff.png, edge_cost.png, over_time.png, "
        "summary.md "
        f"in {time.perf_counter() - t0:.0f} s",
        file=sys.stderr,
    )
    return 0


def write_curves(
    runs: Sequence[RunResult], y_true: FloatArray, start: int, path: Path, task: str, window: int = 2000
) -> None:
    """Sliding-window accuracy (or RMSE) of each plotted run, downsampled, as a long CSV table."""
    import csv

    from edgedrift.metrics import downsample_curve, windowed_accuracy, windowed_rmse

    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["strategy", "params", "sample", "accuracy" if task == "classification" else "rmse"])
        for run in runs:
            preds = run.scored_predictions()
            curve = (
                windowed_accuracy(preds == y_true, window)
                if task == "classification"
                else windowed_rmse(preds - y_true, window)
            )
            idx, vals = downsample_curve(curve, 2000)
            params = json.dumps(run.params)
            out.writerows(
                [run.strategy, params, int(i) + start, f"{v:.6g}"] for i, v in zip(idx, vals, strict=True)
            )


def _pick_for_time_plot(entries: Sequence[SweepEntry], metric: str) -> list[SweepEntry]:
    """For each strategy (up to 8): its best configuration with at most 20 recomputes."""
    out = []
    for name in dict.fromkeys(e.strategy for e in entries):
        if name in BASELINES:
            continue
        best = best_within(entries, 20, [name], metric)
        if best is not None:
            out.append(best)
    return out[:8]


def summarize(entries: Sequence[SweepEntry], metric: str) -> str:
    """Markdown: every configuration (standard deviations over offsets with ddof = 1; "labeled only" scores
    the labeled samples alone), then EdgeDrift's best against the best peer at each budget."""
    pct = 100.0 if metric == "accuracy" else 1.0
    unit = "%" if metric == "accuracy" else ""
    lines = [
        f"| strategy | params | recomputes | {metric} | sd | labeled only | kappa | edge µs/sample "
        "| edge state B | order | cloud CPU s/recompute |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for e in sorted(entries, key=lambda e: (e.strategy, e.recomputes)):
        labeled = e.mean.get("accuracy_labeled", float("nan")) * pct
        lines.append(
            f"| {e.strategy} | {json.dumps(e.params)} | {e.recomputes:.1f} | "
            f"{e.metric(metric) * pct:.2f}{unit} | {e.metric_sd(metric) * pct:.2f} | {labeled:.2f} | "
            f"{e.mean.get('kappa', float('nan')):.3f} | {e.edge_us_per_sample:.1f} | "
            f"{e.edge_state_bytes:.0f} | {e.update_order} | {e.cloud_cpu_s_per_recompute:.3f} |"
        )
    own = [n for n, s in STRATEGIES.items() if s.edgedrift]
    peers = [e.strategy for e in entries if e.strategy not in own and e.strategy not in BASELINES]
    lines += [
        "",
        f"| budget (recomputes) | EdgeDrift best | {metric} | best peer | {metric} |",
        "|---:|---|---:|---|---:|",
    ]
    for b in BUDGETS:
        mine, peer = best_within(entries, b, own, metric), best_within(entries, b, peers, metric)

        def fmt(e: SweepEntry | None) -> str:
            if e is None:
                return "– | –"
            return (
                f"{e.strategy} {json.dumps(e.params)} ({e.recomputes:.1f}) | "
                f"{e.metric(metric) * pct:.2f} ± {e.metric_sd(metric) * pct:.2f}"
            )

        lines.append(f"| ≤ {b} | {fmt(mine)} | {fmt(peer)} |")
    return "\n".join(lines) + "\n"
