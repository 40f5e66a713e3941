"""Devices: registration and secret rotation (operator), the fleet list, per-device counters."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, status
from pydantic import Field

from edgedrift.wire import DeviceCounters, WireModel
from edgedrift_cloud import registry
from edgedrift_cloud.auth import new_secret
from edgedrift_cloud.dependencies import DeviceAccessDep, DevicePath, OperatorDep, SessionDep, StateDep

router = APIRouter(prefix="/v1/devices", tags=["devices"])


class DeviceRegistration(WireModel):
    """Leave ``secret`` out to have the service generate a 256-bit one."""

    secret: Annotated[str, Field(min_length=16, max_length=256)] | None = None


class DeviceCredential(WireModel):
    device_id: str
    created: bool
    #: Present only when the service generated the secret; it is not stored and cannot be read again.
    secret: str | None = None


@router.get("", response_model=list[DeviceCounters], summary="Every device with its counters (operator)")
def list_devices(_: OperatorDep, session: SessionDep) -> list[DeviceCounters]:
    return [registry.counters(session, d) for d in registry.list_device_ids(session)]


@router.put(
    "/{device_id}",
    response_model=DeviceCredential,
    summary="Register a device or rotate its secret (operator)",
)
def register_device(
    device_id: DevicePath,
    _: OperatorDep,
    session: SessionDep,
    state: StateDep,
    registration: Annotated[DeviceRegistration | None, Body()] = None,
) -> DeviceCredential:
    given = registration.secret if registration is not None else None
    secret = given or new_secret()
    created = registry.upsert_device(session, device_id, secret)
    session.commit()
    state.tokens.forget_device(device_id)
    return DeviceCredential(device_id=device_id, created=created, secret=None if given else secret)


@router.get(
    "/{device_id}/counters",
    response_model=DeviceCounters,
    status_code=status.HTTP_200_OK,
    summary="Recomputes, bytes, training time and reasons of one device",
)
def device_counters(device_id: DevicePath, _: DeviceAccessDep, session: SessionDep) -> DeviceCounters:
    return registry.counters(session, device_id)
