"""``edgedrift evaluate``: replay a stream through every strategy and write tables and plots."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from edgedrift.data import load_dataset
from edgedrift_eval.peers import RIVER_PEERS
from edgedrift_eval.protocol import get_protocol
from edgedrift_eval.runner import BASELINES, RunSpec, run_one
from edgedrift_eval.strategies import STRATEGIES, expand
from edgedrift_eval.sweep import aggregate, best_within, plan, run_sweep, write_outputs

BUDGETS = (0, 5, 10, 20, 50, 100)
DEFAULT_STRATEGIES = "druid,druid-paper,predsign,periodic,sgd,ddm,eddm,adwin"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "evaluate",
        help="replay a stream through the strategies; write results and plots",
        description=__doc__,
    )
    p.add_argument(
        "--dataset",
        default="elec2",
        help="elec2, elec2-6, covtype, sine1, 'sine1+:d=10,sigma=100', 'ridge:sigma=10', sea, "
        "hyperplane, rbf, or csv:PATH (with --target)",
    )
    p.add_argument("--target", help="label column for --dataset csv:PATH")
    p.add_argument("--seed", type=int, default=0, help="seed of synthetic streams")
    p.add_argument(
        "--shuffle",
        type=int,
        default=None,
        metavar="SEED",
        help="shuffle the stream's rows first (a drift-free control)",
    )
    p.add_argument("--protocol", default="druid", help="druid (every 10th label, window 2000) or full")
    p.add_argument("--every", type=int, help="label every k-th sample")
    p.add_argument("--window", type=int, help="window / warm-up length in samples")
    p.add_argument("--delay", type=int, help="label delay in samples")
    p.add_argument(
        "--strategies",
        default=DEFAULT_STRATEGIES,
        help=f"comma-separated; groups: river, edgedrift, all. Known: {', '.join(STRATEGIES)}, "
        f"{', '.join(RIVER_PEERS)}",
    )
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="override a strategy's sweep grid, e.g. --grid druid=0.99,0.999",
    )
    p.add_argument("--offsets", help="label offsets to run (default: all of the protocol, e.g. 0-9)")
    p.add_argument("--jobs", type=int, default=None, help="parallel processes (default: 2)")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=evaluate)


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
    protocol = get_protocol(args.protocol, every=args.every, window=args.window, delay=args.delay)
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
    meta = {
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

    from edgedrift_eval.plots import over_time_plot, tradeoff_plot

    n_offsets = len({r["offset"] for r in rows})
    title = f"{stream.name}: {metric} vs batch recomputes ({protocol.name} protocol, {n_offsets} offsets)"
    tradeoff_plot(entries, args.out / "tradeoff.png", title, metric)
    picked = _pick_for_time_plot(entries, metric)
    first = offsets[0] if offsets else protocol.offsets[0]
    curves = [
        run_one(
            stream,
            protocol,
            RunSpec(e["strategy"], next(iter(e["params"].values()), None), first),
            curves=True,
        )
        for e in picked
    ]
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
        f"wrote {args.out}/results.json, runs.csv, curves.csv, tradeoff.png, over_time.png, summary.md "
        f"in {time.perf_counter() - t0:.0f} s",
        file=sys.stderr,
    )
    return 0


def write_curves(
    runs: list[dict[str, Any]], y_true: Any, start: int, path: Path, task: str, window: int = 2000
) -> None:
    """Sliding-window accuracy (or RMSE) of each plotted run, downsampled, as a long CSV table."""
    import csv

    from edgedrift.metrics import downsample_curve, windowed_accuracy, windowed_rmse

    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["strategy", "params", "sample", "accuracy" if task == "classification" else "rmse"])
        for run in runs:
            preds = run["predictions"]
            curve = (
                windowed_accuracy(preds == y_true, window)
                if task == "classification"
                else windowed_rmse(preds - y_true, window)
            )
            idx, vals = downsample_curve(curve, 2000)
            params = json.dumps(run["params"])
            out.writerows(
                [run["strategy"], params, int(i) + start, f"{v:.6g}"] for i, v in zip(idx, vals, strict=True)
            )


def _pick_for_time_plot(entries: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """For each strategy (up to 8): its best configuration with at most 20 recomputes."""
    out = []
    for name in dict.fromkeys(e["strategy"] for e in entries):
        if name in BASELINES:
            continue
        best = best_within(entries, 20, [name], metric)
        if best is not None:
            out.append(best)
    return out[:8]


def summarize(entries: list[dict[str, Any]], metric: str) -> str:
    """Markdown: every configuration, then EdgeDrift's best against the best peer at each budget."""
    pct = 100.0 if metric == "accuracy" else 1.0
    unit = "%" if metric == "accuracy" else ""
    lines = [
        f"| strategy | params | recomputes | {metric} | sd | kappa | edge µs/sample | order |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for e in sorted(entries, key=lambda e: (e["strategy"], e["recomputes"])):
        lines.append(
            f"| {e['strategy']} | {json.dumps(e['params'])} | {e['recomputes']:.1f} | "
            f"{e[metric] * pct:.2f}{unit} | {e[metric + '_sd'] * pct:.2f} | "
            f"{e.get('kappa', float('nan')):.3f} | {e['edge_us_per_sample']:.1f} | {e['update_order']} |"
        )
    own = [n for n, s in STRATEGIES.items() if s.edgedrift]
    peers = [e["strategy"] for e in entries if e["strategy"] not in own and e["strategy"] not in BASELINES]
    lines += [
        "",
        f"| budget (recomputes) | EdgeDrift best | {metric} | best peer | {metric} |",
        "|---:|---|---:|---|---:|",
    ]
    for b in BUDGETS:
        mine, peer = best_within(entries, b, own, metric), best_within(entries, b, peers, metric)

        def fmt(e: dict[str, Any] | None) -> str:
            if e is None:
                return "– | –"
            return (
                f"{e['strategy']} {json.dumps(e['params'])} ({e['recomputes']:.1f}) | "
                f"{e[metric] * pct:.2f} ± {e[metric + '_sd'] * pct:.2f}"
            )

        lines.append(f"| ≤ {b} | {fmt(mine)} | {fmt(peer)} |")
    return "\n".join(lines) + "\n"
