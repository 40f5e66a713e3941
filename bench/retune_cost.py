"""Cloud cost of one re-tuning recompute (druid-tune / periodic-tune) against a plain window recompute.

A re-tuning recompute refits the batch model on a window length chosen by prequential validation over
the device's history and replays every grid point of the edge learner over the recent history. This
measures its CPU seconds at d = 5 (ELEC2-like) and d = 54 (Covertype-like) on a synthetic drifting
stream, with a full history (20,000 labels), beside the plain LIBLINEAR recompute of a 200-label window
(the peer, as a ratio).

    python bench/retune_cost.py [--history 20000] [--json FILE] [--quick]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from edgedrift.strategies.channel import TuneChannel
from edgedrift.training.linear import LinearTrainer
from edgedrift.training.retune import HistoryRetuner


def drifting(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A hyperplane that rotates once half-way, features on drifting scales."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * (1.0 + np.linspace(0.0, 3.0, n))[:, None]
    w1, w2 = rng.normal(size=d), rng.normal(size=d)
    w = np.where((np.arange(n) < n // 2)[:, None], w1, w2)
    return X, np.where((X * w).sum(axis=1) > 0, 1.0, -1.0)


def cpu(fn: object, *args: object) -> tuple[float, object]:
    t = time.process_time()
    out = fn(*args)  # type: ignore[operator]
    return time.process_time() - t, out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--history", type=int, help="labels in the device's history (default 20000)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--quick", action="store_true", help="smoke run: a 2500-label history, d = 5 only")
    args = parser.parse_args()
    n = args.history or (2500 if args.quick else 20000)
    rows = []
    print("| d | learner | history labels | re-tune CPU s | window recompute CPU s | ratio | chosen |")
    print("|---:|---|---:|---:|---:|---:|---|")
    for d in (5,) if args.quick else (5, 54):
        X, y = drifting(n, d)
        trainer = LinearTrainer("logistic", 10.0)
        for learner in ("newton", "rmsprop"):
            channel = TuneChannel(d)
            channel.record_many(X, y)
            retuner = HistoryRetuner(channel, learner, trainer, "logistic", "classification")
            t_tune, _ = cpu(retuner, X[-200:], y[-200:])
            t_plain, _ = cpu(trainer, X[-200:], y[-200:])
            t_plain = max(t_plain, 1e-6)
            tune = retuner.tunes[-1]
            rows.append(
                {"d": d, "learner": learner, "history": n, "retune_cpu_s": t_tune, "window_cpu_s": t_plain}
                | {"params": tune.params, "window": tune.window, "anchor": tune.anchor}
            )
            print(
                f"| {d} | {learner} | {n} | {t_tune:.2f} | {t_plain:.4f} | {t_tune / t_plain:.0f}x | "
                f"{json.dumps(tune.params)}, window {tune.window}, anchor {tune.anchor} |"
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
