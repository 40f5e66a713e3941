"""SGD with per-feature adaptive steps (AdaGrad, RMSProp) on online-standardised features.

Per coordinate j: v_j accumulates g_j² (AdaGrad: v_j += g_j²; RMSProp: v_j ← ρ v_j + (1 − ρ) g_j²) and
w_j ← w_j − η g_j / (√v_j + ε). Standardising x with an exponentially weighted mean and variance makes
the problem well conditioned even when the feature scales drift; RMSProp's forgetting keeps the step
size alive on an endless stream, where AdaGrad's steps shrink for ever.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from edgedrift import kernels
from edgedrift.learners.base import DELTA_SQ_MAX, MAX_SQNORM, STEP_MAX, IncrementalLearner, sqnorm
from edgedrift.models.losses import FloatArray, Loss, Task


class AdaptiveSGD(IncrementalLearner):
    """AdaGrad or RMSProp steps on standardised features (``scale=True`` by default).

    Parameters
    ----------
    n_features
        Number of features d.
    loss
        A loss of Table 1 by name or as a :class:`~edgedrift.models.losses.Loss`.
    lr
        The step size η.
    method
        ``"rmsprop"`` (v_j forgets with ρ) or ``"adagrad"`` (v_j accumulates for ever).
    rho
        RMSProp's decay ρ of the squared gradients.
    eps
        Added to √v_j, so a coordinate without gradient does not divide by zero.
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
    >>> X = rng.normal(size=(600, 3)) * [1.0, 50.0, 0.01]
    >>> y = X @ [2.0, 0.02, 100.0] + 1.0 + 0.1 * rng.normal(size=600)
    >>> rmsprop = AdaptiveSGD(3, "squared", lr=0.1)
    >>> for x, target in zip(X[:500], y[:500]):
    ...     rmsprop.learn_one(x, target)
    >>> errors = rmsprop.predict_many(X[500:]) - y[500:]
    >>> round(float(np.sqrt(np.mean(errors**2))), 1)
    0.2
    """

    def __init__(
        self,
        n_features: int,
        loss: str | Loss = "logistic",
        lr: float = 0.3,
        method: Literal["rmsprop", "adagrad"] = "rmsprop",
        rho: float = 0.9,
        eps: float = 1e-8,
        scale: bool = True,
        scale_alpha: float = 0.01,
        task: Task | None = None,
    ) -> None:
        super().__init__(n_features, loss, scale, scale_alpha, task)
        self.lr = lr
        self.method = method
        self.rho = rho
        self.eps = eps
        self._v = np.zeros(n_features + 1)
        self._g = np.empty(n_features + 1)

    def _learn_compiled(self, x: FloatArray, y: float) -> int | None:
        found = kernels.for_loss(self._loss)
        if found is None:
            return None
        k, code = found
        mean, var, inv_std, scratch, a, eps = self._scaler_arrays()
        try:
            status: int = k.adaptive_learn(
                x, y, code, self.w, self._xa, self._g, self._v, mean, var, inv_std, scratch, a, eps,
                self.lr, self.rho, self.eps, STEP_MAX, MAX_SQNORM, self.method == "rmsprop",
            )  # fmt: skip
        except kernels.LayoutError:  # an array the kernel does not take (not contiguous, say)
            return None
        return status

    def _replay_compiled(self, X: FloatArray, y: FloatArray, z: FloatArray) -> tuple[int, int, int] | None:
        found = kernels.for_loss(self._loss)
        if found is None:
            return None
        k, code = found
        counts: tuple[int, int, int] = k.adaptive_replay(
            *self._replay_head(X, y, z), code, self.w, self._xa, self._g, self._v, self.lr, self.rho,
            self.eps, STEP_MAX, self.method == "rmsprop",
        )  # fmt: skip
        return counts

    def _update(self, xa: FloatArray, y: float) -> bool:
        c = self._loss.dz_one(y, float(xa @ self.w))
        if not abs(c) <= STEP_MAX:
            return False
        g = np.multiply(xa, c, out=self._g)
        v = self._v
        if self.method == "rmsprop":
            v *= self.rho
            v += (1.0 - self.rho) * g * g
        else:
            v += g * g
        self.w -= self.lr * g / (np.sqrt(v) + self.eps)
        return True

    def _update_many(self, Xa: FloatArray, y: FloatArray) -> bool:
        """Gradients at the batch's starting weights; v takes them in as k sequential steps would."""
        G = self._loss.dz(y, Xa @ self.w)[:, None] * Xa
        if not sqnorm(G) <= DELTA_SQ_MAX:
            return False
        k = len(y)
        if self.method == "rmsprop":
            decay = self.rho ** np.arange(k - 1, -1, -1)
            self._v *= self.rho**k
            self._v += (1.0 - self.rho) * (decay @ (G * G))
        else:
            self._v += np.einsum("ij,ij->j", G, G)
        self.w -= self.lr * G.sum(axis=0) / (np.sqrt(self._v) + self.eps)
        return True

    def reset(self) -> None:
        super().reset()
        self._v[:] = 0.0
