"""What a device's session reports about itself: its part of the retained status message and the
heartbeat to the cloud, read from the session and the collaborators it owns (no state of its own)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from edgedrift import __version__, kernels
from edgedrift.wire import INT32_MAX, INT64_MAX, Heartbeat
from edgedrift.wire_stats import HeartbeatExtra

if TYPE_CHECKING:
    from edgedrift_edge.session.device_session import DeviceSession

#: Rejection reasons (or outlier ids) listed in a summary event (the count covers all of them).
REASONS_PER_EVENT = 5
OUTLIER_REASON = "outside the guard's range: predicted, kept out of learner, monitor and window"
LABEL_MISS_REASON = "no unlabeled sample with this id among the recent samples"
ID_REUSED_REASON = "same id, different content: processed as new"


def status(session: DeviceSession) -> dict[str, Any]:
    """The device's part of the retained status message (the agent adds state and queue)."""
    loop, quality, labels = session.loop, session.quality, session.class_names.labels
    return {
        "device_id": session.config.device_id,
        "version": __version__,
        "kernels": kernels.path(),
        "phase": session.phase,
        "warmup": session.warmup_state(),
        "strategy": session.config.strategy,
        "n_features": session.n_features,
        "model_version": session.model_version,
        "accuracy": quality.accuracy(),
        "rmse": quality.rmse(),
        "macro_f1": quality.macro_f1(),
        "classes": None if labels is None else labels.to_json(),
        "accuracy_window": len(quality),
        "warning": bool(loop.monitor.warning_detected) if loop else False,
        "pending_recompute": session.pending is not None,
        "unauthorized": session.recomputes.unauthorized,
        "loop": asdict(loop.counters) if loop else None,
        "counters": asdict(session.counters),
    }


def heartbeat(session: DeviceSession) -> Heartbeat:
    """The heartbeat to the cloud: the counters, the recent quality and the monitor's warning. Counters
    saturate at the wire's bounds (the registry's BIGINT and INTEGER columns): a publisher's ``seq`` can
    claim any number of samples dropped, and a counter past its bound made the heartbeat invalid, which
    ended a gateway's worker (every device of it) at its next round of heartbeats."""
    c, loop, quality = session.counters, session.loop, session.quality
    extra: HeartbeatExtra = {
        "phase": session.phase,
        "label_misses": min(c.label_misses, INT64_MAX),
        "duplicates": min(c.duplicates, INT64_MAX),
        "outliers": min(c.outliers, INT64_MAX),
        "id_reused": min(c.id_reused, INT64_MAX),
        "rmse": quality.rmse(),
    }
    if session.class_names.labels is not None:
        extra["n_classes"] = session.class_names.n_classes
        extra["macro_f1"] = quality.macro_f1()
    return Heartbeat(
        samples=min(c.samples, INT64_MAX),
        labeled=min(c.labeled, INT64_MAX),
        accuracy=quality.accuracy(),
        accuracy_window=min(len(quality), INT32_MAX),
        warnings=int(bool(loop and loop.monitor.warning_detected)),
        drift_events=min(session.drift_events, INT32_MAX),
        recomputes_requested=min(c.recomputes_requested, INT32_MAX),
        model_version=session.model_version,
        dropped=min(c.dropped, INT64_MAX),
        rejected=min(c.rejected, INT64_MAX),
        extra=extra,
    )
