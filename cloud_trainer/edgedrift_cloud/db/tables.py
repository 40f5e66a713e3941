"""Registry tables (SQLAlchemy 2.x declarative). The schema is owned by the Alembic migrations in
``migrations/versions``; a test checks that the migrations and these classes agree."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from edgedrift.wire import StatValue


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(value: Any) -> datetime | None:
    """A CASE over timestamps loses the column type on SQLite (text comes back): parse it here."""
    if value is None:
        return None
    t = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite drops the zone on the way back)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {datetime: UTCDateTime()}


class Device(Base):
    """A device and the sha256 of its secret (the secret itself is never stored)."""

    __tablename__ = "devices"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    #: Versions issued so far; incremented atomically to number the next model.
    model_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: The version the device must run (its recomputes are answered with it); None: the newest.
    pinned_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: When the device was deregistered with its history kept (its credential no longer works).
    revoked_at: Mapped[datetime | None] = mapped_column(nullable=True)


class ModelRecord(Base):
    """One immutable model version of a device, with who asked for it, why, and what it cost."""

    __tablename__ = "models"
    __table_args__ = (
        UniqueConstraint("device_id", "version", name="uq_models_device_version"),
        UniqueConstraint("device_id", "request_id", name="uq_models_device_request"),
        # The fleet views: a device's recent recomputes, and the fleet's in the last minute.
        Index("ix_models_device_created", "device_id", "created_at"),
        Index("ix_models_created", "created_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    device_id: Mapped[str] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    request_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    #: sha256 of the request's window and header: a reused request_id with another body is a 409.
    request_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    sha256: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(32))
    learner: Mapped[str] = mapped_column(String(32))
    task: Mapped[str] = mapped_column(String(16))
    rebalance: Mapped[str] = mapped_column(String(16))
    chosen: Mapped[str | None] = mapped_column(String(32), nullable=True)
    scores: Mapped[dict[str, float] | None] = mapped_column(JSON, nullable=True)
    n: Mapped[int] = mapped_column(Integer)
    d: Mapped[int] = mapped_column(Integer)
    train_ms: Mapped[float] = mapped_column(Float)
    bytes_in: Mapped[int] = mapped_column(BigInteger)
    bytes_out: Mapped[int] = mapped_column(BigInteger)
    encoding: Mapped[str] = mapped_column(String(8))
    reason: Mapped[str] = mapped_column(String(64))
    requested_by: Mapped[str] = mapped_column(String(64))
    monitor: Mapped[dict[str, StatValue]] = mapped_column(JSON)
    document: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: When retention dropped the document (the row stays, so the counters still count the recompute).
    pruned_at: Mapped[datetime | None] = mapped_column(nullable=True)
    #: A re-tuning recompute's edge parameters (``EdgeTune.as_document()``); None for other recomputes.
    edge: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)

    @property
    def model(self) -> dict[str, Any]:
        """The stored document, parsed: the ``model`` of the API's views (``StoredModel`` and its kin)."""
        document: dict[str, Any] = json.loads(self.document)
        return document


class HeartbeatRecord(Base):
    """An edge agent's heartbeat: the accuracy-over-time series of the dashboard."""

    __tablename__ = "heartbeats"
    __table_args__ = (
        Index("ix_heartbeats_device_time", "device_id", "received_at"),
        Index("ix_heartbeats_received_at", "received_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    device_id: Mapped[str] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"))
    received_at: Mapped[datetime] = mapped_column(default=utcnow)
    samples: Mapped[int] = mapped_column(BigInteger)
    labeled: Mapped[int] = mapped_column(BigInteger)
    accuracy: Mapped[float | None] = mapped_column(Float, nullable=True)
    accuracy_window: Mapped[int] = mapped_column(Integer)
    warnings: Mapped[int] = mapped_column(Integer)
    drift_events: Mapped[int] = mapped_column(Integer)
    recomputes_requested: Mapped[int] = mapped_column(Integer)
    model_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    dropped: Mapped[int] = mapped_column(BigInteger)
    rejected: Mapped[int] = mapped_column(BigInteger)
    extra: Mapped[dict[str, StatValue]] = mapped_column(JSON)


class ModelAlias(Base):
    """A named pointer to one version of a device (``production``, ``candidate``, ...)."""

    __tablename__ = "model_aliases"

    device_id: Mapped[str] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"), primary_key=True)
    alias: Mapped[str] = mapped_column(String(32), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class RecomputeBudget(Base):
    """Recomputes admitted per scope (``fleet`` or ``device:<id>``) and minute: one atomic conditional
    UPDATE per admission, so every replica sharing the database honours one budget."""

    __tablename__ = "recompute_budget"

    scope: Mapped[str] = mapped_column(String(80), primary_key=True)
    minute: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    admitted: Mapped[int] = mapped_column(Integer)


class Gateway(Base):
    """A gateway: one process serving several devices, with a credential of its own (only its hash)."""

    __tablename__ = "gateways"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class GatewayDevice(Base):
    """Which gateway serves a device (at most one); the gateway holds the device's secret."""

    __tablename__ = "gateway_devices"

    device_id: Mapped[str] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"), primary_key=True)
    gateway_id: Mapped[str] = mapped_column(ForeignKey("gateways.id", ondelete="CASCADE"), index=True)
    assigned_at: Mapped[datetime] = mapped_column(default=utcnow)


class Handover(Base):
    """A device on its way from one gateway to another (``edgedrift_cloud.gateway_registry``): the phase
    the two gateways reached and, once the source released it, the device's checkpoint for the target."""

    __tablename__ = "handovers"

    device_id: Mapped[str] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"), primary_key=True)
    source: Mapped[str] = mapped_column(ForeignKey("gateways.id", ondelete="CASCADE"))
    target: Mapped[str] = mapped_column(ForeignKey("gateways.id", ondelete="CASCADE"))
    #: moving -> recording (source) -> subscribed (target) -> released (source, with the state).
    phase: Mapped[str] = mapped_column(String(16))
    state: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)


class DeviceCounter(Base):
    """A device's counters, maintained on write in the transaction that stores a version or a batch of
    heartbeats (atomic ``x = x + n`` upserts), so reading them is one row whatever the history's size.
    They count what was ever stored: retention does not lower them; purging the device drops them."""

    __tablename__ = "device_counters"

    device_id: Mapped[str] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"), primary_key=True)
    recomputes: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_in: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_out: Mapped[int] = mapped_column(BigInteger, default=0)
    train_ms_total: Mapped[float] = mapped_column(Float, default=0.0)
    latest_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_recompute_at: Mapped[datetime | None] = mapped_column(nullable=True)
    last_reason: Mapped[str | None] = mapped_column(String(64), nullable=True)
    heartbeats: Mapped[int] = mapped_column(BigInteger, default=0)
    #: The newest heartbeat or recompute.
    last_seen: Mapped[datetime | None] = mapped_column(nullable=True)


class DeviceRecomputeCounter(Base):
    """A device's recomputes per learner and reason (its ``reasons`` and the per-device metric series)."""

    __tablename__ = "device_recompute_counters"

    device_id: Mapped[str] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"), primary_key=True)
    learner: Mapped[str] = mapped_column(String(32), primary_key=True)
    reason: Mapped[str] = mapped_column(String(64), primary_key=True)
    recomputes: Mapped[int] = mapped_column(BigInteger, default=0)
    train_ms: Mapped[float] = mapped_column(Float, default=0.0)
    bytes_in: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_out: Mapped[int] = mapped_column(BigInteger, default=0)


class FleetRecomputeCounter(Base):
    """The fleet's recomputes per learner and reason, spread over a few shards (by device) so that
    concurrent stores rarely wait on one row; ``/metrics`` sums at most shards x learners x reasons
    rows. Purging a device keeps its share: these are Prometheus counters, they never go down."""

    __tablename__ = "fleet_recompute_counters"

    shard: Mapped[int] = mapped_column(Integer, primary_key=True)
    learner: Mapped[str] = mapped_column(String(32), primary_key=True)
    reason: Mapped[str] = mapped_column(String(64), primary_key=True)
    recomputes: Mapped[int] = mapped_column(BigInteger, default=0)
    train_ms: Mapped[float] = mapped_column(Float, default=0.0)
    bytes_in: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_out: Mapped[int] = mapped_column(BigInteger, default=0)


class HistoryChunk(Base):
    """One batch of a device's labeled history (float64 arrays as bytes): a row per forwarded batch, not
    per sample. Only the newest chunks that hold the last ``history_labels`` labels are kept."""

    __tablename__ = "history_chunks"
    __table_args__ = (UniqueConstraint("device_id", "batch_id", name="uq_history_device_batch"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    device_id: Mapped[str] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"), index=True)
    #: The agent's idempotency key of the batch: a retried batch is stored once.
    batch_id: Mapped[str] = mapped_column(String(64))
    n: Mapped[int] = mapped_column(Integer)
    d: Mapped[int] = mapped_column(Integer)
    #: X (n x d) then y (n), little-endian float64.
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
