"""The edge loop's monitor hooks (own training batch, accept, prediction override) and shrub models in it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from edgedrift.loop import EdgeLoop
from edgedrift.models.document import BatchModel, model_from_document
from edgedrift.models.linear import LinearModel
from edgedrift.models.losses import FloatArray, get_loss
from edgedrift.models.tree import ShrubModel
from edgedrift.monitors import PeriodicMonitor
from edgedrift.monitors.druid import DruidMonitor
from edgedrift.monitors.hooks import SelectionHook
from edgedrift.training.shrub import train_shrub
from edgedrift.window import CountWindow


def constant(sign: float, version: int) -> LinearModel:
    """Predicts ``sign`` everywhere (bias only)."""
    return LinearModel(get_loss("logistic"), np.array([0.0, 0.0, sign]), 1.0, meta={"version": version})


class Hooked(PeriodicMonitor, SelectionHook):
    """A periodic monitor that trains on its own batch, declines some models and may override prediction."""

    def __init__(self, period: int, decline: bool = False) -> None:
        super().__init__(period)
        self.decline = decline
        self.seen: list[tuple[FloatArray, FloatArray]] = []
        self.override: BatchModel | None = None
        self.resets: list[BatchModel] = []

    def update(self, x: FloatArray, y: float, error: float, window: Any, n_evicted: int) -> None:
        self.seen.append((x.copy(), np.array([y])))
        super().update(x, y, error, window, n_evicted)

    def reset(self, model: BatchModel, X: FloatArray, y: FloatArray) -> None:
        self.resets.append(model)
        super().reset(model, X, y)

    def training_batch(self) -> tuple[FloatArray, FloatArray, int | None]:
        X = np.array([x for x, _ in self.seen])
        y = np.concatenate([y for _, y in self.seen])
        return X, y, 3

    def accept(self, model: BatchModel) -> bool:
        return not self.decline

    def prediction_model(self) -> BatchModel | None:
        return self.override


class Trainer:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int | None]] = []

    def __call__(self, X: FloatArray, y: FloatArray, reset_rows: int | None = None) -> BatchModel:
        self.calls.append((len(y), reset_rows))
        return constant(-1.0, len(self.calls) + 1)


def run(monitor: Hooked, trainer: Trainer, n: int = 10) -> EdgeLoop:
    loop = EdgeLoop(CountWindow(4, 2), monitor, trainer)
    loop.start(constant(1.0, 1), np.zeros((2, 2)), np.array([1.0, 1.0]))
    rng = np.random.default_rng(0)
    for _ in range(n):
        loop.process_one(rng.normal(size=2), 1.0)
    return loop


def test_monitor_batch_and_reset_rows_reach_the_trainer() -> None:
    trainer = Trainer()
    loop = run(Hooked(5), trainer)
    # The monitor's own batch (every labeled sample since start: 5, then 10), not the 4-sample window.
    assert trainer.calls == [(5, 3), (10, 3)]
    assert loop.counters.recomputes == 2
    assert loop.model is not None and loop.model.meta["version"] == 3


def test_a_declined_model_is_counted_but_not_installed() -> None:
    trainer = Trainer()
    monitor = Hooked(5, decline=True)
    loop = run(monitor, trainer)
    assert loop.counters.recomputes == 2
    assert loop.model is not None and loop.model.meta["version"] == 1, "the declined models replaced it"
    # The monitor starts over with the model it kept.
    assert [m.meta["version"] for m in monitor.resets] == [1, 1, 1]


def test_prediction_model_overrides_the_installed_one() -> None:
    monitor = Hooked(1000)
    loop = run(monitor, Trainer(), n=1)
    x = np.array([0.3, -0.2])
    assert loop.predict_one(x) == 1.0
    monitor.override = constant(-1.0, 99)
    assert loop.predict_one(x) == -1.0
    assert loop.predict_many(np.tile(x, (3, 1))).tolist() == [-1.0, -1.0, -1.0]


def test_shrub_documents_become_shrub_models_that_predict_like_the_document() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 3))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    doc = train_shrub(X, y, "classification", max_depth=4, min_samples_leaf=1, seed=0)
    doc["training"] = {"chosen": "batch", "scores": {"batch": 0.5}}
    model = model_from_document(doc)
    assert isinstance(model, ShrubModel) and isinstance(model, BatchModel)
    assert model.meta["training"]["chosen"] == "batch"
    assert model.classes.tolist() == [-1.0, 1.0] and model.n_features == 3
    assert model.nbytes > 0
    np.testing.assert_array_equal(model.predict(X), np.array([model.predict_one(x) for x in X]))
    assert (model.predict(X) == y).mean() > 0.9
    linear = constant(1.0, 7).with_meta(training={"chosen": "reset"})
    assert model_from_document(linear.to_document()).meta["training"] == {"chosen": "reset"}


def test_bound_monitors_refuse_a_shrub_with_a_clear_error() -> None:
    rng = np.random.default_rng(2)
    X = rng.normal(size=(50, 2))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    shrub = ShrubModel.from_document(
        train_shrub(X, y, "classification", max_depth=2, min_samples_leaf=1, seed=0)
    )
    with pytest.raises(TypeError, match="linear models only"):
        DruidMonitor().reset(shrub, X, y)
