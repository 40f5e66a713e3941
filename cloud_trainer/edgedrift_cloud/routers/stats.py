"""Edge heartbeats: ``POST`` stores one, ``GET`` returns the recent time series."""

from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import APIRouter, Query, status
from fastapi.responses import Response
from sqlalchemy.orm import Session

from edgedrift.wire import Heartbeat, HeartbeatRecord
from edgedrift_cloud import registry
from edgedrift_cloud.dependencies import DeviceAccessDep, DevicePath, SessionDep, StateDep
from edgedrift_cloud.rate_limit import too_fast

router = APIRouter(prefix="/v1/devices/{device_id}/stats", tags=["stats"])


@router.post(
    "",
    response_model=HeartbeatRecord,
    status_code=status.HTTP_201_CREATED,
    summary="Store a heartbeat",
    responses={429: {"description": "More heartbeats than the device's limit: retry after Retry-After"}},
)
async def post_stats(
    device_id: DevicePath, beat: Heartbeat, _: DeviceAccessDep, state: StateDep
) -> HeartbeatRecord | Response:
    limits, settings = state.limits, state.settings
    if (wait := limits.heartbeats.take(device_id)) > 0:
        limit = settings.heartbeats_per_minute
        return too_fast("heartbeat_rate", f"more than {limit} heartbeats a minute from {device_id}", wait)
    if (wait := limits.heartbeat_bytes.take(device_id, len(beat.model_dump_json()))) > 0:
        detail = f"more than {settings.heartbeat_bytes_per_minute} heartbeat bytes a minute from {device_id}"
        return too_fast("heartbeat_bytes", detail, wait)

    def store(session: Session) -> HeartbeatRecord:
        record = registry.add_heartbeat(session, device_id, beat)
        session.commit()
        return registry.heartbeat_out(record)

    return await anyio.to_thread.run_sync(state.with_session, store)


@router.get("", response_model=list[HeartbeatRecord], summary="Recent heartbeats, oldest first")
def get_stats(
    device_id: DevicePath,
    _: DeviceAccessDep,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> list[HeartbeatRecord]:
    return [registry.heartbeat_out(r) for r in registry.list_heartbeats(session, device_id, limit)]
