"""river's own learners as peers, run under the same protocol (predict_one, then learn_one when labeled).

Binary labels ±1 reach river as True/False; multi-class codes 0..C−1 as the integers 0..C−1. The linear
peers become one-vs-rest (``river.multiclass.OneVsRestClassifier``) when there are more than two classes;
the trees and the adaptive random forest are multi-class by themselves.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from edgedrift.models.losses import FloatArray, Task


def _river_model(name: str, task: Task, n_classes: int = 2) -> Any:
    from river import compose, forest, linear_model, multiclass, preprocessing, tree

    if task == "regression":
        regressors: dict[str, Callable[[], Any]] = {
            "river-lr": lambda: compose.Pipeline(
                preprocessing.StandardScaler(), linear_model.LinearRegression()
            ),
            "river-ht": lambda: tree.HoeffdingTreeRegressor(),
        }
        if name not in regressors:
            raise ValueError(f"{name} has no regression variant")
        return regressors[name]()

    def linear(model: Callable[[], Any]) -> Callable[[], Any]:
        if n_classes > 2:
            return lambda: compose.Pipeline(
                preprocessing.StandardScaler(), multiclass.OneVsRestClassifier(model())
            )
        return lambda: compose.Pipeline(preprocessing.StandardScaler(), model())

    classifiers: dict[str, Callable[[], Any]] = {
        "river-lr": linear(linear_model.LogisticRegression),
        "river-perceptron": linear(linear_model.Perceptron),
        "river-ht": lambda: tree.HoeffdingTreeClassifier(),
        "river-hat": lambda: tree.HoeffdingAdaptiveTreeClassifier(seed=0),
        "river-arf": lambda: forest.ARFClassifier(seed=0),
    }
    return classifiers[name]()


RIVER_PEERS: dict[str, str] = {
    "river-lr": "river StandardScaler | LogisticRegression (one-vs-rest for C > 2 classes)",
    "river-perceptron": "river StandardScaler | Perceptron (one-vs-rest for C > 2 classes)",
    "river-ht": "river Hoeffding tree",
    "river-hat": "river Hoeffding adaptive tree",
    "river-arf": "river adaptive random forest (10 trees, ADWIN)",
}
REGRESSION_PEERS = ("river-lr", "river-ht")


class RiverRunner:
    """Adapts a river estimator to the runner protocol (see the module docstring for the labels)."""

    recomputes = 0

    def __init__(self, name: str, task: Task, n_features: int, n_classes: int = 2) -> None:
        self.model = _river_model(name, task, n_classes)
        self.task = task
        self.multiclass = task == "classification" and n_classes > 2
        self._keys = list(range(n_features))

    def _x(self, x: FloatArray) -> dict[int, float]:
        return dict(zip(self._keys, x.tolist(), strict=True))

    def _label(self, y: float) -> float | bool | int:
        if self.task == "regression":
            return y
        return int(y) if self.multiclass else y > 0

    def _code(self, p: Any) -> float:
        if self.task == "regression":
            return float(p or 0.0)
        if self.multiclass:
            return 0.0 if p is None else float(p)  # nothing learned yet: class 0, as the majority baseline
        return 1.0 if p else -1.0

    def predict_one(self, x: FloatArray) -> float:
        return self._code(self.model.predict_one(self._x(x)))

    def process_one(self, x: FloatArray, y: float | None = None, ts: float = math.nan) -> float:
        xd = self._x(x)
        y_hat = self._code(self.model.predict_one(xd))
        if y is not None:
            self.model.learn_one(xd, self._label(y))
        return y_hat

    def learn_one(self, x: FloatArray, y: float, y_hat: float | None = None, ts: float = math.nan) -> None:
        self.model.learn_one(self._x(x), self._label(y))

    def process_many(
        self, X: FloatArray, y: FloatArray | None = None, ts: FloatArray | None = None
    ) -> FloatArray:
        """A batch (``y`` NaN where unlabeled), sample by sample as :meth:`process_one` (river has no
        mini-batch learning for these models)."""
        labels = [math.nan] * len(X) if y is None else np.asarray(y, dtype=np.float64).tolist()
        return np.array([self.process_one(x, None if v != v else v) for x, v in zip(X, labels, strict=True)])

    def warm(self, X: FloatArray, y: FloatArray) -> None:
        for xi, yi in zip(X, y, strict=True):
            self.learn_one(xi, float(yi))
