"""Input checks shared by the metric modules."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.int64]


def as_1d(x: npt.ArrayLike, name: str) -> NDArray[np.generic]:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {a.shape}")
    return a


def positive_mask(x: npt.ArrayLike, name: str) -> BoolArray:
    """True where the label is +1; raises unless every label is +1 or −1."""
    a = as_1d(x, name)
    if a.dtype == np.bool_:
        raise ValueError(f"{name} must hold labels ±1, not booleans")
    pos: BoolArray = a == 1
    n_pos = int(np.count_nonzero(pos))
    n_neg = int(np.count_nonzero(a == -1))
    if n_pos + n_neg != a.shape[0]:
        raise ValueError(f"{name} must hold binary labels in {{-1, +1}} only")
    return pos


def same_length(*arrays: NDArray[np.generic]) -> int:
    n = arrays[0].shape[0]
    if any(a.shape[0] != n for a in arrays[1:]):
        raise ValueError(f"arrays must have the same length, got {[a.shape[0] for a in arrays]}")
    return int(n)


def check_window(window: int) -> int:
    if isinstance(window, bool) or int(window) != window or window < 1:
        raise ValueError(f"window must be a positive integer, got {window!r}")
    return int(window)


def label_sign(v: float, name: str) -> bool:
    """True for +1, False for −1, ValueError otherwise (scalar version of :func:`positive_mask`)."""
    if v == 1:
        return True
    if v == -1:
        return False
    raise ValueError(f"{name} must be a binary label in {{-1, +1}}, got {v!r}")


def ratio_or_zero(num: float, den: float) -> float:
    return num / den if den != 0 else 0.0


def as_codes(x: npt.ArrayLike, n_classes: int, name: str) -> IntArray:
    """Class numbers 0..C−1 of multi-class label codes; ValueError for anything else."""
    a = np.asarray(as_1d(x, name), dtype=np.float64)
    bad = (a < 0) | (a >= n_classes) | (a != np.floor(a))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must hold class codes 0..{n_classes - 1}; position {i} has {a[i]}")
    return a.astype(np.int64)
