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
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats as sps

from edgedrift.models.linear import LinearModel
from edgedrift.models.losses import FloatArray
from edgedrift.monitors.base import Monitor
from edgedrift.monitors.gradient import DeltaG
from edgedrift.window import CountWindow, TimeWindow


def chi_scale_mle(values: FloatArray, df: int) -> float:
    """MLE of the scale of χ_df (loc 0, df fixed): sqrt(mean(v²)/df).

    ``scipy.stats.chi.fit(v, df, floc=0)`` would also fit the degrees of freedom (df is only a starting
    guess there); ``chi.fit(v, fdf=df, floc=0)`` gives this same value.
    """
    v = np.asarray(values, dtype=np.float64)
    return math.sqrt(float(np.mean(v * v)) / df)


class _BoundMonitor(Monitor):
    """Common part: Δg under β₁, the radius vector and readable bound statistics."""

    def __init__(self) -> None:
        super().__init__()
        self.delta_g = DeltaG()
        self.num_warnings = 0

    def reset(self, model: LinearModel, X: FloatArray, y: FloatArray) -> None:
        self.delta_g.reset(model, X, y)
        self.num_warnings = 0
        self.drift_detected = False
        self.warning_detected = False

    def _track(self, x: FloatArray, y: float, window: CountWindow | TimeWindow, n_evicted: int) -> None:
        if n_evicted:
            self.delta_g.remove(window.evicted_X, window.evicted_y, n_evicted)
        self.delta_g.add(x, y)

    @property
    def stats(self) -> dict[str, Any]:
        dg = self.delta_g
        out = {**super().stats, "warnings": self.num_warnings}
        if dg.model is not None:
            out["delta_g_norm"] = float(np.linalg.norm(dg.vec))
            out["bound"] = 2.0 * float(np.linalg.norm(dg.radius()))
            out["n_added"] = dg.n_added
        return out


class DruidPaperMonitor(_BoundMonitor):
    """Algorithm 1 of the paper, literally (see the module docstring)."""

    name = "druid-paper"
    incremental_during_warning = True

    def __init__(self, alpha: float, n_fit: int = 200, t_n: int | None = None, df: int | None = None) -> None:
        super().__init__()
        if not 0.0 < alpha < 1.0:
            raise ValueError("alpha must be in (0, 1)")
        self.alpha = alpha
        self.n_fit = n_fit
        self.t_n = n_fit if t_n is None else t_n
        self.df = df
        self._collected = np.empty(n_fit)
        self.threshold = math.inf

    def reset(self, model: LinearModel, X: FloatArray, y: FloatArray) -> None:
        super().reset(model, X, y)
        self.threshold = math.inf

    def update(
        self, x: FloatArray, y: float, error: float, window: CountWindow | TimeWindow, n_evicted: int
    ) -> None:
        self._track(x, y, window, n_evicted)
        n_a = self.delta_g.n_added
        norm = float(np.linalg.norm(self.delta_g.vec))
        if n_a < self.n_fit:
            self._collected[n_a - 1] = norm
            return
        if n_a == self.n_fit:
            df = self.df or self.delta_g.model.n_features  # type: ignore[union-attr]
            scale = chi_scale_mle(self._collected[: self.n_fit - 1], df)
            self.threshold = scale * float(sps.chi.ppf(self.alpha, df))
        self.num_warnings = self.num_warnings + 1 if norm > self.threshold else 0
        self.warning_detected = self.num_warnings > 0
        self.drift_detected = self.num_warnings > self.t_n
        if self.drift_detected:
            self.n_detections += 1

    @property
    def stats(self) -> dict[str, Any]:
        return {**super().stats, "threshold": self.threshold}


class DruidMonitor(_BoundMonitor):
    """EdgeDrift's DRUiD: a calibrated whitened test on Δg (see the module docstring).

    Parameters: ``alpha`` is the per-label false-alarm quantile; ``t_n`` the number of consecutive
    exceedances that triggers a recompute; ``min_labels`` the labels to wait after a recompute before
    testing (the χ² approximation needs a few samples); ``incremental_during_warning`` switches
    prediction to the incremental model while exceedances run, as in Algorithm 1.
    """

    name = "druid"

    def __init__(
        self,
        alpha: float = 0.99,
        t_n: int = 50,
        min_labels: int = 10,
        ridge: float = 1e-6,
        incremental_during_warning: bool = False,
    ) -> None:
        super().__init__()
        if not 0.0 < alpha < 1.0:
            raise ValueError("alpha must be in (0, 1)")
        self.alpha = alpha
        self.t_n = t_n
        self.min_labels = min_labels
        self.ridge = ridge
        self.incremental_during_warning = incremental_during_warning
        self.threshold = math.inf
        self.statistic = 0.0
        self.n_tests = 0
        self.n_exceedances = 0
        self._S_inv: FloatArray = np.zeros((0, 0))

    def reset(self, model: LinearModel, X: FloatArray, y: FloatArray) -> None:
        super().reset(model, X, y)
        dim = model.n_features + 1
        G = model.gradients(X, y)
        S: FloatArray = np.atleast_2d(np.cov(G, rowvar=False)) if len(y) > 1 else np.eye(dim)
        S[np.diag_indices(dim)] += self.ridge * max(float(np.trace(S)) / dim, 1e-12)
        self._S_inv = np.asarray(np.linalg.inv(S), dtype=np.float64)
        self.threshold = float(sps.chi2.ppf(self.alpha, dim))

    def update(
        self, x: FloatArray, y: float, error: float, window: CountWindow | TimeWindow, n_evicted: int
    ) -> None:
        self._track(x, y, window, n_evicted)
        dg = self.delta_g
        if dg.n_added < self.min_labels:
            return
        v = dg.vec
        self.statistic = float(v @ self._S_inv @ v) / (dg.n_new_in_window + dg.n_removed)
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
