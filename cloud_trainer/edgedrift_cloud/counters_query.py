"""``GET /v1/devices``: one page of devices with their recompute and heartbeat counters, in SQL."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from edgedrift.wire import DeviceCounters
from edgedrift_cloud.db.tables import Device, HeartbeatRecord, ModelRecord, as_utc

__all__ = ["counters_page"]


def counters_page(session: Session, limit: int, offset: int) -> tuple[int, list[DeviceCounters]]:
    """``GET /v1/devices``: the total and one page of devices (by id) with their counters.

    Four grouped statements for the page, whatever its size: devices, version aggregates, reasons,
    heartbeats."""
    total = int(session.scalar(select(func.count(Device.id))) or 0)
    ids = list(session.scalars(select(Device.id).order_by(Device.id).offset(offset).limit(limit)))
    if not ids:
        return total, []
    m = ModelRecord
    aggregates = {
        row[0]: row[1:]
        for row in session.execute(
            select(
                m.device_id,
                func.count(m.id),
                func.coalesce(func.sum(m.bytes_in), 0),
                func.coalesce(func.sum(m.bytes_out), 0),
                func.coalesce(func.sum(m.train_ms), 0.0),
                func.max(m.version),
                func.max(m.created_at),
            )
            .where(m.device_id.in_(ids))
            .group_by(m.device_id)
        ).all()
    }
    reasons: dict[str, dict[str, int]] = {}
    last_reason: dict[str, str] = {}
    for device_id, reason, n, newest in session.execute(
        select(m.device_id, m.reason, func.count(m.id), func.max(m.version))
        .where(m.device_id.in_(ids))
        .group_by(m.device_id, m.reason)
    ).all():
        reasons.setdefault(device_id, {})[str(reason)] = int(n)
        # a device's first version stored between the two statements (PostgreSQL reads each at its own
        # snapshot) is in this one only: its totals show on the next read
        totals = aggregates.get(device_id)
        if totals is not None and newest == totals[4]:
            last_reason[device_id] = str(reason)
    h = HeartbeatRecord
    beats = {
        row[0]: row[1:]
        for row in session.execute(
            select(h.device_id, func.count(h.id), func.max(h.received_at))
            .where(h.device_id.in_(ids))
            .group_by(h.device_id)
        ).all()
    }
    out = []
    for device_id in ids:
        count, b_in, b_out, train_ms, latest, last_at = aggregates.get(device_id, (0, 0, 0, 0.0, None, None))
        n_beats, beat_at = beats.get(device_id, (0, None))
        last_at, beat_at = as_utc(last_at), as_utc(beat_at)
        seen = [t for t in (last_at, beat_at) if t is not None]
        out.append(
            DeviceCounters(
                device_id=device_id,
                recomputes=int(count),
                bytes_in=int(b_in),
                bytes_out=int(b_out),
                train_ms_total=float(train_ms),
                reasons=reasons.get(device_id, {}),
                latest_version=None if latest is None else int(latest),
                last_recompute_at=last_at,
                last_reason=last_reason.get(device_id),
                heartbeats=int(n_beats),
                last_seen=max(seen) if seen else None,
            )
        )
    return total, out
