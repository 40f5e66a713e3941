"""Gateways: the operator registers a gateway and assigns devices to it; the gateway, with its own
credential, fetches its device list and the secrets of devices new to it (``/sync``), so devices are
provisioned through this API and picked up by a running gateway without a restart."""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Body, Depends, HTTPException, Path, Request, Response, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import Field
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from edgedrift.wire import DEVICE_ID_PATTERN, GatewayHeartbeatsStored, HeartbeatBatch, WireModel
from edgedrift_cloud import bulk, gateway_registry
from edgedrift_cloud.auth import new_secret, refuse_weak, same_secret
from edgedrift_cloud.dependencies import DevicePath, OperatorDep, SessionDep, StateDep

router = APIRouter(
    prefix="/v1/gateways",
    tags=["gateways"],
    responses={401: {"description": "Missing or unknown credential (gateway secret or operator token)"}},
)

GatewayPath = Annotated[
    str,
    Path(pattern=DEVICE_ID_PATTERN, description="Gateway id: letters, digits, '_' and '-' (1-64)."),
]
DeviceId = Annotated[str, Field(pattern=DEVICE_ID_PATTERN)]
_bearer = HTTPBearer(auto_error=False, description="The gateway's secret or the operator token.")


class GatewayRegistration(WireModel):
    """Leave ``secret`` out to have the service generate a 256-bit one."""

    secret: Annotated[str, Field(min_length=16, max_length=256)] | None = None


class GatewayCredential(WireModel):
    gateway_id: str
    created: bool
    #: Present only when the service generated the secret; it is not stored and cannot be read again.
    secret: str | None = None


class Assignment(WireModel):
    devices: Annotated[list[DeviceId], Field(min_length=1, max_length=10_000)]


class Assigned(WireModel):
    gateway_id: str
    devices: int
    created: int
    moved: int


class SyncRequest(WireModel):
    #: Devices whose secret the gateway holds already (the others get a fresh one).
    known: Annotated[list[DeviceId], Field(max_length=100_000, default_factory=list)]


class GatewayDevice(WireModel):
    device_id: str
    secret: str | None = None
    #: In a hand-over (``gateway_registry``): record, release (the source); wait, hold, take (the target).
    handover: str | None = None


class HandoverStep(WireModel):
    phase: Literal["recording", "subscribed"]


class HandoverState(WireModel):
    device_id: str
    #: The device's fresh secret (the source's copy stops working).
    secret: str
    #: The device's checkpoint as the source left it, base64.
    state: str


class GatewayDevices(WireModel):
    gateway_id: str
    devices: list[GatewayDevice]


async def gateway_or_operator(
    gateway_id: GatewayPath,
    state: StateDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """``operator`` or ``gateway``; 401 for a missing or wrong credential, 404 for an unknown gateway."""
    if credentials is None or not credentials.credentials:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing bearer credential", _CHALLENGE)
    token = credentials.credentials
    if same_secret(token, state.settings.operator_token.get_secret_value()):
        return "operator"

    def check() -> bool:
        with state.sessions() as session:
            return gateway_registry.gateway_accepts(session, gateway_id, token)

    if not await anyio.to_thread.run_sync(check):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "unknown credential for this gateway", _CHALLENGE)
    return "gateway"


CallerDep = Annotated[str, Depends(gateway_or_operator)]
_CHALLENGE = {"WWW-Authenticate": "Bearer"}
_UNKNOWN_GATEWAY: dict[int | str, dict[str, Any]] = {404: {"description": "Unknown gateway"}}


def _known_gateway(session: SessionDep, gateway_id: str) -> None:
    if not gateway_registry.gateway_exists(session, gateway_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"unknown gateway {gateway_id!r}")


@router.put(
    "/{gateway_id}",
    response_model=GatewayCredential,
    summary="Register a gateway or rotate its secret",
    responses={
        409: {"description": "Another gateway already uses this secret"},
        422: {"description": "A weak secret in production mode (as the service refuses at start)"},
    },
)
def register_gateway(
    gateway_id: GatewayPath,
    _: OperatorDep,
    session: SessionDep,
    state: StateDep,
    registration: Annotated[GatewayRegistration | None, Body()] = None,
) -> GatewayCredential:
    given = registration.secret if registration is not None else None
    refuse_weak(state.settings.mode != "development", [(["secret"], given)])
    secret = given or new_secret()
    created = gateway_registry.upsert_gateway(session, gateway_id, secret)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        raise HTTPException(status.HTTP_409_CONFLICT, "secret: another gateway already uses it") from None
    return GatewayCredential(gateway_id=gateway_id, created=created, secret=None if given else secret)


@router.post(
    "/{gateway_id}/devices",
    response_model=Assigned,
    summary="Assign devices to a gateway (operator)",
    responses={**_UNKNOWN_GATEWAY, 409: {"description": "A device's previous move has not ended"}},
)
def assign_devices(
    gateway_id: GatewayPath, _: OperatorDep, session: SessionDep, body: Assignment
) -> Assigned:
    _known_gateway(session, gateway_id)
    devices = list(dict.fromkeys(body.devices))
    try:
        created, moved = gateway_registry.assign(session, gateway_id, devices)
    except gateway_registry.HandoverConflictError as exc:
        session.rollback()
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    session.commit()
    return Assigned(gateway_id=gateway_id, devices=len(devices), created=created, moved=moved)


@router.delete(
    "/{gateway_id}/devices/{device_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Stop a gateway serving a device (operator)",
    responses={404: {"description": "The gateway does not serve this device"}},
)
def unassign_device(
    gateway_id: GatewayPath, device_id: DevicePath, _: OperatorDep, session: SessionDep
) -> None:
    if not gateway_registry.unassign(session, gateway_id, device_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"gateway {gateway_id!r} does not serve {device_id!r}")
    session.commit()


@router.get(
    "/{gateway_id}/devices",
    response_model=list[str],
    summary="The devices a gateway serves",
    responses=_UNKNOWN_GATEWAY,
)
def list_gateway_devices(gateway_id: GatewayPath, _: CallerDep, session: SessionDep) -> list[str]:
    _known_gateway(session, gateway_id)
    return gateway_registry.devices_of(session, gateway_id)


@router.post(
    "/{gateway_id}/sync",
    response_model=GatewayDevices,
    summary="The gateway's devices, with a fresh secret for each one it does not hold yet (the gateway)",
    responses={403: {"description": "Only the gateway itself receives its devices' secrets"}},
)
def sync_gateway(
    gateway_id: GatewayPath, caller: CallerDep, session: SessionDep, state: StateDep, body: SyncRequest
) -> GatewayDevices:
    if caller != "gateway":
        raise HTTPException(status.HTTP_403_FORBIDDEN, "only the gateway receives its devices' secrets")
    before = state.credential_generation
    rows = gateway_registry.sync(session, gateway_id, set(body.known))
    session.commit()
    issued = {device_id for device_id, secret, _ in rows if secret is not None}
    if issued:
        state.wait_heard(before)
    state.tokens.forget_devices(issued)
    devices = [GatewayDevice(device_id=d, secret=s, handover=h) for d, s, h in rows]
    return GatewayDevices(gateway_id=gateway_id, devices=devices)


def _gateway_only(caller: str) -> None:
    if caller != "gateway":
        raise HTTPException(status.HTTP_403_FORBIDDEN, "only a gateway of the hand-over takes its steps")


_HANDOVER: dict[int | str, dict[str, Any]] = {
    403: {"description": "The operator's token: only the gateways take the steps"},
    409: {"description": "No hand-over of this device involves the gateway, or not in this phase"},
}


@router.post(
    "/{gateway_id}/handovers/{device_id}/phase",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="The source records the device's messages, or the target subscribed (a gateway)",
    responses=_HANDOVER,
)
def handover_phase(
    gateway_id: GatewayPath, device_id: DevicePath, caller: CallerDep, session: SessionDep, step: HandoverStep
) -> None:
    _gateway_only(caller)
    try:
        gateway_registry.advance(session, gateway_id, device_id, step.phase)
    except gateway_registry.HandoverConflictError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    session.commit()


@router.post(
    "/{gateway_id}/handovers/{device_id}/state",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="The source leaves the device's checkpoint and stops serving it (a gateway)",
    responses=_HANDOVER,
)
async def handover_release(
    gateway_id: GatewayPath, device_id: DevicePath, caller: CallerDep, state: StateDep, request: Request
) -> Response:
    _gateway_only(caller)
    blob = await request.body()

    def store() -> None:
        with state.sessions() as session:
            gateway_registry.release(session, gateway_id, device_id, blob)
            session.commit()

    try:
        await anyio.to_thread.run_sync(store)
    except gateway_registry.HandoverConflictError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{gateway_id}/handovers/{device_id}/take",
    response_model=HandoverState,
    summary="The target takes the device's checkpoint and a fresh secret; the hand-over ends (a gateway)",
    responses=_HANDOVER,
)
def handover_take(
    gateway_id: GatewayPath, device_id: DevicePath, caller: CallerDep, session: SessionDep, state: StateDep
) -> HandoverState:
    _gateway_only(caller)
    before = state.credential_generation
    try:
        blob, secret = gateway_registry.take(session, gateway_id, device_id)
    except gateway_registry.HandoverConflictError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    session.commit()
    state.wait_heard(before)
    state.tokens.forget_devices({device_id})
    encoded = base64.b64encode(blob).decode()
    return HandoverState(device_id=device_id, secret=secret, state=encoded)


@router.post(
    "/{gateway_id}/heartbeats",
    response_model=GatewayHeartbeatsStored,
    status_code=status.HTTP_201_CREATED,
    summary="Store a batch of the gateway's devices' heartbeats in one request (the gateway)",
    responses={
        403: {"description": "None of the batch's devices is served by the gateway; nothing is stored"},
        **_UNKNOWN_GATEWAY,
    },
)
async def post_gateway_heartbeats(
    gateway_id: GatewayPath, _: CallerDep, state: StateDep, batch: HeartbeatBatch
) -> GatewayHeartbeatsStored:
    """What ``/v1/bulk/heartbeats`` does for the operator, with the gateway's own credential and only for
    the devices assigned to it; in the heartbeat threads, apart from the devices' requests. A device
    unassigned since the gateway's last sync is named in ``refused``, and the others' beats are stored:
    an operator's unassignment does not fail the heartbeats of the whole gateway."""
    beats = [(h.device_id, h.heartbeat) for h in batch.heartbeats]

    def store(session: Session) -> GatewayHeartbeatsStored:
        _known_gateway(session, gateway_id)
        served = gateway_registry.serving(session, gateway_id)
        refused = sorted({d for d, _ in beats} - served)
        kept = [(d, b) for d, b in beats if d in served]
        if not kept:
            detail = f"devices this gateway does not serve: {bulk.named(refused)}"
            raise HTTPException(status.HTTP_403_FORBIDDEN, detail)
        return GatewayHeartbeatsStored(stored=bulk.commit_heartbeats(session, kept), refused=refused)

    return await state.store_heartbeats(store)
