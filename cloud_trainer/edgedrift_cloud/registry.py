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
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from edgedrift.wire import (
    AccuracyPoint,
    DeviceCounters,
    DeviceSeries,
    Fleet,
    FleetTotals,
    Heartbeat,
    ModelInfo,
    ModelVersion,
    RecomputePoint,
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
    return False


def device_for_token_hash(session: Session, token_hash: str) -> str | None:
    return session.scalar(select(Device.id).where(Device.token_hash == token_hash))


def device_exists(session: Session, device_id: str) -> bool:
    return session.get(Device, device_id) is not None


def list_device_ids(session: Session) -> list[str]:
    return list(session.scalars(select(Device.id).order_by(Device.id)))


@dataclass(frozen=True)
class NewModel:
    """Everything stored with a new model version except its number and time."""

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
    monitor: dict[str, Any]
    request_id: str | None


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
    record = ModelRecord(
        device_id=new.device_id,
        version=version,
        request_id=new.request_id,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        kind=new.kind,
        learner=new.learner,
        task=new.task,
        rebalance=new.rebalance,
        chosen=new.chosen,
        scores=new.scores,
        n=new.n,
        d=new.d,
        train_ms=new.train_ms,
        bytes_in=new.bytes_in,
        bytes_out=len(text.encode()),
        encoding=new.encoding,
        reason=new.reason,
        requested_by=new.requested_by,
        monitor=new.monitor,
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
    return ModelInfo.model_validate(_info_fields(record))


def model_version(record: ModelRecord) -> ModelVersion:
    fields = _info_fields(record)
    return ModelVersion.model_validate(
        fields | {"device_id": record.device_id, "model": json.loads(record.document)}
    )


def _info_fields(r: ModelRecord) -> dict[str, Any]:
    return {
        "version": r.version,
        "sha256": r.sha256,
        "learner": r.learner,
        "kind": r.kind,
        "task": r.task,
        "rebalance": r.rebalance,
        "n": r.n,
        "d": r.d,
        "train_ms": r.train_ms,
        "bytes_in": r.bytes_in,
        "bytes_out": r.bytes_out,
        "encoding": r.encoding,
        "reason": r.reason,
        "requested_by": r.requested_by,
        "monitor": r.monitor,
        "created_at": r.created_at,
    }


def add_heartbeat(session: Session, device_id: str, beat: Heartbeat) -> HeartbeatRecord:
    record = HeartbeatRecord(device_id=device_id, **beat.model_dump())
    session.add(record)
    session.flush()
    return record


def heartbeat_out(record: HeartbeatRecord) -> HeartbeatOut:
    fields = {name: getattr(record, name) for name in HeartbeatOut.model_fields}
    return HeartbeatOut.model_validate(fields)


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


def recompute_totals(session: Session) -> list[tuple[str, str, str, int, float, int, int]]:
    """(device, learner, reason, count, train ms, bytes in, bytes out) for the Prometheus collector."""
    rows = session.execute(
        select(
            ModelRecord.device_id,
            ModelRecord.learner,
            ModelRecord.reason,
            func.count(ModelRecord.id),
            func.coalesce(func.sum(ModelRecord.train_ms), 0.0),
            func.coalesce(func.sum(ModelRecord.bytes_in), 0),
            func.coalesce(func.sum(ModelRecord.bytes_out), 0),
        ).group_by(ModelRecord.device_id, ModelRecord.learner, ModelRecord.reason)
    ).all()
    return [(str(a), str(b), str(c), int(d), float(e), int(f), int(g)) for a, b, c, d, e, f, g in rows]


def fleet(session: Session, points: int) -> Fleet:
    """Every device's counters and its last ``points`` recomputes and heartbeats (the dashboard)."""
    devices: list[DeviceSeries] = []
    for device_id in list_device_ids(session):
        base = counters(session, device_id)
        recent = session.scalars(
            select(ModelRecord)
            .where(ModelRecord.device_id == device_id)
            .order_by(ModelRecord.version.desc())
            .limit(points)
        ).all()
        devices.append(
            DeviceSeries(
                **base.model_dump(),
                recompute_series=[
                    RecomputePoint(
                        t=r.created_at,
                        version=r.version,
                        reason=r.reason,
                        learner=r.learner,
                        train_ms=r.train_ms,
                    )
                    for r in reversed(recent)
                ],
                accuracy_series=[
                    AccuracyPoint(
                        t=h.received_at,
                        accuracy=h.accuracy,
                        samples=h.samples,
                        warnings=h.warnings,
                        model_version=h.model_version,
                    )
                    for h in list_heartbeats(session, device_id, points)
                ],
            )
        )
    totals = FleetTotals(
        devices=len(devices),
        recomputes=sum(d.recomputes for d in devices),
        bytes_in=sum(d.bytes_in for d in devices),
        bytes_out=sum(d.bytes_out for d in devices),
        train_ms_total=sum(d.train_ms_total for d in devices),
        heartbeats=sum(d.heartbeats for d in devices),
    )
    return Fleet(generated_at=utcnow(), totals=totals, devices=devices)
