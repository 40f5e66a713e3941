"""Model registry: the list of versions, the latest, one version (ETag / If-None-Match); and the
operator's version management: pin, rollback, aliases, per-version metrics, retention, ONNX export."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response, status
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from edgedrift.wire import ModelInfo, ModelVersion
from edgedrift_cloud import registry, versions
from edgedrift_cloud.db.tables import ModelRecord
from edgedrift_cloud.dependencies import DeviceAccessDep, DevicePath, OperatorDep, SessionDep
from edgedrift_cloud.versions import (
    ALIAS_PATTERN,
    PruneResult,
    RegistryView,
    VersionChoice,
    VersionMetrics,
    VersionRef,
)

router = APIRouter(prefix="/v1/devices/{device_id}/models", tags=["models"])
ONNX_MEDIA_TYPE = "application/onnx"
#: Versions in one page of the list: each entry is at most a few KiB (its ``monitor`` is bounded), so a
#: page stays well under a MiB.
MAX_PAGE = 200


@router.get("", response_model=list[ModelInfo], summary="List a device's model versions, newest first")
def list_models(
    device_id: DevicePath,
    _: DeviceAccessDep,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> list[ModelInfo]:
    return [registry.model_info(r) for r in registry.list_models(session, device_id, limit, offset)]


@router.get(
    "/latest",
    response_model=ModelVersion,
    summary="The newest model version with its document",
    responses={
        304: {"description": "Not modified (If-None-Match matched)"},
        404: {"description": "No model"},
    },
)
def latest_model(
    device_id: DevicePath, _: DeviceAccessDep, session: SessionDep, request: Request
) -> Response:
    return _reply(registry.get_model(session, device_id, None), device_id, request)


VersionPath = Annotated[int, Path(ge=1, le=2**31 - 1)]
AliasPath = Annotated[str, Path(pattern=ALIAS_PATTERN, description="Lower-case name, e.g. production.")]
_OPERATOR_ERRORS: dict[int | str, dict[str, str]] = {
    404: {"description": "Unknown device, version or alias"},
    410: {"description": "Version pruned by retention"},
}


@contextmanager
def _registry_errors() -> Iterator[None]:
    """VersionNotFoundError → 404, VersionPrunedError → 410."""
    try:
        yield
    except versions.VersionPrunedError as exc:
        raise HTTPException(status.HTTP_410_GONE, str(exc)) from None
    except versions.VersionNotFoundError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None


def _change(session: Session, device_id: str, change: Callable[[], object]) -> RegistryView:
    """Apply one registry change, commit, and return the device's registry view (404 / 410 on errors)."""
    with _registry_errors():
        change()
        session.commit()
        return versions.registry_view(session, device_id)


def _drop_alias(session: Session, device_id: str, alias: str) -> None:
    if not versions.delete_alias(session, device_id, alias):
        raise versions.VersionNotFoundError(f"device {device_id!r} has no alias {alias!r}")


@router.get("/registry", response_model=RegistryView, summary="Pin, aliases, newest and serving version")
def registry_state(device_id: DevicePath, _: DeviceAccessDep, session: SessionDep) -> RegistryView:
    with _registry_errors():
        return versions.registry_view(session, device_id)


@router.put(
    "/pin",
    response_model=RegistryView,
    summary="Pin a version: recomputes are answered with it (operator)",
    responses=_OPERATOR_ERRORS,
)
def pin_version(device_id: DevicePath, _: OperatorDep, session: SessionDep, ref: VersionRef) -> RegistryView:
    return _change(session, device_id, lambda: versions.pin(session, device_id, ref.version))


@router.delete(
    "/pin",
    response_model=RegistryView,
    summary="Unpin: the newest version serves (operator)",
    responses={404: {"description": "Unknown device"}},
)
def unpin(device_id: DevicePath, _: OperatorDep, session: SessionDep) -> RegistryView:
    return _change(session, device_id, lambda: versions.pin(session, device_id, None))


@router.post(
    "/rollback",
    response_model=RegistryView,
    summary="Pin the given version, or the one before the version serving now (operator)",
    responses=_OPERATOR_ERRORS,
)
def rollback(
    device_id: DevicePath, _: OperatorDep, session: SessionDep, choice: VersionChoice | None = None
) -> RegistryView:
    to = None if choice is None else choice.version
    return _change(session, device_id, lambda: versions.rollback(session, device_id, to))


@router.put(
    "/aliases/{alias}",
    response_model=RegistryView,
    summary="Point an alias (production, candidate, ...) at a version (operator)",
    responses=_OPERATOR_ERRORS,
)
def set_alias(
    device_id: DevicePath, alias: AliasPath, _: OperatorDep, session: SessionDep, ref: VersionRef
) -> RegistryView:
    return _change(session, device_id, lambda: versions.set_alias(session, device_id, alias, ref.version))


@router.delete(
    "/aliases/{alias}",
    response_model=RegistryView,
    summary="Remove an alias (operator)",
    responses=_OPERATOR_ERRORS,
)
def delete_alias(
    device_id: DevicePath, alias: AliasPath, _: OperatorDep, session: SessionDep
) -> RegistryView:
    return _change(session, device_id, lambda: _drop_alias(session, device_id, alias))


@router.get(
    "/aliases/{alias}",
    response_model=ModelVersion,
    summary="The version an alias points at, with its document",
    responses=_OPERATOR_ERRORS,
)
def alias_model(
    device_id: DevicePath, alias: AliasPath, _: DeviceAccessDep, session: SessionDep, request: Request
) -> Response:
    with _registry_errors():
        return _reply(versions.alias_model(session, device_id, alias), device_id, request)


@router.get(
    "/metrics",
    response_model=list[VersionMetrics],
    summary="Per version: heartbeats, samples, accuracy or RMSE while it was installed",
)
def version_metrics(device_id: DevicePath, _: DeviceAccessDep, session: SessionDep) -> list[VersionMetrics]:
    return versions.version_metrics(session, device_id)


@router.post(
    "/prune",
    response_model=PruneResult,
    summary="Retention: drop the documents of all but the newest `keep`, the pinned and aliased versions",
    responses=_OPERATOR_ERRORS,
)
def prune(
    device_id: DevicePath,
    _: OperatorDep,
    session: SessionDep,
    keep: Annotated[int, Query(ge=1, le=100_000)],
) -> PruneResult:
    with _registry_errors():
        result = versions.prune(session, device_id, keep)
        session.commit()
        return result


@router.get(
    "/{version:int}/onnx",
    response_class=Response,
    summary="One version as an ONNX model, for any ONNX runtime",
    responses={
        200: {"content": {ONNX_MEDIA_TYPE: {}}, "description": "The serialised ONNX ModelProto"},
        304: {"description": "Not modified (If-None-Match matched)"},
        422: {"description": "The model kind has no ONNX export"},
        501: {"description": "The service runs without the onnx extra"},
        **_OPERATOR_ERRORS,
    },
)
def onnx_model(
    device_id: DevicePath, version: VersionPath, _: DeviceAccessDep, session: SessionDep, request: Request
) -> Response:
    with _registry_errors():
        record = versions.stored(session, device_id, version)
    etag = f'"{record.sha256}.onnx"'
    if etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
    try:
        from edgedrift.adapters.onnx import document_to_onnx
    except ImportError:
        raise HTTPException(
            status.HTTP_501_NOT_IMPLEMENTED,
            "ONNX export needs the onnx extra: pip install 'edgedrift-cloud[onnx]'",
        ) from None
    try:
        body = document_to_onnx(record.model)
    except (TypeError, ValueError) as exc:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_ENTITY, f"no ONNX export for this model: {exc}"
        ) from None
    disposition = f'attachment; filename="{device_id}-v{version}.onnx"'
    return Response(
        body, media_type=ONNX_MEDIA_TYPE, headers={"ETag": etag, "Content-Disposition": disposition}
    )


@router.get(
    "/{version:int}",
    response_model=ModelVersion,
    summary="One model version with its document",
    responses={
        304: {"description": "Not modified (If-None-Match matched)"},
        404: {"description": "No model"},
        410: {"description": "Pruned by retention"},
    },
)
def get_model(
    device_id: DevicePath,
    version: VersionPath,
    _: DeviceAccessDep,
    session: SessionDep,
    request: Request,
) -> Response:
    with _registry_errors():
        return _reply(versions.stored(session, device_id, version), device_id, request)


def _reply(record: ModelRecord | None, device_id: str, request: Request) -> Response:
    if record is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"device {device_id!r} has no such model version")
    etag = f'"{record.sha256}"'
    if etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
    body = registry.model_version(record).model_dump(mode="json")
    return JSONResponse(body, headers={"ETag": etag, "Cache-Control": "no-cache"})
