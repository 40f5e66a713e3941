"""The OpenAPI description: FastAPI's schema completed with what FastAPI cannot see.

FastAPI documents a route's body, parameters and declared responses. It does not see the training
route's body (parsed by hand, JSON or binary), nor the refusals that come from the middleware and the
shared dependencies: 401/403/404 from the credential checks, 400/413 from the body reader, 429 from the
failed-authentication limit, 503 while the database is unavailable. :func:`install` adds them to every
route that can answer them, derived from the route's dependencies, so a client (and schemathesis, which
checks every status and body against this document) knows each status a route may answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI, Request, Response, status
from fastapi.dependencies.models import Dependant
from fastapi.exception_handlers import http_exception_handler
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute, RouteContext, iter_route_contexts
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from edgedrift.wire import INT64_MAX, TrainRequest
from edgedrift_cloud.dependencies import (
    device_access,
    get_principal,
    get_session,
    get_state,
    require_operator,
)

__all__ = ["ErrorBody", "install"]

Schema = dict[str, Any]


class ErrorBody(BaseModel):
    """A refusal other than a field error: what went wrong and, where one applies, a machine reason."""

    detail: str
    reason: str | None = None


_ERROR = {"$ref": "#/components/schemas/ErrorBody"}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "required": True,
        "schema": {"type": "integer", "minimum": 0},
    }
}
_CHALLENGE = {
    "WWW-Authenticate": {
        "description": "The scheme to authenticate with (Bearer).",
        "required": True,
        "schema": {"type": "string"},
    }
}


def _error(description: str, headers: Schema | None = None) -> Schema:
    response: Schema = {"description": description, "content": {"application/json": {"schema": _ERROR}}}
    if headers:
        response["headers"] = headers
    return response


BAD_BODY = _error("The body is not valid JSON, or Content-Length is malformed")
UNAUTHENTICATED = _error("Missing or unknown bearer credential", _CHALLENGE)
FORBIDDEN = _error("The credential may not do this (another device's resource, or operator only)")
UNKNOWN_DEVICE = _error("Unknown device")
TOO_LARGE = _error("The body is above the route's size cap")
AUTH_LIMITED = _error(
    "Too many failed authentications from this address: retry after Retry-After", _RETRY_AFTER
)
DATABASE_DOWN = _error("The database is unavailable: retry after Retry-After", _RETRY_AFTER)
#: Every 401 of the API carries the challenge, every 429 (failed-auth limit, training queue, recompute
#: budget) says when to retry.
_ALWAYS_HEADERS = {"401": _CHALLENGE, "429": _RETRY_AFTER}


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` return the completed schema (built once), and every 405 list in ``Allow``
    all the methods of the resource."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app)
        return app.openapi_schema

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == status.HTTP_405_METHOD_NOT_ALLOWED:
            methods = allowed_methods(app, request.url.path)
            exc.headers = {**(exc.headers or {}), "Allow": ", ".join(methods)}
        return await http_exception_handler(request, exc)

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_exception_handler(StarletteHTTPException, http_error)


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """Every method some route of ``path`` answers. Starlette's 405 names only the first route that
    matched the path (``PUT`` for ``/v1/devices/x``, which also answers ``DELETE``)."""
    methods: set[str] = set()
    for route in iter_route_contexts(app.routes):
        regex = getattr(route, "path_regex", None)
        if route.methods and regex is not None and regex.match(path):
            methods |= route.methods
    return sorted(methods)


def build(app: FastAPI) -> Schema:
    """FastAPI's schema, the training window's body schema, the refusals of every route and key
    constraints FastAPI's schema leaves out."""
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    _add_train_request(components)
    components["ErrorBody"] = ErrorBody.model_json_schema()
    validation = components.get("HTTPValidationError")
    for route in iter_route_contexts(app.routes):
        if not isinstance(route.original_route, APIRoute) or not route.include_in_schema:
            continue
        for method in route.methods or ():
            operation = schema["paths"].get(route.path_format, {}).get(method.lower())
            if operation is not None:
                _add_refusals(route, operation, validation is not None)
    _repair(schema)
    return schema


def _add_train_request(components: Schema) -> None:
    """The JSON window schema (with the header rules, ``wire.HEADER_RULES``): the training route parses
    its body itself (JSON or binary), so FastAPI cannot see the model."""
    model_schema = TrainRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(model_schema.pop("$defs", {}))
    components["TrainRequest"] = model_schema


def _calls(dependant: Dependant) -> Iterator[Callable[..., Any]]:
    for sub in dependant.dependencies:
        if sub.call is not None:
            yield sub.call
        yield from _calls(sub)


def _add_refusals(route: RouteContext, operation: Schema, validation: bool) -> None:
    """Add the statuses the route's dependencies and the middleware answer (a route's own declaration
    of a status wins)."""
    calls = set(_calls(route.dependant))
    path = route.path_format or ""
    behind_gate = path.startswith("/v1/")
    has_body = route.body_field is not None or "requestBody" in (route.openapi_extra or {})
    refusals: dict[str, Schema] = {}
    if has_body:
        refusals |= {"400": BAD_BODY, "413": TOO_LARGE}
    if get_principal in calls or (behind_gate and has_body):
        refusals["401"] = UNAUTHENTICATED
    if require_operator in calls or device_access in calls:
        refusals["403"] = FORBIDDEN
    if device_access in calls:
        refusals["404"] = UNKNOWN_DEVICE
    if behind_gate:
        refusals["429"] = AUTH_LIMITED
    if get_session in calls or (path.startswith("/v1/") and get_state in calls):
        refusals["503"] = DATABASE_DOWN
    responses: Schema = operation.setdefault("responses", {})
    for code, response in refusals.items():
        responses.setdefault(code, response)
    for code, response in responses.items():
        if code.startswith("4") or code.startswith("5"):
            _with_body(response, validation and code == "422")
        if code in _ALWAYS_HEADERS:
            response["headers"] = {**_ALWAYS_HEADERS[code], **response.get("headers", {})}


def _with_body(response: Schema, validation: bool) -> None:
    """A refusal declared with a description only gets the error body; a 422 may be a field error
    (FastAPI's shape) or a refusal with a reason (a window that cannot be trained on)."""
    content = response.setdefault("content", {}).setdefault("application/json", {})
    if validation:
        content["schema"] = {"anyOf": [{"$ref": "#/components/schemas/HTTPValidationError"}, _ERROR]}
    else:
        content.setdefault("schema", _ERROR)


_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _repair(node: Any) -> None:
    """Two places where the generated schema says less than the validators do, fixed in every subschema.

    pydantic states a constrained dict key (``dict[ShortText, ...]``) as ``patternProperties`` but still
    allows other keys, which its validator refuses: the object is closed. FastAPI's OpenAPI model holds
    bounds as floats, so an integer bound comes out as ``9.223372036854776e+18`` (2**63, one above the
    BIGINT limit the validator enforces): integer bounds are written as integers, that one exactly."""
    if isinstance(node, dict):
        if "patternProperties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        if node.get("type") == "integer":
            for key in _BOUNDS:
                bound = node.get(key)
                if isinstance(bound, float) and bound.is_integer():
                    node[key] = INT64_MAX if bound == float(INT64_MAX) else int(bound)
        for value in node.values():
            _repair(value)
    elif isinstance(node, list):
        for value in node:
            _repair(value)
