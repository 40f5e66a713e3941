"""Gateways in the database: their credentials and the devices each one serves.

A gateway holds the secrets of its devices: the cloud hands a device's secret to its gateway once, by
rotating it (:func:`sync`), so the gateway acts for each device with that device's own credential and
every device endpoint keeps its one-device authorisation. Only hashes are stored.

Moving a device between two gateways is a **hand-over** (issue 30 row 4), a row of ``handovers`` whose
phase the two gateways advance through their sync: ``moving`` (the operator's assignment) -> ``recording``
(the source notes every message it handles for the device) -> ``subscribed`` (the target subscribed and
holds what arrives) -> ``released`` (the source unsubscribed, finished what it had received and left
the device's checkpoint here) -> the target takes the checkpoint (and the device's secret) and the row
goes. The source serves the device until it released it, the target from its subscription on: the
broker delivers every message to at least one of them, and the target skips the overlap by the
source's notes (``docs/edge-agent.md``, "Moving a device between gateways").
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from edgedrift_cloud.auth import hash_secret, new_secret
from edgedrift_cloud.db.tables import Device, Gateway, GatewayDevice, Handover


def upsert_gateway(session: Session, gateway_id: str, secret: str) -> bool:
    """Create a gateway or rotate its secret; True when it is new."""
    gateway = session.get(Gateway, gateway_id)
    if gateway is None:
        session.add(Gateway(id=gateway_id, token_hash=hash_secret(secret)))
        return True
    gateway.token_hash = hash_secret(secret)
    return False


def gateway_exists(session: Session, gateway_id: str) -> bool:
    return session.get(Gateway, gateway_id) is not None


def gateway_accepts(session: Session, gateway_id: str, token: str) -> bool:
    """True when ``token`` is the gateway's secret (constant-time comparison of the hashes)."""
    stored = session.scalar(select(Gateway.token_hash).where(Gateway.id == gateway_id))
    return stored is not None and hmac.compare_digest(stored, hash_secret(token))


#: Phases of a hand-over in which the source still serves the device.
SOURCE_SERVES = ("moving", "recording", "subscribed")
#: What a gateway's sync tells it to do with a device in a hand-over, by its role and the phase.
SOURCE_FLAGS = {"moving": "record", "recording": "record", "subscribed": "release"}
TARGET_FLAGS = {"moving": "wait", "recording": "hold", "subscribed": "hold", "released": "take"}
#: The phase a gateway may move a hand-over to, from the phase before, by its role.
STEPS = {("source", "recording"): "moving", ("target", "subscribed"): "recording"}


class HandoverConflictError(Exception):
    """A hand-over step asked by a gateway that is not its party or out of order (HTTP 409)."""


def assign(session: Session, gateway_id: str, device_ids: Sequence[str]) -> tuple[int, int]:
    """Let ``gateway_id`` serve these devices, registering unknown ones (with a secret nobody holds
    until the gateway syncs) and moving devices another gateway served: each move starts a hand-over
    (:class:`HandoverConflictError` for a device whose previous move has not ended). Returns (created, moved).
    A few statements for the whole list, whatever its length."""
    known = set(session.scalars(select(Device.id).where(Device.id.in_(device_ids))))
    new = [d for d in device_ids if d not in known]
    session.add_all(Device(id=d, token_hash=hash_secret(new_secret())) for d in new)
    session.flush()
    query = select(GatewayDevice).where(GatewayDevice.device_id.in_(device_ids))
    rows = {r.device_id: r for r in session.scalars(query)}
    moving = set(session.scalars(select(Handover.device_id).where(Handover.device_id.in_(device_ids))))
    moved = 0
    for device_id in device_ids:
        row = rows.get(device_id)
        if row is None:
            session.add(GatewayDevice(device_id=device_id, gateway_id=gateway_id))
        elif row.gateway_id != gateway_id:
            if device_id in moving:
                raise HandoverConflictError(f"device {device_id!r} is still being handed over")
            session.add(
                Handover(device_id=device_id, source=row.gateway_id, target=gateway_id, phase="moving")
            )
            row.gateway_id = gateway_id
            moved += 1
    return len(new), moved


def unassign(session: Session, gateway_id: str, device_id: str) -> bool:
    """Stop ``gateway_id`` serving ``device_id`` (a move to it is called off: the source keeps nothing
    listed and lets the device go); False when it did not."""
    session.execute(delete(Handover).where(Handover.device_id == device_id, Handover.target == gateway_id))
    result = session.execute(
        delete(GatewayDevice).where(
            GatewayDevice.gateway_id == gateway_id, GatewayDevice.device_id == device_id
        )
    )
    return bool(getattr(result, "rowcount", 0))


def devices_of(session: Session, gateway_id: str) -> list[str]:
    """The devices the gateway serves (a revoked device is served by none)."""
    return list(
        session.scalars(
            select(GatewayDevice.device_id)
            .join(Device, Device.id == GatewayDevice.device_id)
            .where(GatewayDevice.gateway_id == gateway_id, Device.revoked_at.is_(None))
            .order_by(GatewayDevice.device_id)
        )
    )


def serving(session: Session, gateway_id: str) -> set[str]:
    """The devices whose heartbeats the gateway may send: its own and those it is handing over."""
    query = select(Handover.device_id).where(Handover.source == gateway_id, Handover.phase.in_(SOURCE_SERVES))
    return set(devices_of(session, gateway_id)) | set(session.scalars(query))


def sync(session: Session, gateway_id: str, known: set[str]) -> list[tuple[str, str | None, str | None]]:
    """The gateway's devices with a secret and a hand-over flag each (:data:`SOURCE_FLAGS`,
    :data:`TARGET_FLAGS`, None outside a hand-over). Each device it does not hold a secret for gets a
    fresh secret, returned here once (its previous secret stops working), except one being handed to it:
    the source still acts with that secret, and the target gets a fresh one when it takes the state. A
    device it hands over is listed until it released it. A revoked device is left out: only an operator
    lifts a revocation (``PUT /v1/devices/{id}``), never a gateway. A few SELECTs, one UPDATE per rotated
    device."""
    query = (
        select(Device)
        .join(GatewayDevice, GatewayDevice.device_id == Device.id)
        .where(GatewayDevice.gateway_id == gateway_id, Device.revoked_at.is_(None))
        .order_by(Device.id)
    )
    handovers = session.scalars(
        select(Handover).where((Handover.source == gateway_id) | (Handover.target == gateway_id))
    )
    incoming: dict[str, str] = {}
    out: list[tuple[str, str | None, str | None]] = []
    for h in handovers:
        if h.target == gateway_id:
            incoming[h.device_id] = TARGET_FLAGS[h.phase]
        elif h.phase in SOURCE_SERVES:
            out.append((h.device_id, None, SOURCE_FLAGS[h.phase]))
    for device in session.scalars(query):
        if device.id in known or device.id in incoming:
            out.append((device.id, None, incoming.get(device.id)))
            continue
        out.append((device.id, rotate(device), None))
    return sorted(out)


def rotate(device: Device) -> str:
    """A fresh secret for ``device`` (its previous one stops working), returned once."""
    secret = new_secret()
    device.token_hash = hash_secret(secret)
    return secret


def _handover(session: Session, gateway_id: str, device_id: str) -> tuple[Handover, str]:
    """The device's hand-over and the gateway's role in it; :class:`HandoverConflictError` if none."""
    h = session.get(Handover, device_id)
    if h is None or gateway_id not in (h.source, h.target):
        raise HandoverConflictError(f"no hand-over of {device_id!r} involves gateway {gateway_id!r}")
    return h, "source" if h.source == gateway_id else "target"


def advance(session: Session, gateway_id: str, device_id: str, phase: str) -> None:
    """The source began recording, or the target subscribed (:data:`STEPS`); asking again is harmless."""
    h, role = _handover(session, gateway_id, device_id)
    before = STEPS.get((role, phase))
    if before is None:
        raise HandoverConflictError(f"the {role} of a hand-over cannot move it to {phase!r}")
    if h.phase == phase:
        return
    if h.phase != before:
        raise HandoverConflictError(f"hand-over of {device_id!r} is {h.phase!r}, not {before!r}")
    h.phase = phase


def release(session: Session, gateway_id: str, device_id: str, state: bytes) -> None:
    """The source leaves the device's state once the target subscribed (again: replaced)."""
    h, role = _handover(session, gateway_id, device_id)
    if role != "source" or h.phase not in ("subscribed", "released"):
        raise HandoverConflictError(
            f"hand-over of {device_id!r} is {h.phase!r}: the {role} cannot release it"
        )
    h.phase, h.state = "released", state


def take(session: Session, gateway_id: str, device_id: str) -> tuple[bytes, str]:
    """The target takes the state the source left and the device's fresh secret; the hand-over ends."""
    h, role = _handover(session, gateway_id, device_id)
    device = session.get(Device, device_id)
    if role != "target" or h.phase != "released" or h.state is None or device is None:
        raise HandoverConflictError(
            f"hand-over of {device_id!r} is {h.phase!r}: nothing for the {role} to take"
        )
    state = h.state
    session.delete(h)
    return state, rotate(device)
