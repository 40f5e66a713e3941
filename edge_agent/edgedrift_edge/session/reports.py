"""The reporting half of a device's session: recent accuracy (or RMSE; for a device with ``classes`` also
the macro-F1 of its recent window) and the scoring that keeps it, outlier events, the retained status and
the heartbeat to the cloud. A mixin of
:class:`~edgedrift_edge.session.DeviceSession` (no state of its own)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np

from edgedrift import __version__, kernels
from edgedrift.labels import ClassLabels
from edgedrift.loop import EdgeLoop
from edgedrift.metrics.multiclass import MulticlassConfusion
from edgedrift.wire import Heartbeat
from edgedrift.wire_stats import HeartbeatExtra
from edgedrift_edge.buffers.score_window import ScoreWindow
from edgedrift_edge.session.ledger import Counters, SessionConfig
from edgedrift_edge.session.messages import SampleId
from edgedrift_edge.session.trainer import RecomputeRequest

#: Rejection reasons (or outlier ids) listed in a summary event (the count covers all of them).
REASONS_PER_EVENT = 5
OUTLIER_REASON = "outside the guard's range: predicted, kept out of learner, monitor and window"


class ReportsMixin:
    """What a device reports about itself (see the module docstring)."""

    config: SessionConfig
    counters: Counters
    phase: str
    loop: EdgeLoop | None
    n_features: int | None
    model_version: int | None
    pending: RecomputeRequest | None
    unauthorized: bool
    recent: ScoreWindow
    recent_sum: float
    drift_events: int
    classes: ClassLabels | None
    n_classes: int
    recent_cells: ScoreWindow | None

    if TYPE_CHECKING:

        def _emit(self, kind: str, **values: Any) -> None: ...

        def warmup_state(self) -> dict[str, Any] | None: ...

    def _report_outliers(self, ids: Sequence[SampleId | None]) -> None:
        if ids:
            self.counters.outliers += len(ids)
            self._emit(
                "outlier",
                count=len(ids),
                ids=ids[:REASONS_PER_EVENT],
                reason=OUTLIER_REASON,
            )

    def _score(self, y: float, y_hat: float) -> None:
        if not math.isfinite(y_hat):
            return
        hit = (y - y_hat) * (y - y_hat) if self.config.task == "regression" else float(y == y_hat)
        evicted = self.recent.push(hit)
        if evicted is not None:
            self.recent_sum -= evicted
        self.recent_sum += hit
        if self.recent_cells is not None:  # the cell t·C + p of the confusion matrix, classes 0..C−1
            C = self.n_classes
            t, p = (int(v) if C >= 3 else int(v > 0) for v in (y, y_hat))
            self.recent_cells.push(float(t * C + p))

    def macro_f1(self) -> float | None:
        """Macro-F1 of the recent window (devices with ``classes``; the mean F1 over the classes that
        occur in it, :attr:`MulticlassConfusion.macro_f1`)."""
        cells = self.recent_cells
        if cells is None or not len(cells):
            return None
        C = self.n_classes
        codes = cells.values().astype(np.int64)
        confusion = MulticlassConfusion(C)
        confusion.update_many(codes // C, codes % C)
        return float(confusion.macro_f1)

    def accuracy(self) -> float | None:
        n = len(self.recent)
        if n == 0 or self.config.task != "classification":
            return None
        return min(1.0, max(0.0, self.recent_sum / n))

    def rmse(self) -> float | None:
        n = len(self.recent)
        if n == 0 or self.config.task != "regression":
            return None
        return math.sqrt(max(self.recent_sum, 0.0) / n)

    def status(self) -> dict[str, Any]:
        """The device's part of the retained status message (the agent adds state and queue)."""
        loop = self.loop
        return {
            "device_id": self.config.device_id,
            "version": __version__,
            "kernels": kernels.path(),
            "phase": self.phase,
            "warmup": self.warmup_state(),
            "strategy": self.config.strategy,
            "n_features": self.n_features,
            "model_version": self.model_version,
            "accuracy": self.accuracy(),
            "rmse": self.rmse(),
            "macro_f1": self.macro_f1(),
            "classes": None if self.classes is None else self.classes.to_json(),
            "accuracy_window": len(self.recent),
            "warning": bool(loop.monitor.warning_detected) if loop else False,
            "pending_recompute": self.pending is not None,
            "unauthorized": self.unauthorized,
            "loop": asdict(loop.counters) if loop else None,
            "counters": asdict(self.counters),
        }

    def heartbeat(self) -> Heartbeat:
        c = self.counters
        loop = self.loop
        extra: HeartbeatExtra = {
            "phase": self.phase,
            "label_misses": c.label_misses,
            "duplicates": c.duplicates,
            "outliers": c.outliers,
            "id_reused": c.id_reused,
            "rmse": self.rmse(),
        }
        if self.classes is not None:
            extra["n_classes"] = self.n_classes
            extra["macro_f1"] = self.macro_f1()
        return Heartbeat(
            samples=c.samples,
            labeled=c.labeled,
            accuracy=self.accuracy(),
            accuracy_window=len(self.recent),
            warnings=int(bool(loop and loop.monitor.warning_detected)),
            drift_events=self.drift_events,
            recomputes_requested=c.recomputes_requested,
            model_version=self.model_version,
            dropped=c.dropped,
            rejected=c.rejected,
            extra=extra,
        )
