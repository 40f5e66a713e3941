"""A device's recent quality: accuracy (classification) or RMSE (regression) over its newest
``accuracy_window`` labeled predictions, and for a device with class names the macro-F1 of that window
from its confusion cells. Owned by :class:`~edgedrift_edge.session.DeviceSession`; the status, the
heartbeat and the agent's metrics read it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from edgedrift.metrics.multiclass import MulticlassConfusion
from edgedrift_edge.buffers.score_window import ScoreWindow


class Quality:
    """The recent scores (1.0/0.0 hits or squared errors) and their running sum; with ``n_classes`` also
    each prediction's confusion cell t·C + p."""

    def __init__(self, task: str, window: int, n_classes: int | None = None) -> None:
        self.task = task
        self.window = window
        self.n_classes = n_classes
        self.scores = ScoreWindow(window)
        self.total = 0.0
        #: Each recent labeled prediction's cell t·C + p of the confusion matrix (devices with ``classes``).
        self.cells = None if n_classes is None else ScoreWindow(window)

    def __len__(self) -> int:
        return len(self.scores)

    def score(self, y: float, y_hat: float) -> None:
        """One labeled prediction (a non-finite prediction is not scored)."""
        if not math.isfinite(y_hat):
            return
        hit = (y - y_hat) * (y - y_hat) if self.task == "regression" else float(y == y_hat)
        evicted = self.scores.push(hit)
        if evicted is not None:
            self.total -= evicted
        self.total += hit
        if self.cells is not None and self.n_classes is not None:  # classes 0..C−1, or ±1 for two
            C = self.n_classes
            t, p = (int(v) if C >= 3 else int(v > 0) for v in (y, y_hat))
            self.cells.push(float(t * C + p))

    def accuracy(self) -> float | None:
        n = len(self.scores)
        if n == 0 or self.task != "classification":
            return None
        return min(1.0, max(0.0, self.total / n))

    def rmse(self) -> float | None:
        n = len(self.scores)
        if n == 0 or self.task != "regression":
            return None
        return math.sqrt(max(self.total, 0.0) / n)

    def macro_f1(self) -> float | None:
        """Macro-F1 of the recent window (devices with ``classes``; the mean F1 over the classes that
        occur in it, :attr:`MulticlassConfusion.macro_f1`)."""
        cells = self.cells
        if cells is None or self.n_classes is None or not len(cells):
            return None
        C = self.n_classes
        codes = cells.values().astype(np.int64)
        confusion = MulticlassConfusion(C)
        confusion.update_many(codes // C, codes % C)
        return float(confusion.macro_f1)

    def snapshot(self, tree: dict[str, Any]) -> None:
        """Into a checkpoint tree (the keys a session has always written)."""
        tree["recent"] = self.scores.values()
        tree["recent_sum"] = self.total
        tree["recent_cells"] = None if self.cells is None else self.cells.values()

    def restore(self, tree: dict[str, Any]) -> None:
        """From a checkpoint tree; the confusion cells are absent in one written before classes, or
        without them."""
        self.scores = ScoreWindow(self.window, tree["recent"].tolist())
        self.total = tree["recent_sum"]
        cells = tree.get("recent_cells")
        if self.cells is not None and cells is not None:
            self.cells = ScoreWindow(self.window, cells.tolist())
