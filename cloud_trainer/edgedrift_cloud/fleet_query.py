"""Fleet views in SQL: one page of devices (filtered, sorted, counted) and the fleet summary.

Every figure is computed by the database in a bounded number of statements, never per device in
Python: a page is one statement (plus a count when it falls past the end), the summary is one. Each
device row joins its latest heartbeat (and the one before it, to see counters grow), its latest model
version (``devices.model_count`` numbers versions, so the unique ``(device_id, version)`` index finds it)
and its recomputes of the last hour; each of these is an index probe per device.

Status, first match wins: ``unauthorized`` (credential revoked), ``offline`` (never seen, or silent for
``offline_after`` seconds), ``stale`` (silent for ``stale_after`` seconds), ``silent`` (its agent reports,
in its latest heartbeat, that the broker delivered it nothing for ``silent_after_s``: typically an ACL
that does not grant its gateway the device's topics), ``degraded`` (seen, but its
dropped or rejected samples grew since the previous heartbeat), ``online``. A device is *drifting now*
when it is online or degraded and its latest heartbeat reports a monitor warning or a new drift event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel
from sqlalchemy import (
    Boolean,
    ColumnElement,
    Float,
    Numeric,
    RowMapping,
    Select,
    Text,
    and_,
    bindparam,
    case,
    func,
    literal,
    null,
    or_,
    select,
    true,
)
from sqlalchemy.orm import Session, aliased

from edgedrift.wire_stats import MAX_STAT_ABS, stat_number
from edgedrift_cloud.db.tables import Device, HeartbeatRecord, ModelRecord, UTCDateTime, as_utc, utcnow

__all__ = [
    "DEFAULT_THRESHOLDS",
    "SORT_KEYS",
    "STATUSES",
    "FleetFilter",
    "FleetPage",
    "FleetRow",
    "FleetSummary",
    "SortKey",
    "Status",
    "Thresholds",
    "device_rows",
    "fleet_page",
    "fleet_summary",
]

Status = Literal["online", "stale", "offline", "unauthorized", "degraded", "silent"]
STATUSES: tuple[Status, ...] = ("online", "stale", "offline", "unauthorized", "degraded", "silent")
SortKey = Literal[
    "device_id", "status", "drifting", "last_seen", "accuracy", "rmse", "recomputes", "recent", "version"
]
SORT_KEYS: tuple[SortKey, ...] = (
    "device_id", "status", "drifting", "last_seen", "accuracy", "rmse", "recomputes", "recent", "version"
)  # fmt: skip
#: Silent this long: stale (three missed heartbeats at the agent's default 10 s period).
STALE_AFTER_S = 30.0
#: Silent this long: offline.
OFFLINE_AFTER_S = 120.0
#: The window of a row's ``recomputes_last_hour``.
RECENT = timedelta(hours=1)


class FleetRow(BaseModel):
    """One device in the fleet table."""

    device_id: str
    status: Status
    drifting: bool
    last_seen: datetime | None
    task: str | None
    accuracy: float | None
    rmse: float | None
    #: A device configured with classes: its recent macro-F1 and its number of classes.
    macro_f1: float | None = None
    n_classes: int | None = None
    samples: int | None
    dropped: int | None
    rejected: int | None
    #: The version the device reports running; ``latest_version`` is the newest the cloud issued.
    running_version: int | None
    latest_version: int | None
    recomputes: int
    recomputes_last_hour: int
    last_reason: str | None
    last_recompute_at: datetime | None
    learner: str | None


class FleetPage(BaseModel):
    """A page of the fleet table and how many devices match the filters."""

    generated_at: datetime
    total: int
    offset: int
    limit: int
    sort: SortKey
    descending: bool
    devices: list[FleetRow]


class FleetSummary(BaseModel):
    """Fleet-wide counts by status, drifting devices, recomputes in the last minute and budget use."""

    generated_at: datetime
    devices: int
    online: int
    stale: int
    offline: int
    unauthorized: int
    degraded: int
    silent: int = 0
    drifting: int
    recomputes_total: int
    recomputes_last_minute: int
    #: The operator's fleet budget (recomputes per minute) when one is set, and the share used.
    budget_per_minute: float | None
    budget_use: float | None


@dataclass(frozen=True)
class FleetFilter:
    """What the table shows: statuses, drifting only, one task, an id substring."""

    statuses: tuple[Status, ...] = ()
    drifting: bool | None = None
    task: str | None = None
    search: str | None = None
    #: One device exactly (its page's header row).
    device_id: str | None = None


@dataclass(frozen=True)
class Thresholds:
    stale_after_s: float = STALE_AFTER_S
    offline_after_s: float = OFFLINE_AFTER_S


DEFAULT_THRESHOLDS = Thresholds()


def _beat(n: int, lateral: bool) -> tuple[Any, ColumnElement[bool]]:
    """The device's n-th newest heartbeat as a joinable source and its join condition.

    PostgreSQL: a LATERAL subquery (an index probe per device). Joining on a correlated ``id = (SELECT
    ...)`` instead lets its planner hash or merge the whole heartbeats table. SQLite has no LATERAL but
    runs that correlated join as a probe per device."""
    inner = aliased(HeartbeatRecord)
    name = ("beat", "prev")[n]
    if lateral:
        newest = (
            select(*(c for c in HeartbeatRecord.__table__.c))
            .where(HeartbeatRecord.device_id == Device.id)
            .order_by(HeartbeatRecord.received_at.desc())
            .limit(1)
            .offset(n)
            .lateral(name)
        )
        return newest, true()
    table = aliased(HeartbeatRecord.__table__, name=name)
    nth_id = (
        select(inner.id)
        .where(inner.device_id == Device.id)
        .order_by(inner.received_at.desc())
        .limit(1)
        .offset(n)
        .correlate(Device)
        .scalar_subquery()
    )
    return table, table.c.id == nth_id


def _rows(
    now: datetime, thresholds: Thresholds, lateral: bool, only: Select[Any] | None = None
) -> Select[Any]:
    """One row per device with its computed status; the statement the page and the summary wrap.
    ``only`` (a select of device ids) restricts it to those devices before any per-device probe."""
    beat_source, beat_on = _beat(0, lateral)
    prev_source, prev_on = _beat(1, lateral)
    beat, prev = beat_source.c, prev_source.c
    last = aliased(ModelRecord, name="last_model")
    recent = aliased(ModelRecord)
    recent_count = (
        select(func.count(recent.id))
        .where(recent.device_id == Device.id, recent.created_at >= _at(now - RECENT, "recent_since"))
        .correlate(Device)
        .scalar_subquery()
    )
    last_seen = case(
        (or_(last.created_at.is_(None), beat.received_at >= last.created_at), beat.received_at),
        else_=last.created_at,
    )
    fresh = _at(now - timedelta(seconds=thresholds.stale_after_s), "fresh_since")
    alive = _at(now - timedelta(seconds=thresholds.offline_after_s), "alive_since")
    troubled = and_(prev.id.is_not(None), beat.dropped + beat.rejected > prev.dropped + prev.rejected)
    status = case(
        (Device.revoked_at.is_not(None), literal("unauthorized")),
        (or_(last_seen.is_(None), last_seen < alive), literal("offline")),
        (last_seen < fresh, literal("stale")),
        (_stored_flag(beat.extra, "silent", lateral), literal("silent")),
        (troubled, literal("degraded")),
        else_=literal("online"),
    )
    warned = or_(beat.warnings > 0, and_(prev.id.is_not(None), beat.drift_events > prev.drift_events))
    drifting = case(
        (and_(Device.revoked_at.is_(None), last_seen >= fresh, warned), literal(True)),
        else_=literal(False),
    )
    rmse = _stored_number(beat.extra, "rmse", lateral)
    task = func.coalesce(
        last.task,
        case((rmse.is_not(None), literal("regression")), (beat.accuracy.is_not(None), "classification")),
    )
    statement = (
        select(
            Device.id.label("device_id"),
            status.label("status"),
            drifting.label("drifting"),
            last_seen.label("last_seen"),
            task.label("task"),
            beat.accuracy.label("accuracy"),
            rmse.label("rmse"),
            _stored_number(beat.extra, "macro_f1", lateral).label("macro_f1"),
            _stored_number(beat.extra, "n_classes", lateral).label("n_classes"),
            beat.samples.label("samples"),
            beat.dropped.label("dropped"),
            beat.rejected.label("rejected"),
            beat.model_version.label("running_version"),
            Device.model_count.label("recomputes"),
            recent_count.label("recomputes_last_hour"),
            last.reason.label("last_reason"),
            last.created_at.label("last_recompute_at"),
            last.learner.label("learner"),
        )
        .select_from(Device)
        .outerjoin(beat_source, beat_on)
        .outerjoin(prev_source, prev_on)
        .outerjoin(last, and_(last.device_id == Device.id, last.version == Device.model_count))
    )
    return statement if only is None else statement.where(Device.id.in_(only))


def device_rows(session: Session, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Select[Any]:
    """Every device's computed row (status, drifting, quality, versions), for a fleet-wide reading."""
    return _rows(utcnow(), thresholds, _lateral(session))


def _stored_number(extra: Any, name: str, postgresql: bool) -> ColumnElement[Any]:
    """A heartbeat's ``extra[name]`` (``rmse``, ``macro_f1``, ``n_classes``) when it is a finite number
    of sane magnitude, else NULL, whatever was
    stored (a string, a bool, a 400-digit integer, ``\\u0000`` anywhere in the map): one device's stored
    value must not fail the fleet's read. On PostgreSQL every JSON operator fails on a map holding
    ``\\u0000`` (it cannot become text), so the raw text is checked first; a CASE evaluates its branches
    only when their condition holds."""
    if postgresql:
        field = extra.op("->")(literal(name))
        text_value = extra.op("->>")(literal(name))
        number = and_(
            func.strpos(extra.cast(Text), "\\u0000") == 0, func.json_typeof(field) == literal("number")
        )
        sane = func.abs(text_value.cast(Numeric)) <= literal(repr(MAX_STAT_ABS)).cast(Numeric)
        return case((number, case((sane, text_value.cast(Float)))), else_=null())
    path = f"$.{name}"
    value = func.json_extract(extra, path)
    number = and_(func.instr(extra, "\\u0000") == 0, func.json_type(extra, path).in_(["integer", "real"]))
    return case((number, case((func.abs(value) <= MAX_STAT_ABS, value.cast(Float)))), else_=null())


def _stored_flag(extra: Any, name: str, postgresql: bool) -> ColumnElement[Any]:
    """Whether a heartbeat's ``extra[name]`` is JSON ``true`` (anything else, a map holding ``\\u0000``
    included, is false: see :func:`_stored_number`)."""
    if postgresql:
        clean = func.strpos(extra.cast(Text), "\\u0000") == 0
        return case((clean, extra.op("->>")(literal(name)) == literal("true")), else_=literal(False))
    return func.coalesce(func.json_type(extra, f"$.{name}") == literal("true"), literal(False))


def _lateral(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def _at(when: datetime, name: str) -> Any:
    """A timestamp parameter stored as the columns store theirs (SQLite compares text)."""
    return bindparam(name, when, type_=UTCDateTime())


_STATUS_RANK = {"unauthorized": 0, "offline": 1, "silent": 2, "degraded": 3, "stale": 4, "online": 5}


def _order(rows: Any, sort: SortKey, descending: bool) -> list[ColumnElement[Any]]:
    c = rows.c
    key: ColumnElement[Any] = {
        "device_id": c.device_id,
        "status": case(*((c.status == s, r) for s, r in _STATUS_RANK.items()), else_=9),
        "drifting": case((c.drifting, 1), else_=0),
        "last_seen": c.last_seen,
        "accuracy": c.accuracy,
        "rmse": c.rmse,
        "recomputes": c.recomputes,
        "recent": c.recomputes_last_hour,
        "version": c.running_version,
    }[sort]
    ordered = key.desc() if descending else key.asc()
    nullable = sort in ("last_seen", "accuracy", "rmse", "version")
    keys: list[ColumnElement[Any]] = [ordered.nulls_last() if nullable else ordered]
    return [*keys, c.device_id.asc()] if sort != "device_id" else keys


def _where(rows: Any, chosen: FleetFilter) -> list[ColumnElement[bool]]:
    c = rows.c
    where: list[ColumnElement[bool]] = []
    if chosen.statuses:
        where.append(c.status.in_(chosen.statuses))
    if chosen.drifting is not None:
        where.append(c.drifting == literal(chosen.drifting, Boolean))
    if chosen.task:
        where.append(c.task == chosen.task)
    if chosen.search:
        where.append(c.device_id.icontains(chosen.search, autoescape=True))
    if chosen.device_id:
        where.append(c.device_id == chosen.device_id)
    return where


def fleet_page(
    session: Session,
    chosen: FleetFilter,
    *,
    sort: SortKey = "device_id",
    descending: bool = False,
    offset: int = 0,
    limit: int = 50,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> FleetPage:
    """One page of the fleet table: a single statement (a window count gives the total).

    Sorted by id and filtered by id only (the dashboard's first view), the page's ids are chosen from the
    devices table first, so only ``limit`` devices are probed and the total is a count of ids; any
    other sort or filter needs every device's computed row."""
    now = utcnow()
    if sort == "device_id" and not chosen.statuses and chosen.drifting is None and not chosen.task:
        return _page_by_id(session, chosen, now, descending, offset, limit, thresholds)
    rows = _rows(now, thresholds, _lateral(session)).subquery("fleet")
    where = _where(rows, chosen)
    statement = (
        select(rows, func.count().over().label("total"))
        .where(*where)
        .order_by(*_order(rows, sort, descending))
        .offset(offset)
        .limit(limit)
    )
    found = session.execute(statement).mappings().all()
    if found:
        total = int(found[0]["total"])
    else:  # past the end (or nothing matches): the window count had no row to ride on
        total = int(session.scalar(select(func.count()).select_from(rows).where(*where)) or 0)
    return _page(now, found, total, sort, descending, offset, limit)


def _page_by_id(
    session: Session,
    chosen: FleetFilter,
    now: datetime,
    descending: bool,
    offset: int,
    limit: int,
    thresholds: Thresholds,
) -> FleetPage:
    """The page of a fleet table sorted by id, filtered by id only: one statement, ``limit`` probes."""
    matching: list[ColumnElement[bool]] = []
    if chosen.search:
        matching.append(Device.id.icontains(chosen.search, autoescape=True))
    if chosen.device_id:
        matching.append(Device.id == chosen.device_id)
    order = Device.id.desc() if descending else Device.id.asc()
    ids = select(Device.id).where(*matching).order_by(order).offset(offset).limit(limit)
    counted = select(func.count(Device.id)).where(*matching)
    rows = _rows(now, thresholds, _lateral(session), only=select(ids.subquery().c.id)).subquery("fleet")
    key = rows.c.device_id.desc() if descending else rows.c.device_id.asc()
    statement = select(rows, counted.scalar_subquery().label("total")).order_by(key)
    found = session.execute(statement).mappings().all()
    count = int(found[0]["total"]) if found else int(session.scalar(counted) or 0)
    return _page(now, found, count, "device_id", descending, offset, limit)


def _page(
    now: datetime,
    found: Sequence[RowMapping],
    total: int,
    sort: SortKey,
    descending: bool,
    offset: int,
    limit: int,
) -> FleetPage:
    devices = [_row(dict(r)) for r in found]
    return FleetPage(
        generated_at=now,
        total=total,
        offset=offset,
        limit=limit,
        sort=sort,
        descending=descending,
        devices=devices,
    )


def _whole(value: Any) -> int | None:
    """A stored count read as a number (None unless a whole number within 32 bits)."""
    number = stat_number(value)
    return int(number) if number is not None and number.is_integer() and 0 <= number < 2**31 else None


def _row(r: dict[str, Any]) -> FleetRow:
    recomputes = int(r["recomputes"] or 0)
    return FleetRow(
        device_id=r["device_id"],
        status=r["status"],
        drifting=bool(r["drifting"]),
        last_seen=as_utc(r["last_seen"]),
        task=r["task"],
        accuracy=stat_number(r["accuracy"]),
        rmse=stat_number(r["rmse"]),
        macro_f1=stat_number(r["macro_f1"]),
        n_classes=_whole(r["n_classes"]),
        samples=r["samples"],
        dropped=r["dropped"],
        rejected=r["rejected"],
        running_version=r["running_version"],
        latest_version=recomputes or None,
        recomputes=recomputes,
        recomputes_last_hour=int(r["recomputes_last_hour"] or 0),
        last_reason=r["last_reason"],
        last_recompute_at=as_utc(r["last_recompute_at"]),
        learner=r["learner"],
    )


def fleet_summary(
    session: Session, budget_per_minute: float | None, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> FleetSummary:
    """Counts by status, drifting devices and recomputes in the last minute: one statement."""
    now = utcnow()
    rows = _rows(now, thresholds, _lateral(session)).subquery("fleet")

    def count(condition: ColumnElement[bool]) -> Any:
        return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)

    last_minute = (
        select(func.count(ModelRecord.id))
        .where(ModelRecord.created_at >= _at(now - timedelta(minutes=1), "minute_since"))
        .scalar_subquery()
    )
    statement = select(
        func.count().label("devices"),
        *(count(rows.c.status == s).label(s) for s in STATUSES),
        count(rows.c.drifting == literal(True, Boolean)).label("drifting"),
        func.coalesce(func.sum(rows.c.recomputes), 0).label("recomputes_total"),
        last_minute.label("recomputes_last_minute"),
    ).select_from(rows)
    r = session.execute(statement).mappings().one()
    per_minute = int(r["recomputes_last_minute"] or 0)
    return FleetSummary(
        generated_at=now,
        devices=int(r["devices"]),
        **{s: int(r[s]) for s in STATUSES},
        drifting=int(r["drifting"]),
        recomputes_total=int(r["recomputes_total"]),
        recomputes_last_minute=per_minute,
        budget_per_minute=budget_per_minute,
        budget_use=per_minute / budget_per_minute if budget_per_minute else None,
    )
