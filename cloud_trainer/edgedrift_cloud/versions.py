"""The model-version registry of a device, like MLflow's: a pinned version, aliases, rollback,
per-version metrics from heartbeats, retention of old versions and deregistration.

A pinned device is answered with its pinned version instead of a new one (the edge installs it and its
monitor bounds it as β₁); without a pin the newest version serves. Retention drops the documents of all
but the newest ``keep`` versions, the pinned one and the aliased ones; the rows stay, so the recompute
counters (aggregates over the rows) do not change. Every function takes the caller's session; the
caller commits.
"""

from __future__ import annotations

import secrets
from collections import defaultdict
from datetime import datetime
from typing import Annotated

from pydantic import Field
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from edgedrift.wire import NUMBER, WireModel
from edgedrift.wire_stats import stat_number
from edgedrift_cloud.auth import hash_secret
from edgedrift_cloud.db.tables import (
    Device,
    GatewayDevice,
    HeartbeatRecord,
    ModelAlias,
    ModelRecord,
    utcnow,
)

ALIAS_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"


class VersionNotFoundError(LookupError):
    """The device has no stored version with that number (or none older, for a rollback)."""


class VersionPrunedError(LookupError):
    """Retention dropped this version's document."""


VersionNumber = Annotated[int, Field(ge=1, le=2**31 - 1), NUMBER]


class VersionRef(WireModel):
    """The body of a pin or an alias."""

    version: VersionNumber


class VersionChoice(WireModel):
    """The body of a rollback (``version`` None: the one before the version serving now)."""

    version: VersionNumber | None = None


class RegistryView(WireModel):
    """What a device runs and why: the pin, the aliases, the newest version."""

    device_id: str
    latest: int | None
    pinned: int | None
    #: The version a recompute is answered with: the pinned one, else the newest.
    serving: int | None
    aliases: dict[str, int]
    revoked_at: datetime | None
    pruned: list[int]


class VersionMetrics(WireModel):
    """How a version did while the device reported it installed (its heartbeats)."""

    version: int
    heartbeats: int
    samples: int
    accuracy_mean: float | None
    accuracy_last: float | None
    rmse_mean: float | None
    first_seen: datetime
    last_seen: datetime


class PruneResult(WireModel):
    device_id: str
    keep: int
    pruned: list[int]
    kept: list[int]


class Deregistration(WireModel):
    device_id: str
    purged: bool
    #: Versions and heartbeats removed (zero when the history is kept).
    models_deleted: int
    heartbeats_deleted: int


def _device(session: Session, device_id: str) -> Device:
    device = session.get(Device, device_id)
    if device is None:
        raise VersionNotFoundError(f"unknown device {device_id!r}")
    return device


def lock_device(session: Session, device_id: str) -> Device:
    """The device, with its row locked until the transaction ends: pin, rollback, aliases, retention and
    a new version (:func:`registry.store_model` numbers it with an UPDATE of this row) of one device run
    one after another, so a pinned or aliased version is never pruned whatever the interleaving. A
    no-op UPDATE, the first statement of the transaction: on PostgreSQL it takes the row lock, on SQLite
    the database's write lock, and everything read after it is current."""
    locked = session.execute(
        update(Device).where(Device.id == device_id).values(model_count=Device.model_count)
    )
    if not locked.rowcount:  # type: ignore[attr-defined]
        raise VersionNotFoundError(f"unknown device {device_id!r}")
    return _device(session, device_id)


def stored(session: Session, device_id: str, version: int) -> ModelRecord:
    """One version with its document; VersionNotFoundError or VersionPrunedError otherwise."""
    record = session.scalar(
        select(ModelRecord).where(ModelRecord.device_id == device_id, ModelRecord.version == version)
    )
    if record is None:
        raise VersionNotFoundError(f"device {device_id!r} has no model version {version}")
    if record.pruned_at is not None:
        raise VersionPrunedError(f"model version {version} of {device_id!r} was pruned by retention")
    return record


def pinned_model(session: Session, device_id: str) -> ModelRecord | None:
    """The pinned version, or None when the device is not pinned."""
    pinned = session.scalar(select(Device.pinned_version).where(Device.id == device_id))
    return None if pinned is None else stored(session, device_id, pinned)


def pin(session: Session, device_id: str, version: int | None) -> None:
    """Pin a stored version (None unpins: the newest serves again)."""
    device = lock_device(session, device_id)
    if version is not None:
        stored(session, device_id, version)
    device.pinned_version = version


def rollback(session: Session, device_id: str, to: int | None) -> int:
    """Pin ``to``, or the newest stored version older than the one serving now; the pinned version."""
    lock_device(session, device_id)
    if to is None:
        view = registry_view(session, device_id)
        if view.serving is None:
            raise VersionNotFoundError(f"device {device_id!r} has no model to roll back from")
        to = session.scalar(
            select(func.max(ModelRecord.version)).where(
                ModelRecord.device_id == device_id,
                ModelRecord.version < view.serving,
                ModelRecord.pruned_at.is_(None),
            )
        )
        if to is None:
            raise VersionNotFoundError(f"device {device_id!r} has no stored version before {view.serving}")
    pin(session, device_id, to)
    return to


def set_alias(session: Session, device_id: str, alias: str, version: int) -> None:
    lock_device(session, device_id)
    stored(session, device_id, version)
    row = session.get(ModelAlias, (device_id, alias))
    if row is None:
        session.add(ModelAlias(device_id=device_id, alias=alias, version=version))
    else:
        row.version = version
        row.updated_at = utcnow()


def delete_alias(session: Session, device_id: str, alias: str) -> bool:
    """Remove an alias; False when it did not exist."""
    deleted = session.execute(
        delete(ModelAlias).where(ModelAlias.device_id == device_id, ModelAlias.alias == alias)
    )
    return bool(deleted.rowcount)  # type: ignore[attr-defined]


def aliases(session: Session, device_id: str) -> dict[str, int]:
    rows = session.execute(
        select(ModelAlias.alias, ModelAlias.version)
        .where(ModelAlias.device_id == device_id)
        .order_by(ModelAlias.alias)
    ).all()
    return {str(a): int(v) for a, v in rows}


def alias_model(session: Session, device_id: str, alias: str) -> ModelRecord:
    version = aliases(session, device_id).get(alias)
    if version is None:
        raise VersionNotFoundError(f"device {device_id!r} has no alias {alias!r}")
    return stored(session, device_id, version)


def registry_view(session: Session, device_id: str) -> RegistryView:
    device = _device(session, device_id)
    latest = session.scalar(select(func.max(ModelRecord.version)).where(ModelRecord.device_id == device_id))
    pruned = session.scalars(
        select(ModelRecord.version)
        .where(ModelRecord.device_id == device_id, ModelRecord.pruned_at.is_not(None))
        .order_by(ModelRecord.version)
    ).all()
    return RegistryView(
        device_id=device_id,
        latest=latest,
        pinned=device.pinned_version,
        serving=device.pinned_version if device.pinned_version is not None else latest,
        aliases=aliases(session, device_id),
        revoked_at=device.revoked_at,
        pruned=list(pruned),
    )


def version_metrics(session: Session, device_id: str) -> list[VersionMetrics]:
    """Per installed version, newest first: heartbeats, samples seen, mean and last accuracy, mean RMSE
    (the edge reports RMSE in the heartbeat's ``extra`` for a regression task)."""
    rows = session.execute(
        select(
            HeartbeatRecord.model_version,
            HeartbeatRecord.samples,
            HeartbeatRecord.accuracy,
            HeartbeatRecord.extra,
            HeartbeatRecord.received_at,
        )
        .where(HeartbeatRecord.device_id == device_id, HeartbeatRecord.model_version.is_not(None))
        .order_by(HeartbeatRecord.received_at, HeartbeatRecord.id)
    ).all()
    groups: dict[int, list[tuple[int, float | None, float | None, datetime]]] = defaultdict(list)
    for version, samples, accuracy, extra, at in rows:
        rmse = stat_number(extra.get("rmse")) if isinstance(extra, dict) else None
        groups[int(version or 0)].append((int(samples), accuracy, rmse, at))
    out = []
    for version, beats in sorted(groups.items(), reverse=True):
        accs = [a for _, a, _, _ in beats if a is not None]
        rmses = [r for _, _, r, _ in beats if r is not None]
        out.append(
            VersionMetrics(
                version=version,
                heartbeats=len(beats),
                samples=max(s for s, _, _, _ in beats) - min(s for s, _, _, _ in beats),
                accuracy_mean=sum(accs) / len(accs) if accs else None,
                accuracy_last=accs[-1] if accs else None,
                rmse_mean=sum(rmses) / len(rmses) if rmses else None,
                first_seen=beats[0][3],
                last_seen=beats[-1][3],
            )
        )
    return out


def prune(session: Session, device_id: str, keep: int) -> PruneResult:
    """Drop the documents of every version but the newest ``keep``, the pinned and the aliased ones."""
    lock_device(session, device_id)
    view = registry_view(session, device_id)
    live = session.scalars(
        select(ModelRecord.version)
        .where(ModelRecord.device_id == device_id, ModelRecord.pruned_at.is_(None))
        .order_by(ModelRecord.version.desc())
    ).all()
    protected = set(live[:keep]) | set(view.aliases.values())
    if view.pinned is not None:
        protected.add(view.pinned)
    doomed = sorted(v for v in live if v not in protected)
    if doomed:
        session.execute(
            update(ModelRecord)
            .where(ModelRecord.device_id == device_id, ModelRecord.version.in_(doomed))
            .values(document="{}", pruned_at=utcnow())
        )
    return PruneResult(
        device_id=device_id, keep=keep, pruned=doomed, kept=sorted(v for v in live if v in protected)
    )


def deregister(session: Session, device_id: str, purge: bool) -> Deregistration:
    """Revoke the device's credential and unassign it from its gateway; ``purge`` also deletes the device
    with its versions and heartbeats, otherwise the history stays readable by the operator. The
    revocation holds until an operator registers the device again (``PUT``): a gateway's sync never
    re-issues a revoked device's secret."""
    device = _device(session, device_id)
    if not purge:
        device.token_hash = hash_secret(secrets.token_urlsafe(32))
        device.revoked_at = utcnow()
        # No gateway serves it any more, so no gateway's sync can hand it a secret again.
        session.execute(delete(GatewayDevice).where(GatewayDevice.device_id == device_id))
        return Deregistration(device_id=device_id, purged=False, models_deleted=0, heartbeats_deleted=0)
    beats = session.execute(delete(HeartbeatRecord).where(HeartbeatRecord.device_id == device_id))
    session.execute(delete(ModelAlias).where(ModelAlias.device_id == device_id))
    models = session.execute(delete(ModelRecord).where(ModelRecord.device_id == device_id))
    session.execute(delete(Device).where(Device.id == device_id))
    return Deregistration(
        device_id=device_id,
        purged=True,
        models_deleted=int(models.rowcount),  # type: ignore[attr-defined]
        heartbeats_deleted=int(beats.rowcount),  # type: ignore[attr-defined]
    )
