"""The reporting half of a device's session: recent accuracy (or RMSE), the retained status and the
heartbeat to the cloud. A mixin of :class:`~edgedrift_edge.session.DeviceSession` (no state of its own)."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from edgedrift import __version__
from edgedrift.loop import EdgeLoop
from edgedrift.wire import Heartbeat
from edgedrift_edge.ledger import Counters, SessionConfig
from edgedrift_edge.recompute import RecomputeRequest
from edgedrift_edge.score_window import ScoreWindow


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
