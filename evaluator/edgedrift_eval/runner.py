"""One prequential run: a stream, a protocol, a strategy with one parameter value, one label offset."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from edgedrift.data import Stream
from edgedrift.guard import screen_first_window
from edgedrift.loop import EdgeLoop, Recompute
from edgedrift.metrics import (
    classification_report,
    majority_predictions,
    no_change_predictions,
    regression_report,
)
from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray
from edgedrift_eval.peers import RIVER_PEERS, RiverRunner
from edgedrift_eval.protocol import Protocol
from edgedrift_eval.strategies import STRATEGIES, Runner, make_context

BASELINES = ("no-change", "majority")


@dataclass(frozen=True)
class RunSpec:
    strategy: str
    param: float | None
    offset: int


def known_labels(
    y: FloatArray, labeled: NDArray[np.bool_], delay: int
) -> tuple[FloatArray, NDArray[np.bool_]]:
    """Shift labels by ``delay`` so that entry i holds what is known right after predicting sample i."""
    if delay == 0:
        return y, labeled
    n = len(y)
    y_k, lab_k = np.zeros(n), np.zeros(n, dtype=bool)
    y_k[delay:], lab_k[delay:] = y[: n - delay], labeled[: n - delay]
    return y_k, lab_k


def baseline_predictions(
    kind: str, y: FloatArray, labeled: NDArray[np.bool_], delay: int, task: str
) -> FloatArray:
    """The no-change (last known label) and majority (of known labels) predictors under the schedule.

    Classification uses :mod:`edgedrift.metrics`' predictors on the labels as known after the delay;
    for regression "no-change" repeats the last known value and "majority" is the mean of the known
    ones (0 before any label).
    """
    y_k, lab_k = known_labels(y, labeled, delay)
    if task == "classification":
        predict = no_change_predictions if kind == "no-change" else majority_predictions
        return predict(y_k, lab_k)
    if kind == "no-change":
        last = np.maximum.accumulate(np.where(lab_k, np.arange(len(y)), -1))
        prev = np.concatenate([[-1], last[:-1]])
        return np.where(prev >= 0, y_k[np.maximum(prev, 0)], 0.0)
    csum = np.concatenate([[0.0], np.cumsum(np.where(lab_k, y_k, 0.0))[:-1]])
    cnt = np.concatenate([[0], np.cumsum(lab_k)[:-1]])
    return np.where(cnt > 0, csum / np.maximum(cnt, 1), 0.0)


def _timed(fn: Recompute, clock: list[float]) -> Recompute:
    """Wrap a trainer so the time it spends is added to ``clock[0]`` (the cloud's share, not the edge's)."""

    def wrapped(X: FloatArray, y: FloatArray, **kwargs: Any) -> BatchModel | None:
        t = time.perf_counter()
        try:
            return fn(X, y, **kwargs)
        finally:
            clock[0] += time.perf_counter() - t

    return wrapped


def build_runner(
    stream: Stream, protocol: Protocol, spec: RunSpec, labeled: NDArray[np.bool_]
) -> tuple[Runner, dict[str, Any], list[float]]:
    """Create the runner and warm it up on the first window (initial batch model, learners, river)."""
    W = protocol.window
    X0, y0 = stream.X[:W][labeled[:W]], stream.y[:W][labeled[:W]]
    train_clock = [0.0]
    info: dict[str, Any] = {}
    if spec.strategy in RIVER_PEERS:
        runner = RiverRunner(spec.strategy, stream.task, stream.n_features)
        runner.warm(X0, y0)
        return runner, {"update_order": "river"}, train_clock
    strategy = STRATEGIES[spec.strategy]
    guard, X0, y0 = screen_first_window(X0, y0, stream.task)
    ctx = make_context(X0, y0, stream.task, protocol.window_labels, train=strategy.train)
    ctx.guard = guard
    loop = strategy.build(ctx, spec.param)
    assert isinstance(loop, EdgeLoop)
    loop.recompute_fn = _timed(loop.recompute_fn, train_clock)
    loop.start(ctx.initial_model(), X0, y0, warm_learner=True)
    info["C"] = ctx.C
    info["learner_params"] = ctx.learner_params
    info["update_order"] = getattr(loop.learner, "order", "other") if loop.learner is not None else "none"
    return loop, info, train_clock


def run_one(stream: Stream, protocol: Protocol, spec: RunSpec, curves: bool = False) -> dict[str, Any]:
    """Prequential run over the scored part (samples after the first window); returns one result row."""
    n, W = len(stream), protocol.window
    if n <= W:
        raise ValueError(f"stream {stream.name} has {n} samples, not more than the window ({W})")
    labeled = protocol.labeled_mask(n, spec.offset)
    X, y = stream.X, stream.y
    t_build = time.perf_counter()
    if spec.strategy in BASELINES:
        preds = baseline_predictions(spec.strategy, y, labeled, protocol.delay, stream.task)[W:]
        runner: Any = None
        info: dict[str, Any] = {"update_order": "O(1)"}
        elapsed, train_time = 0.0, 0.0
    else:
        runner, info, clock = build_runner(stream, protocol, spec, labeled)
        preds = np.empty(n - W)
        delay = protocol.delay
        pending: deque[int] = deque()
        t0 = time.perf_counter()
        clock[0] = 0.0
        if delay == 0:
            for i in range(W, n):
                preds[i - W] = runner.process_one(X[i], float(y[i]) if labeled[i] else None)
        else:
            for i in range(W, n):
                preds[i - W] = runner.process_one(X[i], None)
                if labeled[i]:
                    pending.append(i)
                while pending and pending[0] + delay <= i:
                    j = pending.popleft()
                    runner.learn_one(X[j], float(y[j]))
        elapsed = time.perf_counter() - t0
        train_time = clock[0]
    y_true = y[W:]
    row: dict[str, Any] = {
        "strategy": spec.strategy,
        "params": {} if spec.param is None else {_param_name(spec.strategy): spec.param},
        "offset": spec.offset,
        "n_scored": int(n - W),
        "n_labeled": int(labeled[W:].sum()),
        **info,
    }
    if stream.task == "classification":
        nochange = baseline_predictions("no-change", y, labeled, protocol.delay, stream.task)[W:]
        row.update(classification_report(y_true, preds, y_nochange=nochange))
    else:
        row.update(regression_report(y_true, preds))
    monitor = getattr(runner, "monitor", None)
    if monitor is not None:
        row["monitor"] = {k: v for k, v in monitor.stats.items() if isinstance(v, int | float | bool)}
    events = getattr(runner, "events", [])
    counters = getattr(runner, "counters", None)
    row.update(
        {
            "recomputes": int(counters.recomputes) if counters else 0,
            "bytes_up": int(counters.bytes_up) if counters else 0,
            "bytes_down": int(counters.bytes_down) if counters else 0,
            "recompute_at": [W + e.sample for e in events],
            "edge_us_per_sample": 1e6 * max(elapsed - train_time, 0.0) / (n - W),
            "train_ms_total": 1e3 * train_time,
            "wall_s": time.perf_counter() - t_build,
        }
    )
    if curves:
        row["predictions"] = preds
    return row


def _param_name(strategy: str) -> str:
    s = STRATEGIES.get(strategy)
    return (s.param if s is not None else None) or "param"
