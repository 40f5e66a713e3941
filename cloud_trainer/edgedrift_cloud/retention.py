"""Heartbeat retention: heartbeats older than ``heartbeat_retention_hours`` are deleted, except each
device's newest two (the fleet views read a device's status, last accuracy and growth of its drops from
them, so a device that went silent keeps its last known state). The counters are kept on write and count
every heartbeat ever received, so retention does not lower them.

Every worker and replica runs :func:`keep_heartbeats` on the same schedule; the deletes are bounded
batches and idempotent, so running them in several processes is safe.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

import anyio
from sqlalchemy import delete, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, aliased

from edgedrift_cloud.db.tables import HeartbeatRecord, utcnow
from edgedrift_cloud.dependencies import AppState

log = logging.getLogger("edgedrift.retention")

#: Heartbeats deleted per statement (a bounded transaction, whatever the backlog).
BATCH = 5000


def prune_heartbeats(session: Session, before: datetime, batch: int = BATCH) -> int:
    """Delete up to ``batch`` of the oldest heartbeats received before ``before`` that are not among
    their device's newest two; commit and return how many went."""
    newer = aliased(HeartbeatRecord)
    second_newest = (
        select(newer.received_at)
        .where(newer.device_id == HeartbeatRecord.device_id)
        .order_by(newer.received_at.desc())
        .limit(1)
        .offset(1)
        .correlate(HeartbeatRecord)
        .scalar_subquery()
    )
    doomed = (
        select(HeartbeatRecord.id)
        .where(HeartbeatRecord.received_at < before, HeartbeatRecord.received_at < second_newest)
        .order_by(HeartbeatRecord.received_at)
        .limit(batch)
    )
    ids = list(session.scalars(doomed))
    if ids:
        session.execute(delete(HeartbeatRecord).where(HeartbeatRecord.id.in_(ids)))
    session.commit()
    return len(ids)


def prune_all(state: AppState, hours: float) -> int:
    """Batches of :func:`prune_heartbeats` until the backlog older than ``hours`` is gone."""
    before = utcnow() - timedelta(hours=hours)
    total = 0
    while True:
        with state.sessions() as session:
            gone = prune_heartbeats(session, before)
        total += gone
        if gone < BATCH:
            return total


async def keep_heartbeats(state: AppState) -> None:
    """Run the retention every ``heartbeat_retention_every_s`` until cancelled (the app's lifespan);
    a database failure is logged and retried at the next round, never fatal."""
    settings = state.settings
    while True:
        await asyncio.sleep(settings.heartbeat_retention_every_s)
        try:
            gone = await anyio.to_thread.run_sync(prune_all, state, settings.heartbeat_retention_hours)
        except SQLAlchemyError as exc:
            log.warning("heartbeat retention failed", extra={"error": str(exc).splitlines()[0][:200]})
            continue
        if gone:
            log.info("heartbeat retention", extra={"deleted": gone})
