"""Liveness, readiness (database reachable and migrated) and Prometheus metrics."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Response, status
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from edgedrift.wire import WireModel
from edgedrift_cloud.db.engine import schema_is_current
from edgedrift_cloud.dependencies import StateDep

router = APIRouter(tags=["health"])


class Health(WireModel):
    status: Literal["ok", "unavailable"]
    detail: str | None = None


@router.get("/healthz", response_model=Health, summary="The process is up")
def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Health,
    summary="The database is reachable and migrated",
    responses={503: {"model": Health, "description": "Not ready"}},
)
def readyz(state: StateDep) -> Response:
    try:
        with state.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        if not schema_is_current(state.engine):
            body = Health(status="unavailable", detail="database schema is not at the newest migration")
            return JSONResponse(body.model_dump(), status_code=status.HTTP_503_SERVICE_UNAVAILABLE)
    except SQLAlchemyError as exc:
        body = Health(status="unavailable", detail=f"database unreachable: {type(exc).__name__}")
        return JSONResponse(body.model_dump(), status_code=status.HTTP_503_SERVICE_UNAVAILABLE)
    return JSONResponse(Health(status="ok").model_dump())


@router.get(
    "/metrics",
    response_class=Response,
    summary="Prometheus metrics",
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
)
def metrics(state: StateDep) -> Response:
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
