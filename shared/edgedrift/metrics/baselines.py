"""Reference classifiers for kappa_t and kappa_m: no-change and majority class, from the labels a learner
has received (binary labels ±1, or multi-class codes 0..C−1)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from edgedrift.metrics._checks import BoolArray, FloatArray, as_1d, as_codes, positive_mask, same_length

__all__ = ["majority_predictions", "no_change_predictions"]


def _mask(y: npt.ArrayLike, labeled_mask: npt.ArrayLike | None) -> tuple[FloatArray, BoolArray]:
    """(y as floats, mask); only the labels of masked samples are meaningful (others may be NaN)."""
    ya = np.asarray(as_1d(y, "y"), dtype=np.float64)
    n = ya.shape[0]
    if labeled_mask is None:
        return ya, np.ones(n, dtype=np.bool_)
    m = as_1d(labeled_mask, "labeled_mask")
    if m.dtype != np.bool_:
        raise TypeError("labeled_mask must be a boolean array")
    same_length(ya, m)
    return ya, m.astype(np.bool_)


def _previous_label(mask: BoolArray) -> npt.NDArray[np.int64]:
    """Index of the last labelled sample strictly before i (−1 before the first)."""
    n = mask.shape[0]
    last = np.maximum.accumulate(np.where(mask, np.arange(n, dtype=np.int64), -1))
    prev = np.empty(n, dtype=np.int64)
    if n:
        prev[0] = -1
        prev[1:] = last[:-1]
    return prev


def no_change_predictions(
    y: npt.ArrayLike, labeled_mask: npt.ArrayLike | None = None, n_classes: int = 2
) -> FloatArray:
    """Predictions of the no-change classifier: ŷᵢ = y_k, k = max{j < i : labeled_mask[j]}.

    Before the first label the prediction is +1 (binary) or class 0 (multi-class). ``labeled_mask``
    marks the samples whose label reaches the learner (None: all of them); the labels of the other
    samples are never read.
    """
    ya, mask = _mask(y, labeled_mask)
    if n_classes > 2:
        as_codes(ya[mask], n_classes, "y (labelled samples)")
        first = 0.0
    else:
        positive_mask(ya[mask], "y (labelled samples)")
        first = 1.0
    prev = _previous_label(mask)
    out: FloatArray = np.where(prev < 0, first, ya[np.maximum(prev, 0)])
    return out


def majority_predictions(
    y: npt.ArrayLike, labeled_mask: npt.ArrayLike | None = None, n_classes: int = 2
) -> FloatArray:
    """Predictions of the majority-class classifier among the labels known strictly before i.

    Binary: ŷᵢ = +1 iff #{j < i labelled: y_j = +1} ≥ #{j < i labelled: y_j = −1} (ties, including
    before any label, go to +1). Multi-class: the most frequent code so far, ties to the lowest code.
    """
    ya, mask = _mask(y, labeled_mask)
    n = ya.shape[0]
    if n_classes > 2:
        codes = np.zeros(n, dtype=np.int64)
        codes[mask] = as_codes(ya[mask], n_classes, "y (labelled samples)")
        onehot = np.zeros((n, n_classes), dtype=np.int64)
        onehot[np.flatnonzero(mask), codes[mask]] = 1
        counts = np.zeros((n, n_classes), dtype=np.int64)
        if n > 1:
            np.cumsum(onehot[:-1], axis=0, out=counts[1:])
        result: FloatArray = np.argmax(counts, axis=1).astype(np.float64)
        return result
    pos = np.zeros(n, dtype=np.bool_)
    pos[mask] = positive_mask(ya[mask], "y (labelled samples)")
    # balance_i = Σ_{j ≤ i labelled} (+1 for y_j = +1, −1 for y_j = −1); shift by one for "strictly before".
    step = pos.astype(np.int64) * 2 - 1
    step[~mask] = 0
    balance = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(step[:-1], out=balance[1:])
    out: FloatArray = np.where(balance >= 0, 1.0, -1.0)
    return out
