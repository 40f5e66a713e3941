"""``POST /v1/devices/{id}/models``: train on a window and store the result as a new version."""

from __future__ import annotations

import hashlib
import logging
import random
import time
from typing import Any, TypedDict

import anyio
import numpy as np
from fastapi import APIRouter, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError
from starlette.requests import ClientDisconnect

from edgedrift.models.losses import FloatArray
from edgedrift.training.window import TrainOutcome, train_window
from edgedrift.wire import (
    WINDOW_CONTENT_TYPE,
    Encoding,
    TrainRequest,
    TrainResponse,
    WindowHeader,
    check_window,
    decode_window,
    window_arrays,
)
from edgedrift_cloud import budget, history, pricing, registry, tracing, versions
from edgedrift_cloud.admission import ClientGoneError
from edgedrift_cloud.db.tables import ModelRecord
from edgedrift_cloud.dependencies import AppState, DeviceAccessDep, DevicePath, StateDep

log = logging.getLogger("edgedrift.training")
router = APIRouter(prefix="/v1/devices/{device_id}/models", tags=["training"])

#: Bodies above this size are parsed in a worker thread, so a large window never blocks the event loop.
PARSE_INLINE_BYTES = 256 * 1024
#: Logged and counted status of a request whose client went away (nginx's convention; never sent).
CLIENT_CLOSED = 499

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


def parse_window(
    body: bytes, content_type: str, state: AppState
) -> tuple[WindowHeader, FloatArray, FloatArray, Encoding]:
    """Header, X, y and encoding from a JSON or binary body; every defect raises a 4xx error."""
    media = content_type.split(";")[0].strip().lower()
    encoding: Encoding
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


async def parse_body(
    body: bytes, content_type: str, state: AppState
) -> tuple[WindowHeader, FloatArray, FloatArray, Encoding]:
    """:func:`parse_window`, in a worker thread for a body above PARSE_INLINE_BYTES (a large window
    never blocks the event loop)."""
    if len(body) > PARSE_INLINE_BYTES:
        return await anyio.to_thread.run_sync(parse_window, body, content_type, state)
    return parse_window(body, content_type, state)


class _FieldError(TypedDict):
    """One entry of a 422 body's ``detail`` (FastAPI's shape)."""

    loc: list[int | str]
    msg: str
    type: str


def _with_prefix(exc: ValidationError, prefix: str) -> list[_FieldError]:
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
        409: {"description": "request_id reused with another window"},
        413: {"description": "Body above the size cap"},
        415: {"description": "Unknown content type"},
        429: {"description": "Training queue full or recompute budget spent: retry after Retry-After"},
        503: {"description": "Database unavailable: retry after Retry-After"},
    },
)
async def train(
    device_id: DevicePath, request: Request, principal: DeviceAccessDep, state: StateDep
) -> Response:
    try:
        body = await request.body()  # the whole body before anything else: a place is taken only then
        parsed = await parse_body(body, request.headers.get("content-type", ""), state)
        header, X, _y, _encoding = parsed
        price = pricing.train_cost(header, int(X.shape[0]), int(X.shape[1]))
        if header.retune is not None and price.cost <= state.settings.max_train_cost:
            held = await anyio.to_thread.run_sync(_held_labels, state, device_id, int(X.shape[1]))
            price = pricing.train_cost(header, int(X.shape[0]), int(X.shape[1]), held)
        if price.cost > state.settings.max_train_cost:
            return _over_cost(state, price)
    except ClientDisconnect:
        return Response(status_code=CLIENT_CLOSED)
    trainings = state.trainings
    if not trainings.try_enter():
        return _too_many(state, "queue_full", "the training queue is full", trainings.retry_after())
    try:
        return await _admitted(device_id, request, principal.name, state, len(body), parsed)
    except (ClientDisconnect, ClientGoneError):
        return Response(status_code=CLIENT_CLOSED)
    finally:
        trainings.leave()


def _held_labels(state: AppState, device_id: str, d: int) -> int:
    with state.sessions() as session:
        return history.held_labels(session, device_id, d, state.history_limits)


async def _admitted(
    device_id: str,
    request: Request,
    requested_by: str,
    state: StateDep,
    size: int,
    parsed: tuple[WindowHeader, FloatArray, FloatArray, Encoding],
) -> Response:
    """Answer a pinned device or a repeated request_id from the registry, take a recompute from the
    budget, train in the pool and store."""
    header, X, y, encoding = parsed
    fingerprint = window_fingerprint(header, X, y)
    admitted_in = budget.current_minute()
    early = await anyio.to_thread.run_sync(
        _before_training, state, device_id, header, fingerprint, admitted_in
    )
    if isinstance(early, str):
        wait = budget.retry_after(time.time(), random.random())
        return _too_many(state, early, f"the recompute {early.replace('_', ' ')} is spent", wait)
    if early is not None:
        record, replayed = early
        return _reply(record, replayed=replayed, pinned=not replayed)
    state.metrics.recompute_admitted.inc()
    edge: dict[str, Any] | None = None
    attributes: dict[str, str | int] = {
        "edgedrift.device_id": device_id,
        "edgedrift.learner": header.learner,
        "edgedrift.rows": len(y),
    }
    with tracing.child_span("edgedrift.train", attributes) as span:
        try:
            if header.retune is None:
                outcome = await state.trainings.run(request.is_disconnected, train_window, header, X, y)
            elif state.trainings.queued > state.settings.retune_max_queued:
                state.metrics.retune_deferred.inc()
                plain = header.model_copy(update={"retune": None})
                outcome = await state.trainings.run(request.is_disconnected, train_window, plain, X, y)
            else:
                outcome, edge = await _retune(state, request, device_id, header, X, y)
        except Exception:
            await anyio.to_thread.run_sync(_refund, state, device_id, admitted_in)
            raise
        span.set_attribute("edgedrift.train_ms", outcome.train_ms)
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
        bytes_in=size,
        encoding=encoding,
        reason=header.reason,
        requested_by=requested_by,
        monitor=dict(header.monitor),
        request_id=header.request_id,
        request_sha256=fingerprint,
        edge=edge,
    )
    record, replayed = await anyio.to_thread.run_sync(_store, state, new)
    if not replayed:
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


async def _retune(
    state: AppState, request: Request, device_id: str, header: WindowHeader, X: FloatArray, y: FloatArray
) -> tuple[TrainOutcome, dict[str, Any]]:
    """A re-tuning recompute: a job of the pool that loads the device's stored history when it runs."""
    limits = state.history_limits
    if state.trainings.processes:
        s = state.settings
        timeouts = (s.database_connect_timeout_s, s.database_statement_timeout_s)
        source = history.HistorySource(device_id, limits, s.database_url, timeouts)
    else:
        source = history.HistorySource(device_id, limits, sessions=state.sessions)
    done = await state.trainings.run(request.is_disconnected, history.retune_job, source, header, X, y)
    return done.outcome, done.edge


def window_fingerprint(header: WindowHeader, X: FloatArray, y: FloatArray) -> str:
    """sha256 of what a request asks for (the header without request_id, X and y as float64): the
    same window retried matches, another window under the same request_id does not."""
    digest = hashlib.sha256(header.model_dump_json(exclude={"request_id"}).encode())
    digest.update(np.ascontiguousarray(X, dtype="<f8").tobytes())
    digest.update(np.ascontiguousarray(y, dtype="<f8").tobytes())
    return digest.hexdigest()


def _limits(state: AppState) -> budget.BudgetLimits:
    return budget.BudgetLimits(
        state.settings.recompute_budget_per_minute, state.settings.recompute_budget_per_device_per_minute
    )


def _refund(state: AppState, device_id: str, minute: int) -> None:
    """The budget back when an admitted training produced no version (it failed, or its client left)."""
    limits = _limits(state)
    if limits.enabled:
        with state.sessions() as session:
            budget.refund(session, limits, device_id, minute)


def _before_training(
    state: AppState, device_id: str, header: WindowHeader, fingerprint: str, minute: int
) -> tuple[ModelRecord, bool] | budget.Refusal | None:
    """What the registry answers without training: (the pinned version, False), (the version of an
    earlier request with this request_id, True), a spent budget (of ``minute``), or None: train."""
    with state.sessions() as session:
        try:
            pinned = versions.pinned_model(session, device_id)
        except versions.VersionPrunedError as exc:  # stored before pins and retention were serialised
            raise HTTPException(status.HTTP_409_CONFLICT, f"{exc}: pin another version") from None
        if pinned is not None:
            return pinned, False
        if header.request_id is not None:
            earlier = registry.model_by_request_id(session, device_id, header.request_id)
            if earlier is not None:
                _same_request(earlier, fingerprint)
                return earlier, True
        limits = _limits(state)
        if limits.enabled:
            strength = budget.evidence(header.reason, dict(header.monitor))
            refusal = budget.admit(session, limits, device_id, strength, minute)
            budget.prune_if_due(session, minute)
            return refusal
    return None


def _over_cost(state: AppState, price: pricing.TrainCost) -> JSONResponse:
    """422 ``cost_cap`` before any training: the window costs more than one request may."""
    state.metrics.recompute_rejected.labels("cost_cap").inc()
    cap = state.settings.max_train_cost
    search = (
        f" plus a re-tuning search over {price.history} history labels costing {price.search}"
        if price.search
        else ""
    )
    detail = (
        f"window of {price.rows} rows x {price.features} features x grid {price.grid}{search} has training "
        f"cost {price.cost} above the cap {cap} (rows x d x grid; grid = the fits of a C='auto' search, "
        "else 1; a re-tuning search: its fits and replays, docs/cloud-trainer.md): send fewer rows or "
        "features, a fixed C, or no re-tuning"
    )
    return JSONResponse({"detail": detail, "reason": "cost_cap"}, status_code=422)


def _same_request(earlier: ModelRecord, fingerprint: str | None) -> None:
    """409 when a request_id comes back with another body (an idempotency key must not be reused)."""
    if (
        earlier.request_sha256 is not None
        and fingerprint is not None
        and earlier.request_sha256 != fingerprint
    ):
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"request_id {earlier.request_id!r} was used for another window (version {earlier.version}); "
            "an idempotency key must not be reused with a different body",
        )


def _too_many(state: AppState, reason: str, detail: str, retry_after: int) -> JSONResponse:
    """429 with Retry-After, counted by reason."""
    state.metrics.recompute_rejected.labels(reason).inc()
    return JSONResponse(
        {"detail": detail, "reason": reason},
        status_code=status.HTTP_429_TOO_MANY_REQUESTS,
        headers={"Retry-After": str(retry_after)},
    )


def _reply(record: ModelRecord, *, replayed: bool, pinned: bool = False) -> JSONResponse:
    """201 with the new version, or 200 when an earlier request with this request_id is replayed or the
    device is pinned."""
    return JSONResponse(
        _response(record, replayed=replayed, pinned=pinned).model_dump(mode="json"),
        status_code=status.HTTP_200_OK if replayed or pinned else status.HTTP_201_CREATED,
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
            _same_request(earlier, new.request_sha256)
            return earlier, True


def _response(record: ModelRecord, *, replayed: bool, pinned: bool = False) -> TrainResponse:
    """The stored version as the API returns it (the document is parsed once, from the registry)."""
    stored = TrainResponse.model_validate(record, from_attributes=True)
    return stored.model_copy(update={"replayed": replayed, "pinned": pinned})
