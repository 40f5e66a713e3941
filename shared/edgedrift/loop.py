"""The edge loop: predict, then (for labeled samples) window, monitor, learn, and recompute when told.

This is the one implementation of the loop. The offline evaluator drives it sample by sample with an
in-process trainer; the edge agent drives it from MQTT with an HTTP trainer. A strategy is a choice of
monitor, incremental learner and prediction policy:

* ``predict_with="batch"``: always the batch model β₁ (periodic sliding window, PredSign, DDM batch);
* ``"monitor"``: β₁, but the incremental model β_cur while the monitor warns (Algorithm 1);
* ``"incremental"``: always the incremental learner, which a recompute re-anchors (incremental SGD,
  EdgeDrift's hybrid ``druid``, the error-driven triggers in incremental mode).

With a :class:`~edgedrift.guard.RangeGuard`, a sample it flags is still predicted but kept out of the
window, the monitor and the learner (``counters.outliers``; ``last_outliers`` holds the flags of the
last call), so one glitched reading cannot poison the state.

The module is over 500 lines because the per-sample path and the two batch paths (``process_many``,
whose predictions must stay exactly those of ``process_one``, and the opt-in vectorised one) belong
together: splitting them would let them drift apart.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from edgedrift.guard import RangeGuard
from edgedrift.learners.base import OnlineLearner
from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray
from edgedrift.monitors.base import Monitor
from edgedrift.monitors.hooks import RestartHook, SelectionHook, UnlabeledHook, WarningHook
from edgedrift.window import CountWindow, TimeWindow

PredictWith = Literal["batch", "monitor", "incremental"]
#: A batch trainer: ``(X, y)`` -> model, or None while an asynchronous recompute is pending. When the
#: monitor keeps a second candidate set (RebalanceStream's reset batch) it is called as
#: ``(X, y, reset_rows=r)``: the last ``r`` rows of X form that set.
Recompute = Callable[..., BatchModel | None]


@dataclass
class RecomputeEvent:
    """One batch recompute (or, for incremental-mode triggers, one learner swap)."""

    sample: int
    n_train: int
    bytes_up: int
    bytes_down: int
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoopCounters:
    samples: int = 0
    labeled: int = 0
    recomputes: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    outliers: int = 0


class Runner(Protocol):
    """What a prequential runner drives: one sample at a time, labels possibly late, or a batch whose
    predictions are those of ``process_one`` on each of its samples in order.

    :class:`EdgeLoop` is one; the evaluator's river peers are others.
    """

    def process_one(self, x: FloatArray, y: float | None = None, ts: float = math.nan) -> float: ...

    def learn_one(
        self, x: FloatArray, y: float, y_hat: float | None = None, ts: float = math.nan
    ) -> None: ...

    def process_many(
        self, X: FloatArray, y: FloatArray | None = None, ts: FloatArray | None = None
    ) -> FloatArray: ...


def window_upload_bytes(n: int, d: int) -> int:
    """Bytes to ship a window as the compact binary body: float32 features and labels, 64-byte header."""
    return 64 + 4 * n * (d + 1)


class EdgeLoop:
    """Test-then-train loop over one stream, shared by the evaluator and the edge agent.

    Parameters
    ----------
    window
        The sliding window of labeled samples the batch trainer retrains on.
    monitor
        Decides when the batch model is stale; its optional hooks (:mod:`edgedrift.monitors.hooks`) are
        looked up once, when it is set.
    recompute
        The batch trainer: ``(X, y)`` -> model, or None while an asynchronous recompute is pending.
    learner
        The incremental learner (needed unless ``predict_with="batch"``).
    predict_with
        ``"batch"``, ``"monitor"`` or ``"incremental"`` (see the module docstring).
    anchor_on_recompute
        Whether every installed batch model re-anchors the learner.
    swap_learner_on_drift
        Incremental mode of the error-driven triggers: a drift swaps in a learner trained since the
        warning instead of retraining the batch model.
    guard
        Keeps flagged samples out of the window, the monitor and the learner.

    Examples
    --------
    >>> import numpy as np
    >>> from edgedrift.learners import ForgettingNewton
    >>> from edgedrift.monitors import DruidMonitor
    >>> from edgedrift.training.linear import LinearTrainer
    >>> from edgedrift.window import CountWindow
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(3000, 2))
    >>> y = np.where(np.arange(3000) < 1500, np.sign(X[:, 0] + X[:, 1]), np.sign(X[:, 0] - X[:, 1]))
    >>> trainer = LinearTrainer("logistic", C=10.0)
    >>> loop = EdgeLoop(
    ...     CountWindow(200, n_features=2),
    ...     DruidMonitor(alpha=0.999, t_n=200),
    ...     trainer,
    ...     learner=ForgettingNewton(2, forgetting=0.9, prior=0.1),
    ...     predict_with="incremental",
    ... )
    >>> loop.start(trainer(X[:200], y[:200]), X[:200], y[:200], warm_learner=True)
    >>> hits = 0
    >>> for i in range(200, 3000):
    ...     hits += int(loop.process_one(X[i], y[i]) == y[i])
    >>> round(hits / 2800, 3), loop.counters.recomputes, [e.sample for e in loop.events]
    (0.97, 1, [1538])
    """

    _state_transient = ("recompute_fn",)

    def __init__(
        self,
        window: CountWindow | TimeWindow,
        monitor: Monitor,
        recompute: Recompute,
        learner: OnlineLearner | None = None,
        predict_with: PredictWith = "batch",
        anchor_on_recompute: bool = True,
        swap_learner_on_drift: bool = False,
        guard: RangeGuard | None = None,
    ) -> None:
        if predict_with != "batch" and learner is None:
            raise ValueError(f"predict_with={predict_with!r} needs an incremental learner")
        if swap_learner_on_drift and learner is None:
            raise ValueError("swap_learner_on_drift needs an incremental learner")
        self.window = window
        self.monitor = monitor
        self.recompute_fn = recompute
        self.learner = learner
        self.predict_with = predict_with
        self.anchor_on_recompute = anchor_on_recompute
        self.swap_learner_on_drift = swap_learner_on_drift
        self.model: BatchModel | None = None
        self.counters = LoopCounters()
        self.events: list[RecomputeEvent] = []
        self.pending_recompute = False
        self._background: OnlineLearner | None = None
        self.guard = guard
        #: Whether the last process_one / learn_one sample was an outlier (process_many: ``last_outliers``).
        self.last_outlier = False
        self.last_outliers: np.ndarray = np.zeros(0, dtype=bool)
        #: process_many: whether each prediction came from the incremental learner (the agent's source).
        self.last_incremental: np.ndarray = np.zeros(0, dtype=bool)

    @property
    def monitor(self) -> Monitor:
        """The recompute trigger; setting it looks up its optional hooks."""
        return self._monitor

    @monitor.setter
    def monitor(self, monitor: Monitor) -> None:
        self._monitor = monitor
        self._unlabeled: UnlabeledHook | None = monitor if isinstance(monitor, UnlabeledHook) else None
        self._restart: RestartHook | None = monitor if isinstance(monitor, RestartHook) else None
        self._selection: SelectionHook | None = monitor if isinstance(monitor, SelectionHook) else None
        self._warning: WarningHook | None = monitor if isinstance(monitor, WarningHook) else None

    def start(self, model: BatchModel, X: FloatArray, y: FloatArray, warm_learner: bool = False) -> None:
        """Install the first batch model, trained on (X, y) (not counted as a recompute).

        The labeled warm-up samples fill the window; ``warm_learner`` also streams them through the
        incremental learner (so its scaler and memory are warm) before it is anchored on the model.
        """
        for xi, yi in zip(X, y, strict=True):
            self.window.push(xi, float(yi))
            if warm_learner and self.learner is not None:
                self.learner.learn_one(xi, float(yi))
        self._install(model, X, y)

    def _install(self, model: BatchModel, X: FloatArray, y: FloatArray) -> None:
        self.model = model
        self._monitor.reset(model, X, y)
        if self.learner is not None and self.anchor_on_recompute:
            self.learner.anchor(model)

    def install(self, model: BatchModel) -> None:
        """Swap in a model that arrived asynchronously (trained on the window as it is now), unless the
        monitor declines it (then the current model stays and the monitor starts over with it)."""
        X, y = self.window.contents()
        self._settle(model, X, y)
        self.pending_recompute = False

    def _settle(self, model: BatchModel, X: FloatArray, y: FloatArray) -> None:
        if self._selection is None or self._selection.accept(model):
            self._install(model, X, y)
        else:
            assert self.model is not None
            self._monitor.reset(self.model, X, y)

    def uses_incremental(self) -> bool:
        """Whether the next prediction comes from the incremental learner."""
        if self.predict_with == "incremental":
            return True
        return (
            self.predict_with == "monitor"
            and self._warning is not None
            and self._warning.incremental_during_warning
            and self._monitor.warning_detected
        )

    def _batch_predictor(self) -> BatchModel:
        """The batch model that predicts: the installed one, or the monitor's choice (SelectionHook)."""
        assert self.model is not None, "call start() with an initial model first"
        if self._selection is not None:
            override = self._selection.prediction_model()
            if override is not None:
                return override
        return self.model

    def predict_one(self, x: FloatArray) -> float:
        if self.uses_incremental():
            assert self.learner is not None
            return self.learner.predict_one(x)
        return self._batch_predictor().predict_one(x)

    def _outlier(self, x: FloatArray, y: float | None, remember: bool = True) -> bool:
        flagged = self.guard is not None and self.guard.check(x, y if self._guard_labels else None, remember)
        self.last_outlier = flagged
        if flagged:
            self.counters.outliers += 1
        return flagged

    @property
    def _guard_labels(self) -> bool:
        return self.model is not None and self.model.task == "regression"

    def process_one(self, x: FloatArray, y: float | None = None, ts: float = math.nan) -> float:
        """Predict x; if it carries a label, learn from it afterwards. Returns the prediction."""
        y_hat = self.predict_one(x)
        self.counters.samples += 1
        if self._outlier(x, y):
            return y_hat
        if y is None:
            if self._unlabeled is not None:
                self._unlabeled.update_unlabeled(x)
        else:
            self._learn(x, y, y_hat, ts)
        return y_hat

    def learn_one(self, x: FloatArray, y: float, y_hat: float | None = None, ts: float = math.nan) -> None:
        """A labeled sample (possibly late): window, monitor, learner, and a recompute if one is due."""
        if self._outlier(x, y, remember=False):
            return
        self._learn(x, y, y_hat, ts)

    def _learn(self, x: FloatArray, y: float, y_hat: float | None, ts: float) -> None:
        if y_hat is None:
            y_hat = self.predict_one(x)
        assert self.model is not None
        error = (y - y_hat) * (y - y_hat) if self.model.task == "regression" else float(y != y_hat)
        self.counters.labeled += 1
        n_evicted = self.window.push(x, y, ts)
        self._monitor.update(x, y, error, self.window, n_evicted)
        if self.learner is not None:
            self.learner.learn_one(x, y)
        if self.swap_learner_on_drift:
            self._track_background(x, y)
        if self._monitor.drift_detected and not self.pending_recompute:
            self._recompute()

    def _track_background(self, x: FloatArray, y: float) -> None:
        """Incremental mode (MOA's drift-detection classifier): a learner trained since the warning.

        A warning that clears without a drift drops it, so a later drift swaps in a learner trained
        since the *current* warning only.
        """
        if not (self._monitor.warning_detected or self._monitor.drift_detected):
            self._background = None
            return
        if self._background is None:
            assert self.learner is not None
            self._background = self.learner.clone()
        self._background.learn_one(x, y)

    def _recompute(self) -> None:
        stats = self._monitor.stats
        own = None if self._selection is None else self._selection.training_batch()
        if own is not None:
            X, y, reset_rows = own
            model = (
                self.recompute_fn(X, y)
                if reset_rows is None
                else self.recompute_fn(X, y, reset_rows=reset_rows)
            )
            self._finish_recompute(model, X, y, stats)
            return
        X, y = self.window.contents()
        if self.swap_learner_on_drift:
            assert self.learner is not None
            self.learner = self._background if self._background is not None else self.learner.clone()
            self._background = None
            assert self.model is not None
            self._monitor.reset(self.model, X, y)
            self._count(0, 0, stats)
            return
        k = None if self._restart is None else self._restart.train_on_last()
        if k is not None:
            # Train on the newest k samples only, and restart the window there, so that the new batch
            # model's training set is exactly the window (D₁ of Theorem 1).
            X, y = X[-k:], y[-k:]
            self.window.keep_last(k)
        self._finish_recompute(self.recompute_fn(X, y), X, y, stats)

    def _finish_recompute(
        self, model: BatchModel | None, X: FloatArray, y: FloatArray, stats: dict[str, Any]
    ) -> None:
        up = window_upload_bytes(len(y), self.window.n_features)
        if model is None:
            self.pending_recompute = True
            self._count(up, 0, stats)
            return
        self._count(up, len(json.dumps(model.to_document())), stats)
        self._settle(model, X, y)

    def _count(self, up: int, down: int, stats: dict[str, Any]) -> None:
        self.counters.recomputes += 1
        self.counters.bytes_up += up
        self.counters.bytes_down += down
        self.events.append(RecomputeEvent(self.counters.samples, len(self.window), up, down, stats))

    def process_many(
        self, X: FloatArray, y: FloatArray | None = None, ts: FloatArray | None = None
    ) -> FloatArray:
        """A batch (``y`` NaN where unlabeled), with per-sample semantics: exactly the predictions and the
        state of :meth:`process_one` on each sample in order. Each labeled sample is learned before the
        next one is predicted (its label is in the batch), so a drift the monitor finds mid-batch is
        recomputed there. ``last_outliers`` holds the guard's flags.

        Fast where it can be: nothing but the guard and an unlabeled-sample hook changes between two
        labeled samples, so each run of unlabeled samples is predicted in one call (a learner's
        ``predict_rows``: one compiled call that scores each row bit for bit as ``predict_one``) and
        screened by the guard at once; labeled samples go through :meth:`process_one` and its compiled
        per-sample kernels (:mod:`edgedrift.kernels`). :meth:`process_many_vectorised` is the faster
        mini-batch opt-in that gives up accuracy."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        n = len(X)
        preds = np.empty(n, dtype=np.float64)
        flags = np.zeros(n, dtype=bool)
        incremental = np.zeros(n, dtype=bool)
        if y is None:
            at: list[int] = []
            labels: list[float] = []
        else:
            yv = np.asarray(y, dtype=np.float64)
            at = np.flatnonzero(~np.isnan(yv)).tolist()
            labels = yv.tolist()
        times = None if ts is None else np.asarray(ts, dtype=np.float64).tolist()
        start = 0
        for i in [*at, n]:
            if i > start:
                incremental[start:i] = self._unlabeled_run(X[start:i], preds[start:i], flags[start:i])
            if i < n:
                incremental[i] = self.uses_incremental()
                preds[i] = self.process_one(X[i], labels[i], math.nan if times is None else times[i])
                flags[i] = self.last_outlier
            start = i + 1
        self.last_outliers, self.last_incremental = flags, incremental
        if n:
            self.last_outlier = bool(flags[-1])
        return preds

    def _unlabeled_run(self, X: FloatArray, out: FloatArray, flags: np.ndarray) -> bool:
        """:meth:`process_one` of unlabeled samples in a row, predictions into ``out`` and the guard's
        flags into ``flags``: the state they are predicted with is the same for all of them. Returns
        whether the incremental learner predicted them."""
        incremental = self.uses_incremental()
        if incremental:
            predictor: Any = self.learner
        else:
            predictor = self._batch_predictor()
        rows = getattr(predictor, "predict_rows", None)
        if rows is not None:
            out[:] = rows(X)
        else:
            predict = predictor.predict_one
            for r in range(len(X)):
                out[r] = predict(X[r])
        self.counters.samples += len(X)
        if self.guard is not None:
            flags[:] = self.guard.check_many(X)
            self.counters.outliers += int(np.count_nonzero(flags))
        if self._unlabeled is not None:
            update = self._unlabeled.update_unlabeled
            for r in np.flatnonzero(~flags).tolist():
                update(X[r])
        return incremental

    def learn_many(
        self, X: FloatArray, y: FloatArray, y_hat: FloatArray | None = None, ts: FloatArray | None = None
    ) -> None:
        """Labeled samples (possibly late), with per-sample semantics: exactly :meth:`learn_one` on each
        in order, a recompute the monitor calls for happening at its sample."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        n = len(X)
        labels = np.asarray(y, dtype=np.float64).tolist()
        predicted: list[float | None] = [None] * n if y_hat is None else np.asarray(y_hat).tolist()
        times = [math.nan] * n if ts is None else np.asarray(ts, dtype=np.float64).tolist()
        flags = np.zeros(n, dtype=bool)
        learn = self.learn_one
        for i in range(n):
            learn(X[i], labels[i], predicted[i], times[i])
            if self.last_outlier:
                flags[i] = True
        self.last_outliers = flags

    def process_many_vectorised(
        self, X: FloatArray, y: FloatArray | None = None, ts: FloatArray | None = None
    ) -> FloatArray:
        """The opt-in mini-batch path (the edge agent's ``batch_mode=vectorised``): all samples are
        predicted with the state at the batch's start, then its labeled samples are learned as one
        mini-batch and the monitor sees them step by step; a recompute it calls for happens at the end
        of the batch. Faster than :meth:`process_many`, but not what a per-sample stream gets: on ELEC2
        it loses 10-14 points of accuracy at batches of 100 (``docs/benchmarks.md``)."""
        X = np.asarray(X, dtype=np.float64)
        preds = self.predict_many(X)
        self.counters.samples += len(X)
        y = None if y is None else np.asarray(y, dtype=np.float64)
        flags = self._outliers_many(X, y)
        if flags.any():
            X, preds_kept = X[~flags], preds[~flags]
            y = None if y is None else y[~flags]
            ts = None if ts is None else np.asarray(ts)[~flags]
        else:
            preds_kept = preds
        if y is None:
            if self._unlabeled is not None:
                self._unlabeled.update_unlabeled_many(X)
            return preds
        labeled = ~np.isnan(y)
        if not labeled.all() and self._unlabeled is not None:
            self._unlabeled.update_unlabeled_many(X[~labeled])
        if labeled.any():
            self._learn_many(X[labeled], y[labeled], preds_kept[labeled], None if ts is None else ts[labeled])
        return preds

    def _outliers_many(self, X: FloatArray, y: FloatArray | None) -> np.ndarray:
        if self.guard is None:
            flags = np.zeros(len(X), dtype=bool)
        else:
            flags = self.guard.check_many(X, y if self._guard_labels else None)
            if flags.any():
                self.counters.outliers += int(flags.sum())
        self.last_outliers = flags
        return flags

    def learn_many_vectorised(
        self, X: FloatArray, y: FloatArray, y_hat: FloatArray | None = None, ts: FloatArray | None = None
    ) -> None:
        """Labeled samples as one mini-batch (the opt-in of :meth:`process_many_vectorised`)."""
        flags = self._outliers_many(X, y)
        if flags.any():
            keep = ~flags
            X, y = X[keep], y[keep]
            y_hat = None if y_hat is None else y_hat[keep]
            ts = None if ts is None else ts[keep]
        if len(y):
            self._learn_many(X, y, y_hat, ts)

    def _learn_many(
        self, X: FloatArray, y: FloatArray, y_hat: FloatArray | None, ts: FloatArray | None
    ) -> None:
        if self.swap_learner_on_drift:
            for i in range(len(y)):
                self._learn(X[i], float(y[i]), None, math.nan if ts is None else float(ts[i]))
            return
        if y_hat is None:
            y_hat = self.predict_many(X)
        assert self.model is not None
        regression = self.model.task == "regression"
        errors = (y - y_hat) * (y - y_hat) if regression else (y != y_hat).astype(np.float64)
        self.counters.labeled += len(y)
        n_evicted = self.window.push_many(X, y, ts)
        self._monitor.update_many(X, y, errors, self.window, n_evicted)
        if self.learner is not None:
            self.learner.learn_many(X, y)
        if self._monitor.drift_detected and not self.pending_recompute:
            self._recompute()

    def predict_many(self, X: FloatArray) -> FloatArray:
        """Vectorised predictions for a batch under the current predictor (no learning)."""
        if self.uses_incremental():
            assert self.learner is not None
            return self.learner.predict_many(X)
        return self._batch_predictor().predict(X)
