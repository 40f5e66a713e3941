"""EdgeDrift's incremental learners as river estimators (the ``river`` extra), the other way round from
:mod:`~edgedrift.adapters.river_learner`: so they run wherever river expects a model, in
``river.evaluate.progressive_val_score``, a ``river.compose`` pipeline or ``river.model_selection``.

The learners take numpy rows and labels ±1 (:mod:`edgedrift.labels`); river passes a ``dict`` of features
and any hashable label. The wrappers translate: the features' names are fixed by the first sample
(in its order; a later sample's missing feature is 0, an unknown one ignored), the classes by the
``classes`` argument or, without it, by the first two labels seen (the first is −1). Three or more
classes need ``classes`` named up front: the learner then runs one-vs-rest
(:class:`~edgedrift.learners.OneVsRest`). The learner given is a template, never trained: each wrapper
trains a clone sized to the stream's features.

This module imports river at the top; :mod:`edgedrift.adapters` does not import it.

Examples
--------
river's phishing data set (1,250 websites, 9 features), scored test-then-train by river itself; river's
own ``StandardScaler | LogisticRegression`` scores 89.28 %, the majority class 55.48 %:

>>> from river import datasets, evaluate, metrics
>>> from edgedrift.learners import ForgettingNewton
>>> model = EdgeDriftClassifier(ForgettingNewton(1, forgetting=0.99))
>>> evaluate.progressive_val_score(datasets.Phishing(), model, metrics.Accuracy())
Accuracy: 88.87%
>>> proba = model.predict_proba_one({"empty_server_form_handler": 1.0, "popup_window": 0.0})
>>> sorted(proba), round(sum(proba.values()), 9)
([False, True], 1.0)

A regressor on river's Trump approval series (MAE of river's ``StandardScaler | LinearRegression``:
1.31, of the running mean: 1.57):

>>> model = EdgeDriftRegressor(ForgettingNewton(1, loss="squared", forgetting=0.99))
>>> evaluate.progressive_val_score(datasets.TrumpApproval(), model, metrics.MAE())
MAE: 1.041594
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
from river import base

from edgedrift.learners import ForgettingNewton, OneVsRest
from edgedrift.learners.base import IncrementalLearner
from edgedrift.models.losses import FloatArray

__all__ = ["EdgeDriftClassifier", "EdgeDriftRegressor"]


class _Features:
    """The order of a stream's features, fixed by its first sample: a river ``dict`` as a numpy row."""

    def __init__(self, first: Mapping[Any, Any]) -> None:
        self.names = tuple(first)

    def row(self, x: Mapping[Any, Any]) -> FloatArray:
        try:
            return np.array([float(x.get(name, 0.0)) for name in self.names], dtype=np.float64)
        except (TypeError, ValueError):
            bad = next(n for n in self.names if not _is_number(x.get(n, 0.0)))
            raise ValueError(f"feature {bad!r} is {x[bad]!r}: EdgeDrift's learners take numbers") from None


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


class EdgeDriftClassifier(base.Classifier):  # type: ignore[misc]  # river is untyped
    """An EdgeDrift classification learner as a river classifier (see the module docstring).

    Parameters
    ----------
    learner
        The template: an incremental learner for classification (:class:`ForgettingNewton`, ``SGD``,
        ``AdaptiveSGD``, ``Perceptron``) of any width; each stream trains a clone with its own width.
        None: ``ForgettingNewton`` with its defaults (logistic loss, forgetting 0.95, scaled features).
    classes
        The class labels in code order; needed for three or more classes. None: the first two labels
        seen.

    Examples
    --------
    >>> from edgedrift.learners import SGD
    >>> model = EdgeDriftClassifier(SGD(1, lr=0.5))
    >>> for x, y in [({"a": 1.0}, "up"), ({"a": -1.0}, "down")] * 20:
    ...     model.learn_one(x, y)
    >>> model.predict_one({"a": 2.0}), model.predict_one({"a": -2.0})
    ('up', 'down')
    """

    def __init__(
        self, learner: IncrementalLearner | None = None, classes: Sequence[Hashable] | None = None
    ) -> None:
        learner = ForgettingNewton(1) if learner is None else learner
        if not isinstance(learner, IncrementalLearner) or learner.task != "classification":
            raise TypeError(f"EdgeDriftClassifier wraps a classification learner, not {learner!r}")
        if classes is not None and len(set(classes)) != len(classes):
            raise ValueError(f"classes must be distinct, got {list(classes)}")
        self.learner = learner
        self.classes = None if classes is None else tuple(classes)
        self._known: list[Hashable] = list(self.classes or ())
        self._features: _Features | None = None
        self._model: IncrementalLearner | OneVsRest | None = None

    @property
    def _multiclass(self) -> bool:
        return len(self._known) >= 3

    def _row(self, x: Mapping[Any, Any]) -> FloatArray:
        if self._features is None:
            self._features = _Features(x)
            d = len(self._features.names)
            clone = self.learner.clone({"n_features": d})
            self._model = OneVsRest(clone, len(self._known)) if self._multiclass else clone
        return self._features.row(x)

    def _code(self, y: Hashable) -> float:
        if y not in self._known:
            if self.classes is not None or len(self._known) == 2:
                raise ValueError(
                    f"label {y!r} is not one of the classes {self._known}: name every class of a "
                    "multi-class stream with classes=[...]"
                )
            self._known.append(y)
        i = self._known.index(y)
        return float(i) if self._multiclass else (-1.0 if i == 0 else 1.0)

    def learn_one(self, x: Mapping[Any, Any], y: Hashable, **kwargs: Any) -> None:
        row = self._row(x)
        code = self._code(y)
        assert self._model is not None
        self._model.learn_one(row, code)

    def predict_proba_one(self, x: Mapping[Any, Any], **kwargs: Any) -> dict[Hashable, float]:
        """Logistic loss: the sigmoid of each score (normalised one-vs-rest); another loss: 1 for the
        predicted class. Empty before any label; the one class while only one was seen."""
        if not self._known:
            return {}
        if len(self._known) == 1:
            return {self._known[0]: 1.0}
        row = self._row(x)
        model = self._model
        logistic = self.learner.loss == "logistic"
        if isinstance(model, OneVsRest):
            scores = model.scores_one(row)
            if not logistic:
                best = int(np.argmax(scores))
                return {c: float(i == best) for i, c in enumerate(self._known)}
            p = np.array([_sigmoid(float(s)) for s in scores])
            p /= p.sum()
            return {c: float(p[i]) for i, c in enumerate(self._known)}
        assert model is not None
        z = model.score_one(row)
        up = _sigmoid(z) if logistic else float(z >= 0.0)
        return {self._known[0]: 1.0 - up, self._known[1]: up}


class EdgeDriftRegressor(base.Regressor):  # type: ignore[misc]  # river is untyped
    """An EdgeDrift regression learner as a river regressor (see the module docstring).

    Parameters
    ----------
    learner
        The template: an incremental learner with a regression loss, of any width. None:
        ``ForgettingNewton(loss="squared")``.

    Examples
    --------
    >>> from edgedrift.learners import ForgettingNewton
    >>> model = EdgeDriftRegressor(ForgettingNewton(1, loss="squared", scale=False))
    >>> for i in range(200):
    ...     model.learn_one({"t": i % 10}, 3.0 * (i % 10) + 1.0)
    >>> round(model.predict_one({"t": 4}), 1)
    13.0
    """

    def __init__(self, learner: IncrementalLearner | None = None) -> None:
        learner = ForgettingNewton(1, loss="squared") if learner is None else learner
        if not isinstance(learner, IncrementalLearner) or learner.task != "regression":
            raise TypeError(f"EdgeDriftRegressor wraps a regression learner, not {learner!r}")
        self.learner = learner
        self._features: _Features | None = None
        self._model: IncrementalLearner | None = None

    def _row(self, x: Mapping[Any, Any]) -> FloatArray:
        if self._features is None:
            self._features = _Features(x)
            self._model = self.learner.clone({"n_features": len(self._features.names)})
        return self._features.row(x)

    def learn_one(self, x: Mapping[Any, Any], y: float, **kwargs: Any) -> None:
        row = self._row(x)
        assert self._model is not None
        self._model.learn_one(row, float(y))

    def predict_one(self, x: Mapping[Any, Any], **kwargs: Any) -> float:
        """The learner's prediction; 0 before the first sample."""
        if self._model is None:
            return 0.0
        return self._model.predict_one(self._row(x))
