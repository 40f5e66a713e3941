"""``POST /v1/devices/{id}/models``: train on a window and store the result as a new version."""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
from fastapi import APIRouter, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError

from edgedrift.training.window import TrainOutcome, train_window
from edgedrift.wire import (
    WINDOW_CONTENT_TYPE,
    TrainRequest,
    TrainResponse,
    WindowHeader,
    check_window,
    decode_window,
    window_arrays,
)
from edgedrift_cloud import registry
from edgedrift_cloud.db.tables import ModelRecord
from edgedrift_cloud.dependencies import AppState, DeviceAccessDep, DevicePath, StateDep

log = logging.getLogger("edgedrift.training")
router = APIRouter(prefix="/v1/devices/{device_id}/models", tags=["training"])

_REQUEST_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/TrainRequest"}},
            WINDOW_CONTENT_TYPE: {
                "schema": {"type": "string", "format": "binary"},
                "description": "Compact window: see edgedrift.wire.encode_window (float32 arrays).",
            },
        },
    }
}


def parse_window(body: bytes, content_type: str, state: AppState) -> tuple[WindowHeader, Any, Any, str]:
    """Header, X, y and encoding from a JSON or binary body; every defect raises a 4xx error."""
    media = content_type.split(";")[0].strip().lower()
    if media == WINDOW_CONTENT_TYPE:
        try:
            header, X, y = decode_window(body)
        except ValidationError as exc:
            raise RequestValidationError(_with_prefix(exc, "header")) from None
        encoding = "binary"
    elif media in ("application/json", ""):
        try:
            request = TrainRequest.model_validate_json(body)
        except ValidationError as exc:
            raise RequestValidationError(_with_prefix(exc, "body")) from None
        header = WindowHeader.model_validate(request.model_dump(exclude={"X", "y"}))
        X, y = window_arrays(request)
        encoding = "json"
    else:
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            f"content type {media!r} is not application/json or {WINDOW_CONTENT_TYPE}",
        )
    check_window(header, X, y, max_rows=state.settings.max_rows, max_features=state.settings.max_features)
    return header, X, y, encoding


def _with_prefix(exc: ValidationError, prefix: str) -> list[dict[str, Any]]:
    return [
        {"loc": [prefix, *e["loc"]], "msg": e["msg"], "type": e["type"]}
        for e in exc.errors(include_url=False, include_context=False, include_input=False)
    ]


@router.post(
    "",
    response_model=TrainResponse,
    status_code=status.HTTP_201_CREATED,
    summary="Train a model on a window and store it as the device's next version",
    openapi_extra=_REQUEST_BODY,
    responses={
        200: {"description": "Replay of an earlier request with the same request_id", "model": TrainResponse},
        413: {"description": "Body above the size cap"},
        415: {"description": "Unknown content type"},
    },
)
async def train(device_id: DevicePath, request: Request, principal: DeviceAccessDep, state: StateDep) -> Any:
    body = await request.body()
    header, X, y, encoding = parse_window(body, request.headers.get("content-type", ""), state)
    outcome, record, replayed = await anyio.to_thread.run_sync(
        _train_and_store, state, device_id, principal.name, header, X, y, len(body), encoding
    )
    if outcome is not None and not replayed:
        log.info(
            "recompute",
            extra={
                "device": device_id,
                "version": record.version,
                "learner": header.learner,
                "reason": header.reason,
                "n": record.n,
                "d": record.d,
                "train_ms": round(outcome.train_ms, 3),
                "bytes_in": record.bytes_in,
                "encoding": encoding,
            },
        )
    return _reply(record, replayed=replayed)


def _train_and_store(
    state: AppState,
    device_id: str,
    requested_by: str,
    header: WindowHeader,
    X: Any,
    y: Any,
    bytes_in: int,
    encoding: str,
) -> tuple[TrainOutcome | None, ModelRecord, bool]:
    """Train and store in one worker-thread call (one thread hop per request, not two). A repeated
    request_id returns the stored version without training."""
    if header.request_id is not None:
        with state.sessions() as session:
            earlier = registry.model_by_request_id(session, device_id, header.request_id)
        if earlier is not None:
            return None, earlier, True
    outcome = train_window(header, X, y)
    state.metrics.training_seconds.labels(header.learner).observe(outcome.train_ms / 1000.0)
    new = registry.NewModel(
        device_id=device_id,
        document=outcome.document,
        kind=outcome.kind,
        learner=header.learner,
        task=header.task,
        rebalance=header.rebalance,
        chosen=outcome.chosen,
        scores=outcome.scores,
        n=int(X.shape[0]),
        d=int(X.shape[1]),
        train_ms=outcome.train_ms,
        bytes_in=bytes_in,
        encoding=encoding,
        reason=header.reason,
        requested_by=requested_by,
        monitor=dict(header.monitor),
        request_id=header.request_id,
    )
    record, replayed = _store(state, new)
    return outcome, record, replayed


def _reply(record: ModelRecord, *, replayed: bool) -> JSONResponse:
    """201 with the new version, or 200 when an earlier request with this request_id is replayed."""
    return JSONResponse(
        _response(record, replayed=replayed).model_dump(mode="json"),
        status_code=status.HTTP_200_OK if replayed else status.HTTP_201_CREATED,
        headers={
            "ETag": f'"{record.sha256}"',
            "Location": f"/v1/devices/{record.device_id}/models/{record.version}",
        },
    )


def _store(state: AppState, new: registry.NewModel) -> tuple[ModelRecord, bool]:
    """Insert in one transaction; a concurrent duplicate request_id returns the stored version."""
    with state.sessions() as session:
        try:
            record = registry.store_model(session, new)
            session.commit()
            return record, False
        except IntegrityError:
            session.rollback()
            if new.request_id is None:
                raise
            earlier = registry.model_by_request_id(session, new.device_id, new.request_id)
            if earlier is None:
                raise
            return earlier, True


def _response(record: ModelRecord, *, replayed: bool) -> TrainResponse:
    """The stored version as the API returns it (the document is parsed once, from the registry)."""
    fields = ("device_id", "version", "sha256", "learner", "rebalance", "chosen", "scores", "reason",
              "n", "d", "train_ms", "bytes_in", "bytes_out", "encoding", "created_at")  # fmt: skip
    values = {name: getattr(record, name) for name in fields}
    values.update(model=json.loads(record.document), replayed=replayed)
    return TrainResponse.model_validate(values)
