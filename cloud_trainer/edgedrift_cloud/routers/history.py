"""``POST /v1/devices/{id}/history``: append a batch of labeled samples to the device's history (the
labels a re-tuning recompute searches; see :mod:`edgedrift_cloud.history`)."""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Request, status
from fastapi.responses import JSONResponse
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from edgedrift.models.losses import FloatArray
from edgedrift.wire import WINDOW_CONTENT_TYPE, HistoryStored
from edgedrift_cloud import history
from edgedrift_cloud.db.tables import HistoryChunk, ModelRecord
from edgedrift_cloud.dependencies import AppState, DeviceAccessDep, DevicePath, StateDep
from edgedrift_cloud.rate_limit import too_fast
from edgedrift_cloud.routers.window_body import parse_body

router = APIRouter(prefix="/v1/devices/{device_id}/history", tags=["history"])
#: Retry-After of a batch refused because the fleet's history is full.
HISTORY_FULL_RETRY_S = 300

_REQUEST_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            WINDOW_CONTENT_TYPE: {
                "schema": {"type": "string", "format": "binary"},
                "description": "Labeled samples as a compact window (edgedrift.wire.encode_window, "
                "float64); the header's request_id is the batch id.",
            },
            "application/json": {"schema": {"$ref": "#/components/schemas/TrainRequest"}},
        },
    }
}


@router.post(
    "",
    response_model=HistoryStored,
    status_code=status.HTTP_201_CREATED,
    summary="Append labeled samples to the device's history (for re-tuning recomputes)",
    openapi_extra=_REQUEST_BODY,
    responses={
        200: {"description": "Replay of a batch already stored under this batch id", "model": HistoryStored},
        409: {"description": "batch id reused with other samples"},
        413: {"description": "Body above the size cap, or a batch above the history's bytes per device"},
        415: {"description": "Unknown content type"},
        422: {"description": "Malformed window, or no batch id (request_id)"},
        429: {
            "description": "Past the device's history upload or byte limit, or the fleet's history is at its "
            "limit: retry after Retry-After"
        },
        503: {"description": "Database unavailable: retry after Retry-After"},
    },
)
async def append(
    device_id: DevicePath, request: Request, _: DeviceAccessDep, state: StateDep
) -> JSONResponse:
    limits, settings = state.limits, state.settings
    if (wait := limits.history_uploads.take(device_id)) > 0:
        detail = f"more than {settings.history_uploads_per_minute} history uploads a minute from {device_id}"
        return too_fast("history_rate", detail, wait)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and (wait := limits.history_bytes.take(device_id, int(declared))) > 0:
        return _too_many_bytes(state, device_id, wait)
    body = await request.body()
    if not declared.isdigit() and (wait := limits.history_bytes.take(device_id, len(body))) > 0:
        return _too_many_bytes(state, device_id, wait)
    header, X, y, _encoding = await parse_body(body, request.headers.get("content-type", ""), state)
    mismatch = await anyio.to_thread.run_sync(_mismatch, state, device_id, header.task, int(X.shape[1]))
    if mismatch is not None:
        return JSONResponse({"detail": mismatch, "reason": "history_mismatch"}, status_code=409)
    if header.request_id is None:
        detail = "a history batch needs its batch id in the header's request_id (retries must not add twice)"
        return JSONResponse({"detail": detail, "reason": "batch_id_missing"}, status_code=422)
    batch_id = header.request_id
    try:
        stored = await anyio.to_thread.run_sync(_store, state, device_id, batch_id, X, y, len(body))
    except history.HistoryRefusedError as refused:
        headers = {"Retry-After": str(HISTORY_FULL_RETRY_S)} if refused.status == 429 else None
        body_out = {"detail": refused.detail, "reason": refused.reason}
        return JSONResponse(body_out, status_code=refused.status, headers=headers)
    if stored is None:
        detail = f"batch id {batch_id!r} was stored with other samples; a batch id must not be reused"
        return JSONResponse({"detail": detail, "reason": "batch_id_reused"}, status_code=409)
    replayed, labels = stored
    answer = HistoryStored(device_id=device_id, batch_id=batch_id, n=len(y), replayed=replayed, labels=labels)
    return JSONResponse(
        answer.model_dump(mode="json"),
        status_code=status.HTTP_200_OK if replayed else status.HTTP_201_CREATED,
    )


def _mismatch(state: AppState, device_id: str, task: str, d: int) -> str | None:
    """Why a batch does not fit the device's newest model (another task or width), or None. Such labels
    could never serve its re-tuning recomputes, and one stored batch of them used to fail every later one."""
    with state.sessions() as session:
        newest = session.execute(
            select(ModelRecord.version, ModelRecord.task, ModelRecord.d)
            .where(ModelRecord.device_id == device_id)
            .order_by(ModelRecord.version.desc())
            .limit(1)
        ).first()
    if newest is None or (newest.task == task and newest.d == d):
        return None
    return (
        f"a {task} history batch of {d} features does not fit the device's model (version {newest.version}: "
        f"{newest.task}, {newest.d} features)"
    )


def _too_many_bytes(state: AppState, device_id: str, wait: float) -> JSONResponse:
    detail = f"more than {state.settings.history_bytes_per_minute} bytes of history a minute from {device_id}"
    return too_fast("history_bytes", detail, wait)


def _store(
    state: AppState, device_id: str, batch_id: str, X: FloatArray, y: FloatArray, size: int
) -> tuple[bool, int] | None:
    """Store in one transaction: (replayed, labels held), or None when the batch id was stored with
    other samples (also by a concurrent request)."""
    fleet = (state.fleet_history, state.settings.history_bytes_total)
    for attempt in range(2):
        with state.sessions() as session:
            if not _same_batch(session, device_id, batch_id, X, y):
                return None
            try:
                result = history.store_batch(
                    session, device_id, batch_id, X, y, size, state.history_limits, fleet
                )
                session.commit()
                return result
            except IntegrityError:
                session.rollback()
                if attempt == 1:
                    raise
    raise AssertionError("unreachable")


def _same_batch(session: Session, device_id: str, batch_id: str, X: FloatArray, y: FloatArray) -> bool:
    """False when the batch id was stored with other samples (an idempotency key must not be reused)."""
    stored = session.scalar(
        select(HistoryChunk.data).where(
            HistoryChunk.device_id == device_id, HistoryChunk.batch_id == batch_id
        )
    )
    return stored is None or stored == history.pack(X, y)
