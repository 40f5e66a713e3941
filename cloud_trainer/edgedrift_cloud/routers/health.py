"""Liveness, readiness (database reachable and migrated) and Prometheus metrics."""

from __future__ import annotations

import contextlib
import time
from typing import Literal

import anyio
from fastapi import APIRouter, Response, status
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from edgedrift.wire import WireModel
from edgedrift_cloud.db.engine import schema_is_current
from edgedrift_cloud.dependencies import AppState, StateDep
from edgedrift_cloud.errors import database_problem
from edgedrift_cloud.job_queue import QueueUnavailableError

router = APIRouter(tags=["health"])


class Health(WireModel):
    status: Literal["ok", "unavailable"]
    detail: str | None = None


@router.get("/healthz", response_model=Health, summary="The process is up")
async def healthz() -> Health:
    """Answered on the event loop, never in the thread pool: a hung database that holds every worker
    thread cannot delay it."""
    return Health(status="ok")


#: A database failure answered with 503 keeps ``/readyz`` at 503 this many seconds.
RECENT_FAILURE_S = 10.0


@router.get(
    "/readyz",
    response_model=Health,
    summary="The database is reachable, writable and migrated and the training pool is up (own deadline)",
    responses={503: {"model": Health, "description": "Not ready"}},
)
async def readyz(state: StateDep) -> Response:
    problem: str | None = f"database did not answer within {state.settings.readiness_timeout_s:g} s"
    with anyio.move_on_after(state.settings.readiness_timeout_s):
        problem = await anyio.to_thread.run_sync(_database_problem, state, abandon_on_cancel=True)
    recent = state.database_error
    if problem is None and recent is not None and time.monotonic() - recent[0] < RECENT_FAILURE_S:
        problem = recent[1]
    if problem is None and state.jobs is not None:
        problem = await _queue_problem(state)
    elif problem is None and not state.trainings.started:
        problem = "the training pool is starting"
    if problem is not None:
        body = Health(status="unavailable", detail=problem)
        return JSONResponse(body.model_dump(), status_code=status.HTTP_503_SERVICE_UNAVAILABLE)
    return JSONResponse(Health(status="ok").model_dump())


async def _queue_problem(state: AppState) -> str | None:
    """None when the training queue's Redis answers (``training=queue``)."""
    assert state.jobs is not None
    problem: str | None = (
        f"the training queue's Redis did not answer within {state.settings.readiness_timeout_s:g} s"
    )
    with anyio.move_on_after(state.settings.readiness_timeout_s):
        try:
            await state.jobs.ping()
            problem = None
        except Exception as exc:
            problem = f"the training queue's Redis is unavailable: {type(exc).__name__}"
    return problem


def _database_problem(state: AppState) -> str | None:
    """None when the database answers, accepts a write (an empty UPDATE, rolled back: a read-only
    SQLite file fails it) and is migrated; otherwise why not."""
    try:
        with state.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
            conn.execute(text("UPDATE alembic_version SET version_num = version_num WHERE 1 = 0"))
            conn.rollback()
        if not schema_is_current(state.engine):
            return "database schema is not at the newest migration"
    except SQLAlchemyError as exc:
        return database_problem(exc)
    return None


@router.get(
    "/metrics",
    response_class=Response,
    summary="Prometheus metrics",
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
)
async def metrics(state: StateDep) -> Response:
    if state.jobs is not None:
        with contextlib.suppress(QueueUnavailableError):  # /readyz says so; the scrape goes on
            state.metrics.jobs_waiting.set(await state.jobs.queued())
    body = await anyio.to_thread.run_sync(state.metrics.exposition)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
