"""Classification metrics for C classes from a C×C confusion matrix (labels are the codes 0..C−1).

With M[t, p] the number of samples of class t predicted as p, n = ΣM, the row sums r_t (true class
counts), the column sums c_p (predicted counts) and the diagonal a_k:

    accuracy           p_o = Σ a_k / n
    kappa (Cohen)      (p_o − p_e)/(1 − p_e),   p_e = Σ_k r_k c_k / n²
    kappa_m            (p_o − p_maj)/(1 − p_maj),  p_maj = max_k r_k / n
    balanced_accuracy  mean over the classes present (r_k > 0) of the recall a_k / r_k
    macro_f1           mean over the classes present in y_true or y_pred of 2a_k / (r_k + c_k)
    mcc (Gorodkin R_K) (n Σa_k − Σ r_k c_k) / √((n² − Σ c_k²)(n² − Σ r_k²))

For C = 2 each of them equals the binary formula of :mod:`edgedrift.metrics` (F1 there is the positive
class's; macro-F1 averages both). Degenerate cases follow the binary conventions: NaN when empty, a
kappa 0 when its reference is perfect, MCC 0 when a denominator is 0.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from edgedrift.metrics._checks import IntArray, as_codes, ratio_or_zero, same_length

__all__ = ["MulticlassConfusion", "multiclass_report"]


class MulticlassConfusion:
    """Incremental C×C confusion matrix (rows: true class, columns: predicted class) and its metrics.

    Parameters
    ----------
    n_classes
        C, at least 2; the labels are the codes 0..C−1.

    Examples
    --------
    >>> cm = MulticlassConfusion(3)
    >>> cm.update_many([0, 1, 2, 2, 1], [0, 2, 2, 2, 1])
    >>> round(cm.accuracy, 2), round(cm.kappa, 3), round(cm.balanced_accuracy, 3)
    (0.8, 0.688, 0.833)
    """

    def __init__(self, n_classes: int) -> None:
        if n_classes < 2:
            raise ValueError(f"n_classes must be at least 2, got {n_classes}")
        self.n_classes = n_classes
        self.matrix: IntArray = np.zeros((n_classes, n_classes), dtype=np.int64)

    def __repr__(self) -> str:
        return f"MulticlassConfusion(n_classes={self.n_classes}, n={self.n})"

    def _cell(self, y_true: float, y_pred: float) -> tuple[int, int]:
        t, p = as_codes([y_true, y_pred], self.n_classes, "labels")
        return int(t), int(p)

    def update(self, y_true: float, y_pred: float) -> None:
        """Count one prediction (codes 0..C−1)."""
        self.matrix[self._cell(y_true, y_pred)] += 1

    def revert(self, y_true: float, y_pred: float) -> None:
        """Remove one previously counted prediction; ValueError if that cell is already 0."""
        cell = self._cell(y_true, y_pred)
        if self.matrix[cell] == 0:
            raise ValueError(f"cannot revert: no sample of class {cell[0]} predicted as {cell[1]} left")
        self.matrix[cell] -= 1

    def update_many(self, y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> None:
        """Count a batch of predictions (vectorised)."""
        t = as_codes(y_true, self.n_classes, "y_true")
        p = as_codes(y_pred, self.n_classes, "y_pred")
        same_length(t, p)
        C = self.n_classes
        self.matrix += np.bincount(t * C + p, minlength=C * C).reshape(C, C)

    def reset(self) -> None:
        self.matrix[:] = 0

    @property
    def n(self) -> int:
        return int(self.matrix.sum())

    @property
    def correct(self) -> int:
        return int(np.trace(self.matrix))

    @property
    def accuracy(self) -> float:
        n = self.n
        return self.correct / n if n else math.nan

    @property
    def kappa(self) -> float:
        """Cohen's κ; 0 when p_e = 1."""
        n = self.n
        if n == 0:
            return math.nan
        s = int(self.matrix.sum(axis=1) @ self.matrix.sum(axis=0))
        return ratio_or_zero(n * self.correct - s, n * n - s)

    @property
    def kappa_m(self) -> float:
        """κ_m against always predicting y_true's majority class; 0 when that is perfect."""
        n = self.n
        if n == 0:
            return math.nan
        majority = int(self.matrix.sum(axis=1).max())
        return ratio_or_zero(self.correct - majority, n - majority)

    def kappa_t(self, correct_nochange: int) -> float:
        """κ_t against the no-change classifier that was right ``correct_nochange`` times."""
        n = self.n
        return ratio_or_zero(self.correct - correct_nochange, n - correct_nochange) if n else math.nan

    @property
    def balanced_accuracy(self) -> float:
        """Mean recall over the classes present in y_true."""
        rows = self.matrix.sum(axis=1)
        present = rows > 0
        if not present.any():
            return math.nan
        return float(np.mean(np.diag(self.matrix)[present] / rows[present]))

    @property
    def macro_f1(self) -> float:
        """Mean F1 over the classes that occur in y_true or y_pred."""
        if self.n == 0:
            return math.nan
        support = self.matrix.sum(axis=1) + self.matrix.sum(axis=0)
        present = support > 0
        return float(np.mean(2.0 * np.diag(self.matrix)[present] / support[present]))

    @property
    def mcc(self) -> float:
        """Gorodkin's R_K, the C-class MCC; 0 when a denominator is 0."""
        n = self.n
        if n == 0:
            return math.nan
        rows = self.matrix.sum(axis=1).astype(np.float64)
        cols = self.matrix.sum(axis=0).astype(np.float64)
        cov_tp = n * self.correct - float(rows @ cols)
        den_p = n * n - float(cols @ cols)
        den_t = n * n - float(rows @ rows)
        if den_p <= 0 or den_t <= 0:
            return 0.0
        return cov_tp / (math.sqrt(den_p) * math.sqrt(den_t))

    def report(self, correct_nochange: int | None = None) -> dict[str, float]:
        """The keys of :func:`edgedrift.metrics.classification_report` (``f1`` is the macro-F1 here)."""
        macro = self.macro_f1
        return {
            "accuracy": self.accuracy,
            "kappa": self.kappa,
            "kappa_t": math.nan if correct_nochange is None else self.kappa_t(correct_nochange),
            "kappa_m": self.kappa_m,
            "balanced_accuracy": self.balanced_accuracy,
            "f1": macro,
            "macro_f1": macro,
            "mcc": self.mcc,
            "n": float(self.n),
        }


def multiclass_report(
    y_true: npt.ArrayLike, y_pred: npt.ArrayLike, n_classes: int, y_nochange: npt.ArrayLike | None = None
) -> dict[str, float]:
    """:meth:`MulticlassConfusion.report` of a whole stream of codes 0..C−1."""
    cm = MulticlassConfusion(n_classes)
    cm.update_many(y_true, y_pred)
    correct_nc = None
    if y_nochange is not None:
        t = as_codes(y_true, n_classes, "y_true")
        nc = as_codes(y_nochange, n_classes, "y_nochange")
        same_length(t, nc)
        correct_nc = int(np.count_nonzero(t == nc))
    return cm.report(correct_nc)
