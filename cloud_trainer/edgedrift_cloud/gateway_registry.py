"""Gateways in the database: their credentials and the devices each one serves.

A gateway holds the secrets of its devices: the cloud hands a device's secret to its gateway once, by
rotating it (:func:`sync`), so the gateway acts for each device with that device's own credential and
every device endpoint keeps its one-device authorisation. Only hashes are stored.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from edgedrift_cloud.auth import hash_secret, new_secret
from edgedrift_cloud.db.tables import Device, Gateway, GatewayDevice


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


def assign(session: Session, gateway_id: str, device_ids: Sequence[str]) -> tuple[int, int]:
    """Let ``gateway_id`` serve these devices, registering unknown ones (with a secret nobody holds
    until the gateway syncs) and moving devices another gateway served. Returns (created, moved).
    A few statements for the whole list, whatever its length."""
    known = set(session.scalars(select(Device.id).where(Device.id.in_(device_ids))))
    new = [d for d in device_ids if d not in known]
    session.add_all(Device(id=d, token_hash=hash_secret(new_secret())) for d in new)
    session.flush()
    query = select(GatewayDevice).where(GatewayDevice.device_id.in_(device_ids))
    rows = {r.device_id: r for r in session.scalars(query)}
    moved = 0
    for device_id in device_ids:
        row = rows.get(device_id)
        if row is None:
            session.add(GatewayDevice(device_id=device_id, gateway_id=gateway_id))
        elif row.gateway_id != gateway_id:
            row.gateway_id = gateway_id
            moved += 1
    return len(new), moved


def unassign(session: Session, gateway_id: str, device_id: str) -> bool:
    """Stop ``gateway_id`` serving ``device_id``; False when it did not."""
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


def sync(session: Session, gateway_id: str, known: set[str]) -> list[tuple[str, str | None]]:
    """The gateway's devices; each one it does not hold a secret for gets a fresh secret, returned
    here once (its previous secret stops working). A revoked device is left out: only an operator lifts a
    revocation (``PUT /v1/devices/{id}``), never a gateway. One SELECT, one UPDATE per rotated device."""
    query = (
        select(Device)
        .join(GatewayDevice, GatewayDevice.device_id == Device.id)
        .where(GatewayDevice.gateway_id == gateway_id, Device.revoked_at.is_(None))
        .order_by(Device.id)
    )
    out: list[tuple[str, str | None]] = []
    for device in session.scalars(query):
        if device.id in known:
            out.append((device.id, None))
            continue
        secret = new_secret()
        device.token_hash = hash_secret(secret)
        out.append((device.id, secret))
    return out
