"""The reporting half of a device's session: recent accuracy (or RMSE) and the scoring that keeps it,
outlier events, the retained status and the heartbeat to the cloud. A mixin of
:class:`~edgedrift_edge.session.DeviceSession` (no state of its own)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from edgedrift import __version__
from edgedrift.loop import EdgeLoop
from edgedrift.wire import Heartbeat
from edgedrift_edge.ledger import Counters, SessionConfig
from edgedrift_edge.messages import SampleId
from edgedrift_edge.recompute import RecomputeRequest
from edgedrift_edge.score_window import ScoreWindow

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

    if TYPE_CHECKING:

        def _emit(self, kind: str, **values: Any) -> None: ...

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
            "phase": self.phase,
            "strategy": self.config.strategy,
            "n_features": self.n_features,
            "model_version": self.model_version,
            "accuracy": self.accuracy(),
            "rmse": self.rmse(),
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
            extra={
                "phase": self.phase,
                "label_misses": c.label_misses,
                "duplicates": c.duplicates,
                "outliers": c.outliers,
                "id_reused": c.id_reused,
                "rmse": self.rmse(),
            },
        )
