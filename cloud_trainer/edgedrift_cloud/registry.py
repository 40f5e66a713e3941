"""The model registry and counters: every database read and write of the service lives here.

Versions are numbered by an atomic ``UPDATE devices SET model_count = model_count + 1 ... RETURNING``
in the same transaction as the insert, so concurrent retrains of one device never share a version and
a failed insert leaves no gap. Counters are aggregates over the stored versions, so they survive
restarts and agree across workers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import func, literal, select, update
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
from edgedrift_cloud.db.tables import Device, HeartbeatRecord, ModelRecord, utcnow


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
    return record


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
    record = HeartbeatRecord(device_id=device_id, **beat.model_dump())
    session.add(record)
    session.flush()
    return record


def heartbeat_out(record: HeartbeatRecord) -> HeartbeatOut:
    return HeartbeatOut.model_validate(record, from_attributes=True)


def list_heartbeats(session: Session, device_id: str, limit: int) -> list[HeartbeatRecord]:
    """The newest ``limit`` heartbeats, oldest first."""
    rows = session.scalars(
        select(HeartbeatRecord)
        .where(HeartbeatRecord.device_id == device_id)
        .order_by(HeartbeatRecord.received_at.desc(), HeartbeatRecord.id.desc())
        .limit(limit)
    ).all()
    return list(reversed(rows))


def counters(session: Session, device_id: str) -> DeviceCounters:
    """Recomputes, bytes, training time and reasons of one device, aggregated from the registry."""
    agg = session.execute(
        select(
            func.count(ModelRecord.id),
            func.coalesce(func.sum(ModelRecord.bytes_in), 0),
            func.coalesce(func.sum(ModelRecord.bytes_out), 0),
            func.coalesce(func.sum(ModelRecord.train_ms), 0.0),
            func.max(ModelRecord.version),
        ).where(ModelRecord.device_id == device_id)
    ).one()
    reasons = dict(
        session.execute(
            select(ModelRecord.reason, func.count(ModelRecord.id))
            .where(ModelRecord.device_id == device_id)
            .group_by(ModelRecord.reason)
        ).all()
    )
    last = session.execute(
        select(ModelRecord.created_at, ModelRecord.reason)
        .where(ModelRecord.device_id == device_id)
        .order_by(ModelRecord.version.desc())
        .limit(1)
    ).first()
    beats = session.execute(
        select(func.count(HeartbeatRecord.id), func.max(HeartbeatRecord.received_at)).where(
            HeartbeatRecord.device_id == device_id
        )
    ).one()
    return DeviceCounters(
        device_id=device_id,
        recomputes=int(agg[0]),
        bytes_in=int(agg[1]),
        bytes_out=int(agg[2]),
        train_ms_total=float(agg[3]),
        reasons={str(k): int(v) for k, v in reasons.items()},
        latest_version=None if agg[4] is None else int(agg[4]),
        last_recompute_at=None if last is None else last.created_at,
        last_reason=None if last is None else last.reason,
        heartbeats=int(beats[0]),
        last_seen=_latest(beats[1], None if last is None else last.created_at),
    )


def _latest(*times: datetime | None) -> datetime | None:
    known = [t for t in times if t is not None]
    return max(known, key=lambda t: t.timestamp()) if known else None


def recompute_totals(
    session: Session, per_device: bool = True
) -> list[tuple[str, str, str, int, float, int, int]]:
    """(device, learner, reason, count, train ms, bytes in, bytes out) for the Prometheus collector;
    without ``per_device`` the device is "" and the rows are per (learner, reason): a bounded scrape."""
    device = ModelRecord.device_id if per_device else literal("")
    rows = session.execute(
        select(
            device,
            ModelRecord.learner,
            ModelRecord.reason,
            func.count(ModelRecord.id),
            func.coalesce(func.sum(ModelRecord.train_ms), 0.0),
            func.coalesce(func.sum(ModelRecord.bytes_in), 0),
            func.coalesce(func.sum(ModelRecord.bytes_out), 0),
        ).group_by(*([ModelRecord.device_id] if per_device else []), ModelRecord.learner, ModelRecord.reason)
    ).all()
    return [(str(a), str(b), str(c), int(d), float(e), int(f), int(g)) for a, b, c, d, e, f, g in rows]
