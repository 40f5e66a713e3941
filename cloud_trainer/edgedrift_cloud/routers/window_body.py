"""A training window's request body: JSON or the compact binary layout, parsed and checked, every defect a
4xx that names the field (the training and history routes share it)."""

from __future__ import annotations

from typing import TypedDict

import anyio
from fastapi import HTTPException, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from edgedrift.models.losses import FloatArray
from edgedrift.wire import (
    WINDOW_CONTENT_TYPE,
    Encoding,
    TrainRequest,
    WindowHeader,
    check_window,
    decode_window,
    window_arrays,
)
from edgedrift_cloud.dependencies import AppState

#: Bodies above this size are parsed in a worker thread, so a large window never blocks the event loop.
PARSE_INLINE_BYTES = 256 * 1024


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
