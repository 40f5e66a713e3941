"""Any river classifier or regressor as the edge loop's incremental learner.

river estimators read a sample as a dict and a binary label as a bool; the loop hands over numpy rows and
labels ±1. :class:`RiverLearner` translates both ways (feature ``i`` is the dict key ``i``; ``y > 0`` is
``True``), and implements ``anchor`` — what a recompute does to the learner — by one documented rule:

* **warm start** when the river model is linear: a ``river.linear_model`` GLM (``LogisticRegression``,
  ``LinearRegression``, ``Perceptron``), alone or after one ``preprocessing.StandardScaler`` in a
  pipeline, and the batch model is a :class:`~edgedrift.models.linear.LinearModel`. Its raw-space weights
  (a, b) are written into the river model's space: w = a·σ and c = b + a·μ behind the scaler's μ, σ (a
  feature the scaler maps to 0, σ = 0, gets w = 0 and its constant a·μ goes to c), so the river model
  predicts what the batch model predicts and then keeps learning from there;
* **reset and replay the window** otherwise (trees, ensembles, any other pipeline, or a batch model that
  is not linear): a fresh clone of the river model learns the last ``window`` labeled samples again, the
  window the batch model was just trained on.

Until the river model has learned anything (``predict_one`` gives None) the last anchored batch model
predicts, and +1 / 0.0 before the first anchor.

**Checkpoints.** :mod:`edgedrift.state` saves classes of edgedrift only, so the river model itself is
not saved: its class and parameters are (:mod:`edgedrift.adapters.river_spec`), with the last anchored
batch model and the window. A restore rebuilds the untrained model and re-anchors it the same way: a
warm start (after replaying the window's samples up to the anchor, which refills a scaler's statistics)
followed by the samples learned since, or a reset and replay of the window. A bare linear model comes
back exactly while fewer than ``window`` samples arrived since the last recompute, any other
approximately. A model whose parameters cannot be described (a function, a third party's class) makes
the checkpoint fail with a :class:`~edgedrift.state.StateError` naming ``learner._unsaved``.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Literal

import numpy as np

from edgedrift.adapters.river_spec import build, describe
from edgedrift.models.document import BatchModel
from edgedrift.models.linear import LinearModel
from edgedrift.models.losses import FloatArray, Task
from edgedrift.state import StateError

__all__ = ["RiverLearner", "linear_parts"]

AnchorRule = Literal["warm-start", "replay"]


def linear_parts(model: Any) -> tuple[Any, Any | None] | None:
    """(the GLM, its StandardScaler or None) when ``model`` is warm-startable, else None."""
    from river import compose, preprocessing
    from river.linear_model.base import GLM

    if isinstance(model, GLM):
        return model, None
    if isinstance(model, compose.Pipeline):
        steps = list(model.steps.values())
        if (
            len(steps) == 2
            and isinstance(steps[0], preprocessing.StandardScaler)
            and isinstance(steps[1], GLM)
        ):
            return steps[1], steps[0]
    return None


class RiverLearner:
    """A river estimator behind the :class:`~edgedrift.learners.base.OnlineLearner` interface.

    Parameters
    ----------
    model
        A river classifier (binary labels) or regressor, untrained; it is the template every reset clones.
    n_features
        Number of features d.
    task
        ``"classification"`` (labels ±1) or ``"regression"``.
    window
        Labeled samples kept for reset-and-replay (the loop's window length).

    Examples
    --------
    A river Hoeffding tree re-anchored by a recompute forgets and relearns the window:

    >>> import numpy as np
    >>> from river import tree
    >>> learner = RiverLearner(tree.HoeffdingTreeClassifier(grace_period=20), n_features=2, window=50)
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2))
    >>> for x in X:
    ...     learner.learn_one(x, 1.0 if x[0] > 0 else -1.0)
    >>> learner.rule, learner.n_learned
    ('replay', 300)
    >>> from edgedrift.training.linear import LinearTrainer
    >>> learner.anchor(LinearTrainer("logistic", 10.0)(X[-50:], np.sign(X[-50:, 0])))
    >>> learner.n_replayed
    50
    """

    #: The river objects are rebuilt from ``spec`` on restore (see the module docstring).
    _state_transient = ("model", "_model")

    def __init__(self, model: Any, n_features: int, task: Task = "classification", window: int = 200) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        self.model = model
        self.n_features = n_features
        self.task: Task = task
        self.window = window
        self._model: Any = model.clone()
        self.rule: AnchorRule = "warm-start" if linear_parts(self._model) is not None else "replay"
        self._recent: deque[tuple[dict[int, float], float]] = deque(maxlen=window)
        self._fallback: BatchModel | None = None
        self.spec = describe(model)
        #: Set only when the model cannot be described: a checkpoint then fails naming it.
        self._unsaved: Any = model if self.spec is None else None
        self._since_anchor = 0
        self.n_learned = 0
        self.n_anchors = 0
        self.n_replayed = 0

    @staticmethod
    def _row(x: FloatArray) -> dict[int, float]:
        return dict(enumerate(np.asarray(x, dtype=np.float64).reshape(-1).tolist()))

    def _target(self, y: float) -> bool | float:
        return bool(y > 0) if self.task == "classification" else float(y)

    def predict_one(self, x: FloatArray) -> float:
        p = self._model.predict_one(self._row(x))
        if p is None:
            if self._fallback is not None:
                return self._fallback.predict_one(np.asarray(x, dtype=np.float64))
            return 1.0 if self.task == "classification" else 0.0
        if self.task == "regression":
            return float(p)
        return 1.0 if p is True or (p is not False and float(p) > 0) else -1.0

    def predict_many(self, X: FloatArray) -> FloatArray:
        return np.array([self.predict_one(x) for x in np.asarray(X, dtype=np.float64)], dtype=np.float64)

    def learn_one(self, x: FloatArray, y: float) -> None:
        row = self._row(x)
        self._model.learn_one(row, self._target(y))
        self._recent.append((row, float(y)))
        self._since_anchor += 1
        self.n_learned += 1

    def learn_many(self, X: FloatArray, y: FloatArray) -> None:
        for xi, yi in zip(np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64), strict=True):
            self.learn_one(xi, float(yi))

    def anchor(self, model: Any) -> None:
        """Re-anchor on a new batch model: warm start if both are linear, else reset and replay."""
        self._fallback = model
        self.n_anchors += 1
        self._since_anchor = 0
        if not self._reanchor(model):
            self.n_replayed += len(self._recent)

    def _reanchor(self, model: Any) -> bool:
        """Warm start (True) or reset and replay the window (False)."""
        parts = linear_parts(self._model) if isinstance(model, LinearModel) else None
        if parts is not None:
            assert isinstance(model, LinearModel)
            self._warm_start(parts[0], parts[1], model)
            return True
        self._model = self.model.clone()
        self._replay(len(self._recent))
        return False

    def _replay(self, n: int, skip_last: int = 0) -> None:
        """Learn the newest ``n`` samples of the window again, leaving out the newest ``skip_last``."""
        recent = list(self._recent)
        for row, y in recent[len(recent) - n : len(recent) - skip_last]:
            self._model.learn_one(row, self._target(y))

    def _state_restored(self) -> None:
        """After :func:`edgedrift.state.loads`: rebuild the river model, re-anchor it (module docstring)."""
        if not isinstance(self.spec, dict):
            raise StateError("RiverLearner: no description of the river model to rebuild it from")
        self.model = build(self.spec)
        self._model = self.model.clone()
        since = min(self._since_anchor, len(self._recent))
        if self._fallback is None:
            self._replay(len(self._recent))
            return
        if linear_parts(self._model) is not None and isinstance(self._fallback, LinearModel):
            self._replay(len(self._recent), skip_last=since)  # the scaler's statistics at the anchor
        if self._reanchor(self._fallback):
            self._replay(since)

    @staticmethod
    def _warm_start(glm: Any, scaler: Any | None, model: LinearModel) -> None:
        a, b = model.raw_coef, model.raw_intercept
        weights, intercept = a.copy(), b
        if scaler is not None:
            mu = np.array([float(scaler.means.get(i, 0.0)) for i in range(a.size)])
            if scaler.with_std:
                sigma = np.sqrt(np.array([float(scaler.vars.get(i, 0.0)) for i in range(a.size)]))
            else:
                sigma = np.ones(a.size)
            seen = sigma > 0
            weights = np.where(seen, a * sigma, 0.0)
            intercept = b + float(a @ mu)
        for i, w in enumerate(weights.tolist()):
            glm._weights[i] = w
        glm.intercept = float(intercept)

    def clone(self) -> RiverLearner:
        """A fresh learner from the same template (nothing learned, no anchor)."""
        return RiverLearner(self.model, self.n_features, self.task, self.window)

    def __repr__(self) -> str:
        return f"RiverLearner({self.model!r}, n_features={self.n_features}, task={self.task!r})"
