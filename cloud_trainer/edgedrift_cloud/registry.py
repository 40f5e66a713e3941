"""The model registry and counters: every database read and write of the service lives here.

Versions are numbered by an atomic ``UPDATE devices SET model_count = model_count + 1 ... RETURNING``
in the same transaction as the insert, so concurrent retrains of one device never share a version and
a failed insert leaves no gap. Counters are maintained on write, in that same transaction (and in the
one that stores heartbeats), by atomic ``x = x + n`` upserts: reading them is one row per device, and
the fleet's totals are at most ``FLEET_SHARDS`` x learners x reasons rows, whatever the history's size;
they survive restarts and agree across workers and replicas. They count every recompute and heartbeat
ever stored: retention (which drops documents) does not lower them; purging a device drops its own.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from edgedrift.wire import (
    DeviceCounters,
    Heartbeat,
    ModelInfo,
    ModelVersion,
    StatValue,
)
from edgedrift.wire import HeartbeatRecord as HeartbeatOut
from edgedrift_cloud.auth import hash_secret
from edgedrift_cloud.db.rows import upsert
from edgedrift_cloud.db.tables import (
    Device,
    DeviceCounter,
    DeviceRecomputeCounter,
    FleetRecomputeCounter,
    HeartbeatRecord,
    ModelRecord,
    utcnow,
)

#: Shards of the fleet counters (by device): concurrent stores of different devices rarely share a row.
FLEET_SHARDS = 16
#: Rows per counter upsert (well below PostgreSQL's 65,535 bind parameters).
CHUNK = 1000
#: (learner, reason) counters per device; more reasons are counted as :data:`OTHER_REASON`.
MAX_REASONS = 16
OTHER_REASON = "other"


def canonical_json(doc: dict[str, Any]) -> str:
    """The stored form of a model document; its sha256 is the model's ETag."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)


def upsert_device(session: Session, device_id: str, secret: str) -> bool:
    """Create a device or rotate its secret; True when the device is new."""
    device = session.get(Device, device_id)
    if device is None:
        session.add(Device(id=device_id, token_hash=hash_secret(secret)))
        return True
    device.token_hash = hash_secret(secret)
    device.revoked_at = None
    return False


def device_for_token_hash(session: Session, token_hash: str) -> str | None:
    return session.scalar(select(Device.id).where(Device.token_hash == token_hash))


def device_exists(session: Session, device_id: str) -> bool:
    return session.get(Device, device_id) is not None


def list_device_ids(session: Session) -> list[str]:
    return list(session.scalars(select(Device.id).order_by(Device.id)))


@dataclass(frozen=True)
class NewModel:
    """Everything stored with a new model version except what :func:`store_model` adds: the version
    number, the time, the stored document's text, its sha256 and size. Field names are the table's."""

    device_id: str
    document: dict[str, Any]
    kind: str
    learner: str
    task: str
    rebalance: str
    chosen: str | None
    scores: dict[str, float] | None
    n: int
    d: int
    train_ms: float
    bytes_in: int
    encoding: str
    reason: str
    requested_by: str
    monitor: dict[str, StatValue]
    request_id: str | None
    request_sha256: str | None = None
    #: A re-tuning recompute's edge parameters (None for other recomputes).
    edge: dict[str, Any] | None = None


def store_model(session: Session, new: NewModel) -> ModelRecord:
    """Number and insert a new immutable version (the caller commits)."""
    version = session.execute(
        update(Device)
        .where(Device.id == new.device_id)
        .values(model_count=Device.model_count + 1)
        .returning(Device.model_count)
    ).scalar_one()
    created = utcnow()
    document = dict(new.document, version=version, created=created.isoformat())
    text = canonical_json(document)
    columns = {f.name: getattr(new, f.name) for f in fields(new) if f.name != "document"}
    record = ModelRecord(
        **columns,
        version=version,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        bytes_out=len(text.encode()),
        document=text,
        created_at=created,
    )
    session.add(record)
    session.flush()
    _count_recompute(session, record)
    return record


def fleet_shard(device_id: str) -> int:
    """The fleet counter shard of a device (stable across processes, unlike ``hash``)."""
    return zlib.crc32(device_id.encode()) % FLEET_SHARDS


_MEASURES = ("recomputes", "train_ms", "bytes_in", "bytes_out")


def _count_recompute(session: Session, record: ModelRecord) -> None:
    """Add a stored version to its device's, its (device, learner, reason)'s and its fleet shard's
    counters, in the caller's transaction (the version's device row is locked by then, so the device's
    newest version is this one)."""
    measures = {"recomputes": 1, "train_ms": record.train_ms, "bytes_in": record.bytes_in}
    measures["bytes_out"] = record.bytes_out
    device = {
        "device_id": record.device_id,
        "recomputes": 1,
        "bytes_in": record.bytes_in,
        "bytes_out": record.bytes_out,
        "train_ms_total": record.train_ms,
        "latest_version": record.version,
        "last_recompute_at": record.created_at,
        "last_reason": record.reason,
        "heartbeats": 0,
        "last_seen": record.created_at,
    }
    upsert(
        session,
        DeviceCounter,
        [device],
        add=("recomputes", "bytes_in", "bytes_out", "train_ms_total"),
        replace=("latest_version", "last_recompute_at", "last_reason"),
    )
    group = {"learner": record.learner, "reason": _counted_reason(session, record), **measures}
    upsert(session, DeviceRecomputeCounter, [{"device_id": record.device_id, **group}], add=_MEASURES)
    upsert(session, FleetRecomputeCounter, [{"shard": fleet_shard(record.device_id), **group}], add=_MEASURES)


def _counted_reason(session: Session, record: ModelRecord) -> str:
    """The reason a recompute is counted under: its own, or ``other`` once its device has
    :data:`MAX_REASONS` (learner, reason) counters and this is a new one. A device names its reasons, and
    each would be a counter row and a Prometheus series: their number is bounded per device."""
    seen = session.execute(
        select(DeviceRecomputeCounter.learner, DeviceRecomputeCounter.reason).where(
            DeviceRecomputeCounter.device_id == record.device_id
        )
    ).all()
    if len(seen) < MAX_REASONS or (record.learner, record.reason) in {(a, b) for a, b in seen}:
        return record.reason
    return OTHER_REASON


def count_heartbeats(session: Session, device_ids: Sequence[str], at: datetime) -> None:
    """Add heartbeats received at ``at`` to their devices' counters: one statement per batch (per
    CHUNK devices), rows in device order so concurrent batches lock them in the same order."""
    per_device = Counter(device_ids)
    rows = [
        {
            "device_id": device_id,
            "recomputes": 0,
            "bytes_in": 0,
            "bytes_out": 0,
            "train_ms_total": 0.0,
            "heartbeats": n,
            "last_seen": at,
        }
        for device_id, n in sorted(per_device.items())
    ]
    for start in range(0, len(rows), CHUNK):
        upsert(session, DeviceCounter, rows[start : start + CHUNK], add=("heartbeats",))


def model_by_request_id(session: Session, device_id: str, request_id: str) -> ModelRecord | None:
    return session.scalar(
        select(ModelRecord).where(ModelRecord.device_id == device_id, ModelRecord.request_id == request_id)
    )


def get_model(session: Session, device_id: str, version: int | None) -> ModelRecord | None:
    """One version, or the latest when ``version`` is None."""
    query = select(ModelRecord).where(ModelRecord.device_id == device_id)
    if version is None:
        query = query.order_by(ModelRecord.version.desc()).limit(1)
    else:
        query = query.where(ModelRecord.version == version)
    return session.scalar(query)


def list_models(session: Session, device_id: str, limit: int, offset: int) -> Sequence[ModelRecord]:
    return session.scalars(
        select(ModelRecord)
        .where(ModelRecord.device_id == device_id)
        .order_by(ModelRecord.version.desc())
        .limit(limit)
        .offset(offset)
    ).all()


def model_info(record: ModelRecord) -> ModelInfo:
    """A list entry: the row's fields without the document."""
    return ModelInfo.model_validate(record, from_attributes=True)


def model_version(record: ModelRecord) -> ModelVersion:
    """One version with its document (the row's ``model`` property parses it)."""
    return ModelVersion.model_validate(record, from_attributes=True)


def add_heartbeat(session: Session, device_id: str, beat: Heartbeat) -> HeartbeatRecord:
    record = HeartbeatRecord(device_id=device_id, received_at=utcnow(), **beat.model_dump())
    session.add(record)
    session.flush()
    count_heartbeats(session, [device_id], record.received_at)
    return record


def heartbeat_out(record: HeartbeatRecord) -> HeartbeatOut:
    return HeartbeatOut.model_validate(record, from_attributes=True)


def list_heartbeats(
    session: Session, device_id: str, limit: int, since: datetime | None = None
) -> list[HeartbeatRecord]:
    """The newest ``limit`` heartbeats (received at ``since`` or later, when given), oldest first."""
    query = select(HeartbeatRecord).where(HeartbeatRecord.device_id == device_id)
    if since is not None:
        query = query.where(HeartbeatRecord.received_at >= since)
    rows = session.scalars(
        query.order_by(HeartbeatRecord.received_at.desc(), HeartbeatRecord.id.desc()).limit(limit)
    ).all()
    return list(reversed(rows))


def counters(session: Session, device_id: str) -> DeviceCounters:
    """Recomputes, bytes, training time, reasons and heartbeats of one device: its counter rows."""
    row = session.get(DeviceCounter, device_id, populate_existing=True)
    reasons: Counter[str] = Counter()
    for reason, n in session.execute(
        select(DeviceRecomputeCounter.reason, DeviceRecomputeCounter.recomputes).where(
            DeviceRecomputeCounter.device_id == device_id
        )
    ).all():
        reasons[str(reason)] += int(n)
    if row is None:
        return DeviceCounters(
            device_id=device_id, recomputes=0, bytes_in=0, bytes_out=0, train_ms_total=0.0, reasons={},
            latest_version=None, last_recompute_at=None, last_reason=None, heartbeats=0, last_seen=None,
        )  # fmt: skip
    return DeviceCounters(
        device_id=device_id,
        recomputes=int(row.recomputes),
        bytes_in=int(row.bytes_in),
        bytes_out=int(row.bytes_out),
        train_ms_total=float(row.train_ms_total),
        reasons=dict(reasons),
        latest_version=row.latest_version,
        last_recompute_at=row.last_recompute_at,
        last_reason=row.last_reason,
        heartbeats=int(row.heartbeats),
        last_seen=row.last_seen,
    )


def recompute_totals(
    session: Session, per_device: bool = True
) -> list[tuple[str, str, str, int, float, int, int]]:
    """(device, learner, reason, count, train ms, bytes in, bytes out) for the Prometheus collector;
    without ``per_device`` the device is "" and the rows are per (learner, reason), summed over the
    fleet shards: a bounded scrape whatever the fleet's size."""
    rows: Sequence[Any]
    if per_device:
        d = DeviceRecomputeCounter
        rows = session.execute(
            select(d.device_id, d.learner, d.reason, d.recomputes, d.train_ms, d.bytes_in, d.bytes_out)
        ).all()
    else:
        f = FleetRecomputeCounter
        rows = session.execute(
            select(
                f.learner,
                f.reason,
                func.sum(f.recomputes),
                func.sum(f.train_ms),
                func.sum(f.bytes_in),
                func.sum(f.bytes_out),
            ).group_by(f.learner, f.reason)
        ).all()
        rows = [("", *r) for r in rows]
    return [(str(a), str(b), str(c), int(d), float(e), int(f_), int(g)) for a, b, c, d, e, f_, g in rows]
