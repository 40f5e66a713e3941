"""Edge heartbeats: ``POST`` stores one, ``GET`` returns the recent time series."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from edgedrift.wire import Heartbeat, HeartbeatRecord
from edgedrift_cloud import registry
from edgedrift_cloud.dependencies import DeviceAccessDep, DevicePath, SessionDep

router = APIRouter(prefix="/v1/devices/{device_id}/stats", tags=["stats"])


@router.post(
    "", response_model=HeartbeatRecord, status_code=status.HTTP_201_CREATED, summary="Store a heartbeat"
)
def post_stats(
    device_id: DevicePath, beat: Heartbeat, _: DeviceAccessDep, session: SessionDep
) -> HeartbeatRecord:
    record = registry.add_heartbeat(session, device_id, beat)
    session.commit()
    return registry.heartbeat_out(record)


@router.get("", response_model=list[HeartbeatRecord], summary="Recent heartbeats, oldest first")
def get_stats(
    device_id: DevicePath,
    _: DeviceAccessDep,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 500,
) -> list[HeartbeatRecord]:
    return [registry.heartbeat_out(r) for r in registry.list_heartbeats(session, device_id, limit)]
