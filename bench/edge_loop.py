"""Edge-loop throughput: predict + window + monitor + incremental update, against river, in one run.

For d = 5 (ELEC2) and d = 54 (a seeded Sine1+ stream with 54 attributes, the width of Covertype), it
measures samples per second of EdgeDrift's edge loop (``druid``: DRUiD monitor + second-order learner,
and ``druid-rmsprop``: DRUiD + first-order learner) on

* labeled samples (every sample is learned), unlabeled samples (predict only), and the DRUiD protocol's
  mix (every 10th sample labeled),
* one sample at a time (``process_one``) and in batches of 100 (``process_many``),

against river's ``StandardScaler | LogisticRegression`` doing ``predict_one`` + ``learn_one`` on the same
samples (``learn_one`` only where labeled), river and edge runs alternating, and against EdgeDrift's own
numpy path (the compiled kernels of :mod:`edgedrift.kernels` switched off) in the same run. Batch
recomputes run in-process here; their time is the cloud's work, so it is measured and subtracted from
the edge's figure (and reported).

BLAS runs on one thread (``OPENBLAS_NUM_THREADS=1`` unless set), as in the edge image: the loop is
sequential, and BLAS threads on a shared small CPU make its small matrix operations far slower.

    python bench/edge_loop.py [--n 20000] [--repeat 3] [--json PATH]
    python bench/edge_loop.py --quick      # smoke run: 2,000 samples, one repetition
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads BLAS

import argparse
import json
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from edgedrift import kernels
from edgedrift.data import Stream, load_elec2, sine1plus
from edgedrift.loop import EdgeLoop
from edgedrift_eval.strategies import STRATEGIES, make_context

Timing = tuple[float, float]


def river_model() -> Any:
    from river import compose, linear_model, preprocessing

    return compose.Pipeline(preprocessing.StandardScaler(), linear_model.LogisticRegression())


def time_river(X: np.ndarray, y: np.ndarray) -> float:
    """Seconds per sample for river: predict_one on every sample, learn_one where y is not NaN."""
    model = river_model()
    keys = list(range(X.shape[1]))
    labels = (y > 0).tolist()
    labeled = (~np.isnan(y)).tolist()
    t = time.perf_counter()
    for i in range(len(X)):
        xd = dict(zip(keys, X[i].tolist(), strict=True))
        model.predict_one(xd)
        if labeled[i]:
            model.learn_one(xd, labels[i])
    return (time.perf_counter() - t) / len(X)


def build_loop(stream: Stream, strategy: str, clock: list[float]) -> EdgeLoop:
    X0, y0 = stream.X[:2000:10], stream.y[:2000:10]
    ctx = make_context(X0, y0, stream.task, 200)
    loop = STRATEGIES[strategy].build(ctx, 0.999)
    assert isinstance(loop, EdgeLoop)
    train = loop.recompute_fn

    def timed(Xw: np.ndarray, yw: np.ndarray) -> Any:
        t = time.perf_counter()
        try:
            return train(Xw, yw)
        finally:
            clock[0] += time.perf_counter() - t

    loop.recompute_fn = timed
    loop.start(ctx.initial_model(), X0, y0, warm_learner=True)
    return loop


def time_edge(stream: Stream, strategy: str, X: np.ndarray, y: np.ndarray, batch: int) -> Timing:
    """(edge seconds per sample without the in-process retrains, retrain seconds per sample)."""
    clock = [0.0]
    loop = build_loop(stream, strategy, clock)
    n = len(X)
    labels = [None if np.isnan(v) else v for v in y.tolist()]  # outside the clock, as river's lists are
    t = time.perf_counter()
    if batch == 1:
        for i in range(n):
            loop.process_one(X[i], labels[i])
    else:
        for j in range(0, n, batch):
            loop.process_many(X[j : j + batch], y[j : j + batch])
    total = time.perf_counter() - t
    return (total - clock[0]) / n, clock[0] / n


def on_numpy(edge: Callable[[], Timing]) -> Timing:
    """``edge()`` with the compiled kernels switched off (the numpy reference path)."""
    compiled, kernels.MODULE = kernels.MODULE, None
    try:
        return edge()
    finally:
        kernels.MODULE = compiled


def best_of_runs(
    repeat: int, river: Callable[[], float], edge: Callable[[], Timing]
) -> tuple[float, Timing, Timing]:
    """Best of ``repeat`` runs of each (river, the edge, the edge on numpy), alternating, so a ratio
    compares them under the same load on a shared machine."""
    rivers, edges, numpys = [], [], []
    for _ in range(repeat):
        rivers.append(river())
        edges.append(edge())
        numpys.append(on_numpy(edge))
    return min(rivers), min(edges, key=lambda r: r[0]), min(numpys, key=lambda r: r[0])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, help="samples per measurement (default 20,000; quick 2,000)")
    parser.add_argument("--repeat", type=int, help="best of this many runs (default 3; quick 1)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2,000 samples, one repetition")
    parser.add_argument("--json", type=Path, help='also write the table here as {"runs": [rows]}')
    args = parser.parse_args()
    args.n = args.n or (2_000 if args.quick else 20_000)
    args.repeat = args.repeat or (1 if args.quick else 3)
    streams = [("elec2 d=5", load_elec2()), ("sine1+ d=54", sine1plus(d=54, concept_length=5_000, seed=0))]
    if kernels.MODULE is None:
        print("note: edgedrift._kernels is not in use: the edge columns are the numpy path")
    print(
        "| stream | samples | strategy | batch | edge µs/sample | samples/s | river µs/sample "
        "| ratio vs river | numpy path µs/sample | retrain µs/sample (cloud) |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    rows: list[dict[str, Any]] = []
    for label, stream in streams:
        X = stream.X[2000 : 2000 + args.n]
        y_all = stream.y[2000 : 2000 + args.n]
        mixes = {
            "labeled": y_all.copy(),
            "unlabeled": np.full(len(y_all), np.nan),
            "10% labeled": np.where(np.arange(len(y_all)) % 10 == 0, y_all, np.nan),
        }
        for mix, y in mixes.items():
            for strategy in ("druid", "druid-rmsprop"):
                for batch in (1, 100):
                    river, (edge, train), (numpy_path, _) = best_of_runs(
                        args.repeat,
                        partial(time_river, X, y),
                        partial(time_edge, stream, strategy, X, y, batch),
                    )
                    print(
                        f"| {label} | {mix} | {strategy} | {batch} | {edge * 1e6:.2f} | {1 / edge:,.0f} | "
                        f"{river * 1e6:.2f} | {river / edge:.1f}x | {numpy_path * 1e6:.2f} | "
                        f"{train * 1e6:.2f} |",
                        flush=True,
                    )
                    rows.append(
                        {
                            "stream": label,
                            "samples": mix,
                            "strategy": strategy,
                            "batch": batch,
                            "edge_us_per_sample": edge * 1e6,
                            "samples_per_s": 1 / edge,
                            "river_us_per_sample": river * 1e6,
                            "ratio_vs_river": river / edge,
                            "kernels": kernels.MODULE is not None,
                            "numpy_us_per_sample": numpy_path * 1e6,
                            "retrain_us_per_sample": train * 1e6,
                        }
                    )
    if args.json is not None:
        args.json.write_text(json.dumps({"n": args.n, "repeat": args.repeat, "runs": rows}, indent=2))


if __name__ == "__main__":
    main()
