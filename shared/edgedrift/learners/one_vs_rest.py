"""One-vs-rest: a multi-class learner of C ≥ 3 classes from C copies of a binary linear learner.

River's ``multiclass.OneVsRestClassifier`` pattern over EdgeDrift's learners (SGD, the perceptron,
RMSProp / AdaGrad, the forgetting Newton learner): the learner given is a template, cloned once per class;
learner c sees every labeled sample with the label +1 if its code is c and −1 otherwise, and the
prediction is the code whose learner scores highest (ties: the lowest code). That is exactly the model
LIBLINEAR's one-vs-rest batch model is (column c of β), so :meth:`OneVsRest.anchor` hands column c of a
recomputed model to learner c (β_cur ← β₁ of Algorithm 1, per column).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgedrift.base import Estimator
from edgedrift.labels import check_codes, one_vs_rest_targets
from edgedrift.learners.base import IncrementalLearner
from edgedrift.models.linear import LinearModel
from edgedrift.models.losses import FloatArray, Task

__all__ = ["OneVsRest"]


class OneVsRest(Estimator):
    """C binary linear learners, one per class code 0..C−1; predicts the code of the highest score.

    Parameters
    ----------
    learner
        The binary learner to copy (an :class:`~edgedrift.learners.base.IncrementalLearner` for
        classification); it is cloned per class and never trained itself.
    n_classes
        The number of classes C ≥ 3 (labels are the codes 0.0 … C−1).

    Examples
    --------
    >>> import numpy as np
    >>> from edgedrift.learners import ForgettingNewton
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(600, 2))
    >>> y = np.argmax(X @ [[1.0, -1.0, 0.0], [0.0, 1.0, -1.0]] + [0.0, 0.0, 0.5], axis=1).astype(float)
    >>> ovr = OneVsRest(ForgettingNewton(2, forgetting=0.99, prior=0.1), n_classes=3)
    >>> hits = 0
    >>> for x, label in zip(X, y):
    ...     hits += int(ovr.predict_one(x) == label)  # test, then train
    ...     ovr.learn_one(x, label)
    >>> round(hits / len(y), 3), ovr.predict_many(X[:4]).tolist(), y[:4].tolist()
    (0.938, [2.0, 0.0, 1.0, 0.0], [2.0, 0.0, 1.0, 0.0])
    """

    def __init__(self, learner: IncrementalLearner, n_classes: int) -> None:
        if not isinstance(learner, IncrementalLearner):
            raise TypeError(f"OneVsRest copies a linear incremental learner, not {type(learner).__name__}")
        if learner.task != "classification":
            raise ValueError("OneVsRest needs a classification learner")
        if n_classes < 3:
            raise ValueError(
                f"OneVsRest is for C >= 3 classes (two classes: the learner itself), got {n_classes}"
            )
        self.learner = learner
        self.n_classes = n_classes
        self.learners: list[IncrementalLearner] = [learner.clone() for _ in range(n_classes)]
        self.n_learned = 0

    @property
    def task(self) -> Task:
        return "classification"

    @property
    def order(self) -> str:
        """The update cost of one class's learner (``O(d)``, ``O(d^2)``); C of them run per label."""
        return self.learner.order

    @property
    def n_skipped(self) -> int:
        """The most labeled samples any class's learner skipped (a too-large sample is skipped by all)."""
        return max(learner.n_skipped for learner in self.learners)

    def _check(self, y: FloatArray) -> None:
        check_codes(y, self.n_classes, "OneVsRest")
        if np.isnan(y).any():
            raise ValueError("OneVsRest: a labeled sample needs a label, got NaN")

    def scores_one(self, x: FloatArray) -> FloatArray:
        """The C scores x̃ᵀw_c of one sample."""
        return np.array([learner.score_one(x) for learner in self.learners])

    def scores_many(self, X: FloatArray) -> FloatArray:
        """The (n, C) scores of a batch (the scalers are not updated)."""
        return np.column_stack([learner.score_many(X) for learner in self.learners])

    def predict_one(self, x: FloatArray) -> float:
        return float(np.argmax(self.scores_one(x)))

    def predict_many(self, X: FloatArray) -> FloatArray:
        codes: FloatArray = np.argmax(self.scores_many(X), axis=1).astype(np.float64)
        return codes

    def learn_one(self, x: FloatArray, y: float) -> None:
        """Each class's learner learns x with +1 (its class) or −1; ValueError for a label that is no code."""
        self._check(np.array([y]))
        x = np.asarray(x, dtype=np.float64)
        for c, learner in enumerate(self.learners):
            learner.learn_one(x, 1.0 if c == y else -1.0)
        self.n_learned += 1

    def learn_many(self, X: FloatArray, y: FloatArray) -> None:
        y = np.asarray(y, dtype=np.float64)
        self._check(y)
        X = np.asarray(X, dtype=np.float64)
        targets = one_vs_rest_targets(y, self.n_classes)
        for c, learner in enumerate(self.learners):
            learner.learn_many(X, np.ascontiguousarray(targets[:, c]))
        self.n_learned += len(y)

    def replay_predictions(self, X: FloatArray, y: FloatArray) -> FloatArray | None:
        """:meth:`predict_one` of each row, each made just before :meth:`learn_one` learns the row, bit for
        bit as that loop: the classes' learners learn independently, so each class's scores come from its
        learner's compiled replay on its ±1 labels and the prediction is the first code of the highest
        score of each row. None, with nothing learned, where a class's learner has no compiled replay
        or a label is no code."""
        y = np.asarray(y, dtype=np.float64)
        try:
            self._check(y)
        except ValueError:  # the loop raises at the sample; let it
            return None
        targets = one_vs_rest_targets(y, self.n_classes)
        columns = [np.ascontiguousarray(targets[:, c]) for c in range(self.n_classes)]
        if not all(lr.replayable(X, t) for lr, t in zip(self.learners, columns, strict=True)):
            return None
        scores = np.empty((len(y), self.n_classes))
        for c, (learner, t) in enumerate(zip(self.learners, columns, strict=True)):
            z = learner.replay_scores(X, t)
            if z is None:
                raise RuntimeError("a replayable learner's replay failed mid-way")
            scores[:, c] = z
        self.n_learned += len(y)
        codes: FloatArray = np.argmax(scores, axis=1).astype(np.float64)
        return codes

    def anchor(self, model: Any) -> None:
        """Learner c continues from column c of a one-vs-rest batch model of the same C classes."""
        if not isinstance(model, LinearModel):
            raise TypeError(f"OneVsRest continues from a linear model, not {type(model).__name__}")
        if model.n_classes != self.n_classes:
            raise ValueError(f"a model of {model.n_classes} classes cannot anchor {self.n_classes} learners")
        for c, learner in enumerate(self.learners):
            learner.anchor(model.column(c))

    def reset(self) -> None:
        for learner in self.learners:
            learner.reset()
        self.n_learned = 0
