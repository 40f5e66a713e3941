"""Devices: registration, secret rotation and deregistration (operator), the fleet list, counters."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, HTTPException, Query, Response, status
from pydantic import Field

from edgedrift.wire import DeviceCounters, WireModel
from edgedrift_cloud import counters_query, registry, versions
from edgedrift_cloud.auth import new_secret, refuse_weak
from edgedrift_cloud.dependencies import DeviceAccessDep, DevicePath, OperatorDep, SessionDep, StateDep
from edgedrift_cloud.errors import committed_or_409

router = APIRouter(prefix="/v1/devices", tags=["devices"])


class DeviceRegistration(WireModel):
    """Leave ``secret`` out to have the service generate a 256-bit one."""

    secret: Annotated[str, Field(min_length=16, max_length=256)] | None = None


class DeviceCredential(WireModel):
    device_id: str
    created: bool
    #: Present only when the service generated the secret; it is not stored and cannot be read again.
    secret: str | None = None


@router.get(
    "",
    response_model=list[DeviceCounters],
    summary="One page of devices (by id) with their counters; the total in X-Total-Count (operator)",
)
def list_devices(
    _: OperatorDep,
    session: SessionDep,
    response: Response,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> list[DeviceCounters]:
    total, page = counters_query.counters_page(session, limit, offset)
    response.headers["X-Total-Count"] = str(total)
    return page


@router.put(
    "/{device_id}",
    response_model=DeviceCredential,
    summary="Register a device or rotate its secret (operator)",
    responses={
        409: {"description": "Another device already uses this secret"},
        422: {"description": "A weak secret in production mode (as the service refuses at start)"},
    },
)
def register_device(
    device_id: DevicePath,
    _: OperatorDep,
    session: SessionDep,
    state: StateDep,
    registration: Annotated[DeviceRegistration | None, Body()] = None,
) -> DeviceCredential:
    given = registration.secret if registration is not None else None
    refuse_weak(state.settings.mode != "development", [(["secret"], given)])
    secret = given or new_secret()
    before = state.credential_generation
    with committed_or_409(session, "secret: another device already uses this secret; choose another"):
        created = registry.upsert_device(session, device_id, secret)
    state.wait_heard(before)
    state.tokens.forget_device(device_id)
    state.misses.clear()
    return DeviceCredential(device_id=device_id, created=created, secret=None if given else secret)


@router.delete(
    "/{device_id}",
    response_model=versions.Deregistration,
    summary="Deregister a device: revoke its credential, keep its history or purge it (operator)",
    responses={404: {"description": "Unknown device"}},
)
def deregister_device(
    device_id: DevicePath,
    _: OperatorDep,
    session: SessionDep,
    state: StateDep,
    purge: Annotated[bool, Query(description="Also delete its versions and heartbeats.")] = False,
) -> versions.Deregistration:
    before = state.credential_generation
    try:
        result = versions.deregister(session, device_id, purge)
    except versions.VersionNotFoundError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    session.commit()
    state.wait_heard(before)
    state.tokens.forget_device(device_id)
    return result


@router.get(
    "/{device_id}/counters",
    response_model=DeviceCounters,
    status_code=status.HTTP_200_OK,
    summary="Recomputes, bytes, training time and reasons of one device",
)
def device_counters(device_id: DevicePath, _: DeviceAccessDep, session: SessionDep) -> DeviceCounters:
    return registry.counters(session, device_id)
