"""A per-feature range guard: keeps glitched readings out of the learner, the monitor and the window.

A sensor that reboots or glitches can send one reading of 1e6 (or 1e308) in every feature. Predicting
such a sample is harmless, but learning from it is not: one sample at 10⁶ times the usual scale moves a
second-order learner's weights, the exponentially weighted scaler and the DRUiD gradient sums for
thousands of samples. The guard learns a robust location and scale per feature from the first window
(median and the largest of three robust spreads: 1.4826·MAD, IQR/1.349 and the 1 %…99 % quantile range
over 4.653, each equal to σ for normal data) and flags a sample whose robust z-score
|x_j − median_j| / scale_j exceeds ``threshold`` in any feature, or that is not finite. A feature that was
constant in the first window (all three spreads zero) gets the scale max(|median|, 1), so a legitimate
later change of a constant-at-start feature (ELEC2's New South Wales-only first months) is not flagged.
For regression the label is guarded the same way. The test is two comparisons per feature against
precomputed bounds (no subtraction, so an extreme value cannot overflow it).

Glitches are isolated; a real change of regime is sustained. When at least ``patience`` of the last
2·``patience`` samples were flagged, the guard refits itself on the samples seen since (``refits``
counts it) and accepts the new regime from then on.

The default threshold of 100 robust standard deviations flags none of the samples of the streams in
``edgedrift.data`` (ELEC2, Sine1+, SEA, Hyperplane, RandomRBF, ridge), so results on them do not change.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from edgedrift import kernels
from edgedrift.models.losses import FloatArray

#: (q99 − q01) / this = σ for normal data.
_Q01_Q99_SIGMAS = 2.0 * 2.3263478740408408
#: Up to this many features the per-sample test runs on Python floats (faster than numpy calls).
_SCALAR_WIDTH = 16


class RangeGuard:
    """Flags samples far outside the robust range of the first window (see the module docstring).

    Parameters
    ----------
    threshold
        Largest accepted robust z-score per feature.
    patience
        Flagged samples among the last 2·patience that make the guard accept a new regime.

    Examples
    --------
    >>> import numpy as np
    >>> from edgedrift.guard import RangeGuard
    >>> guard = RangeGuard().fit(np.random.default_rng(0).normal(size=(200, 3)))
    >>> guard.check(np.array([0.1, -0.4, 1.2])), guard.check(np.array([1e6, 0.0, 0.0]))
    (False, True)
    >>> guard.stats
    {'outliers': 1, 'guard_refits': 0}
    """

    def __init__(self, threshold: float = 100.0, patience: int = 50) -> None:
        if threshold <= 0 or not math.isfinite(threshold):
            raise ValueError("threshold must be a finite number > 0")
        if patience < 1:
            raise ValueError("patience must be >= 1")
        self.threshold = float(threshold)
        self.patience = int(patience)
        self.lo: FloatArray = np.zeros(0)
        self.hi: FloatArray = np.zeros(0)
        self.y_lo = -math.inf
        self.y_hi = math.inf
        self.n_flagged = 0
        self.refits = 0
        self.n_seen = 0
        self._lo: list[float] = []
        self._hi: list[float] = []
        self._flagged_at: deque[int] = deque()
        self._rows: FloatArray = np.zeros((0, 0))
        self._ys: FloatArray = np.zeros(0)
        self._kept = 0

    @property
    def fitted(self) -> bool:
        return self.lo.size > 0

    def _bounds(self, X: FloatArray) -> tuple[FloatArray, FloatArray]:
        center = np.median(X, axis=0)
        mad = 1.4826 * np.median(np.abs(X - center), axis=0)
        q01, q25, q75, q99 = np.quantile(X, (0.01, 0.25, 0.75, 0.99), axis=0)
        scale = np.maximum.reduce([mad, (q75 - q25) / 1.349, (q99 - q01) / _Q01_Q99_SIGMAS])
        constant = ~(scale > 0.0)
        scale[constant] = np.maximum(np.abs(center[constant]), 1.0)
        return center - self.threshold * scale, center + self.threshold * scale

    def _set(self, lo: FloatArray, hi: FloatArray) -> None:
        self.lo, self.hi = lo, hi
        self._lo, self._hi = lo.tolist(), hi.tolist()

    def fit(self, X: FloatArray, y: FloatArray | None = None) -> RangeGuard:
        """Learn the accepted range from the first window's samples (``y`` too, for regression)."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or len(X) == 0:
            raise ValueError("the guard needs a non-empty 2-D first window")
        finite = np.isfinite(X).all(axis=1)
        if y is not None:
            finite &= np.isfinite(y)
        if not finite.any():
            raise ValueError("the first window has no finite sample")
        self._set(*self._bounds(X[finite]))
        if y is not None:
            y_lo, y_hi = self._bounds(np.asarray(y, dtype=np.float64)[finite][:, None])
            self.y_lo, self.y_hi = float(y_lo[0]), float(y_hi[0])
        self._release(X.shape[1])
        self._flagged_at.clear()
        return self

    def _release(self, width: int) -> None:
        """Drop the rows kept for a refit: they exist only while something was flagged recently (most
        devices never see a glitch, and a gateway holds a guard per device)."""
        self._rows, self._ys = np.zeros((0, width)), np.zeros(0)
        self._kept = 0

    def _inside(self, x: FloatArray, y: float | None) -> bool:
        if y is not None and not self.y_lo <= y <= self.y_hi:
            return False
        k = kernels.MODULE
        if k is not None:
            try:
                return bool(k.in_range(x, self.lo, self.hi))
            except kernels.LayoutError:  # a row the kernel does not take (not contiguous, another width)
                pass
        if len(self._lo) <= _SCALAR_WIDTH:
            return all(lo <= v <= hi for v, lo, hi in zip(x.tolist(), self._lo, self._hi, strict=True))
        return bool(np.all((x >= self.lo) & (x <= self.hi)))

    def check(self, x: FloatArray, y: float | None = None, remember: bool = True) -> bool:
        """True if the sample is an outlier. ``remember`` feeds the regime-shift rule (which may refit
        the guard); a late label of a sample checked before passes False."""
        if not self.fitted:
            return False
        flagged = not self._inside(x, y)
        if remember:
            self._remember(x, y, flagged)
        if flagged:
            self.n_flagged += 1
        return flagged

    def check_many(self, X: FloatArray, y: FloatArray | None = None) -> NDArray[np.bool_]:
        """:meth:`check` for a batch (NaN in ``y`` = unlabeled); one vectorised test while nothing in it
        or in the recent past was flagged."""
        if not self.fitted:
            return np.zeros(len(X), dtype=bool)
        bad = self.outside(X, y)
        if not bad.any() and not self._flagged_at:
            self.n_seen += len(X)
            return np.asarray(bad, dtype=bool)
        out = np.empty(len(X), dtype=bool)
        for i in range(len(X)):
            yi = None if y is None or math.isnan(y[i]) else float(y[i])
            out[i] = self.check(X[i], yi)
        return out

    def outside(self, X: FloatArray, y: FloatArray | None = None) -> NDArray[np.bool_]:
        """The rows outside the accepted range (NaN in ``y`` = unlabeled); counts and remembers nothing."""
        labels = y is not None and (math.isfinite(self.y_lo) or math.isfinite(self.y_hi))
        k = kernels.MODULE
        if k is not None and not labels:
            bad = np.empty(len(X), dtype=bool)
            try:
                k.rows_outside(X, self.lo, self.hi, bad)
                return bad
            except kernels.LayoutError:  # rows the kernel does not take (not contiguous, another width)
                pass
        inside = self.lo <= X  # comparisons with NaN are False (and do not warn)
        inside &= self.hi >= X
        bad = cast(NDArray[np.bool_], ~inside.all(axis=1))
        if labels:
            assert y is not None
            bad |= ~np.isnan(y) & ~((y >= self.y_lo) & (y <= self.y_hi))
        return bad

    def _remember(self, x: FloatArray, y: float | None, flagged: bool) -> None:
        """Count the sample; while something was flagged in the last 2·patience samples, keep the rows
        (the material of a refit) and refit once ``patience`` of them were flagged."""
        self.n_seen += 1
        window = 2 * self.patience
        flags = self._flagged_at
        while flags and flags[0] <= self.n_seen - window:
            flags.popleft()
        if flagged:
            flags.append(self.n_seen)
        if not flags:
            if self._kept or len(self._ys):
                self._release(len(x))
            return
        if not len(self._ys):
            self._rows, self._ys = np.zeros((window, len(x))), np.zeros(window)
        slot = self._kept % window
        self._rows[slot] = x
        self._ys[slot] = math.nan if y is None else y
        self._kept += 1
        if len(flags) >= self.patience:
            self._refit()

    def _refit(self) -> None:
        """A sustained shift, not a glitch: take the samples since it began as the new normal."""
        n = min(self._kept, len(self._ys))
        X = self._rows[:n]
        finite = np.isfinite(X).all(axis=1)
        if finite.sum() < self.patience:
            return  # a burst of non-finite values is no regime
        self._set(*self._bounds(X[finite]))
        y = self._ys[:n][finite]
        if math.isfinite(self.y_lo) and np.isfinite(y).sum() >= self.patience:
            y_lo, y_hi = self._bounds(y[np.isfinite(y)][:, None])
            self.y_lo, self.y_hi = float(y_lo[0]), float(y_hi[0])
        self._flagged_at.clear()
        self._release(X.shape[1])
        self.refits += 1

    @property
    def stats(self) -> dict[str, Any]:
        return {"outliers": self.n_flagged, "guard_refits": self.refits}


def screen_first_window(
    X0: FloatArray, y0: FloatArray, task: str, guard: RangeGuard | None = None
) -> tuple[RangeGuard, FloatArray, FloatArray]:
    """Fit ``guard`` (a default one when None) on the first window's labeled samples and drop the
    window's own outliers, so that the first model never sees them either. Returns (guard, X0, y0)."""
    guard = guard or RangeGuard()
    labels = y0 if task == "regression" else None
    guard.fit(X0, labels)
    keep = ~guard.outside(X0, labels)
    return guard, X0[keep], y0[keep]
