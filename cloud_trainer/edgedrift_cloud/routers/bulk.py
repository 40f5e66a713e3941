"""Bulk endpoints for a fleet (operator): register many devices at once, store a gateway's batch of its
devices' heartbeats in one request."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import APIRouter, HTTPException, status
from pydantic import Field

from edgedrift.wire import DEVICE_ID_PATTERN, HeartbeatBatch, HeartbeatsStored, WireModel
from edgedrift_cloud import bulk
from edgedrift_cloud.auth import new_secret, refuse_weak
from edgedrift_cloud.dependencies import OperatorDep, SessionDep, StateDep
from edgedrift_cloud.errors import committed_or_409

router = APIRouter(prefix="/v1/bulk", tags=["bulk"])

#: Most entries in one bulk request.
MAX_BATCH = 10_000
DeviceId = Annotated[str, Field(pattern=DEVICE_ID_PATTERN)]


class BulkDevice(WireModel):
    device_id: DeviceId
    #: Leave out to have the service generate a 256-bit secret (returned once).
    secret: Annotated[str, Field(min_length=16, max_length=256)] | None = None


class BulkRegistration(WireModel):
    devices: Annotated[list[BulkDevice], Field(min_length=1, max_length=MAX_BATCH)]


def _conflict(registration: BulkRegistration) -> str | None:
    """Why the entries of one batch contradict each other (a device listed twice, two devices given one
    secret), or None. A 409 like a secret another device holds: the request is well formed, its
    registrations cannot all hold."""
    ids = [d.device_id for d in registration.devices]
    if len(set(ids)) != len(ids):
        return "device_id: a device id appears twice"
    secrets = [d.secret for d in registration.devices if d.secret is not None]
    if len(set(secrets)) != len(secrets):
        return "secret: two devices share a secret"
    return None


class BulkRegistered(WireModel):
    created: int
    rotated: int
    #: The generated secrets (only for devices registered without one); not stored, not shown again.
    secrets: dict[str, str]


@router.post(
    "/devices",
    response_model=BulkRegistered,
    summary="Register or rotate up to 10,000 devices in one request (operator)",
    responses={
        409: {"description": "A device listed twice, or a secret used twice or by another device"},
        422: {"description": "A weak secret in production mode (as the service refuses at start)"},
    },
)
def register_devices(
    registration: BulkRegistration, _: OperatorDep, session: SessionDep, state: StateDep
) -> BulkRegistered:
    given = [(["devices", i, "secret"], d.secret) for i, d in enumerate(registration.devices)]
    refuse_weak(state.settings.mode != "development", given)
    conflict = _conflict(registration)
    if conflict is not None:
        raise HTTPException(status.HTTP_409_CONFLICT, conflict)
    generated = {d.device_id: new_secret() for d in registration.devices if d.secret is None}
    secrets = {d.device_id: d.secret or generated[d.device_id] for d in registration.devices}
    before = state.credential_generation
    with committed_or_409(session, "secret: a given secret is already used by another device"):
        done = bulk.register_devices(session, secrets)
    state.wait_heard(before)
    state.tokens.forget_devices(set(secrets))
    state.misses.clear()
    return BulkRegistered(created=done.created, rotated=done.rotated, secrets=generated)


@router.post(
    "/heartbeats",
    response_model=HeartbeatsStored,
    status_code=status.HTTP_201_CREATED,
    summary="Store a batch of devices' heartbeats, as a gateway sends them (operator)",
    responses={404: {"description": "Unknown devices (named in detail); nothing is stored"}},
)
async def post_heartbeats(batch: HeartbeatBatch, _: OperatorDep, state: StateDep) -> HeartbeatsStored:
    beats = [(h.device_id, h.heartbeat) for h in batch.heartbeats]
    try:
        return HeartbeatsStored(
            stored=await state.store_heartbeats(partial(bulk.commit_heartbeats, beats=beats))
        )
    except bulk.UnknownDevicesError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
