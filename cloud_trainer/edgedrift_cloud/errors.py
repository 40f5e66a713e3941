"""Error responses: every refusal is a JSON body that names the field and the reason.

Validation errors keep FastAPI's shape, ``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}``;
other refusals are ``{"detail": "..."}`` with the matching status.
"""

from __future__ import annotations

import json

from fastapi import FastAPI, HTTPException, Request, status
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edgedrift.wire import WindowError


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(status.HTTP_413_CONTENT_TOO_LARGE, f"request body exceeds {limit} bytes")


class BodyLimitMiddleware:
    """Refuses bodies above ``limit`` bytes: at once from Content-Length, or while streaming."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            too_large = length.isdigit()
            detail = f"request body exceeds {self.limit} bytes" if too_large else "bad Content-Length"
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
                if seen > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        await self.app(scope, limited_receive, send)


def window_error_body(exc: WindowError) -> dict[str, object]:
    return {"detail": [{"loc": ["body", *exc.field.split(".")], "msg": exc.reason, "type": "value_error"}]}


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(WindowError)
    async def _window_error(_request: Request, exc: WindowError) -> JSONResponse:
        return JSONResponse(window_error_body(exc), status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)
