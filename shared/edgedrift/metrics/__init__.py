"""Prequential (test-then-train) evaluation metrics for classification and regression.

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

Multi-class labels (the codes 0..C−1 of :mod:`edgedrift.labels`) are measured from a C×C confusion
matrix (:mod:`edgedrift.metrics.multiclass`, whose formulas reduce to these for C = 2);
:mod:`~edgedrift.metrics.windowed` has the sliding-window versions and
:mod:`~edgedrift.metrics.baselines` the no-change and majority classifiers.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from edgedrift.metrics._checks import label_sign, positive_mask, ratio_or_zero, same_length
from edgedrift.metrics.baselines import majority_predictions, no_change_predictions
from edgedrift.metrics.multiclass import MulticlassConfusion, multiclass_report
from edgedrift.metrics.regression import regression_report
from edgedrift.metrics.windowed import downsample_curve, windowed_accuracy, windowed_kappa, windowed_rmse

__all__ = [
    "ConfusionMatrix",
    "MulticlassConfusion",
    "classification_report",
    "downsample_curve",
    "majority_predictions",
    "multiclass_report",
    "no_change_predictions",
    "regression_report",
    "windowed_accuracy",
    "windowed_kappa",
    "windowed_rmse",
]


# --------------------------------------------------------------------------------------------------
# Metrics from confusion-matrix counts (exact integer arithmetic, shared by the batch and incremental APIs)
# --------------------------------------------------------------------------------------------------


def _accuracy(tp: int, fp: int, fn: int, tn: int) -> float:
    n = tp + fp + fn + tn
    return (tp + tn) / n if n else math.nan


def _kappa(tp: int, fp: int, fn: int, tn: int) -> float:
    # (p_o − p_e)/(1 − p_e) multiplied through by n²: (n·agree − S)/(n² − S), S = Σ_c row_c·col_c.
    n = tp + fp + fn + tn
    if n == 0:
        return math.nan
    s = (tp + fp) * (tp + fn) + (tn + fn) * (tn + fp)
    return ratio_or_zero(n * (tp + tn) - s, n * n - s)


def _kappa_against(correct: int, n: int, correct_ref: int) -> float:
    """(p_o − p_ref)/(1 − p_ref) = (correct − correct_ref)/(n − correct_ref); 0 when p_ref = 1."""
    if n == 0:
        return math.nan
    return ratio_or_zero(correct - correct_ref, n - correct_ref)


def _balanced_accuracy(tp: int, fp: int, fn: int, tn: int) -> float:
    recalls = [tp / (tp + fn)] if tp + fn else []
    if tn + fp:
        recalls.append(tn / (tn + fp))
    return sum(recalls) / len(recalls) if recalls else math.nan


def _f1(tp: int, fp: int, fn: int, tn: int) -> float:
    if tp + fp + fn + tn == 0:
        return math.nan
    return ratio_or_zero(2 * tp, 2 * tp + fp + fn)


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
        t = label_sign(y_true, "y_true")
        p = label_sign(y_pred, "y_pred")
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
        t = label_sign(y_true, "y_true")
        p = label_sign(y_pred, "y_pred")
        cell = ("tp" if p else "fn") if t else ("fp" if p else "tn")
        if getattr(self, cell) == 0:
            raise ValueError(f"cannot revert: no {cell.upper()} left to remove")
        self._add(y_true, y_pred, -1)

    def update_many(self, y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> None:
        """Count a batch of predictions (vectorised)."""
        t = positive_mask(y_true, "y_true")
        p = positive_mask(y_pred, "y_pred")
        n = same_length(t, p)
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
    def macro_f1(self) -> float:
        """Mean of both classes' F1 (class −1's F1 swaps the roles: 2TN/(2TN + FN + FP))."""
        if self.n == 0:
            return math.nan
        return (_f1(*self.counts) + _f1(self.tn, self.fn, self.fp, self.tp)) / 2

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
            "macro_f1": self.macro_f1,
            "mcc": self.mcc,
            "n": float(self.n),
        }


def classification_report(
    y_true: npt.ArrayLike,
    y_pred: npt.ArrayLike,
    y_nochange: npt.ArrayLike | None = None,
    n_classes: int = 2,
) -> dict[str, float]:
    """Classification metrics: labels ±1 (positive class +1) for ``n_classes = 2``, codes 0..C−1 beyond.

    Keys: ``accuracy``, ``kappa`` (Cohen), ``kappa_t`` (temporal: against ``y_nochange``, the
    no-change classifier's predictions on the same samples, see :func:`no_change_predictions`; NaN
    when not given), ``kappa_m`` (against always predicting y_true's majority class),
    ``balanced_accuracy``, ``f1`` (binary: of class +1; multi-class: macro), ``macro_f1``, ``mcc``
    (multi-class: Gorodkin's R_K) and ``n``. Formulas and degenerate-case conventions (kappas 0 when the
    reference is perfect, MCC 0 on an empty marginal, F1 0 when TP+FP+FN = 0, NaN for n = 0) are in the
    module docstrings.
    """
    if n_classes > 2:
        return multiclass_report(y_true, y_pred, n_classes, y_nochange)
    cm = ConfusionMatrix()
    cm.update_many(y_true, y_pred)
    correct_nc: int | None = None
    if y_nochange is not None:
        t = positive_mask(y_true, "y_true")
        nc = positive_mask(y_nochange, "y_nochange")
        n = same_length(t, nc)
        correct_nc = n - int(np.count_nonzero(t ^ nc))
    return cm.report(correct_nc)
