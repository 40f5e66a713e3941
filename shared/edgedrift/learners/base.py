"""The incremental-learner interface (river style) and the online standardiser they may use.

Learners work on augmented features (x, 1), optionally standardised online. ``anchor(model)`` re-anchors
a learner on a batch model: β₁ is mapped from its training space into the learner's current feature
space, so the learner continues from the batch solution (β_cur ← β₁ in Algorithm 1).

No sample may leave a learner with non-finite weights: a labeled sample with ‖x‖² + y² above
``MAX_SQNORM`` (or non-finite) is skipped before anything changes, and an update whose scalar step
exceeds ``STEP_MAX`` (a diverging score, a degenerate curvature) is skipped too. ``n_learned`` counts
every labeled sample received, ``n_skipped`` those of them that left the weights unchanged. The
per-sample checks are one dot product and scalars the update computes anyway, so that path stays
cheap; a mini-batch step is not applied when its weight change has a squared norm above
``DELTA_SQ_MAX`` (or is not finite).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Literal, Protocol

import numpy as np

from edgedrift import kernels
from edgedrift.base import Estimator
from edgedrift.models.linear import LinearModel
from edgedrift.models.losses import FloatArray, Loss, Task, get_loss

#: Largest ‖x‖² + y² of a labeled sample a learner takes in; beyond it (or non-finite) it is skipped.
MAX_SQNORM = 1e100
_F64 = np.dtype(np.float64)


def sqnorm(a: FloatArray) -> float:
    """Σ a², one BLAS call; not finite if an entry is not (or the sum overflows)."""
    flat = a.reshape(-1)
    return float(flat @ flat)


#: How :meth:`IncrementalLearner.learn_one` ended (the compiled kernels return the same numbers): the
#: weights moved; the sample was too large and changed nothing; the step was not taken.
LEARNED, SKIPPED_SIZE, SKIPPED_STEP = 0, 1, 2

#: Largest |scalar step| of one update (SGD's η·∂ℓ/∂z, a Newton step's coefficient); beyond it: skipped.
STEP_MAX = 1e50
#: Largest squared norm of the weight change of one mini-batch step; beyond it the step is not taken.
DELTA_SQ_MAX = 1e200


class EWStandardizer(Estimator):
    """Exponentially weighted mean and variance per feature, so the scaling follows drift.

    With weight a for the newest sample: δ = x − μ, μ ← μ + aδ, σ² ← (1 − a)(σ² + aδ²). The first
    1/a samples use a = 1/n (the running mean), so the start is not dominated by the first sample.

    Parameters
    ----------
    n_features
        Number of features d.
    alpha
        Weight a of the newest sample, in (0, 1].
    eps
        Added to σ² before the square root, so a constant feature does not divide by zero.

    Examples
    --------
    >>> import numpy as np
    >>> scaler = EWStandardizer(2, alpha=0.5)
    >>> for x in ([1.0, 10.0], [3.0, 10.0]):
    ...     scaler.update(np.array(x))
    >>> scaler.mean.tolist(), scaler.var.tolist()
    ([2.0, 10.0], [1.0, 0.0])
    """

    def __init__(self, n_features: int, alpha: float = 0.01, eps: float = 1e-8) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError("alpha must be in (0, 1]")
        self.n_features = n_features
        self.alpha = alpha
        self.eps = eps
        self.n = 0
        self.mean = np.zeros(n_features)
        self.var = np.zeros(n_features)
        self.inv_std = np.ones(n_features)
        self._d = np.empty(n_features)

    def update(self, x: FloatArray) -> None:
        self.n += 1
        a = max(self.alpha, 1.0 / self.n)
        d = self._d
        np.subtract(x, self.mean, out=d)
        self.mean += a * d
        self.var += a * d * d
        self.var *= 1.0 - a
        np.sqrt(self.var + self.eps, out=self.inv_std)
        np.divide(1.0, self.inv_std, out=self.inv_std)

    def update_many(self, X: FloatArray) -> None:
        """k samples at once: the same exponentially weighted mean and variance as k calls of update.

        Once past the warm-up (a = alpha), the weights are a(1 − a)^{k−1−i} on the new rows and
        (1 − a)^k on the old moments, and the variance is taken around the new mean.
        """
        while len(X) and self.n < 1.0 / self.alpha:
            self.update(X[0])
            X = X[1:]
        k = len(X)
        if k == 0:
            return
        a = self.alpha
        decay = (1.0 - a) ** k
        w = a * (1.0 - a) ** np.arange(k - 1, -1, -1)
        mean = decay * self.mean + w @ X
        self.var = decay * (self.var + (self.mean - mean) ** 2) + w @ ((X - mean) ** 2)
        self.mean = mean
        self.n += k
        self.inv_std = 1.0 / np.sqrt(self.var + self.eps)

    def transform_into(self, x: FloatArray, out: FloatArray) -> None:
        np.subtract(x, self.mean, out=out)
        out *= self.inv_std


class OnlineLearner(Protocol):
    """What the edge loop needs of an incremental learner (river's ``learn_one``/``predict_one`` style).

    The linear learners below, Online-BLS and the Shrub Ensemble all offer it. ``anchor`` receives every
    model a recompute installs: a linear learner continues from it, a Shrub Ensemble adds the new shrub,
    a learner that cannot use it ignores it.
    """

    n_learned: int

    @property
    def task(self) -> Task: ...

    def predict_one(self, x: FloatArray) -> float: ...

    def predict_many(self, X: FloatArray) -> FloatArray: ...

    def learn_one(self, x: FloatArray, y: float) -> None: ...

    def learn_many(self, X: FloatArray, y: FloatArray) -> None: ...

    def anchor(self, model: Any) -> None: ...

    def clone(self) -> OnlineLearner: ...


class IncrementalLearner(Estimator, ABC):
    """A linear incremental learner over (optionally standardised) augmented features.

    Parameters
    ----------
    n_features
        Number of features d; the weights live in (d+1)-space, x̃ = (x, 1).
    loss
        A loss of Table 1 by name (``"logistic"``, ``"squared_hinge"``, ``"squared"``) or as a
        :class:`~edgedrift.models.losses.Loss`.
    scale
        Whether to standardise the features online (:class:`EWStandardizer`, read as :attr:`scaler`).
    scale_alpha
        The standardiser's weight of the newest sample.
    task
        ``"classification"`` (sign prediction) or ``"regression"``; None: the loss's task. A squared
        loss may serve a classifier this way.
    """

    #: Order of one update in the number of features: "O(d)" first-order, "O(d^2)" second-order.
    order: Literal["O(d)", "O(d^2)"] = "O(d)"

    def __init__(
        self,
        n_features: int,
        loss: str | Loss = "logistic",
        scale: bool = False,
        scale_alpha: float = 0.01,
        task: Task | None = None,
    ) -> None:
        self.n_features = n_features
        self.loss = loss
        self.scale = scale
        self.scale_alpha = scale_alpha
        self._loss: Loss = get_loss(loss) if isinstance(loss, str) else loss
        # A squared loss may also serve a classifier (least-squares / RLS on ±1 targets, sign prediction).
        self.task: Task = self._loss.task if task is None else task
        self.w = np.zeros(n_features + 1)
        self._scaler = EWStandardizer(n_features, scale_alpha) if scale else None
        self._xa = np.ones(n_features + 1)
        self.n_learned = 0
        self.n_skipped = 0
        # Raw-space weights (x·raw_w + raw_b == x̃ᵀw), rebuilt lazily after learning, so that predicting
        # an unlabeled sample is a single dot product.
        self._raw_w = np.zeros(n_features)
        self._raw_b = 0.0
        self._stale = True

    @property
    def scaler(self) -> EWStandardizer | None:
        """The online standardiser of the features (``scale=True``), None without scaling."""
        return self._scaler

    def _features(self, x: FloatArray) -> FloatArray:
        """x̃ = (x or its standardised value, 1) in a reused buffer."""
        xa = self._xa
        if self._scaler is None:
            xa[:-1] = x
        else:
            self._scaler.transform_into(x, xa[:-1])
        return xa

    def score_one(self, x: FloatArray) -> float:
        """The linear score x̃ᵀw (one compiled call where the kernels are built)."""
        if self._stale:
            self._refresh_raw()
        k = kernels.MODULE
        if k is not None:
            try:
                return float(k.linear_score(self._raw_w, x, self._raw_b))
            except kernels.LayoutError:  # a row the kernel does not take (not contiguous, say)
                pass
        return float(self._raw_w @ x) + self._raw_b

    def _refresh_raw(self) -> None:
        if self._scaler is None:
            self._raw_w[:] = self.w[:-1]
            self._raw_b = float(self.w[-1])
        else:
            raw_b = self._raw_compiled()
            if raw_b is None:
                np.multiply(self.w[:-1], self._scaler.inv_std, out=self._raw_w)
                raw_b = float(self.w[-1]) - float(self._raw_w @ self._scaler.mean)
            self._raw_b = raw_b
        self._stale = False

    def _raw_compiled(self) -> float | None:
        """:meth:`_refresh_raw` with a standardiser in one compiled call; None without the kernels."""
        k = kernels.MODULE
        if k is None:
            return None
        assert self._scaler is not None
        try:
            return float(k.raw_weights(self.w, self._scaler.inv_std, self._scaler.mean, self._raw_w))
        except kernels.LayoutError:  # an array the kernel does not take (not contiguous, say)
            return None

    def predict_one(self, x: FloatArray) -> float:
        z = self.score_one(x)
        if self.task == "regression":
            return z
        return 1.0 if z >= 0.0 else -1.0

    def predict_rows(self, X: FloatArray) -> FloatArray:
        """:meth:`predict_one` of every row of X, bit for bit (``predict_many`` may round otherwise), in
        one compiled call where the kernels are built: the unlabeled runs of ``EdgeLoop.process_many``."""
        if self._stale:
            self._refresh_raw()
        k = kernels.MODULE
        z = np.empty(len(X), dtype=np.float64)
        scored = False
        if k is not None:
            try:
                k.linear_scores(self._raw_w, X, self._raw_b, z)
                scored = True
            except kernels.LayoutError:  # rows the kernel does not take: score_one row by row
                pass
        if not scored:
            z[:] = [self.score_one(x) for x in X]
        if self.task == "regression":
            return z
        return np.where(z >= 0.0, 1.0, -1.0)

    def score_many(self, X: FloatArray) -> FloatArray:
        """The linear scores x̃ᵀw of a batch (the scaler is not updated)."""
        return np.asarray(self._features_many(X) @ self.w, dtype=np.float64)

    def predict_many(self, X: FloatArray) -> FloatArray:
        """Vectorised predictions for a batch (the scaler is not updated)."""
        z = self._features_many(X) @ self.w
        if self.task == "regression":
            return np.asarray(z, dtype=np.float64)
        return np.where(z >= 0.0, 1.0, -1.0)

    def learn_one(self, x: FloatArray, y: float) -> None:
        """One update on a labeled sample (the scaler first takes in x, then the weights move).

        A sample that could make the state non-finite is skipped and counted (see the module docstring).
        """
        if type(x) is not np.ndarray or x.dtype is not _F64:
            x = np.asarray(x, dtype=np.float64)
        status = self._learn_compiled(x, y)
        if status is None:
            if not float(x @ x) + y * y <= MAX_SQNORM:
                status = SKIPPED_SIZE
            else:
                if self._scaler is not None:
                    self._scaler.update(x)
                status = LEARNED if self._update(self._features(x), y) else SKIPPED_STEP
        elif status != SKIPPED_SIZE and self._scaler is not None:
            self._scaler.n += 1
        self.n_learned += 1
        if status != LEARNED:
            self.n_skipped += 1
        if status != SKIPPED_SIZE:
            self._stale = True

    def _learn_compiled(self, x: FloatArray, y: float) -> int | None:
        """:meth:`learn_one`'s size check, standardiser update and step in one compiled call
        (:mod:`edgedrift.kernels`): LEARNED, SKIPPED_SIZE or SKIPPED_STEP; None where there is no kernel
        for this learner, its loss or these arrays (then the numpy code runs)."""
        return None

    def _scaler_arrays(self) -> tuple[Any, Any, Any, Any, float, float]:
        """The standardiser's (mean, var, inv_std, scratch, weight of this sample, eps) for a kernel; Nones
        without a standardiser."""
        s = self._scaler
        if s is None:
            return None, None, None, None, 0.0, 0.0
        return s.mean, s.var, s.inv_std, s._d, max(s.alpha, 1.0 / (s.n + 1)), s.eps

    def replay_predictions(self, X: FloatArray, y: FloatArray) -> FloatArray | None:
        """A prequential replay in one compiled call: :meth:`predict_one` of each row of X, each made just
        before :meth:`learn_one` learns the row with its label, bit for bit as that loop (the same
        kernels' arithmetic); the learner ends in the state the loop leaves. None, with nothing learned,
        where there is no compiled replay for this learner, its loss or these arrays (the first-window
        tuning's and the cloud's grid replays then run the loop)."""
        z = self.replay_scores(X, y)
        if z is None or self.task == "regression":
            return z
        out: FloatArray = np.where(z >= 0.0, 1.0, -1.0)
        return out

    def replay_scores(self, X: FloatArray, y: FloatArray) -> FloatArray | None:
        """:meth:`replay_predictions` with the raw scores (:meth:`score_one` of each row before it is
        learned) instead of the predictions."""
        if not self.replayable(X, y):
            return None
        y = np.asarray(y, dtype=np.float64)
        z = np.empty(len(y), dtype=np.float64)
        try:
            counts = self._replay_compiled(np.asarray(X), y, z)
        except kernels.LayoutError:  # an array the kernel does not take
            return None
        if counts is None:
            return None
        self.n_learned, skipped, scaler_n = counts
        self.n_skipped += skipped
        if self._scaler is not None:
            self._scaler.n = scaler_n
        self._stale = True
        return z

    def replayable(self, X: FloatArray, y: FloatArray) -> bool:
        """Whether :meth:`replay_predictions` runs compiled on (X, y): a kernel for this learner and its
        loss, and X a C-contiguous float64 matrix of float64 labels ``y`` (its rows are then the
        contiguous rows ``learn_one``'s kernel takes)."""
        return (
            type(self)._replay_compiled is not IncrementalLearner._replay_compiled
            and kernels.for_loss(self._loss) is not None
            and isinstance(X, np.ndarray)
            and X.dtype == np.float64
            and X.ndim == 2
            and X.shape == (len(y), self.n_features)
            and X.flags.c_contiguous
            and np.asarray(y).dtype == np.float64
        )

    def _replay_compiled(self, X: FloatArray, y: FloatArray, z: FloatArray) -> tuple[int, int, int] | None:
        """The learner's replay kernel over (X, y) writing each row's raw score into z: (n_learned, rows
        skipped, the standardiser's count) after it; None without a kernel for this learner."""
        return None

    def _replay_head(self, X: FloatArray, y: FloatArray, z: FloatArray) -> tuple[Any, ...]:
        """The arguments every replay kernel starts with: the rows, the raw-space weights of the
        predictions, the standardiser (Nones without one), the count of learned samples, the size limit."""
        s = self._scaler
        if s is None:
            return X, y, z, self._raw_w, None, None, None, None, 1.0, 0, 0.0, self.n_learned, MAX_SQNORM
        return (
            X, y, z, self._raw_w, s.mean, s.var, s.inv_std, s._d, s.alpha, s.n, s.eps, self.n_learned,
            MAX_SQNORM,
        )  # fmt: skip

    @abstractmethod
    def _update(self, xa: FloatArray, y: float) -> bool:
        """Move w given the augmented features xa of a labeled sample; False if the step was skipped."""

    def learn_many(self, X: FloatArray, y: FloatArray) -> None:
        """A batch of labeled samples as one mini-batch step (the scaler first takes in all of X).

        Learners with a vectorised rule override :meth:`_update_many`; the default applies
        :meth:`_update` per sample. Rows that :meth:`learn_one` would skip for their size are left out;
        a step the learner does not take (see the module docstring) counts all rows as skipped.
        """
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        n = len(y)
        outcome = self._learn_many_compiled(X, y)
        if outcome is not None:
            kept, status = outcome
            self.n_skipped += n - kept if status == LEARNED else n
            if kept:
                if self._scaler is not None:
                    self._scaler.n += kept
                self._stale = True
        else:
            if not sqnorm(X) + float(y @ y) <= MAX_SQNORM:  # some row is too large: keep the others
                ok = np.einsum("ij,ij->i", X, X) + y * y <= MAX_SQNORM
                self.n_skipped += n - int(np.count_nonzero(ok))
                X, y = X[ok], y[ok]
            if len(y):
                if self._scaler is not None:
                    self._scaler.update_many(X)
                if not self._update_many(self._features_many(X), y):
                    self.n_skipped += len(y)
                self._stale = True
        self.n_learned += n

    def _learn_many_compiled(self, X: FloatArray, y: FloatArray) -> tuple[int, int] | None:
        """:meth:`learn_many`'s size filter, standardiser update and step in one compiled call
        (:mod:`edgedrift.kernels`): the number of rows kept and how the step ended (LEARNED, SKIPPED_STEP,
        or SKIPPED_SIZE when no row was kept); None where there is no kernel for this learner, its loss or
        these arrays (then the numpy code runs)."""
        return None

    def _update_many(self, Xa: FloatArray, y: FloatArray) -> bool:
        """Move w for a batch (augmented rows Xa); False if the step was not taken."""
        for xa, yi in zip(Xa, y, strict=True):
            if not self._update(xa, float(yi)):
                self.n_skipped += 1
        return True

    def _features_many(self, X: FloatArray) -> FloatArray:
        Xa = np.ones((len(X), self.n_features + 1))
        if self._scaler is None:
            Xa[:, :-1] = X
        else:
            np.multiply(X - self._scaler.mean, self._scaler.inv_std, out=Xa[:, :-1])
        return Xa

    def anchor(self, model: LinearModel) -> None:
        """Continue from the batch model: express its raw-space weights in this learner's space."""
        if model.multiclass:
            raise ValueError(
                f"a binary learner cannot continue from a model of {model.n_classes} classes: "
                "wrap it in OneVsRest (each class's learner continues from its column)"
            )
        a, b = model.raw_coef, model.raw_intercept
        self._stale = True
        if self._scaler is None:
            self.w[:-1] = a
            self.w[-1] = b
        else:
            std = 1.0 / self._scaler.inv_std
            self.w[:-1] = a * std
            self.w[-1] = b + float(a @ self._scaler.mean)

    def reset(self) -> None:
        self.w[:] = 0.0
        self.n_learned = 0
        self.n_skipped = 0
        self._stale = True
        if self._scaler is not None:
            self._scaler = self._scaler.clone()
