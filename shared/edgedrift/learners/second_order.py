"""A second-order learner with a forgetting factor: online Newton / recursive least squares.

It tracks the minimiser of the discounted objective

    Σ_{i≤t} λ^{t−i} ℓ(yᵢ, x̃ᵢᵀw) + (a₀/2) ‖w − m‖²

with P ≈ (its Hessian)⁻¹. The prior (precision a₀, mean m) does *not* decay: without it the forgetting
would erase all curvature along directions the recent samples do not excite and P would blow up
(wind-up), which with λ = 0.9 happens within a few dozen labels. ``anchor(model)`` moves the prior mean m
to the batch model, so between recomputes the learner is shrunk towards the last batch solution.

Per labeled sample (score z, c = ∂ℓ/∂z, curvature h = ∂²ℓ/∂z² floored at ``h_min``), all O(d²):

1. forgetting: P ← P/λ (the data part of the Hessian decays by λ);
2. the prior's lost mass a₀(1 − λ) is added back as one rank-one term on coordinate j = t mod (d+1),
   scaled by d+1 so that each coordinate gets a₀(1 − λ) per label on average (Sherman–Morrison), with
   its Newton step w ← w − P e_j · a₀(1 − λ)(d+1)(w_j − m_j);
3. the sample: P ← P − h P x̃ x̃ᵀ P / (1 + h x̃ᵀ P x̃) and w ← w − c P x̃;
4. every 16 labels P ← (P + Pᵀ)/2, which keeps the covariance-form recursion stable under forgetting.

Step 3 is skipped (and the sample counted in ``n_skipped``) when x̃ᵀPx̃ is not finite and positive or
the Newton step's coefficient exceeds ``STEP_MAX``; steps 1-2 do not depend on the sample and stay.

The rank-one updates are numpy outer products subtracted in place (no scipy BLAS on the edge): at d = 5
the per-call overhead, not arithmetic, is the cost of an update, so the step uses few calls.

For the squared loss (h = 2) this is RLS with forgetting; for the logistic loss the online Newton /
extended-Kalman-filter update.
"""

from __future__ import annotations

import math

import numpy as np

from edgedrift import kernels
from edgedrift.learners.base import DELTA_SQ_MAX, MAX_SQNORM, STEP_MAX, IncrementalLearner, sqnorm
from edgedrift.models.linear import LinearModel
from edgedrift.models.losses import FloatArray, Loss, Task


class ForgettingNewton(IncrementalLearner):
    """Online Newton / RLS with forgetting factor ``forgetting`` (λ) and a non-decaying prior.

    Parameters
    ----------
    n_features
        Number of features d.
    loss
        A loss of Table 1 by name or as a :class:`~edgedrift.models.losses.Loss`.
    forgetting
        The forgetting factor λ in (0, 1]: a label's weight decays by λ per later label.
    prior
        The prior's precision a₀ > 0 (towards m: zero, or the last batch model after :meth:`anchor`).
    h_min
        Floor of the curvature ∂²ℓ/∂z² of one sample, so a confidently classified sample still adds
        curvature.
    scale
        Whether to standardise the features online.
    scale_alpha
        The standardiser's weight of the newest sample.
    task
        None: the loss's task; ``"classification"`` lets a squared loss predict signs.

    Examples
    --------
    A concept that flips half-way: with forgetting the learner follows it within a few dozen labels.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(600, 2))
    >>> y = np.sign(X[:, 0] - X[:, 1])
    >>> y[300:] *= -1
    >>> newton = ForgettingNewton(2, forgetting=0.9, prior=0.1)
    >>> hits = []
    >>> for x, label in zip(X, y):
    ...     hits.append(newton.predict_one(x) == label)
    ...     newton.learn_one(x, label)
    >>> float(np.mean(hits[300:350])), float(np.mean(hits[350:]))
    (0.86, 0.936)
    """

    order = "O(d^2)"

    def __init__(
        self,
        n_features: int,
        loss: str | Loss = "logistic",
        forgetting: float = 0.95,
        prior: float = 1.0,
        h_min: float = 1e-3,
        scale: bool = True,
        scale_alpha: float = 0.01,
        task: Task | None = None,
    ) -> None:
        super().__init__(n_features, loss, scale, scale_alpha, task)
        if not 0.0 < forgetting <= 1.0:
            raise ValueError("forgetting must be in (0, 1]")
        if prior <= 0.0:
            raise ValueError("prior must be > 0")
        self.forgetting = forgetting
        self.prior = prior
        self.h_min = h_min
        dim = n_features + 1
        self.P = np.eye(dim) / prior
        self.m = np.zeros(dim)
        self._rho = prior * (1.0 - forgetting) * dim
        self._Px = np.empty(dim)

    def _learn_compiled(self, x: FloatArray, y: float) -> int | None:
        found = kernels.for_loss(self._loss)
        if found is None:
            return None
        k, code = found
        mean, var, inv_std, scratch, a, eps = self._scaler_arrays()
        n = self.n_learned
        try:
            status: int = k.newton_learn(
                x, y, code, self.w, self.P, self.m, self._xa, self._Px, mean, var, inv_std, scratch, a,
                eps, 1.0 / self.forgetting, self._rho, n % self.w.size, self.h_min, STEP_MAX,
                MAX_SQNORM, n % 16 == 0,
            )  # fmt: skip
        except kernels.LayoutError:  # an array the kernel does not take (not contiguous, say)
            return None
        return status

    def _replay_compiled(self, X: FloatArray, y: FloatArray, z: FloatArray) -> tuple[int, int, int] | None:
        found = kernels.for_loss(self._loss)
        if found is None:
            return None
        k, code = found
        counts: tuple[int, int, int] = k.newton_replay(
            *self._replay_head(X, y, z), code, self.w, self.P, self.m, self._xa, self._Px,
            1.0 / self.forgetting, self._rho, self.h_min, STEP_MAX,
        )  # fmt: skip
        return counts

    def _learn_many_compiled(self, X: FloatArray, y: FloatArray) -> tuple[int, int] | None:
        found = kernels.for_loss(self._loss)
        if found is None:
            return None
        k, code = found
        s = self._scaler
        mean, var, inv_std = (None, None, None) if s is None else (s.mean, s.var, s.inv_std)
        n_seen, alpha, eps = (0, 1.0, 0.0) if s is None else (s.n, s.alpha, s.eps)
        try:
            kept, status = k.newton_learn_many(
                X, y, code, self.w, self.P, self.m, mean, var, inv_std, n_seen, alpha, eps, self.forgetting,
                self._rho, self.n_learned % self.w.size, self.h_min, MAX_SQNORM, DELTA_SQ_MAX,
            )  # fmt: skip
        except kernels.LayoutError:  # an array the kernel does not take (not contiguous, say)
            return None
        return kept, status

    def _update(self, xa: FloatArray, y: float) -> bool:
        w, P = self.w, self.P
        P *= 1.0 / self.forgetting
        if self._rho > 0.0:
            j = self.n_learned % w.size
            Pj = P[:, j].copy()
            s = 1.0 + self._rho * Pj[j]
            P -= np.multiply.outer(Pj, Pj * (self._rho / s))
            w -= Pj * (self._rho * (w[j] - self.m[j]) / s)
        z = float(xa @ w)
        c = self._loss.dz_one(y, z)
        h = max(self._loss.d2z_one(y, z), self.h_min)
        Px = np.matmul(P, xa, out=self._Px)
        denom = 1.0 / h + float(xa @ Px)
        if not 0.0 < denom < math.inf:
            return False  # P lost definiteness or x̃ᵀPx̃ overflowed; the forgetting and prior steps stay
        step = c / (h * denom)
        if not abs(step) <= STEP_MAX:
            return False
        P -= np.multiply.outer(Px, Px * (1.0 / denom))
        w -= Px * step
        if self.n_learned % 16 == 0:
            self._symmetrize()
        return True

    def _symmetrize(self) -> None:
        """P ← (P + Pᵀ)/2: P/λ amplifies the antisymmetric part of the round-off at every step, and left
        alone P loses positive definiteness within a few hundred labels at λ ≤ 0.95."""
        self.P += self.P.T
        self.P *= 0.5

    def _update_many(self, Xa: FloatArray, y: FloatArray) -> bool:
        """One Newton step for the whole batch, gradient at the batch's starting weights.

        The data part of the Hessian decays by λ^k; the batch's k samples and its k cyclic prior terms are
        added as one block U (rows) with weights: by the Woodbury identity (an m-by-m solve) when the block
        has fewer rows than d+1, else directly in information form (a (d+1)-by-(d+1) solve). The new P is
        built aside and installed only if it and the step are finite (and the solve not singular).
        """
        w, k = self.w, len(y)
        dim = w.size
        P = self.P * self.forgetting ** (-k)
        z = Xa @ w
        c = self._loss.dz(y, z)
        h = np.maximum(self._loss.d2z(y, z), self.h_min)
        grad = c @ Xa
        rows, weights = [Xa], [h]
        if self._rho > 0.0:
            hits = np.bincount((self.n_learned + np.arange(k)) % dim, minlength=dim)
            j = np.flatnonzero(hits)
            rho = self._rho * hits[j]
            grad[j] += rho * (w[j] - self.m[j])
            rows.append(np.eye(dim)[j])
            weights.append(rho)
        U, wt = np.vstack(rows), np.concatenate(weights)
        try:
            if len(wt) < dim:
                UP = U @ P
                S = UP @ U.T
                S[np.diag_indices_from(S)] += 1.0 / wt
                P -= UP.T @ np.linalg.solve(S, UP)
            else:
                A = np.linalg.inv(P) + (U.T * wt) @ U
                P = np.ascontiguousarray(np.linalg.inv(A))
        except np.linalg.LinAlgError:
            return False
        P += P.T
        P *= 0.5
        step = P @ grad
        if not (math.isfinite(sqnorm(P)) and sqnorm(step) <= DELTA_SQ_MAX):
            return False
        self.P = P
        w -= step
        return True

    def anchor(self, model: LinearModel) -> None:
        """Restart from the batch model (β_cur ← β₁) and shrink towards it from now on (m = β₁)."""
        super().anchor(model)
        self.m[:] = self.w

    def reset(self) -> None:
        super().reset()
        self.P[:] = np.eye(self.n_features + 1) / self.prior
        self.m[:] = 0.0
