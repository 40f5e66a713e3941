"""Model registry reads: the list of versions, the latest, one version (ETag / If-None-Match)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response, status
from fastapi.responses import JSONResponse

from edgedrift.wire import ModelInfo, ModelVersion
from edgedrift_cloud import registry
from edgedrift_cloud.db.tables import ModelRecord
from edgedrift_cloud.dependencies import DeviceAccessDep, DevicePath, SessionDep

router = APIRouter(prefix="/v1/devices/{device_id}/models", tags=["models"])


@router.get("", response_model=list[ModelInfo], summary="List a device's model versions, newest first")
def list_models(
    device_id: DevicePath,
    _: DeviceAccessDep,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
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
def latest_model(device_id: DevicePath, _: DeviceAccessDep, session: SessionDep, request: Request) -> Any:
    return _reply(registry.get_model(session, device_id, None), device_id, request)


@router.get(
    "/{version}",
    response_model=ModelVersion,
    summary="One model version with its document",
    responses={
        304: {"description": "Not modified (If-None-Match matched)"},
        404: {"description": "No model"},
    },
)
def get_model(
    device_id: DevicePath,
    version: Annotated[int, Path(ge=1, le=2**31 - 1)],
    _: DeviceAccessDep,
    session: SessionDep,
    request: Request,
) -> Any:
    return _reply(registry.get_model(session, device_id, version), device_id, request)


def _reply(record: ModelRecord | None, device_id: str, request: Request) -> Response:
    if record is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"device {device_id!r} has no such model version")
    etag = f'"{record.sha256}"'
    if etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
    body = registry.model_version(record).model_dump(mode="json")
    return JSONResponse(body, headers={"ETag": etag, "Cache-Control": "no-cache"})
