"""PredSign (DRUiD paper, Sections 4.2 and 5.1): recompute when the Lemma 1 bounds disagree too often.

Labeled samples update Δg (and so r); every unlabeled sample x is scored with the bounds
L, U = x̃ᵀβ₁ − x̃ᵀr ∓ ‖x̃‖‖r‖ of eq. (7). When sign(L) ≠ sign(U) the new model β₂ might classify x
differently; after more than T_D such samples since the last recompute, PredSign recomputes.
An unlabeled sample whose bounds are not finite (e.g. x = 1e308) is skipped and counted.

A one-vs-rest model of C ≥ 3 classes predicts the argmax of its C scores; each column β₂_c lies in its
own ball (centre β₁_c − r_c, radius ‖r_c‖), so L_c, U_c bound x̃ᵀβ₂_c. The class of β₂ is certain when
the class k with the highest lower bound has L_k > U_c for every other class c; otherwise the sample is a
disagreement (for C = 2 this is the sign rule). :func:`~edgedrift.bounds.argmax_certain` is that rule.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from edgedrift.bounds import argmax_certain
from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray
from edgedrift.monitors.base import Evictions
from edgedrift.monitors.gradient import BoundMonitor
from edgedrift.monitors.hooks import UnlabeledHook


class PredSignMonitor(BoundMonitor, UnlabeledHook):
    """Counts sign disagreements of the prediction bounds on unlabeled samples; threshold ``t_d``.

    Parameters
    ----------
    t_d
        T_D: a recompute follows more than ``t_d`` disagreements since the last recompute.

    Examples
    --------
    Every 10th sample is labeled; the concept rotates at sample 600:

    >>> import numpy as np
    >>> from edgedrift.training.linear import train_linear
    >>> from edgedrift.window import CountWindow
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(3000, 2))
    >>> y = np.where(np.arange(3000) < 600, np.sign(X[:, 0] + X[:, 1]), np.sign(X[:, 0] - X[:, 1]))
    >>> model = train_linear(X[:200], y[:200], C=10.0)
    >>> window = CountWindow(200, n_features=2)
    >>> monitor = PredSignMonitor(t_d=300)
    >>> monitor.reset(model, X[:200], y[:200])
    >>> _ = window.push_many(X[:200], y[:200])
    >>> for i in range(200, 3000):
    ...     if i % 10:
    ...         monitor.update_unlabeled(X[i])
    ...     else:
    ...         error = float(model.predict_one(X[i]) != y[i])
    ...         monitor.update(X[i], y[i], error, window, window.push(X[i], y[i]))
    ...     if monitor.drift_detected:
    ...         break
    >>> i, monitor.stats["disagreements"]
    (711, 301)
    """

    name = "predsign"

    def __init__(self, t_d: int) -> None:
        super().__init__()
        if t_d < 0:
            raise ValueError("t_d must be >= 0")
        self.t_d = t_d
        self.n_disagree = 0
        self.n_skipped = 0
        self._centre = np.zeros(0)
        self._r_norm = 0.0
        self._r_norms = np.zeros(0)

    def reset(self, model: BatchModel, X: FloatArray, y: FloatArray) -> None:
        super().reset(model, X, y)
        self.n_disagree = 0
        self._refresh()

    def _refresh(self) -> None:
        """Cache β₁ − r and ‖r‖; they change only when a labeled sample arrives."""
        r = self.delta_g.radius()
        assert self.delta_g.model is not None
        self._centre = self.delta_g.model.beta - r
        self._r_norm = float(np.linalg.norm(r))
        self._r_norms = np.linalg.norm(r, axis=0) if r.ndim == 2 else np.zeros(0)

    def update(self, x: FloatArray, y: float, error: float, window: Evictions, n_evicted: int) -> None:
        self._track(x, y, window, n_evicted)
        self._refresh()

    def update_unlabeled(self, x: FloatArray) -> None:
        xa = self.delta_g.augment(x)
        if self._r_norms.size:
            scores = xa @ self._centre
            spread = math.sqrt(float(xa @ xa)) * self._r_norms
            if not (np.isfinite(scores).all() and np.isfinite(spread).all()):
                self.n_skipped += 1
                return
            uncertain = not argmax_certain((scores - spread)[None, :], (scores + spread)[None, :])[0]
        else:
            centre = float(xa @ self._centre)
            half = math.sqrt(float(xa @ xa)) * self._r_norm
            if not (math.isfinite(centre) and math.isfinite(half)):
                self.n_skipped += 1
                return
            uncertain = (centre - half >= 0.0) != (centre + half >= 0.0)
        if uncertain:
            self.n_disagree += 1
            self.warning_detected = True
            if self.n_disagree > self.t_d:
                self.drift_detected = True
                self.n_detections += 1

    def update_unlabeled_many(self, X: FloatArray) -> None:
        dg = self.delta_g
        assert dg.model is not None
        Xa = dg.model.augment(X)
        centre = Xa @ self._centre
        if self._r_norms.size:  # one-vs-rest: (n, C) bounds, the argmax rule
            half = np.outer(np.linalg.norm(Xa, axis=1), self._r_norms)
            finite = np.isfinite(centre).all(axis=1) & np.isfinite(half).all(axis=1)
            uncertain = ~argmax_certain(centre - half, centre + half)
        else:
            half = np.linalg.norm(Xa, axis=1) * self._r_norm
            finite = np.isfinite(centre) & np.isfinite(half)
            uncertain = (centre - half >= 0.0) != (centre + half >= 0.0)
        self.n_skipped += len(Xa) - int(np.count_nonzero(finite))
        n = int(np.count_nonzero(finite & uncertain))
        if n:
            self.n_disagree += n
            self.warning_detected = True
            if self.n_disagree > self.t_d and not self.drift_detected:
                self.drift_detected = True
                self.n_detections += 1

    @property
    def stats(self) -> dict[str, Any]:
        return {
            **super().stats,
            "disagreements": self.n_disagree,
            "t_d": self.t_d,
            "skipped_unlabeled": self.n_skipped,
        }
