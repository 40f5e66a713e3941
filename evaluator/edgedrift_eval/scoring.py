"""The scoring sets and the compute axis of one run, beside the headline accuracy on every later sample.

* accuracy on the labeled samples only (papers use either scoring; for short-memory learners the two
  differ by points, since a labeled sample is always the furthest from the last label);
* accuracy by lag since the last label (1 … ``every``): how fast a learner's prediction goes stale;
* the edge's state in bytes (every array of the learner, the monitor and the window).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray

from edgedrift.models.losses import FloatArray

__all__ = ["MAX_LAG", "lag_since_label", "scoring_metrics", "state_bytes"]

#: Lags reported (``accuracy_lag1`` … ``accuracy_lag10``).
MAX_LAG = 10


def lag_since_label(labeled: NDArray[np.bool_]) -> NDArray[np.int64]:
    """For each sample, how many samples ago the last labeled one was (0: no label before it).

    Examples
    --------
    >>> lag_since_label(np.array([True, False, False, True, False])).tolist()
    [0, 1, 2, 3, 1]
    """
    idx = np.arange(len(labeled))
    last = np.maximum.accumulate(np.where(labeled, idx, -1))
    prev = np.concatenate([[-1], last[:-1]])
    return np.where(prev >= 0, idx - prev, 0).astype(np.int64)


def scoring_metrics(
    y_true: FloatArray, preds: FloatArray, labeled: NDArray[np.bool_], lags: NDArray[np.int64]
) -> dict[str, float]:
    """``accuracy_labeled`` and ``accuracy_lag1`` … ``accuracy_lag10`` (NaN where no sample has that lag).

    Examples
    --------
    >>> y = np.array([1.0, 1.0, -1.0, -1.0])
    >>> m = scoring_metrics(y, np.array([1.0, -1.0, -1.0, 1.0]), np.array([True, False, True, False]),
    ...                     np.array([0, 1, 2, 1]))
    >>> m["accuracy_labeled"], m["accuracy_lag1"], m["accuracy_lag2"]
    (1.0, 0.0, 1.0)
    """
    hits = preds == y_true
    out = {"accuracy_labeled": float(np.mean(hits[labeled])) if labeled.any() else float("nan")}
    for k in range(1, MAX_LAG + 1):
        at = lags == k
        out[f"accuracy_lag{k}"] = float(np.mean(hits[at])) if at.any() else float("nan")
    return out


def state_bytes(objects: Iterable[object], skip: tuple[type, ...] = ()) -> int:
    """Bytes of every numpy array reachable through the attributes of ``objects`` (each counted once;
    objects of a ``skip`` type are not entered).

    Examples
    --------
    >>> from edgedrift.learners import ForgettingNewton
    >>> state_bytes([ForgettingNewton(4)]) >= 5 * 5 * 8
    True
    """
    seen: set[int] = set()
    total = 0
    stack = list(objects)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or obj is None or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            total += int(obj.nbytes)
        elif isinstance(obj, list | tuple):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("edgedrift"):
            stack.extend(vars(obj).values())
    return total
