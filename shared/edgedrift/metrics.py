"""Prequential (test-then-train) evaluation metrics for binary classification and regression.

Everything is vectorised with numpy: one evaluation of 500 000 predictions takes milliseconds.
Classification labels are ±1 (integer or float arrays); any other value raises ``ValueError``
(map a score of exactly 0 to a class before calling). With the confusion-matrix counts
TP, FP, FN, TN (positive class +1) and n = TP + FP + FN + TN:

    accuracy           p_o = (TP + TN) / n
    kappa (Cohen)      (p_o − p_e) / (1 − p_e),   p_e = [(TP+FP)(TP+FN) + (TN+FN)(TN+FP)] / n²
    kappa_m            (p_o − p_maj) / (1 − p_maj),  p_maj = max(#pos, #neg) / n of y_true
    kappa_t            (p_o − p_nc) / (1 − p_nc),    p_nc = accuracy of the no-change classifier
    balanced_accuracy  mean over the classes present in y_true of their recall
    f1                 2TP / (2TP + FP + FN)  (class +1)
    mcc                (TP·TN − FP·FN) / √((TP+FP)(TP+FN)(TN+FP)(TN+FN))

Regression, with e = ŷ − y and ȳ the mean of y:

    mse = Σe²/n,  rmse = √mse,  mae = Σ|e|/n,  rae = Σ|e| / Σ|y − ȳ|,  r2 = 1 − Σe² / Σ(y − ȳ)²

**Degenerate cases** never emit numpy warnings and are defined as follows: with n = 0 every metric
is NaN; every kappa is 0 when its denominator 1 − p_e (p_maj, p_nc) is 0 (river's convention); MCC is
0 when a marginal (row or column of the confusion matrix) is empty; F1 is 0 when TP + FP + FN = 0;
balanced accuracy averages only the classes that occur in y_true (sklearn's and river's convention);
for a constant y, r2 is 1 for a perfect prediction and 0 otherwise (sklearn's ``force_finite``), and
rae is 0 for a perfect prediction and +inf otherwise.

Sliding-window ("forgetting") versions take a trailing window of the last ``window`` samples; the
first ``window − 1`` positions use the partial window of all samples seen so far.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.int64]

__all__ = [
    "ConfusionMatrix",
    "classification_report",
    "downsample_curve",
    "majority_predictions",
    "no_change_predictions",
    "regression_report",
    "windowed_accuracy",
    "windowed_kappa",
    "windowed_rmse",
]


# --------------------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------------------


def _as_1d(x: npt.ArrayLike, name: str) -> NDArray[np.generic]:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {a.shape}")
    return a


def _positive_mask(x: npt.ArrayLike, name: str) -> BoolArray:
    """True where the label is +1; raises unless every label is +1 or −1."""
    a = _as_1d(x, name)
    if a.dtype == np.bool_:
        raise ValueError(f"{name} must hold labels ±1, not booleans")
    pos: BoolArray = a == 1
    n_pos = int(np.count_nonzero(pos))
    n_neg = int(np.count_nonzero(a == -1))
    if n_pos + n_neg != a.shape[0]:
        raise ValueError(f"{name} must hold binary labels in {{-1, +1}} only")
    return pos


def _same_length(*arrays: NDArray[np.generic]) -> int:
    n = arrays[0].shape[0]
    if any(a.shape[0] != n for a in arrays[1:]):
        raise ValueError(f"arrays must have the same length, got {[a.shape[0] for a in arrays]}")
    return int(n)


def _check_window(window: int) -> int:
    if isinstance(window, bool) or int(window) != window or window < 1:
        raise ValueError(f"window must be a positive integer, got {window!r}")
    return int(window)


def _label_sign(v: float, name: str) -> bool:
    """True for +1, False for −1, ValueError otherwise (scalar version of :func:`_positive_mask`)."""
    if v == 1:
        return True
    if v == -1:
        return False
    raise ValueError(f"{name} must be a binary label in {{-1, +1}}, got {v!r}")


# --------------------------------------------------------------------------------------------------
# Metrics from confusion-matrix counts (exact integer arithmetic, shared by the batch and incremental APIs)
# --------------------------------------------------------------------------------------------------


def _ratio_or_zero(num: int, den: int) -> float:
    return num / den if den != 0 else 0.0


def _accuracy(tp: int, fp: int, fn: int, tn: int) -> float:
    n = tp + fp + fn + tn
    return (tp + tn) / n if n else math.nan


def _kappa(tp: int, fp: int, fn: int, tn: int) -> float:
    # (p_o − p_e)/(1 − p_e) multiplied through by n²: (n·agree − S)/(n² − S), S = Σ_c row_c·col_c.
    n = tp + fp + fn + tn
    if n == 0:
        return math.nan
    s = (tp + fp) * (tp + fn) + (tn + fn) * (tn + fp)
    return _ratio_or_zero(n * (tp + tn) - s, n * n - s)


def _kappa_against(correct: int, n: int, correct_ref: int) -> float:
    """(p_o − p_ref)/(1 − p_ref) = (correct − correct_ref)/(n − correct_ref); 0 when p_ref = 1."""
    if n == 0:
        return math.nan
    return _ratio_or_zero(correct - correct_ref, n - correct_ref)


def _balanced_accuracy(tp: int, fp: int, fn: int, tn: int) -> float:
    recalls = [tp / (tp + fn)] if tp + fn else []
    if tn + fp:
        recalls.append(tn / (tn + fp))
    return sum(recalls) / len(recalls) if recalls else math.nan


def _f1(tp: int, fp: int, fn: int, tn: int) -> float:
    if tp + fp + fn + tn == 0:
        return math.nan
    return _ratio_or_zero(2 * tp, 2 * tp + fp + fn)


def _mcc(tp: int, fp: int, fn: int, tn: int) -> float:
    if tp + fp + fn + tn == 0:
        return math.nan
    den = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    if den == 0:
        return 0.0
    return (tp * tn - fp * fn) / (math.sqrt((tp + fp) * (tp + fn)) * math.sqrt((tn + fp) * (tn + fn)))


class ConfusionMatrix:
    """Incremental binary confusion matrix (positive class +1) with the metrics of this module.

    ``update(y_true, y_pred)`` adds one sample, ``update_many`` a batch, ``revert`` removes one
    (for sliding windows). The metric properties follow the module's formulas and degenerate-case
    conventions (NaN while empty), and match :func:`classification_report` on the same samples.
    """

    __slots__ = ("fn", "fp", "tn", "tp")

    def __init__(self) -> None:
        self.tp = 0
        self.fp = 0
        self.fn = 0
        self.tn = 0

    def __repr__(self) -> str:
        return f"ConfusionMatrix(tp={self.tp}, fp={self.fp}, fn={self.fn}, tn={self.tn})"

    def _add(self, y_true: float, y_pred: float, step: int) -> None:
        t = _label_sign(y_true, "y_true")
        p = _label_sign(y_pred, "y_pred")
        if t:
            if p:
                self.tp += step
            else:
                self.fn += step
        elif p:
            self.fp += step
        else:
            self.tn += step

    def update(self, y_true: float, y_pred: float) -> None:
        """Count one prediction (labels ±1)."""
        self._add(y_true, y_pred, 1)

    def revert(self, y_true: float, y_pred: float) -> None:
        """Remove one previously counted prediction; ValueError if that cell is already 0."""
        t = _label_sign(y_true, "y_true")
        p = _label_sign(y_pred, "y_pred")
        cell = ("tp" if p else "fn") if t else ("fp" if p else "tn")
        if getattr(self, cell) == 0:
            raise ValueError(f"cannot revert: no {cell.upper()} left to remove")
        self._add(y_true, y_pred, -1)

    def update_many(self, y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> None:
        """Count a batch of predictions (vectorised)."""
        t = _positive_mask(y_true, "y_true")
        p = _positive_mask(y_pred, "y_pred")
        n = _same_length(t, p)
        tp = int(np.count_nonzero(t & p))
        n_true_pos = int(np.count_nonzero(t))
        n_pred_pos = int(np.count_nonzero(p))
        self.tp += tp
        self.fn += n_true_pos - tp
        self.fp += n_pred_pos - tp
        self.tn += n - n_true_pos - n_pred_pos + tp

    def reset(self) -> None:
        """Set every count back to 0."""
        self.tp = self.fp = self.fn = self.tn = 0

    @property
    def counts(self) -> tuple[int, int, int, int]:
        """(TP, FP, FN, TN)."""
        return self.tp, self.fp, self.fn, self.tn

    @property
    def n(self) -> int:
        """Number of counted samples."""
        return self.tp + self.fp + self.fn + self.tn

    @property
    def accuracy(self) -> float:
        """(TP + TN) / n."""
        return _accuracy(*self.counts)

    @property
    def kappa(self) -> float:
        """Cohen's κ = (p_o − p_e)/(1 − p_e); 0 when p_e = 1."""
        return _kappa(*self.counts)

    @property
    def kappa_m(self) -> float:
        """κ_m = (p_o − p_maj)/(1 − p_maj), p_maj = share of y_true's majority class; 0 when p_maj = 1."""
        return _kappa_against(self.tp + self.tn, self.n, max(self.tp + self.fn, self.tn + self.fp))

    @property
    def balanced_accuracy(self) -> float:
        """Mean recall over the classes present in y_true."""
        return _balanced_accuracy(*self.counts)

    @property
    def f1(self) -> float:
        """F1 of class +1: 2TP/(2TP + FP + FN); 0 when TP + FP + FN = 0."""
        return _f1(*self.counts)

    @property
    def mcc(self) -> float:
        """(TP·TN − FP·FN)/√((TP+FP)(TP+FN)(TN+FP)(TN+FN)); 0 when a marginal is empty."""
        return _mcc(*self.counts)

    def report(self, correct_nochange: int | None = None) -> dict[str, float]:
        """The keys of :func:`classification_report`; kappa_t needs the no-change classifier's hit count."""
        kappa_t = (
            math.nan
            if correct_nochange is None
            else _kappa_against(self.tp + self.tn, self.n, correct_nochange)
        )
        return {
            "accuracy": self.accuracy,
            "kappa": self.kappa,
            "kappa_t": kappa_t,
            "kappa_m": self.kappa_m,
            "balanced_accuracy": self.balanced_accuracy,
            "f1": self.f1,
            "mcc": self.mcc,
            "n": float(self.n),
        }


# --------------------------------------------------------------------------------------------------
# Batch reports
# --------------------------------------------------------------------------------------------------


def classification_report(
    y_true: npt.ArrayLike, y_pred: npt.ArrayLike, y_nochange: npt.ArrayLike | None = None
) -> dict[str, float]:
    """Binary classification metrics for labels ±1 (positive class +1).

    Keys: ``accuracy``, ``kappa`` (Cohen), ``kappa_t`` (temporal: against ``y_nochange``, the
    no-change classifier's predictions on the same samples, see :func:`no_change_predictions`; NaN
    when not given), ``kappa_m`` (against always predicting y_true's majority class),
    ``balanced_accuracy``, ``f1``, ``mcc`` and ``n``. Formulas and degenerate-case conventions
    (kappas 0 when the reference is perfect, MCC 0 on an empty marginal, F1 0 when TP+FP+FN = 0,
    NaN for n = 0) are in the module docstring.
    """
    cm = ConfusionMatrix()
    cm.update_many(y_true, y_pred)
    correct_nc: int | None = None
    if y_nochange is not None:
        t = _positive_mask(y_true, "y_true")
        nc = _positive_mask(y_nochange, "y_nochange")
        n = _same_length(t, nc)
        correct_nc = n - int(np.count_nonzero(t ^ nc))
    return cm.report(correct_nc)


def regression_report(y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> dict[str, float]:
    """Regression metrics: ``mse``, ``rmse``, ``mae``, ``rae``, ``r2``, ``n``.

    MSE = Σe²/n, RMSE = √MSE, MAE = Σ|e|/n, RAE = Σ|e| / Σ|y − ȳ|, R² = 1 − Σe²/Σ(y − ȳ)², e = ŷ − y.
    For constant y: R² = 1 if perfect else 0; RAE = 0 if perfect else +inf. All NaN for n = 0.
    """
    y = np.asarray(_as_1d(y_true, "y_true"), dtype=np.float64)
    yh = np.asarray(_as_1d(y_pred, "y_pred"), dtype=np.float64)
    n = _same_length(y, yh)
    if n == 0:
        nan = math.nan
        return {"mse": nan, "rmse": nan, "mae": nan, "rae": nan, "r2": nan, "n": 0.0}
    e = yh - y
    sse = float(np.dot(e, e))
    sae = float(np.abs(e).sum())
    dev = y - y.mean()
    sst = float(np.dot(dev, dev))
    sad = float(np.abs(dev).sum())
    # Constant y: R² = 1 if perfect else 0 (sklearn's force_finite); RAE = 0 if perfect else +inf.
    rae = sae / sad if sad > 0.0 else (0.0 if sae == 0.0 else math.inf)
    r2 = 1.0 - sse / sst if sst > 0.0 else (1.0 if sse == 0.0 else 0.0)
    mse = sse / n
    return {"mse": mse, "rmse": math.sqrt(mse), "mae": sae / n, "rae": rae, "r2": r2, "n": float(n)}


# --------------------------------------------------------------------------------------------------
# Sliding-window metrics
# --------------------------------------------------------------------------------------------------


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
    w = _check_window(window)
    c = _as_1d(correct, "correct")
    if c.dtype != np.bool_:
        if c.size and not np.all((c == 0) | (c == 1)):
            raise ValueError("correct must be boolean (or 0/1)")
        c = c.astype(np.bool_)
    n = c.shape[0]
    acc: FloatArray = _trailing_counts(c.astype(np.bool_), w) / _window_lengths(n, w)
    return acc


def windowed_rmse(err: npt.ArrayLike, window: int) -> FloatArray:
    """RMSE over the trailing window at every position: √((1/wᵢ) Σ_{j=i−wᵢ+1}^{i} e_j²), wᵢ = min(i+1, w)."""
    w = _check_window(window)
    e = np.asarray(_as_1d(err, "err"), dtype=np.float64)
    n = e.shape[0]
    ms = _trailing_sums(e * e, w) / _window_lengths(n, w)
    rmse: FloatArray = np.sqrt(ms)
    return rmse


def windowed_kappa(y_true: npt.ArrayLike, y_pred: npt.ArrayLike, window: int) -> FloatArray:
    """Cohen's κ over the trailing window at every position, from windowed confusion-matrix counts.

    κ = (wᵢ·(TP+TN) − S)/(wᵢ² − S), S = (TP+FP)(TP+FN) + (TN+FN)(TN+FP), 0 where wᵢ² = S (p_e = 1).
    """
    w = _check_window(window)
    t = _positive_mask(y_true, "y_true")
    p = _positive_mask(y_pred, "y_pred")
    n = _same_length(t, p)
    nw = _window_lengths(n, w)
    tp = _trailing_counts(t & p, w)
    true_pos = _trailing_counts(t, w)
    pred_pos = _trailing_counts(p, w)
    fn = true_pos - tp
    fp = pred_pos - tp
    tn = nw - true_pos - fp
    s = pred_pos * true_pos + (tn + fn) * (tn + fp)
    num = nw * (tp + tn) - s
    den = nw * nw - s
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
    v = np.asarray(_as_1d(values, "values"), dtype=np.float64)
    n = v.shape[0]
    if n <= max_points:
        idx = np.arange(n, dtype=np.int64)
    else:
        # Spacing (n−1)/(max_points−1) > 1, so the rounded indices are strictly increasing.
        idx = np.rint(np.linspace(0, n - 1, max_points)).astype(np.int64)
    return idx, v[idx]


# --------------------------------------------------------------------------------------------------
# Reference classifiers for kappa_t / kappa_m
# --------------------------------------------------------------------------------------------------


def _labels_and_mask(y: npt.ArrayLike, labeled_mask: npt.ArrayLike | None) -> tuple[BoolArray, BoolArray]:
    """(y == +1, mask); only the labels of masked samples are read (others may be NaN)."""
    ya = _as_1d(y, "y")
    n = ya.shape[0]
    if labeled_mask is None:
        mask = np.ones(n, dtype=np.bool_)
    else:
        m = _as_1d(labeled_mask, "labeled_mask")
        if m.dtype != np.bool_:
            raise TypeError("labeled_mask must be a boolean array")
        _same_length(ya, m)
        mask = m.astype(np.bool_)
    pos = np.zeros(n, dtype=np.bool_)
    pos[mask] = _positive_mask(ya[mask], "y (labelled samples)")
    return pos, mask


def no_change_predictions(y: npt.ArrayLike, labeled_mask: npt.ArrayLike | None = None) -> FloatArray:
    """Predictions of the no-change classifier: ŷᵢ = y_k, k = max{j < i : labeled_mask[j]}.

    Before the first label the prediction is +1. ``labeled_mask`` marks the samples whose label
    reaches the learner (None: all of them); the labels of the other samples are never read.
    Returns float64 ±1.
    """
    pos, mask = _labels_and_mask(y, labeled_mask)
    n = pos.shape[0]
    if n == 0:
        return np.empty(0, dtype=np.float64)
    last = np.maximum.accumulate(np.where(mask, np.arange(n, dtype=np.int64), -1))
    prev = np.empty(n, dtype=np.int64)  # last labelled index strictly before i
    prev[0] = -1
    prev[1:] = last[:-1]
    prev_pos = pos[np.maximum(prev, 0)] | (prev < 0)
    out: FloatArray = np.where(prev_pos, 1.0, -1.0)
    return out


def majority_predictions(y: npt.ArrayLike, labeled_mask: npt.ArrayLike | None = None) -> FloatArray:
    """Predictions of the majority-class classifier among the labels known strictly before i.

    ŷᵢ = +1 iff #{j < i labelled: y_j = +1} ≥ #{j < i labelled: y_j = −1}; ties (including before
    any label) go to +1. Returns float64 ±1.
    """
    pos, mask = _labels_and_mask(y, labeled_mask)
    n = pos.shape[0]
    # balance_i = Σ_{j ≤ i labelled} (+1 for y_j = +1, −1 for y_j = −1); shift by one for "strictly before".
    step = pos.astype(np.int64) * 2 - 1
    step[~mask] = 0
    balance = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(step[:-1], out=balance[1:])
    out: FloatArray = np.where(balance >= 0, 1.0, -1.0)
    return out
