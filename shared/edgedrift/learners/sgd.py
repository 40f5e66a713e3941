"""First-order learners: SGD for each loss of Table 1, and the perceptron.

SGD step: w ← w − η_t (∂ℓ/∂z · x̃ + λ w). Schedules:

* ``constant``: η_t = η₀;
* ``inverse``: η_t = η₀ / (1 + η₀ λ t) (Bottou's schedule; scikit-learn's "optimal" with t₀ = 1/(η₀ λ));
* ``invscaling``: η_t = η₀ / t^p.

The bias weight is not decayed by λ, matching common SGD practice.
"""

from __future__ import annotations

from typing import Literal

from edgedrift.learners.base import DELTA_SQ_MAX, STEP_MAX, IncrementalLearner, sqnorm
from edgedrift.models.losses import FloatArray, Loss, Task

Schedule = Literal["constant", "inverse", "invscaling"]


class SGD(IncrementalLearner):
    """Plain SGD on the chosen loss (the paper's incremental baseline and β_cur update).

    Parameters
    ----------
    n_features
        Number of features d.
    loss
        A loss of Table 1 by name or as a :class:`~edgedrift.models.losses.Loss`.
    lr
        The base step size η₀.
    schedule
        ``"constant"``, ``"inverse"`` (Bottou's) or ``"invscaling"`` (see the module docstring).
    l2
        The L2 penalty λ (not applied to the bias weight).
    power_t
        The exponent p of ``"invscaling"``.
    scale
        Whether to standardise the features online.
    scale_alpha
        The standardiser's weight of the newest sample.
    task
        None: the loss's task; ``"classification"`` lets a squared loss predict signs.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(400, 2))
    >>> y = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, 1.0, -1.0)
    >>> sgd = SGD(2, lr=0.1)
    >>> hits = 0
    >>> for x, label in zip(X, y):
    ...     hits += int(sgd.predict_one(x) == label)  # test, then train
    ...     sgd.learn_one(x, label)
    >>> hits / len(y)
    0.9825
    >>> sgd.predict_many(X[:4]).tolist()
    [1.0, 1.0, -1.0, 1.0]
    """

    def __init__(
        self,
        n_features: int,
        loss: str | Loss = "logistic",
        lr: float = 0.01,
        schedule: Schedule = "inverse",
        l2: float = 1e-4,
        power_t: float = 0.5,
        scale: bool = False,
        scale_alpha: float = 0.01,
        task: Task | None = None,
    ) -> None:
        super().__init__(n_features, loss, scale, scale_alpha, task)
        self.lr = lr
        self.schedule = schedule
        self.l2 = l2
        self.power_t = power_t

    def step_size(self) -> float:
        t = self.n_learned + 1
        if self.schedule == "constant":
            return self.lr
        if self.schedule == "inverse":
            return self.lr / (1.0 + self.lr * self.l2 * t)
        return float(self.lr / t**self.power_t)

    def _update(self, xa: FloatArray, y: float) -> bool:
        w = self.w
        c = self._loss.dz_one(y, float(xa @ w))
        eta = self.step_size()
        step = eta * c
        if not abs(step) <= STEP_MAX:
            return False
        if self.l2:
            w[:-1] *= 1.0 - eta * self.l2
        w -= step * xa
        return True

    def _update_many(self, Xa: FloatArray, y: FloatArray) -> bool:
        """k steps with the gradients taken at the batch's starting weights."""
        c = self._loss.dz(y, Xa @ self.w)
        eta = self.step_size()
        delta = eta * (c @ Xa)
        if not sqnorm(delta) <= DELTA_SQ_MAX:
            return False
        if self.l2:
            self.w[:-1] *= (1.0 - eta * self.l2) ** len(y)
        self.w -= delta
        return True


class Perceptron(IncrementalLearner):
    """Rosenblatt's perceptron: on a mistake (y x̃ᵀw ≤ 0), w ← w + η y x̃. Classification only.

    Parameters
    ----------
    n_features
        Number of features d.
    lr
        The step η of a correction.
    scale
        Whether to standardise the features online (on by default: a mistake-driven rule is only as
        good as the feature scales).
    scale_alpha
        The standardiser's weight of the newest sample.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(400, 2)) * [1.0, 100.0]
    >>> y = np.where(X[:, 0] - 0.01 * X[:, 1] > 0, 1.0, -1.0)
    >>> perceptron = Perceptron(2)
    >>> perceptron.learn_many(X[:300], y[:300])
    >>> float(np.mean(perceptron.predict_many(X[300:]) == y[300:]))
    0.99
    """

    def __init__(
        self, n_features: int, lr: float = 1.0, scale: bool = True, scale_alpha: float = 0.01
    ) -> None:
        super().__init__(n_features, "logistic", scale, scale_alpha)
        self.lr = lr

    def _update(self, xa: FloatArray, y: float) -> bool:
        if y * float(xa @ self.w) <= 0.0:
            step = self.lr * y
            if not abs(step) <= STEP_MAX:
                return False
            self.w += step * xa
        return True

    def _update_many(self, Xa: FloatArray, y: FloatArray) -> bool:
        """Mistakes judged with the batch's starting weights."""
        wrong = y * (Xa @ self.w) <= 0.0
        delta = self.lr * (y[wrong] @ Xa[wrong])
        if not sqnorm(delta) <= DELTA_SQ_MAX:
            return False
        self.w += delta
        return True
