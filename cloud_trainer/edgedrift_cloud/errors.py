"""Error responses: every refusal is a JSON body that names the field and the reason.

Validation errors keep FastAPI's shape, ``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}``;
other refusals are ``{"detail": "..."}`` with the matching status.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from fastapi import FastAPI, HTTPException, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError
from sqlalchemy.orm import Session
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edgedrift.wire import HISTORY_BODY_BYTES, WindowError


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(status.HTTP_413_CONTENT_TOO_LARGE, f"request body exceeds {limit} bytes")


#: Body cap of the small routes: a heartbeat, a registration, a pin (a window or a batch may be large).
SMALL_BODY_BYTES = 64 * 1024


def route_body_limit(path: str, limit: int) -> int:
    """The body cap of a path: ``limit`` for training windows, bulk and gateway batches, the wire's
    :data:`~edgedrift.wire.HISTORY_BODY_BYTES` for history uploads (the agent splits its batches to fit),
    64 KiB elsewhere."""
    if path.startswith(("/v1/bulk/", "/v1/gateways/")) or (
        path.startswith("/v1/devices/") and path.rstrip("/").endswith("/models")
    ):
        return limit
    if path.startswith("/v1/devices/") and path.rstrip("/").endswith("/history"):
        return min(limit, HISTORY_BODY_BYTES)
    return min(limit, SMALL_BODY_BYTES)


class BodyLimitMiddleware:
    """Refuses bodies above ``limit`` bytes: at once from Content-Length, or while streaming."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = route_body_limit(str(scope["path"]), self.limit)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            too_large = length.isdigit()
            detail = f"request body exceeds {limit} bytes" if too_large else "bad Content-Length"
            await send(
                {
                    "type": "http.response.start",
                    "status": 413 if too_large else 400,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
                }
            )
            await send({"type": "http.response.body", "body": json.dumps({"detail": detail}).encode()})
            return
        seen = 0

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, limited_receive, send)


@contextmanager
def committed_or_409(session: Session, detail: str) -> Iterator[None]:
    """Run the block's writes and commit; a unique constraint they break (a secret another device
    uses) rolls back and answers 409 with ``detail``."""
    try:
        yield
        session.commit()
    except IntegrityError:
        session.rollback()
        raise HTTPException(status.HTTP_409_CONFLICT, detail) from None


def window_error_body(exc: WindowError) -> dict[str, object]:
    return {"detail": [{"loc": ["body", *exc.field.split(".")], "msg": exc.reason, "type": "value_error"}]}


def _json_safe(value: object) -> object:
    """``value`` with every non-finite float as its text (JSON has no inf or NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


#: Seconds a client waits before retrying while the database is unavailable.
DATABASE_RETRY_AFTER_S = 5


def database_problem(exc: BaseException) -> str:
    """A one-line reason for a database failure, without the URL or any credential."""
    orig = getattr(exc, "orig", None) or exc
    first = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    return f"database unavailable: {first[:200]}"


def install_handlers(app: FastAPI, on_database_error: Callable[[str], None] | None = None) -> None:
    """422 for a bad window; 503 + Retry-After when the database cannot answer or write (unreachable,
    timed out, read-only, disk full), never a 500. ``on_database_error`` hears each reason (``/readyz``
    reports the last one)."""

    @app.exception_handler(WindowError)
    async def _window_error(_request: Request, exc: WindowError) -> JSONResponse:
        return JSONResponse(window_error_body(exc), status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        """FastAPI's 422 body, whose ``input`` may be a number JSON cannot hold (``1e400`` parses as inf):
        such a number is given as text, so the refusal is not a 500."""
        body = {"detail": _json_safe(jsonable_encoder(exc.errors()))}
        return JSONResponse(body, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)

    async def _database_unavailable(_request: Request, exc: Exception) -> JSONResponse:
        reason = database_problem(exc)
        if on_database_error is not None:
            on_database_error(reason)
        return JSONResponse(
            {"detail": reason},
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
        )

    for kind in (OperationalError, SQLAlchemyTimeoutError, InterfaceError):
        app.add_exception_handler(kind, _database_unavailable)
