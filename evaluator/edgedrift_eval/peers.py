"""river's own learners as peers, run under the same protocol (predict_one, then learn_one when labeled)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from edgedrift.models.losses import FloatArray, Task


def _river_model(name: str, task: Task) -> Any:
    from river import compose, linear_model, preprocessing, tree

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
    classifiers: dict[str, Callable[[], Any]] = {
        "river-lr": lambda: compose.Pipeline(
            preprocessing.StandardScaler(), linear_model.LogisticRegression()
        ),
        "river-perceptron": lambda: compose.Pipeline(
            preprocessing.StandardScaler(), linear_model.Perceptron()
        ),
        "river-ht": lambda: tree.HoeffdingTreeClassifier(),
        "river-hat": lambda: tree.HoeffdingAdaptiveTreeClassifier(seed=0),
    }
    return classifiers[name]()


RIVER_PEERS: dict[str, str] = {
    "river-lr": "river StandardScaler | LogisticRegression",
    "river-perceptron": "river StandardScaler | Perceptron",
    "river-ht": "river Hoeffding tree",
    "river-hat": "river Hoeffding adaptive tree",
}
REGRESSION_PEERS = ("river-lr", "river-ht")


class RiverRunner:
    """Adapts a river estimator to the runner protocol (labels ±1 map to True/False)."""

    recomputes = 0

    def __init__(self, name: str, task: Task, n_features: int) -> None:
        self.model = _river_model(name, task)
        self.task = task
        self._keys = list(range(n_features))

    def _x(self, x: FloatArray) -> dict[int, float]:
        return dict(zip(self._keys, x.tolist(), strict=True))

    def predict_one(self, x: FloatArray) -> float:
        p = self.model.predict_one(self._x(x))
        if self.task == "regression":
            return float(p or 0.0)
        return 1.0 if p else -1.0

    def process_one(self, x: FloatArray, y: float | None = None, ts: float = math.nan) -> float:
        xd = self._x(x)
        p = self.model.predict_one(xd)
        y_hat = float(p or 0.0) if self.task == "regression" else (1.0 if p else -1.0)
        if y is not None:
            self.model.learn_one(xd, y if self.task == "regression" else y > 0)
        return y_hat

    def learn_one(self, x: FloatArray, y: float, y_hat: float | None = None, ts: float = math.nan) -> None:
        self.model.learn_one(self._x(x), y if self.task == "regression" else y > 0)

    def warm(self, X: FloatArray, y: FloatArray) -> None:
        for xi, yi in zip(X, y, strict=True):
            self.learn_one(xi, float(yi))
