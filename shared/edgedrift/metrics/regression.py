"""Regression metrics over a whole stream (formulas in :mod:`edgedrift.metrics`)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from edgedrift.metrics._checks import as_1d, same_length

__all__ = ["regression_report"]


def regression_report(y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> dict[str, float]:
    """Regression metrics: ``mse``, ``rmse``, ``mae``, ``rae``, ``r2``, ``n``.

    MSE = Σe²/n, RMSE = √MSE, MAE = Σ|e|/n, RAE = Σ|e| / Σ|y − ȳ|, R² = 1 − Σe²/Σ(y − ȳ)², e = ŷ − y.
    For constant y: R² = 1 if perfect else 0; RAE = 0 if perfect else +inf. All NaN for n = 0.
    """
    y = np.asarray(as_1d(y_true, "y_true"), dtype=np.float64)
    yh = np.asarray(as_1d(y_pred, "y_pred"), dtype=np.float64)
    n = same_length(y, yh)
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
