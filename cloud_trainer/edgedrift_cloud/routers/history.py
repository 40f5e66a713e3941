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
from edgedrift_cloud.db.tables import HistoryChunk
from edgedrift_cloud.dependencies import AppState, DeviceAccessDep, DevicePath, StateDep
from edgedrift_cloud.routers.training import parse_body

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
        429: {"description": "The fleet's history is at its limit: retry after Retry-After"},
        503: {"description": "Database unavailable: retry after Retry-After"},
    },
)
async def append(
    device_id: DevicePath, request: Request, _: DeviceAccessDep, state: StateDep
) -> JSONResponse:
    body = await request.body()
    header, X, y, _encoding = await parse_body(body, request.headers.get("content-type", ""), state)
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
