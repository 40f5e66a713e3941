"""The fleet recompute budget: recomputes per minute, fleet-wide and per device, set by the operator.

Every admission is one atomic conditional upsert (``INSERT ... ON CONFLICT DO UPDATE SET admitted =
admitted + 1 WHERE admitted < limit``) per scope in the registry database, in one transaction, so
replicas sharing the database honour one budget exactly.

A fair share per device comes first: a device's first recompute of a minute may fill the fleet's budget
up to :func:`priority_share` of it, ordered by its drift evidence (so weak or periodic requests leave
room for the devices whose monitors see a drift), but its second and later ones may fill only
``REPEAT_SHARE`` of it, whatever evidence they report, and none while another device's first recompute
of this minute or the last was refused: one device cannot buy the fleet's budget with self-reported
numbers.

A request is also priced before it is admitted (:mod:`edgedrift_cloud.pricing`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import Connection, Engine, Table, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from edgedrift.wire import StatValue
from edgedrift_cloud.db.tables import RecomputeBudget

Refusal = Literal["budget_fleet", "budget_device"]
#: Share of a minute's budget a request without any drift evidence may use.
FLOOR_SHARE = 0.5
#: Evidence at which a request may use the whole budget (a drift at twice the monitor's threshold).
FULL_EVIDENCE = 2.0
#: Reasons that mean the edge monitor signalled a drift (evidence 1 when no statistic says more).
DRIFT_REASONS = frozenset({"drift", "druid", "bound", "error"})
#: Share of a minute's fleet budget a device's second and later recomputes of the minute may fill.
REPEAT_SHARE = 0.25
#: Scope of the count of first recomputes the fleet budget refused (devices waiting), per minute.
WAITING = "waiting"
#: The per-device counter's ceiling when only the fleet is limited (it then only counts).
_UNLIMITED = 2**31 - 1


@dataclass(frozen=True)
class BudgetLimits:
    """Recomputes per minute (None: unlimited)."""

    fleet: int | None
    per_device: int | None

    @property
    def enabled(self) -> bool:
        return self.fleet is not None or self.per_device is not None


def evidence(reason: str, monitor: dict[str, StatValue]) -> float:
    """How strongly the device's monitor sees a drift: its ``evidence`` statistic if it sends one, else
    its test statistic over its threshold (``norm``/``threshold``), else 1 for a drift reason, 0 otherwise."""
    given = monitor.get("evidence")
    if isinstance(given, int | float) and not isinstance(given, bool) and math.isfinite(given):
        return max(0.0, float(given))
    norm, threshold = monitor.get("norm"), monitor.get("threshold")
    if (
        isinstance(norm, int | float)
        and isinstance(threshold, int | float)
        and threshold > 0
        and math.isfinite(norm / threshold)
    ):
        return max(0.0, float(norm) / float(threshold))
    return 1.0 if reason in DRIFT_REASONS else 0.0


def priority_share(strength: float) -> float:
    """The share of a minute's budget a request of this evidence may fill: FLOOR_SHARE without
    evidence, growing linearly to the whole budget at FULL_EVIDENCE."""
    return FLOOR_SHARE + (1.0 - FLOOR_SHARE) * min(max(strength, 0.0), FULL_EVIDENCE) / FULL_EVIDENCE


def allowed(limit: int, strength: float) -> int:
    """The admission ceiling of one request within a minute: at least 1 when the limit is positive."""
    if limit <= 0:
        return 0
    return max(1, math.floor(limit * priority_share(strength) + 1e-9))


def current_minute(now: float | None = None) -> int:
    return int((time.time() if now is None else now) // 60)


def retry_after(now: float, spread: float) -> int:
    """Seconds until the next minute's budget opens, plus ``spread`` (0..1) of a minute so that the
    refused clients do not all come back in the same second."""
    return max(1, math.ceil(60.0 - now % 60.0 + 59.0 * min(max(spread, 0.0), 1.0)))


def admit(
    session: Session, limits: BudgetLimits, device_id: str, strength: float, minute: int
) -> Refusal | None:
    """Take one recompute from this minute's budgets (the device's, then the fleet's), or name the
    budget that is spent. ``session`` ends its transaction first.

    The device's own count comes first and says which of its recomputes this is: the first of the
    minute may fill the fleet's budget up to its evidence's :func:`priority_share`, a later one only up
    to ``REPEAT_SHARE`` of it and only while no device waits (no first recompute was refused this
    minute or the last). Each take is one autocommitted statement, so the fleet-wide row, which every
    admission in every replica updates, is locked only while PostgreSQL runs that statement (inside a
    transaction it stayed locked until the commit, and admissions queued behind it). A fleet budget
    that turns out spent gives the device's take back."""
    device = f"device:{device_id}"
    session.commit()
    with _autocommit(session) as conn:
        ceiling = _UNLIMITED if limits.per_device is None else allowed(limits.per_device, strength)
        nth = _take(conn, device, minute, ceiling)
        if nth is None:
            return "budget_device"
        if limits.fleet is None:
            return None
        if nth == 1:
            ceiling = allowed(limits.fleet, strength)
        elif _devices_wait(conn, minute):
            ceiling = 0
        else:
            ceiling = math.floor(limits.fleet * REPEAT_SHARE + 1e-9)
        if _take(conn, "fleet", minute, ceiling) is None:
            _give_back(conn, [device], minute)
            if nth == 1:
                _take(conn, WAITING, minute, _UNLIMITED)
            return "budget_fleet"
    return None


def refund(session: Session, limits: BudgetLimits, device_id: str, minute: int) -> None:
    """Give back the recompute :func:`admit` took in ``minute`` when no version came of it (the
    training failed or its client left before it ran), so a failure does not spend the budget."""
    scopes = [f"device:{device_id}"] + (["fleet"] if limits.fleet is not None else [])
    with _autocommit(session) as conn:
        _give_back(conn, scopes, minute)


def _devices_wait(conn: Connection, minute: int) -> bool:
    """Whether the fleet budget refused a device's first recompute in this minute or the last."""
    waiting = conn.execute(
        select(func.count())
        .select_from(RecomputeBudget)
        .where(RecomputeBudget.scope == WAITING, RecomputeBudget.minute.in_((minute, minute - 1)))
    ).scalar_one()
    return bool(waiting)


@contextmanager
def _autocommit(session: Session) -> Iterator[Connection]:
    """A connection of the session's engine of its own, each statement its own transaction.

    On PostgreSQL its statements commit without waiting for the WAL flush (``synchronous_commit`` off
    for this connection's use only, reset before it goes back to the pool): the budget is a rate limit
    of the current minute, and a crash that loses the last few milliseconds of takes only lets those
    recomputes be counted again, while a flush per take cost two disk syncs per recompute."""
    engine = session.get_bind()
    assert isinstance(engine, Engine)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        relaxed = conn.dialect.name == "postgresql"
        if relaxed:
            conn.exec_driver_sql("SET synchronous_commit TO off")
        try:
            yield conn
        finally:
            if relaxed and not conn.invalidated:
                conn.exec_driver_sql("RESET synchronous_commit")


def _give_back(conn: Connection, scopes: list[str], minute: int) -> None:
    if scopes:
        conn.execute(
            update(RecomputeBudget)
            .where(
                RecomputeBudget.scope.in_(scopes),
                RecomputeBudget.minute == minute,
                RecomputeBudget.admitted > 0,
            )
            .values(admitted=RecomputeBudget.admitted - 1)
        )


def _take(conn: Connection, scope: str, minute: int, ceiling: int) -> int | None:
    """One statement: insert the (scope, minute) counter at 1, or add 1 to it while it is below
    ``ceiling`` (a concurrent first insert is the conflict, so no request is lost or counted twice);
    the new count, or None when the ceiling was reached."""
    if ceiling <= 0:
        return None
    table = RecomputeBudget.__table__
    assert isinstance(table, Table)
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    statement = (
        insert(table)
        .values(scope=scope, minute=minute, admitted=1)
        .on_conflict_do_update(
            index_elements=["scope", "minute"],
            set_={"admitted": table.c.admitted + 1},
            where=table.c.admitted < ceiling,
        )
        .returning(table.c.admitted)
    )
    row = conn.execute(statement).first()
    return None if row is None else int(row[0])


_pruned_before = 0


def prune_if_due(session: Session, minute: int) -> None:
    """Drop the per-device counters of past minutes, once per minute and process (the per-device limit
    is on by default, so they would otherwise grow by one row per device and minute)."""
    global _pruned_before
    if minute - 1 > _pruned_before:
        _pruned_before = minute - 1
        prune(session, minute - 1)


def prune(session: Session, before_minute: int) -> int:
    """Drop per-device counters older than ``before_minute`` (the fleet's stay: they are the history)."""
    result = session.execute(
        delete(RecomputeBudget).where(
            RecomputeBudget.minute < before_minute, RecomputeBudget.scope != "fleet"
        )
    )
    session.commit()
    return int(result.rowcount)  # type: ignore[attr-defined]
