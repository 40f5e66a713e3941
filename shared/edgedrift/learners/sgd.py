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
    """Plain SGD on the chosen loss (the paper's incremental baseline and β_cur update)."""

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
        c = self.loss.dz_one(y, float(xa.dot(w)))
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
        c = self.loss.dz(y, Xa.dot(self.w))
        eta = self.step_size()
        delta = eta * c.dot(Xa)
        if not sqnorm(delta) <= DELTA_SQ_MAX:
            return False
        if self.l2:
            self.w[:-1] *= (1.0 - eta * self.l2) ** len(y)
        self.w -= delta
        return True


class Perceptron(IncrementalLearner):
    """Rosenblatt's perceptron: on a mistake (y x̃ᵀw ≤ 0), w ← w + η y x̃. Classification only."""

    def __init__(
        self, n_features: int, lr: float = 1.0, scale: bool = True, scale_alpha: float = 0.01
    ) -> None:
        super().__init__(n_features, "logistic", scale, scale_alpha)
        self.lr = lr

    def _update(self, xa: FloatArray, y: float) -> bool:
        if y * float(xa.dot(self.w)) <= 0.0:
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
