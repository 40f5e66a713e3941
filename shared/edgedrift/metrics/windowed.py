"""Sliding-window ("forgetting") metrics: the trailing window of the last ``window`` samples at every
position; the first ``window − 1`` positions use the partial window of all samples seen so far."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numpy.typing import NDArray

from edgedrift.metrics._checks import (
    FloatArray,
    IntArray,
    as_1d,
    as_codes,
    check_window,
    positive_mask,
    same_length,
)

__all__ = ["downsample_curve", "windowed_accuracy", "windowed_kappa", "windowed_rmse"]


def _trailing_counts(x: NDArray[np.bool_] | IntArray, window: int) -> IntArray:
    """Σ x[max(0, i−w+1) .. i] for every i, exact (integer cumulative sums)."""
    c = np.cumsum(x, dtype=np.int64)
    out = c.copy()
    out[window:] -= c[:-window]
    return out


def _trailing_sums(x: FloatArray, window: int) -> FloatArray:
    """Σ x[max(0, i−w+1) .. i] for every i, in O(n) without a global cumulative sum.

    A global cumsum difference loses the small window sums to round-off once the running total is
    large. Instead the series is cut into blocks of ``window``: the window ending at position j of
    block b is the prefix sum of block b up to j plus the suffix sum of block b−1 from j+1, so every
    sum accumulates at most ``window`` terms (and a NaN only affects the windows that contain it).
    """
    n = x.shape[0]
    w = max(1, min(window, n))  # a window longer than the series is the whole prefix
    n_blocks = -(-n // w)
    padded = np.zeros(n_blocks * w, dtype=np.float64)
    padded[:n] = x
    blocks = padded.reshape(n_blocks, w)
    out = np.cumsum(blocks, axis=1)
    if w > 1 and n_blocks > 1:
        suffix = np.cumsum(blocks[:-1, ::-1], axis=1)[:, ::-1]  # suffix[b, j] = Σ blocks[b, j:]
        out[1:, :-1] += suffix[:, 1:]
    result: FloatArray = out.reshape(-1)[:n]
    return result


def _window_lengths(n: int, window: int) -> IntArray:
    return np.minimum(np.arange(1, n + 1, dtype=np.int64), window)


def windowed_accuracy(correct: npt.ArrayLike, window: int) -> FloatArray:
    """Accuracy over the trailing window at every position i.

    acc_i = (1/wᵢ) Σ_{j=i−wᵢ+1}^{i} correct_j with wᵢ = min(i+1, w); O(n) with integer cumulative sums.
    """
    w = check_window(window)
    c = as_1d(correct, "correct")
    if c.dtype != np.bool_:
        if c.size and not np.all((c == 0) | (c == 1)):
            raise ValueError("correct must be boolean (or 0/1)")
        c = c.astype(np.bool_)
    n = c.shape[0]
    acc: FloatArray = _trailing_counts(c.astype(np.bool_), w) / _window_lengths(n, w)
    return acc


def windowed_rmse(err: npt.ArrayLike, window: int) -> FloatArray:
    """RMSE over the trailing window at every position: √((1/wᵢ) Σ_{j=i−wᵢ+1}^{i} e_j²), wᵢ = min(i+1, w)."""
    w = check_window(window)
    e = np.asarray(as_1d(err, "err"), dtype=np.float64)
    n = e.shape[0]
    ms = _trailing_sums(e * e, w) / _window_lengths(n, w)
    rmse: FloatArray = np.sqrt(ms)
    return rmse


def windowed_kappa(
    y_true: npt.ArrayLike, y_pred: npt.ArrayLike, window: int, n_classes: int = 2
) -> FloatArray:
    """Cohen's κ over the trailing window at every position, from windowed confusion-matrix counts.

    κ = (wᵢ·agree − S)/(wᵢ² − S), S = Σ_k (true count of k)(predicted count of k) over the window, 0 where
    wᵢ² = S (p_e = 1). Labels ±1 for ``n_classes = 2``, codes 0..C−1 beyond (O(nC)).
    """
    w = check_window(window)
    if n_classes > 2:
        t = as_codes(y_true, n_classes, "y_true")
        p = as_codes(y_pred, n_classes, "y_pred")
        n = same_length(t, p)
        nw = _window_lengths(n, w)
        agree = _trailing_counts(t == p, w)
        s = np.zeros(n, dtype=np.int64)
        for k in range(n_classes):
            s += _trailing_counts(t == k, w) * _trailing_counts(p == k, w)
        num, den = nw * agree - s, nw * nw - s
    else:
        tb = positive_mask(y_true, "y_true")
        pb = positive_mask(y_pred, "y_pred")
        n = same_length(tb, pb)
        nw = _window_lengths(n, w)
        tp = _trailing_counts(tb & pb, w)
        true_pos = _trailing_counts(tb, w)
        pred_pos = _trailing_counts(pb, w)
        fn = true_pos - tp
        fp = pred_pos - tp
        tn = nw - true_pos - fp
        s = pred_pos * true_pos + (tn + fn) * (tn + fp)
        num, den = nw * (tp + tn) - s, nw * nw - s
    ok = den != 0
    kappa: FloatArray = np.where(ok, num / np.where(ok, den, 1), 0.0)
    return kappa


def downsample_curve(values: npt.ArrayLike, max_points: int = 2000) -> tuple[IntArray, FloatArray]:
    """At most ``max_points`` evenly spaced samples of a long curve, first and last included.

    Returns ``(idx, values[idx])``; a curve that is already short enough is returned whole. Plain
    decimation: smooth the curve first (e.g. a windowed metric with window ≥ n/max_points).
    """
    if max_points < 2:
        raise ValueError(f"max_points must be at least 2, got {max_points}")
    v = np.asarray(as_1d(values, "values"), dtype=np.float64)
    n = v.shape[0]
    if n <= max_points:
        idx = np.arange(n, dtype=np.int64)
    else:
        # Spacing (n−1)/(max_points−1) > 1, so the rounded indices are strictly increasing.
        idx = np.rint(np.linspace(0, n - 1, max_points)).astype(np.int64)
    return idx, v[idx]
