"""Bulk writes for a fleet: register thousands of devices, store a gateway's heartbeats, in a few
statements per request instead of one round trip per device."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import String, any_, bindparam, select, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from edgedrift.wire import Heartbeat
from edgedrift_cloud import registry
from edgedrift_cloud.auth import hash_secret
from edgedrift_cloud.db.rows import insert_rows
from edgedrift_cloud.db.tables import Device, HeartbeatRecord, utcnow

#: Rows per statement (well below PostgreSQL's 65,535 bind parameters).
CHUNK = 1000


class UnknownDevicesError(LookupError):
    """Heartbeats for devices that are not registered."""

    def __init__(self, device_ids: Sequence[str]) -> None:
        super().__init__(f"unknown devices: {named(device_ids)}")
        self.device_ids = list(device_ids)


def named(device_ids: Sequence[str]) -> str:
    """The first ten ids of a list for an error message."""
    return ", ".join(device_ids[:10]) + (" ..." if len(device_ids) > 10 else "")


@dataclass(frozen=True)
class Registered:
    created: int
    rotated: int


def register_devices(session: Session, secrets: dict[str, str]) -> Registered:
    """Create the devices that are new and rotate the secrets of the others (the caller commits; a
    secret another device uses raises IntegrityError)."""
    existing = registered(session, list(secrets))
    now = utcnow()
    new = [
        {"id": d, "token_hash": hash_secret(s), "model_count": 0, "created_at": now}
        for d, s in secrets.items()
        if d not in existing
    ]
    for start in range(0, len(new), CHUNK):
        insert_rows(session, Device, new[start : start + CHUNK])
    for device_id in existing:
        session.execute(
            update(Device)
            .where(Device.id == device_id)
            .values(token_hash=hash_secret(secrets[device_id]), revoked_at=None)
        )
    session.flush()
    return Registered(created=len(new), rotated=len(existing))


def add_heartbeats(session: Session, beats: Sequence[tuple[str, Heartbeat]]) -> int:
    """Insert many devices' heartbeats in a few statements (the caller commits)."""
    ids = sorted({device_id for device_id, _ in beats})
    known = registered(session, ids)
    unknown = [d for d in ids if d not in known]
    if unknown:
        raise UnknownDevicesError(unknown)
    now = utcnow()
    rows = [{"device_id": d, "received_at": now, **beat.model_dump()} for d, beat in beats]
    for start in range(0, len(rows), CHUNK):
        insert_rows(session, HeartbeatRecord, rows[start : start + CHUNK])
    registry.count_heartbeats(session, [d for d, _ in beats], now)
    return len(rows)


def commit_heartbeats(session: Session, beats: Sequence[tuple[str, Heartbeat]]) -> int:
    """:func:`add_heartbeats` and commit (a route's whole write, in its own session)."""
    stored = add_heartbeats(session, beats)
    session.commit()
    return stored


def registered(session: Session, device_ids: Sequence[str]) -> set[str]:
    """Which of ``device_ids`` are registered (one array parameter per query on PostgreSQL)."""
    if session.get_bind().dialect.name == "postgresql":
        ids = bindparam("ids", list(device_ids), type_=ARRAY(String))
        return set(session.scalars(select(Device.id).where(Device.id == any_(ids))))
    known: set[str] = set()
    for start in range(0, len(device_ids), CHUNK):
        chunk = device_ids[start : start + CHUNK]
        known.update(session.scalars(select(Device.id).where(Device.id.in_(chunk))))
    return known
