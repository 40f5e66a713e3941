"""DRUiD: Drift detectoR from boUnded Distance (DRUiD paper, Section 4.3 and Algorithm 1).

Two variants share the Δg bookkeeping of :class:`~edgedrift.monitors.gradient.DeltaG`:

* :class:`DruidPaperMonitor` follows Algorithm 1 literally: collect ‖Δg‖ for the first N labels after a
  recompute, fit a χ_d (d = number of attributes) by maximum likelihood with the degrees of freedom
  fixed, test ‖Δg‖ > T_α, and recompute after more than T_N consecutive exceedances (N = T_N = window).
* :class:`DruidMonitor` is EdgeDrift's variant. It fixes three weaknesses of the literal test: the χ_d
  scale fitted on partly replaced windows is too small, ‖Δg‖ is not χ_d (its components have very
  different variances and are correlated), and T_N = window size caps the number of recomputes. Under
  "no drift", Δg is a difference of |D_A| + |D_R| per-sample gradients, so Cov(Δg) ≈ (|D_A| + |D_R|)·S
  with S the covariance of one sample's gradient at β₁, estimated on β₁'s own training window. The
  whitened statistic Δgᵀ S⁻¹ Δg / (|D_A| + |D_R|) is then ≈ χ²_{d+1} with no fitting period, and
  the threshold is its α-quantile.

Both take a one-vs-rest model of C ≥ 3 classes as it is (docs/learning-core.md, "Multi-class"): Δg is
then the (d+1)·C stacked gradient of the C columns, S the covariance of one sample's stacked gradient
(the columns' gradients of one sample are correlated, and S keeps that), the whitened statistic has
(d+1)·C degrees of freedom before the rank truncation, and the paper's χ_d fit uses d·C.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from edgedrift import kernels
from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray
from edgedrift.monitors.base import Evictions, eviction_steps, require_linear
from edgedrift.monitors.gradient import BoundMonitor, step_counts
from edgedrift.monitors.hooks import RestartHook, WarningHook
from edgedrift.monitors.quantiles import chi2_ppf, chi_ppf


def chi_scale_mle(values: FloatArray, df: int) -> float:
    """MLE of the scale of χ_df (loc 0, df fixed): sqrt(mean(v²)/df).

    ``scipy.stats.chi.fit(v, df, floc=0)`` would also fit the degrees of freedom (df is only a starting
    guess there); ``chi.fit(v, fdf=df, floc=0)`` gives this same value.
    """
    v = np.asarray(values, dtype=np.float64)
    return math.sqrt(float(np.mean(v * v)) / df)


def chi2_quantile(alpha: float, df: int) -> float:
    """α-quantile of χ²_df (:func:`~edgedrift.monitors.quantiles.chi2_ppf`, cached)."""
    return chi2_ppf(alpha, df)


def consecutive_counts(carry: int, exceed: np.ndarray) -> np.ndarray:
    """Length of the current run of exceedances after each step, starting from a run of ``carry``."""
    idx = np.arange(len(exceed))
    last_miss = np.maximum.accumulate(np.where(exceed, -1, idx))
    return np.where(exceed, idx - last_miss + np.where(last_miss < 0, carry, 0), 0)


class DruidPaperMonitor(BoundMonitor, WarningHook):
    """Algorithm 1 of the DRUiD paper, literally (see the module docstring).

    Parameters
    ----------
    alpha
        The quantile α of the fitted χ_d that sets the threshold T_α, in (0, 1).
    n_fit
        N: the labels after a recompute whose ‖Δg‖ the χ_d is fitted on.
    t_n
        T_N: a recompute follows more than T_N consecutive exceedances (None: ``n_fit``).
    df
        Degrees of freedom d of the χ_d (None: the batch model's number of attributes, times the number of
        classes for a one-vs-rest model of C ≥ 3 classes).

    Examples
    --------
    A concept that rotates at sample 600; the batch model was trained on the first 200 labels:

    >>> import numpy as np
    >>> from edgedrift.training.linear import train_linear
    >>> from edgedrift.window import CountWindow
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(1400, 2))
    >>> y = np.where(np.arange(1400) < 600, np.sign(X[:, 0] + X[:, 1]), np.sign(X[:, 0] - X[:, 1]))
    >>> model = train_linear(X[:200], y[:200], C=10.0)
    >>> window = CountWindow(200, n_features=2)
    >>> monitor = DruidPaperMonitor(alpha=0.99, n_fit=100, t_n=50)
    >>> monitor.reset(model, X[:200], y[:200])
    >>> _ = window.push_many(X[:200], y[:200])
    >>> for i in range(200, 1400):
    ...     error = float(model.predict_one(X[i]) != y[i])
    ...     monitor.update(X[i], y[i], error, window, window.push(X[i], y[i]))
    ...     if monitor.drift_detected:
    ...         break
    >>> i, round(monitor.threshold, 2)
    (653, 5.73)
    """

    name = "druid-paper"
    incremental_during_warning = True

    def __init__(self, alpha: float, n_fit: int = 200, t_n: int | None = None, df: int | None = None) -> None:
        super().__init__()
        if not 0.0 < alpha < 1.0:
            raise ValueError("alpha must be in (0, 1)")
        if df is not None and df < 1:
            raise ValueError("df must be >= 1")
        self.alpha = alpha
        self.n_fit = n_fit
        self.t_n = n_fit if t_n is None else t_n
        self.df = df
        self._collected = np.zeros(n_fit)
        self.threshold = math.inf

    def reset(self, model: BatchModel, X: FloatArray, y: FloatArray) -> None:
        super().reset(model, X, y)
        self.threshold = math.inf

    def update(self, x: FloatArray, y: float, error: float, window: Evictions, n_evicted: int) -> None:
        self._track(x, y, window, n_evicted)
        n_a = self.delta_g.n_added
        norm = float(np.linalg.norm(self.delta_g.vec))
        if n_a < self.n_fit:
            self._collected[n_a - 1] = norm
            return
        if n_a == self.n_fit:
            assert self.delta_g.model is not None
            model = self.delta_g.model
            df = (
                model.n_features * (model.n_classes if model.multiclass else 1)
                if self.df is None
                else self.df
            )
            scale = chi_scale_mle(self._collected[: self.n_fit - 1], df)
            self.threshold = scale * chi_ppf(self.alpha, df)
        self.num_warnings = self.num_warnings + 1 if norm > self.threshold else 0
        self.warning_detected = self.num_warnings > 0
        self.drift_detected = self.num_warnings > self.t_n
        if self.drift_detected:
            self.n_detections += 1

    @property
    def stats(self) -> dict[str, Any]:
        return {**super().stats, "threshold": self.threshold}


class DruidMonitor(BoundMonitor, RestartHook, WarningHook):
    """EdgeDrift's DRUiD: a calibrated whitened test on Δg (see the module docstring).

    The test runs on the clipped Δg, whose covariance is estimated from the equally clipped gradients, so
    one outlier that sits in the window for N labels cannot fake a drift; the covariance pools β₁'s
    training gradients (for the removed part of Δg) with the gradients of the samples added since (the
    out-of-sample part), and settles as evidence grows.

    Parameters
    ----------
    alpha
        The per-label false-alarm quantile of χ²_k, in (0, 1).
    t_n
        The number of consecutive exceedances that triggers a recompute.
    min_labels
        Labels to wait after a recompute before testing (the χ² approximation needs a few samples).
    shrinkage
        Pulls the estimated gradient covariance towards its diagonal, S ← (1 − s)S + s·diag(S), which
        keeps the test calibrated when a direction is barely excited in the training window.
    clip_quantile
        Sets the Huber-style clip of each sample's gradient: whitened norm ≤ the root of this χ²_k
        quantile.
    prior_labels
        Pseudo-samples that shrink the out-of-sample covariance towards β₁'s training covariance.
    refresh
        Labels before the first covariance refresh; later refreshes come when the count of added labels
        has grown by a quarter.
    rank_tol
        Directions whose eigenvalue on the correlation scale is below ``rank_tol`` × the largest are left
        out of the test (and k drops to the effective rank).
    restart
        Train the recompute on the run of exceedances only (the samples since the suspected change) and
        restart the window there, instead of training on a window that still holds the old concept.
    incremental_during_warning
        Predict with the incremental model while exceedances run (``predict_with="monitor"``), as in
        Algorithm 1.

    Examples
    --------
    A concept that rotates at sample 600; the batch model was trained on the first 200 labels:

    >>> import numpy as np
    >>> from edgedrift.training.linear import train_linear
    >>> from edgedrift.window import CountWindow
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(1400, 2))
    >>> y = np.where(np.arange(1400) < 600, np.sign(X[:, 0] + X[:, 1]), np.sign(X[:, 0] - X[:, 1]))
    >>> model = train_linear(X[:200], y[:200], C=10.0)
    >>> window = CountWindow(200, n_features=2)
    >>> monitor = DruidMonitor(alpha=0.999, t_n=200)
    >>> monitor.reset(model, X[:200], y[:200])
    >>> _ = window.push_many(X[:200], y[:200])
    >>> for i in range(200, 1400):
    ...     error = float(model.predict_one(X[i]) != y[i])
    ...     monitor.update(X[i], y[i], error, window, window.push(X[i], y[i]))
    ...     if monitor.drift_detected:
    ...         break
    >>> i, monitor.df, monitor.stats["warnings"]  # 200 exceedances in a row from sample 620 on
    (819, 3, 200)
    """

    name = "druid"

    def __init__(
        self,
        alpha: float = 0.99,
        t_n: int = 50,
        min_labels: int = 10,
        shrinkage: float = 0.0,
        clip_quantile: float = 0.99,
        prior_labels: int = 50,
        refresh: int = 10,
        rank_tol: float = 1e-3,
        restart: bool = False,
        incremental_during_warning: bool = False,
    ) -> None:
        super().__init__()
        if not 0.0 < alpha < 1.0:
            raise ValueError("alpha must be in (0, 1)")
        self.alpha = alpha
        self.t_n = t_n
        self.min_labels = min_labels
        self.shrinkage = shrinkage
        self.clip_quantile = clip_quantile
        self.prior_labels = prior_labels
        self.refresh = refresh
        self.rank_tol = rank_tol
        self.df = 0
        self.restart = restart
        self.incremental_during_warning = incremental_during_warning
        self.threshold = math.inf
        self.statistic = 0.0
        self.n_tests = 0
        self.n_exceedances = 0
        self._W: FloatArray = np.zeros((0, 0))
        self._S_in: FloatArray = np.zeros((0, 0))
        self._next_refresh = refresh

    def reset(self, model: BatchModel, X: FloatArray, y: FloatArray) -> None:
        super().reset(model, X, y)
        linear = require_linear(model, self.name)
        dim = linear.beta.size
        G = linear.gradients(X, y)
        W, df = self._whitener(self._covariance(G, dim))
        radius = math.sqrt(chi2_quantile(self.clip_quantile, df))
        self.delta_g.enable_robust(W.T @ W, radius)
        norms = np.linalg.norm(G @ W.T, axis=1)
        G *= np.minimum(1.0, radius / np.maximum(norms, 1e-300))[:, None]
        self._S_in = self._covariance(G, dim)
        self._set_whitener(self._S_in)
        self._next_refresh = self.refresh

    def _whitener(self, S: FloatArray) -> tuple[FloatArray, int]:
        """W with ‖W v‖² = vᵀS⁺v over the well-determined directions of S, and their number.

        Nearly collinear features make S numerically singular; a plain inverse would turn estimation
        noise along those directions into huge statistics, so directions whose eigenvalue on the
        correlation scale D^{-1/2} S D^{-1/2} is below ``rank_tol`` × the largest are left out and the χ²
        degrees of freedom drop to the effective rank. Working on the correlation scale keeps this
        invariant to feature scaling (Sine1+ scales one feature by σ).
        """
        sd = np.sqrt(np.maximum(np.diag(S), 1e-300))
        lam, U = np.linalg.eigh(S / np.outer(sd, sd))
        keep = lam > self.rank_tol * max(float(lam[-1]), 1e-300)
        W: FloatArray = (U[:, keep] / np.sqrt(lam[keep])).T / sd
        return W, int(keep.sum())

    def _whitened_sq(self, v: FloatArray) -> float:
        """‖W v‖² (compiled where :mod:`edgedrift.kernels` is, else two numpy calls)."""
        k = kernels.MODULE
        if k is not None:
            try:
                return float(k.whitened_sq(self._W, v))
            except kernels.LayoutError:  # W not C-contiguous
                pass
        u = self._W @ v
        return float(u @ u)

    def _set_whitener(self, S: FloatArray) -> None:
        W, df = self._whitener(S)
        self._W = np.ascontiguousarray(W)
        if df != self.df:
            self.df = df
            self.threshold = chi2_quantile(self.alpha, df)

    def _refresh_covariance(self) -> None:
        """Cov(Δg) ≈ |D_A|·S_out + |D_R|·S_in: the added samples are out-of-sample, the removed ones are
        β₁'s own training samples. S_out is the covariance of the clipped added gradients, shrunk towards
        S_in with the weight of ``prior_labels`` pseudo-samples while few have arrived."""
        dg = self.delta_g
        n = dg.n_added
        self._next_refresh = n + max(self.refresh, n // 4)
        mean = dg.added_sum / n
        S_out = (dg.added_outer - n * np.outer(mean, mean)) / max(n - 1, 1)
        S_out = (n * S_out + self.prior_labels * self._S_in) / (n + self.prior_labels)
        n_a, n_r = dg.n_new_in_window, dg.n_removed
        self._set_whitener((n_a * S_out + n_r * self._S_in) / max(n_a + n_r, 1))

    def _covariance(self, G: FloatArray, dim: int) -> FloatArray:
        """Covariance of per-sample gradients, optionally shrunk towards its diagonal."""
        S: FloatArray = np.atleast_2d(np.cov(G, rowvar=False)) if len(G) > 1 else np.eye(dim)
        return (1.0 - self.shrinkage) * S + self.shrinkage * np.diag(np.diag(S))

    def update(self, x: FloatArray, y: float, error: float, window: Evictions, n_evicted: int) -> None:
        self._track(x, y, window, n_evicted)
        dg = self.delta_g
        if dg.n_added < self.min_labels:
            return
        if dg.n_added >= self._next_refresh:
            self._refresh_covariance()
        self.statistic = self._whitened_sq(dg.robust) / (dg.n_new_in_window + dg.n_removed)
        self.n_tests += 1
        if self.statistic > self.threshold:
            self.n_exceedances += 1
            self.num_warnings += 1
        else:
            self.num_warnings = 0
        self.warning_detected = self.num_warnings > 0
        self.drift_detected = self.num_warnings >= self.t_n
        if self.drift_detected:
            self.n_detections += 1

    def update_many(
        self, X: FloatArray, y: FloatArray, errors: FloatArray, window: Evictions, n_evicted: int
    ) -> None:
        """Vectorised batch update: the statistic at every step from cumulative sums of contributions."""
        dg = self.delta_g
        before = dg.robust.copy()
        start = (dg.n_added, dg.n_evicted, dg.n_orig)
        R_add = dg.add_many(X, y)
        R_ev = dg.remove_many(window.evicted_X[:n_evicted], window.evicted_y[:n_evicted])
        if dg.n_added >= self._next_refresh:
            self._refresh_covariance()
        steps = self._steps_compiled(before, R_add, R_ev, start)
        tests, exceedances, statistic, run, longest = (
            self._steps(before, R_add, R_ev, start) if steps is None else steps
        )
        if not tests:
            return
        self.statistic = statistic
        self.n_tests += tests
        self.n_exceedances += exceedances
        self.num_warnings = run
        self.warning_detected = self.num_warnings > 0
        self.drift_detected = longest >= self.t_n
        if self.drift_detected:
            self.n_detections += 1

    def _steps(
        self, before: FloatArray, R_add: FloatArray, R_ev: FloatArray, start: tuple[int, int, int]
    ) -> tuple[int, int, float, int, int]:
        """The test at every step t of the batch: robust Δg after step t is ``before`` plus the added
        contributions up to t minus the evicted ones up to t (the window evicts at the batch's last steps).
        Returns (tests, exceedances, the last statistic, the run of exceedances at the end, the longest
        run); no tests: nothing else is meaningful."""
        k, n_evicted = len(R_add), len(R_ev)
        added = np.arange(1, k + 1)
        evicted = eviction_steps(k, n_evicted)
        traj = before + np.cumsum(R_add, axis=0)
        if n_evicted:
            traj -= np.vstack([np.zeros((1, traj.shape[1])), np.cumsum(R_ev, axis=0)])[evicted]
        tested = start[0] + added >= self.min_labels
        if not tested.any():
            return 0, 0, 0.0, self.num_warnings, 0
        U = traj[tested] @ self._W.T
        counts = step_counts(*start, added, evicted)
        stat = np.einsum("ij,ij->i", U, U) / counts[tested]
        exc = stat > self.threshold
        run = consecutive_counts(self.num_warnings, exc)
        return int(tested.sum()), int(exc.sum()), float(stat[-1]), int(run[-1]), int(run.max())

    def _steps_compiled(
        self, before: FloatArray, R_add: FloatArray, R_ev: FloatArray, start: tuple[int, int, int]
    ) -> tuple[int, int, float, int, int] | None:
        """:meth:`_steps` in one compiled call; None without the kernels (or for arrays they do not take)."""
        k = kernels.MODULE
        if k is None:
            return None
        try:
            steps: tuple[int, int, float, int, int] = k.druid_steps(
                before, R_add, R_ev, self._W, *start, self.min_labels, self.threshold, self.num_warnings
            )
        except kernels.LayoutError:  # an array the kernel does not take (not contiguous, say)
            return None
        return steps

    def train_on_last(self) -> int | None:
        """With ``restart``: the samples of the current run of exceedances (at least ``min_labels``)."""
        return max(self.num_warnings, self.min_labels) if self.restart else None

    @property
    def exceedance_rate(self) -> float:
        return self.n_exceedances / self.n_tests if self.n_tests else 0.0

    @property
    def stats(self) -> dict[str, Any]:
        return {
            **super().stats,
            "statistic": self.statistic,
            "threshold": self.threshold,
            "exceedance_rate": self.exceedance_rate,
        }
