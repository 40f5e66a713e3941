"""``POST /v1/devices/{id}/models``: train on a window and store the result as a new version, in this
worker's pool (``training=inline``) or as a job of the training queue (``training=queue``), whose 202
``GET /v1/devices/{id}/jobs/{job_id}`` follows."""

from __future__ import annotations

import hashlib
import logging
import random
import time
import uuid
from typing import Annotated, Any

import anyio
import numpy as np
from fastapi import APIRouter, HTTPException, Path, Request, status
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

from edgedrift.models.losses import FloatArray
from edgedrift.training.window import TrainOutcome, train_window
from edgedrift.wire import (
    WINDOW_CONTENT_TYPE,
    Encoding,
    TrainResponse,
    WindowHeader,
    encode_window,
)
from edgedrift_cloud import budget, history, job_queue, pricing, recompute, registry, tracing, versions
from edgedrift_cloud.admission import ClientGoneError
from edgedrift_cloud.db.tables import ModelRecord
from edgedrift_cloud.dependencies import AppState, DeviceAccessDep, DevicePath, StateDep
from edgedrift_cloud.routers.window_body import parse_body

log = logging.getLogger("edgedrift.training")
router = APIRouter(prefix="/v1/devices/{device_id}/models", tags=["training"])
#: The jobs of ``training=queue`` that a training request answered with 202.
jobs_router = APIRouter(prefix="/v1/devices/{device_id}/jobs", tags=["training"])

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
        202: {"description": "Queued (training=queue) and not done yet: poll the Location"},
        429: {"description": "Training queue full or recompute budget spent: retry after Retry-After"},
        503: {"description": "Database or training queue unavailable: retry after Retry-After"},
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
        if state.jobs is not None:
            try:
                return await _queued(device_id, request, principal.name, state, len(body), parsed)
            except job_queue.QueueUnavailableError as exc:
                return _queue_unavailable(str(exc))
        return await _admitted(device_id, request, principal.name, state, len(body), parsed)
    except (ClientDisconnect, ClientGoneError):
        return Response(status_code=CLIENT_CLOSED)
    finally:
        trainings.leave()


@jobs_router.get(
    "/{job_id}",
    response_model=TrainResponse,
    summary="Wait for a queued recompute (the 202 of a training request names it): its version when done",
    responses={
        202: {"description": "Still queued or running: poll again (Retry-After)"},
        404: {"description": "No such job (it expired: send the training request again)"},
        410: {"description": "Cancelled: nobody polled it within the poll deadline"},
        429: {"description": "Too many requests wait in this worker: retry after Retry-After"},
        500: {"description": "The training failed"},
    },
)
async def poll_job(
    device_id: DevicePath,
    job_id: Annotated[str, Path(pattern="^[0-9a-f]{32}$")],
    request: Request,
    _principal: DeviceAccessDep,
    state: StateDep,
) -> Response:
    """Waits up to ``jobs_wait_s`` like the training request did, keeping the job alive; a job nobody
    polls for ``jobs_poll_deadline_s`` is cancelled."""
    if state.jobs is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "training runs in the API (training=inline): no jobs")
    trainings = state.trainings
    if not trainings.try_enter():
        return _too_many(state, "queue_full", "too many requests wait for trainings", trainings.retry_after())
    try:
        return await _await_job(state, request, device_id, job_id, replayed=False, poll=True)
    except job_queue.QueueUnavailableError as exc:
        return _queue_unavailable(str(exc))
    finally:
        trainings.leave()


async def _queued(
    device_id: str,
    request: Request,
    requested_by: str,
    state: StateDep,
    size: int,
    parsed: tuple[WindowHeader, FloatArray, FloatArray, Encoding],
) -> Response:
    """The queue's path (``training=queue``): a repeat of a request id waits for its job; otherwise the
    registry's answers (a pinned device, a stored version), the budget, then a job on the queue, which
    this request waits for a while (:func:`_await_job`)."""
    jobs = state.jobs
    assert jobs is not None
    header, X, y, encoding = parsed
    fingerprint = window_fingerprint(header, X, y)
    if header.request_id is None:  # every job has an idempotency key
        header = header.model_copy(update={"request_id": f"job-{uuid.uuid4().hex}"})
    assert header.request_id is not None
    job = job_queue.job_id(header.request_id)
    earlier = await jobs.get(device_id, job)
    if earlier is not None and earlier.state not in ("failed", "cancelled"):
        if earlier.fingerprint != fingerprint:
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                f"request_id {header.request_id!r} was used for another window; an idempotency key must "
                "not be reused with a different body",
            )
        return await _await_job(state, request, device_id, job, replayed=True)
    waiting = await jobs.queued()
    state.metrics.jobs_waiting.set(waiting)
    if waiting >= state.settings.jobs_max_queued:
        return _too_many(state, "queue_full", "the training queue is full", state.trainings.retry_after())
    admitted_in = budget.current_minute()
    answer = await _admit(state, device_id, header, fingerprint, admitted_in)
    if answer is not None:
        return answer
    if header.retune is not None and await jobs.queued() > state.settings.retune_max_queued:
        state.metrics.retune_deferred.inc()
        header = header.model_copy(update={"retune": None})
    fields: dict[str, str | bytes] = {
        "device": device_id,
        "window": encode_window(header, X, y, dtype="float64"),
        "size": str(size),
        "encoding": encoding,
        "requested_by": requested_by,
        "minute": str(admitted_in),
    }
    try:
        created = await jobs.create(device_id, job, fingerprint, fields)
    except job_queue.QueueUnavailableError:
        await anyio.to_thread.run_sync(_refund, state, device_id, admitted_in)
        raise
    if created:
        state.metrics.recompute_admitted.inc()
    else:  # a concurrent repeat of this request id queued it first: one job, one budget take
        await anyio.to_thread.run_sync(_refund, state, device_id, admitted_in)
    return await _await_job(state, request, device_id, job, replayed=not created)


async def _await_job(
    state: AppState, request: Request, device_id: str, job: str, *, replayed: bool, poll: bool = False
) -> Response:
    """Wait up to ``jobs_wait_s`` for a job: 201 (200 for a repeat or a ``poll``) with its version when
    it is done, else 202 with the job to poll (``Location``); 410 for a cancelled job, 500 for a failed
    one."""
    jobs = state.jobs
    assert jobs is not None
    try:
        current = await jobs.wait(device_id, job, state.settings.jobs_wait_s, request.is_disconnected)
    except ClientGoneError:
        return Response(status_code=CLIENT_CLOSED)
    if current is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job} for device {device_id}")
    if current.state == "done" and current.version is not None:
        version = current.version
        record = await anyio.to_thread.run_sync(
            state.with_session, lambda s: registry.get_model(s, device_id, version)
        )
        if record is None:
            raise HTTPException(status.HTTP_410_GONE, f"version {version} of job {job} was pruned")
        answer = _reply(record, replayed=replayed)
        if poll:
            answer.status_code = status.HTTP_200_OK
        return answer
    if current.state == "failed":
        body = {"detail": f"the training failed: {current.error}", "reason": "training_failed"}
        return JSONResponse(body, status_code=status.HTTP_500_INTERNAL_SERVER_ERROR)
    if current.state == "cancelled":
        body = {"detail": "the job was cancelled: nobody waited for it", "reason": "job_cancelled"}
        return JSONResponse(body, status_code=status.HTTP_410_GONE)
    location = f"/v1/devices/{device_id}/jobs/{job}"
    return JSONResponse(
        {"job_id": job, "state": current.state, "attempts": current.attempts, "poll": location},
        status_code=status.HTTP_202_ACCEPTED,
        headers={"Location": location, "Retry-After": "1"},
    )


def _queue_unavailable(detail: str) -> JSONResponse:
    """503 with Retry-After: the training queue's Redis did not answer (nothing was queued)."""
    return JSONResponse(
        {"detail": detail, "reason": "queue_unavailable"},
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": "5"},
    )


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
    answer = await _admit(state, device_id, header, fingerprint, admitted_in)
    if answer is not None:
        return answer
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
    new = recompute.new_model(
        device_id, header, outcome, X, size=size, encoding=encoding, requested_by=requested_by,
        fingerprint=fingerprint, edge=edge,
    )  # fmt: skip
    record, replayed = await anyio.to_thread.run_sync(_store, state, new)
    if not replayed:
        recompute.log_stored(
            log, device_id, record, header, outcome, bytes_in=record.bytes_in, encoding=encoding
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
    recompute.refund(state.sessions, _limits(state), device_id, minute)


async def _admit(
    state: AppState, device_id: str, header: WindowHeader, fingerprint: str, admitted_in: int
) -> Response | None:
    """The registry's and the budget's answer before any training (the inline and the queue paths): a
    429 when the budget is spent, the stored version for a pinned device or a repeated request id, else
    None (admitted: a recompute was taken from the budget in minute ``admitted_in``)."""
    early = await anyio.to_thread.run_sync(
        _before_training, state, device_id, header, fingerprint, admitted_in
    )
    if isinstance(early, str):
        wait = budget.retry_after(time.time(), random.random())
        return _too_many(state, early, f"the recompute {early.replace('_', ' ')} is spent", wait)
    if early is not None:
        record, replayed = early
        return _reply(record, replayed=replayed, pinned=not replayed)
    return None


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
    try:
        recompute.check_same_request(earlier, fingerprint)
    except recompute.RequestIdReusedError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None


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
    try:
        return recompute.store_once(state.sessions, new)
    except recompute.RequestIdReusedError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None


def _response(record: ModelRecord, *, replayed: bool, pinned: bool = False) -> TrainResponse:
    """The stored version as the API returns it (the document is parsed once, from the registry)."""
    stored = TrainResponse.model_validate(record, from_attributes=True)
    return stored.model_copy(update={"replayed": replayed, "pinned": pinned})
