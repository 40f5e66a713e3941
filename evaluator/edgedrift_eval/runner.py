"""One prequential run: a stream, a protocol, a strategy with one parameter value, one label offset."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from edgedrift.data import Stream
from edgedrift.guard import screen_first_window
from edgedrift.loop import EdgeLoop, Recompute, window_upload_bytes
from edgedrift.metrics import (
    classification_report,
    majority_predictions,
    no_change_predictions,
    regression_report,
)
from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray
from edgedrift.strategies.channel import TuneChannel
from edgedrift.strategies.retuned import RetunedLearner
from edgedrift_eval.peers import RIVER_PEERS, RiverRunner
from edgedrift_eval.protocol import Protocol
from edgedrift_eval.results import LearnerParams, MonitorStats, RunResult
from edgedrift_eval.scoring import lag_since_label, scoring_metrics, state_bytes
from edgedrift_eval.strategies import STRATEGIES, make_context

BASELINES = ("no-change", "majority")


@dataclass(frozen=True)
class RunSpec:
    """What one run replays: a strategy, its parameter value (None: its default) and a label offset."""

    strategy: str
    param: float | None
    offset: int


@dataclass(frozen=True)
class RunnerInfo:
    """What a run reports about its runner besides the metrics (``C`` and ``learner_params``: loops only)."""

    update_order: str
    C: float | None = None
    learner_params: LearnerParams | None = None


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
    kind: str, y: FloatArray, labeled: NDArray[np.bool_], delay: int, task: str, n_classes: int = 2
) -> FloatArray:
    """The no-change (last known label) and majority (of known labels) predictors under the schedule.

    Classification uses :mod:`edgedrift.metrics`' predictors on the labels as known after the delay;
    for regression "no-change" repeats the last known value and "majority" is the mean of the known
    ones (0 before any label).
    """
    y_k, lab_k = known_labels(y, labeled, delay)
    if task == "classification":
        predict = no_change_predictions if kind == "no-change" else majority_predictions
        return predict(y_k, lab_k, n_classes=n_classes)
    if kind == "no-change":
        last = np.maximum.accumulate(np.where(lab_k, np.arange(len(y)), -1))
        prev = np.concatenate([[-1], last[:-1]])
        return np.where(prev >= 0, y_k[np.maximum(prev, 0)], 0.0)
    csum = np.concatenate([[0.0], np.cumsum(np.where(lab_k, y_k, 0.0))[:-1]])
    cnt = np.concatenate([[0], np.cumsum(lab_k)[:-1]])
    return np.where(cnt > 0, csum / np.maximum(cnt, 1), 0.0)


def _timed(fn: Recompute, clock: list[float]) -> Recompute:
    """Wrap a trainer so the wall time it spends is added to ``clock[0]`` and its CPU time to
    ``clock[1]`` (the cloud's share, not the edge's)."""

    def wrapped(X: FloatArray, y: FloatArray, **kwargs: Any) -> BatchModel | None:
        t, c = time.perf_counter(), time.process_time()
        try:
            return fn(X, y, **kwargs)
        finally:
            clock[0] += time.perf_counter() - t
            clock[1] += time.process_time() - c

    return wrapped


def build_runner(
    stream: Stream, protocol: Protocol, spec: RunSpec, labeled: NDArray[np.bool_]
) -> tuple[EdgeLoop | RiverRunner, RunnerInfo, list[float]]:
    """Create the runner and warm it up on the first window (initial batch model, learners, river)."""
    W = protocol.window
    X0, y0 = stream.X[:W][labeled[:W]], stream.y[:W][labeled[:W]]
    train_clock = [0.0, 0.0]
    if spec.strategy in RIVER_PEERS:
        runner = RiverRunner(spec.strategy, stream.task, stream.n_features, stream.n_classes)
        runner.warm(X0, y0)
        return runner, RunnerInfo("river"), train_clock
    strategy = STRATEGIES[spec.strategy]
    guard, X0, y0 = screen_first_window(X0, y0, stream.task)
    ctx = make_context(
        X0, y0, stream.task, protocol.window_labels, train=strategy.train, n_classes=stream.n_classes
    )
    ctx.guard = guard
    loop = strategy.build(ctx, spec.param)
    loop.recompute_fn = _timed(loop.recompute_fn, train_clock)
    loop.start(ctx.initial_model(), X0, y0, warm_learner=True)
    order = str(getattr(loop.learner, "order", "other")) if loop.learner is not None else "none"
    return loop, RunnerInfo(order, ctx.C, ctx.learner_params), train_clock


def run_one(stream: Stream, protocol: Protocol, spec: RunSpec, curves: bool = False) -> RunResult:
    """Prequential run over the scored part (samples after the first window); ``curves`` keeps every
    prediction in the result (for plots and for comparing a deployment sample by sample)."""
    n, W = len(stream), protocol.window
    if n <= W:
        raise ValueError(f"stream {stream.name} has {n} samples, not more than the window ({W})")
    labeled = protocol.labeled_mask(n, spec.offset)
    X, y = stream.X, stream.y
    t_build = time.perf_counter()
    if spec.strategy in BASELINES:
        preds = baseline_predictions(
            spec.strategy, y, labeled, protocol.delay, stream.task, stream.n_classes
        )[W:]
        runner: EdgeLoop | RiverRunner | None = None
        info = RunnerInfo("O(1)")
        elapsed, train_time, train_cpu = 0.0, 0.0, 0.0
    else:
        runner, info, clock = build_runner(stream, protocol, spec, labeled)
        preds = np.empty(n - W)
        delay = protocol.delay
        pending: deque[int] = deque()
        t0 = time.perf_counter()
        clock[0] = clock[1] = 0.0
        if protocol.batch > 1:
            if delay:
                raise ValueError("batches (--batch-size > 1) are fed with labels at once (--delay 0) only")
            y_fed = np.where(labeled, y, np.nan)
            for j in range(W, n, protocol.batch):
                k = min(n, j + protocol.batch)
                preds[j - W : k - W] = runner.process_many(X[j:k], y_fed[j:k])
        elif delay == 0:
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
        train_time, train_cpu = clock[0], clock[1]
    y_true = y[W:]
    if stream.task == "classification":
        n_classes = stream.n_classes
        nochange = baseline_predictions("no-change", y, labeled, protocol.delay, stream.task, n_classes)[W:]
        metrics = classification_report(y_true, preds, y_nochange=nochange, n_classes=n_classes)
        metrics |= scoring_metrics(y_true, preds, labeled[W:], lag_since_label(labeled)[W:])
    else:
        metrics = regression_report(y_true, preds)
    loop = runner if isinstance(runner, EdgeLoop) else None
    traffic = _traffic(loop)
    return RunResult(
        strategy=spec.strategy,
        params={} if spec.param is None else {_param_name(spec.strategy): spec.param},
        offset=spec.offset,
        n_scored=int(n - W),
        n_labeled=int(labeled[W:].sum()),
        update_order=info.update_order,
        C=info.C,
        learner_params=info.learner_params,
        metrics=metrics,
        monitor=None if loop is None else _numeric_stats(loop.monitor.stats),
        recomputes=0 if loop is None else int(loop.counters.recomputes),
        bytes_up=traffic[0],
        bytes_down=traffic[1],
        recompute_at=[] if loop is None else [W + e.sample for e in loop.events],
        edge_us_per_sample=1e6 * max(elapsed - train_time, 0.0) / (n - W),
        train_ms_total=1e3 * train_time,
        edge_state_bytes=_edge_state_bytes(loop),
        cloud_cpu_s_per_recompute=train_cpu / max(1, 0 if loop is None else loop.counters.recomputes),
        wall_s=time.perf_counter() - t_build,
        predictions=preds if curves else None,
    )


#: State of the edge loop that is not the edge's: the label outbox lives on the way to the cloud.
_NOT_EDGE = (TuneChannel,)


def _edge_state_bytes(loop: EdgeLoop | None) -> int:
    """Bytes of the arrays of the edge's learner, monitor and window at the end of the run."""
    return 0 if loop is None else state_bytes([loop.learner, loop.monitor, loop.window], _NOT_EDGE)


def _traffic(loop: EdgeLoop | None) -> tuple[int, int]:
    """Bytes up and down: the windows and models of the recomputes; a re-tuning strategy sends its labels
    as they come (the forwarded batches, the last one included) and receives its parameters too."""
    if loop is None:
        return 0, 0
    up, down = int(loop.counters.bytes_up), int(loop.counters.bytes_down)
    if isinstance(loop.learner, RetunedLearner):
        channel = loop.learner.channel
        pending = window_upload_bytes(channel.pending, channel.n_features) if channel.pending else 0
        up = channel.bytes_forwarded + pending
        down += channel.bytes_posted
    return up, down


def _numeric_stats(stats: Mapping[str, object]) -> MonitorStats:
    """The numbers and flags of a monitor's statistics (what a result row keeps)."""
    return {k: v for k, v in stats.items() if isinstance(v, int | float | bool)}


def _param_name(strategy: str) -> str:
    s = STRATEGIES.get(strategy)
    return (s.param if s is not None else None) or "param"
