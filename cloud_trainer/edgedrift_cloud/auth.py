"""Credentials: one bearer secret per device, one for the operator.

Only the sha256 of a device secret is stored. A presented token is hashed and looked up by hash, so
the lookup never compares secrets byte by byte; the operator token is compared with
:func:`hmac.compare_digest` (constant time). Tokens never reach a log line.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from fastapi.exceptions import RequestValidationError

from edgedrift.secrets import weak_secret_reason


def hash_secret(secret: str) -> str:
    """sha256 hex of a secret (device secrets are random tokens, so a plain hash is enough)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    """A fresh 256-bit device secret."""
    return secrets.token_urlsafe(32)


def refuse_weak(production: bool, given: Iterable[tuple[Sequence[object], str | None]]) -> None:
    """The rule the service applies to its own secrets at start (:func:`edgedrift.secrets.weak_secret_reason`)
    applied to secrets set through the API: in production mode a weak one is a 422 naming its field
    (``given``: the field's location in the body and the secret, None when the service generates one)."""
    if not production:
        return
    errors = [
        {"loc": ["body", *loc], "msg": f"the secret {reason} (production mode)", "type": "value_error"}
        for loc, secret in given
        if secret is not None and (reason := weak_secret_reason(secret))
    ]
    if errors:
        raise RequestValidationError(errors)


def same_secret(presented: str, expected: str) -> bool:
    """Constant-time comparison of two secrets (through their hashes, so lengths do not leak)."""
    return hmac.compare_digest(hash_secret(presented), hash_secret(expected))


@dataclass(frozen=True)
class Principal:
    """Who is calling: the operator, or one device."""

    kind: Literal["operator", "device"]
    device_id: str | None = None

    @property
    def name(self) -> str:
        return "operator" if self.kind == "operator" else f"device:{self.device_id}"

    def may_access(self, device_id: str) -> bool:
        return self.kind == "operator" or self.device_id == device_id


class TokenCache:
    """(presented secret's sha256) → device id, for at most ``ttl`` seconds and only under the credential
    generation it was looked up in (:class:`edgedrift_cloud.credential_watch.CredentialWatch`: any
    credential change heard from the database starts a new one, so every entry is void at once); a burst
    of requests does not ask the database. At most ``size`` entries (the oldest are dropped past it)."""

    def __init__(self, ttl: float, size: int = 50_000) -> None:
        self.ttl = ttl
        self.size = size
        self._entries: dict[str, tuple[str, float, int]] = {}

    def get(self, token_hash: str, generation: int = 0) -> str | None:
        entry = self._entries.get(token_hash)
        if entry is None or entry[1] < time.monotonic() or entry[2] != generation:
            return None
        return entry[0]

    def put(self, token_hash: str, device_id: str, generation: int = 0) -> None:
        if self.ttl > 0:
            if len(self._entries) >= self.size:
                now = time.monotonic()
                self._entries = {k: v for k, v in self._entries.items() if v[1] >= now and v[2] == generation}
                while len(self._entries) >= self.size:
                    del self._entries[next(iter(self._entries))]
            self._entries[token_hash] = (device_id, time.monotonic() + self.ttl, generation)

    def forget_device(self, device_id: str) -> None:
        self._entries = {k: v for k, v in self._entries.items() if v[0] != device_id}

    def forget_devices(self, device_ids: set[str]) -> None:
        """:meth:`forget_device` for many devices in one pass (a gateway's rotated secrets)."""
        if device_ids:
            self._entries = {k: v for k, v in self._entries.items() if v[0] not in device_ids}
