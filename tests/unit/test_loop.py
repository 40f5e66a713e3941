"""Tests of edgedrift.loop.EdgeLoop: predict/learn order, recomputes, counters and the learner policies."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from edgedrift.learners import SGD, IncrementalLearner
from edgedrift.loop import EdgeLoop, window_upload_bytes
from edgedrift.models.document import BatchModel
from edgedrift.models.linear import LinearModel
from edgedrift.models.losses import FloatArray, get_loss
from edgedrift.monitors import Monitor, NeverMonitor, PeriodicMonitor
from edgedrift.monitors.hooks import RestartHook, UnlabeledHook, WarningHook
from edgedrift.training.linear import train_linear
from edgedrift.window import CountWindow, TimeWindow

D = 3


def stream(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    y = np.where(X @ np.array([1.0, -1.0, 0.5]) + 0.2 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


@dataclass
class RecordingTrainer:
    """A batch trainer that records every window it is asked to train on."""

    calls: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    models: list[LinearModel] = field(default_factory=list)
    return_none: bool = False

    def __call__(self, X: FloatArray, y: FloatArray) -> LinearModel | None:
        self.calls.append((X.copy(), y.copy()))
        if self.return_none:
            return None
        model = train_linear(X, y, "logistic", 1.0).with_meta(
            created="2024-01-01T00:00:00+00:00", version=len(self.calls)
        )
        self.models.append(model)
        return model


class ScriptedMonitor(Monitor, UnlabeledHook, RestartHook, WarningHook):
    """Warns / fires on given label numbers (1-based, counted since the last reset) and records calls."""

    name = "scripted"

    def __init__(
        self,
        warn: Iterable[int] = (),
        fire: Iterable[int] = (),
        incremental_during_warning: bool = True,
        last: int | None = None,
    ) -> None:
        super().__init__()
        self.warn, self.fire = set(warn), set(fire)
        self.incremental_during_warning = incremental_during_warning
        self.last = last
        self.n = 0
        self.resets: list[tuple[BatchModel, np.ndarray, np.ndarray]] = []
        self.updates: list[tuple[np.ndarray, float, float, int]] = []
        self.unlabeled: list[np.ndarray] = []

    def reset(self, model: BatchModel, X: FloatArray, y: FloatArray) -> None:
        self.resets.append((model, X.copy(), y.copy()))
        self.n = 0
        self.drift_detected = False
        self.warning_detected = False

    def update(self, x: FloatArray, y: float, error: float, window: Any, n_evicted: int) -> None:
        self.n += 1
        self.updates.append((x.copy(), y, error, n_evicted))
        self.warning_detected = self.n in self.warn
        self.drift_detected = self.n in self.fire

    def update_unlabeled(self, x: FloatArray) -> None:
        self.unlabeled.append(x.copy())

    def update_unlabeled_many(self, X: FloatArray) -> None:
        self.unlabeled.extend(x.copy() for x in X)

    def train_on_last(self) -> int | None:
        return self.last


def constant_model(sign: float) -> LinearModel:
    """A model that predicts ``sign`` for every x near the origin (large intercept)."""
    return LinearModel(get_loss("logistic"), np.array([0.0, 0.0, 0.0, 100.0 * sign]), C=1.0)


def opposite_learner(sign: float) -> SGD:
    """A learner that predicts ``sign`` everywhere and never changes (learning rate 0)."""
    learner = SGD(D, lr=0.0, schedule="constant", l2=0.0)
    learner.w[:] = [0.0, 0.0, 0.0, 100.0 * sign]
    return learner


def test_periodic_recompute_trains_on_exactly_the_window_and_installs_the_model() -> None:
    W, period, n = 20, 5, 200
    X, y = stream(W + n, seed=0)
    trainer = RecordingTrainer()
    loop = EdgeLoop(CountWindow(W, D), PeriodicMonitor(period), trainer)
    first = train_linear(X[:W], y[:W])
    loop.start(first, X[:W], y[:W])
    assert loop.model is first
    assert loop.counters.recomputes == 0
    probe = np.random.default_rng(1).normal(size=(50, D)) * 2.0
    for i in range(W, W + n):
        before = len(trainer.calls)
        loop.process_one(X[i], float(y[i]))
        labels_seen = i - W + 1
        if labels_seen % period == 0:
            assert len(trainer.calls) == before + 1
            Xt, yt = trainer.calls[-1]
            # The window holds the last W labeled samples, oldest first.
            np.testing.assert_array_equal(Xt, X[i - W + 1 : i + 1])
            np.testing.assert_array_equal(yt, y[i - W + 1 : i + 1])
            installed = trainer.models[-1]
            assert loop.model is installed
            preds = [loop.predict_one(p) for p in probe]
            assert preds == [installed.predict_one(p) for p in probe]
        else:
            assert len(trainer.calls) == before
    assert loop.counters.recomputes == n // period
    assert len(loop.events) == n // period
    assert [e.sample for e in loop.events] == list(range(period, n + 1, period))
    assert all(e.n_train == W for e in loop.events)


def test_counters_and_bytes() -> None:
    W, period = 15, 7
    X, y = stream(W + 300, seed=2)
    labeled = np.zeros(len(y), dtype=bool)
    labeled[W::3] = True
    trainer = RecordingTrainer()
    loop = EdgeLoop(CountWindow(W, D), PeriodicMonitor(period), trainer)
    loop.start(train_linear(X[:W], y[:W]), X[:W], y[:W])
    for i in range(W, len(y)):
        loop.process_one(X[i], float(y[i]) if labeled[i] else None)
    n_labels = int(labeled[W:].sum())
    c = loop.counters
    assert c.samples == 300
    assert c.labeled == n_labels
    assert c.recomputes == n_labels // period == len(trainer.calls)
    assert c.bytes_up == len(trainer.calls) * (64 + 4 * W * (D + 1))
    assert c.bytes_up == sum(window_upload_bytes(len(yt), D) for _, yt in trainer.calls)
    assert c.bytes_down == sum(len(json.dumps(m.to_document())) for m in trainer.models)
    assert [e.bytes_up for e in loop.events] == [64 + 4 * W * (D + 1)] * c.recomputes
    assert [e.bytes_down for e in loop.events] == [len(json.dumps(m.to_document())) for m in trainer.models]


def test_monitor_sees_each_label_with_its_error_and_evictions() -> None:
    W = 5
    X, y = stream(W + 30, seed=3)
    monitor = ScriptedMonitor()
    model = constant_model(+1.0)
    loop = EdgeLoop(CountWindow(W, D), monitor, RecordingTrainer())
    loop.start(model, X[:W], y[:W])
    (m0, X0, y0) = monitor.resets[0]
    assert m0 is model
    np.testing.assert_array_equal(X0, X[:W])
    np.testing.assert_array_equal(y0, y[:W])
    for i in range(W, W + 30):
        y_hat = loop.process_one(X[i], float(y[i]))
        assert y_hat == 1.0
        x_seen, y_seen, err, n_ev = monitor.updates[-1]
        np.testing.assert_array_equal(x_seen, X[i])
        assert y_seen == y[i]
        assert err == float(y[i] != 1.0)
        assert n_ev == 1  # the window was full after start()
    assert len(monitor.updates) == 30
    assert monitor.unlabeled == []


def test_unlabeled_samples_go_to_update_unlabeled_only() -> None:
    X, y = stream(40, seed=4)
    monitor = ScriptedMonitor()
    loop = EdgeLoop(CountWindow(10, D), monitor, RecordingTrainer())
    loop.start(constant_model(-1.0), X[:10], y[:10])
    for i in range(10, 40):
        assert loop.process_one(X[i], None) == -1.0
    assert len(monitor.unlabeled) == 30
    np.testing.assert_array_equal(np.array(monitor.unlabeled), X[10:40])
    assert monitor.updates == []
    assert loop.counters.samples == 30
    assert loop.counters.labeled == 0
    assert len(loop.window) == 10


def test_late_label_through_learn_one() -> None:
    X, y = stream(30, seed=5)
    monitor = ScriptedMonitor()
    loop = EdgeLoop(CountWindow(10, D), monitor, RecordingTrainer())
    loop.start(constant_model(+1.0), X[:10], y[:10])
    loop.process_one(X[10], None)
    loop.learn_one(X[10], -1.0)  # the label arrives later; the loop predicts again for the error
    assert monitor.updates[-1][2] == 1.0
    np.testing.assert_array_equal(loop.window.contents()[0][-1], X[10])
    assert loop.counters.samples == 1
    assert loop.counters.labeled == 1


@pytest.mark.parametrize("incremental_during_warning", [True, False])
def test_predict_with_monitor_uses_the_learner_only_during_warnings(incremental_during_warning: bool) -> None:
    X, y = stream(60, seed=6)
    warn = {3, 4, 5, 10}
    monitor = ScriptedMonitor(warn=warn, incremental_during_warning=incremental_during_warning)
    loop = EdgeLoop(
        CountWindow(10, D),
        monitor,
        RecordingTrainer(),
        learner=opposite_learner(-1.0),
        predict_with="monitor",
        anchor_on_recompute=False,
    )
    loop.start(constant_model(+1.0), X[:10], y[:10])
    for k, i in enumerate(range(10, 30), start=1):
        # The prediction for label k is made with the state after label k − 1.
        incremental = incremental_during_warning and (k - 1) in warn
        assert loop.uses_incremental() == incremental
        assert loop.process_one(X[i], float(y[i])) == (-1.0 if incremental else 1.0)


def test_predict_with_incremental_and_batch() -> None:
    X, y = stream(40, seed=7)
    inc = EdgeLoop(
        CountWindow(10, D),
        NeverMonitor(),
        RecordingTrainer(),
        learner=opposite_learner(-1.0),
        predict_with="incremental",
        anchor_on_recompute=False,
    )
    inc.start(constant_model(+1.0), X[:10], y[:10])
    assert all(inc.process_one(X[i], float(y[i])) == -1.0 for i in range(10, 40))
    np.testing.assert_array_equal(inc.predict_many(X), -1.0)
    batch = EdgeLoop(
        CountWindow(10, D),
        ScriptedMonitor(warn=range(100)),
        RecordingTrainer(),
        learner=opposite_learner(-1.0),
        anchor_on_recompute=False,
    )
    batch.start(constant_model(+1.0), X[:10], y[:10])
    assert all(batch.process_one(X[i], float(y[i])) == 1.0 for i in range(10, 40))
    np.testing.assert_array_equal(batch.predict_many(X), 1.0)


def test_recompute_anchors_the_learner_on_the_new_model() -> None:
    X, y = stream(60, seed=8)
    learner = SGD(D, lr=0.5)
    trainer = RecordingTrainer()
    loop = EdgeLoop(
        CountWindow(10, D), PeriodicMonitor(10), trainer, learner=learner, predict_with="incremental"
    )
    loop.start(train_linear(X[:10], y[:10]), X[:10], y[:10])
    for i in range(10, 20):
        loop.process_one(X[i], float(y[i]))
    assert len(trainer.models) == 1
    probe = np.random.default_rng(9).normal(size=(30, D))
    np.testing.assert_allclose(
        [learner.score_one(p) for p in probe], trainer.models[0].decision_function(probe), atol=1e-9
    )


def test_start_with_warm_learner_streams_the_warm_up_window() -> None:
    X, y = stream(20, seed=10)
    learner = SGD(D, lr=0.1)
    loop = EdgeLoop(CountWindow(20, D), NeverMonitor(), RecordingTrainer(), learner, "incremental")
    loop.start(train_linear(X, y), X, y, warm_learner=True)
    assert learner.n_learned == 20
    cold = SGD(D, lr=0.1)
    loop2 = EdgeLoop(CountWindow(20, D), NeverMonitor(), RecordingTrainer(), cold, "incremental")
    loop2.start(train_linear(X, y), X, y)
    assert cold.n_learned == 0
    assert len(loop.window) == len(loop2.window) == 20


def test_pending_recompute_suppresses_further_recomputes_until_install() -> None:
    W = 10
    X, y = stream(W + 40, seed=11)
    trainer = RecordingTrainer(return_none=True)
    monitor = ScriptedMonitor(fire=range(5, 100))  # fires at label 5 and keeps firing
    learner = SGD(D, lr=0.1)
    loop = EdgeLoop(CountWindow(W, D), monitor, trainer, learner=learner, predict_with="incremental")
    first = train_linear(X[:W], y[:W])
    loop.start(first, X[:W], y[:W])
    for i in range(W, W + 20):
        loop.process_one(X[i], float(y[i]))
    assert len(trainer.calls) == 1
    assert loop.pending_recompute
    assert loop.counters.recomputes == 1
    assert loop.counters.bytes_up == 64 + 4 * W * (D + 1)
    assert loop.counters.bytes_down == 0
    assert loop.model is first
    # The model arrives asynchronously, trained on the window as it is now.
    async_model = train_linear(*loop.window.contents(), C=2.0)
    loop.install(async_model)
    assert not loop.pending_recompute
    assert loop.model is async_model
    model, Xr, yr = monitor.resets[-1]
    assert model is async_model
    Xw, yw = loop.window.contents()
    np.testing.assert_array_equal(Xr, Xw)
    np.testing.assert_array_equal(yr, yw)
    probe = np.random.default_rng(12).normal(size=(20, D))
    np.testing.assert_allclose([learner.score_one(p) for p in probe], async_model.decision_function(probe))
    # Monitoring starts over: the next drift (label 5 after the reset) asks again.
    for i in range(W + 20, W + 25):
        loop.process_one(X[i], float(y[i]))
    assert len(trainer.calls) == 2
    assert loop.pending_recompute


def test_train_on_last_restarts_the_window() -> None:
    W = 12
    X, y = stream(W + 10, seed=13)
    trainer = RecordingTrainer()
    monitor = ScriptedMonitor(fire={6}, last=4)
    loop = EdgeLoop(CountWindow(W, D), monitor, trainer)
    loop.start(train_linear(X[:W], y[:W]), X[:W], y[:W])
    for i in range(W, W + 6):
        loop.process_one(X[i], float(y[i]))
    Xt, yt = trainer.calls[0]
    np.testing.assert_array_equal(Xt, X[W + 2 : W + 6])
    np.testing.assert_array_equal(yt, y[W + 2 : W + 6])
    assert len(loop.window) == 4
    np.testing.assert_array_equal(loop.window.contents()[0], X[W + 2 : W + 6])
    np.testing.assert_array_equal(monitor.resets[-1][1], X[W + 2 : W + 6])
    assert loop.counters.bytes_up == 64 + 4 * 4 * (D + 1)


def test_swap_learner_on_drift_uses_the_learner_trained_since_the_warning() -> None:
    W = 10
    X, y = stream(W + 40, seed=14)
    trainer = RecordingTrainer()
    monitor = ScriptedMonitor(warn={8, 9, 10, 11}, fire={12}, incremental_during_warning=False)
    original = SGD(D, lr=0.1)
    loop = EdgeLoop(
        CountWindow(W, D),
        monitor,
        trainer,
        learner=original,
        predict_with="incremental",
        swap_learner_on_drift=True,
    )
    first = train_linear(X[:W], y[:W])
    loop.start(first, X[:W], y[:W])
    for i in range(W, W + 12):
        loop.process_one(X[i], float(y[i]))
    assert trainer.calls == []  # incremental mode: no batch training
    assert loop.counters.recomputes == 1
    assert loop.counters.bytes_up == loop.counters.bytes_down == 0
    swapped = loop.learner
    assert swapped is not original
    assert isinstance(swapped, SGD)
    assert swapped.lr == original.lr
    # Trained on labels 8..12 only, exactly like a fresh learner on those samples.
    assert swapped.n_learned == 5
    fresh = SGD(D, lr=0.1)
    for i in range(W + 7, W + 12):
        fresh.learn_one(X[i], float(y[i]))
    np.testing.assert_array_equal(swapped.w, fresh.w)
    assert original.n_learned == 12
    # The monitor was reset on the batch model, which stays installed.
    assert loop.model is first
    assert monitor.resets[-1][0] is first
    # Predictions now come from the swapped learner.
    probe = X[W + 12]
    assert loop.predict_one(probe) == swapped.predict_one(probe)


def test_swap_learner_without_a_warning_starts_fresh() -> None:
    """No warning before the drift: the new learner is fresh and has seen only the drift sample (MOA)."""
    X, y = stream(30, seed=15)
    monitor = ScriptedMonitor(fire={3})
    original = SGD(D, lr=0.1)
    loop = EdgeLoop(
        CountWindow(10, D), monitor, RecordingTrainer(), original, "incremental", swap_learner_on_drift=True
    )
    loop.start(train_linear(X[:10], y[:10]), X[:10], y[:10])
    for i in range(10, 13):
        loop.process_one(X[i], float(y[i]))
    assert loop.learner is not original
    assert isinstance(loop.learner, IncrementalLearner)
    assert loop.learner.n_learned == 1
    fresh = SGD(D, lr=0.1)
    fresh.learn_one(X[12], float(y[12]))
    np.testing.assert_allclose(loop.learner.w, fresh.w)


def test_swap_learner_after_a_cleared_warning_uses_only_the_current_warning() -> None:
    X, y = stream(40, seed=16)
    monitor = ScriptedMonitor(warn={2, 3, 8, 9}, fire={10})
    loop = EdgeLoop(
        CountWindow(10, D),
        monitor,
        RecordingTrainer(),
        SGD(D, lr=0.1),
        "incremental",
        swap_learner_on_drift=True,
    )
    loop.start(train_linear(X[:10], y[:10]), X[:10], y[:10])
    for i in range(10, 20):
        loop.process_one(X[i], float(y[i]))
    assert loop.learner is not None
    assert loop.learner.n_learned == 3  # labels 8, 9, 10


def test_time_window_loop_evicts_by_timestamp() -> None:
    X, y = stream(50, seed=17)
    monitor = ScriptedMonitor()
    loop = EdgeLoop(TimeWindow(5.0, D), monitor, RecordingTrainer())
    loop.start(constant_model(1.0), X[:0], y[:0])
    for i in range(20):
        loop.process_one(X[i], float(y[i]), ts=float(i))
    assert [u[3] for u in monitor.updates] == [0] * 5 + [1] * 15
    np.testing.assert_array_equal(loop.window.timestamps(), [15.0, 16.0, 17.0, 18.0, 19.0])


def test_constructor_rejects_missing_learner() -> None:
    for kwargs in (
        {"predict_with": "monitor"},
        {"predict_with": "incremental"},
        {"swap_learner_on_drift": True},
    ):
        with pytest.raises(ValueError):
            EdgeLoop(CountWindow(5, D), NeverMonitor(), RecordingTrainer(), **kwargs)


def test_regression_error_is_squared() -> None:
    rng = np.random.default_rng(18)
    X = rng.normal(size=(20, D))
    y = X @ np.array([1.0, 2.0, 3.0])
    model = LinearModel(get_loss("squared"), np.zeros(D + 1), C=1.0)
    monitor = ScriptedMonitor()
    loop = EdgeLoop(CountWindow(5, D), monitor, RecordingTrainer())
    loop.start(model, X[:5], y[:5])
    for i in range(5, 20):
        assert loop.process_one(X[i], float(y[i])) == 0.0
    np.testing.assert_allclose([u[2] for u in monitor.updates], y[5:20] ** 2)
