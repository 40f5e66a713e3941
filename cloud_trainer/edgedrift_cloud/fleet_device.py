"""The dashboard's device page: its fleet row, its recent heartbeats and its model versions.

Three statements whatever the history's length: the row (:func:`fleet_query.fleet_page` for one id),
the newest ``points`` heartbeats and the newest ``versions`` model versions (both by index).
Throughput is derived here from consecutive heartbeats (samples per second between them).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel
from sqlalchemy.orm import Session

from edgedrift.wire_stats import StoredStats, stat_number
from edgedrift_cloud import registry
from edgedrift_cloud.db.tables import HeartbeatRecord, utcnow
from edgedrift_cloud.fleet_query import (
    DEFAULT_THRESHOLDS,
    FleetFilter,
    FleetRow,
    Thresholds,
    fleet_page,
)


class BeatPoint(BaseModel):
    """One heartbeat on the device page's time axis."""

    t: datetime
    accuracy: float | None
    rmse: float | None
    #: The recent macro-F1 a device configured with classes reports (None otherwise).
    macro_f1: float | None = None
    samples: int
    #: Samples per second since the previous heartbeat (None for the first one shown).
    throughput: float | None
    warnings: int
    drift_events: int
    dropped: int
    rejected: int
    model_version: int | None


class VersionPoint(BaseModel):
    """One model version with why it was made and what the device's monitor reported."""

    version: int
    created_at: datetime
    reason: str
    requested_by: str
    learner: str
    task: str
    n: int
    d: int
    train_ms: float
    chosen: str | None
    monitor: StoredStats


class DevicePage(BaseModel):
    device: FleetRow
    heartbeats: list[BeatPoint]
    versions: list[VersionPoint]


def _extra(beat: HeartbeatRecord, name: str) -> float | None:
    """A number of the heartbeat's ``extra`` (``rmse``, ``macro_f1``), None if absent or not a number."""
    return stat_number(beat.extra.get(name)) if isinstance(beat.extra, dict) else None


def beat_points(beats: list[HeartbeatRecord]) -> list[BeatPoint]:
    """Heartbeats (oldest first) as points, with the throughput between consecutive ones."""
    points: list[BeatPoint] = []
    previous: HeartbeatRecord | None = None
    for beat in beats:
        throughput = None
        if previous is not None:
            seconds = (beat.received_at - previous.received_at).total_seconds()
            if seconds > 0 and beat.samples >= previous.samples:
                throughput = (beat.samples - previous.samples) / seconds
        points.append(
            BeatPoint(
                t=beat.received_at,
                accuracy=beat.accuracy,
                rmse=_extra(beat, "rmse"),
                macro_f1=_extra(beat, "macro_f1"),
                samples=beat.samples,
                throughput=throughput,
                warnings=beat.warnings,
                drift_events=beat.drift_events,
                dropped=beat.dropped,
                rejected=beat.rejected,
                model_version=beat.model_version,
            )
        )
        previous = beat
    return points


def device_page(
    session: Session,
    device_id: str,
    points: int,
    versions: int,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    window_s: float | None = None,
) -> DevicePage | None:
    """The device page, or None for an unknown device; ``window_s``: only the heartbeats of the last
    ``window_s`` seconds (the dashboard's time range)."""
    page = fleet_page(session, FleetFilter(device_id=device_id), limit=1, thresholds=thresholds)
    if not page.devices:
        return None
    records = registry.list_models(session, device_id, versions, 0)
    since = None if window_s is None else utcnow() - timedelta(seconds=window_s)
    return DevicePage(
        device=page.devices[0],
        heartbeats=beat_points(registry.list_heartbeats(session, device_id, points, since)),
        versions=[VersionPoint.model_validate(r, from_attributes=True) for r in reversed(records)],
    )
