"""The gate in front of every ``/v1`` route: the credential is checked before any body is read (for the
route's subject: a device's routes take that device's secret, a gateway's routes that gateway's, the
rest the operator's token), failed authentications are rate-limited per client address without
locking out the credentials that authenticated from that address before, and unknown credentials are
remembered for a while (a flood of wrong tokens does not reach the database).

The client address is the TCP peer's; ``X-Forwarded-For`` replaces it only when the peer is one of the
configured proxies (``edgedrift-cloud serve --forwarded-allow-ips``, uvicorn's proxy-headers handling)."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edgedrift_cloud.auth import hash_secret

#: Failed authentications one client address may make per window before it gets 429.
FAILURES_PER_WINDOW = 50
FAILURE_WINDOW_S = 10.0
#: How long a credential that authenticated from an address stays exempt from that address's block.
PROVEN_TTL_S = 3600.0


@dataclass(frozen=True)
class Subject:
    """Whose credential a ``/v1`` path takes: a device's (or the operator's) under
    ``/v1/devices/{id}/...``, a gateway's (or the operator's) under ``/v1/gateways/{id}/...``, the
    operator's elsewhere (registration, bulk calls, the fleet)."""

    kind: Literal["device", "gateway", "operator"]
    id: str = ""


def subject_of(path: str) -> Subject:
    """The :class:`Subject` of a ``/v1`` path.

    Examples
    --------
    >>> subject_of("/v1/devices/d-1/models"), subject_of("/v1/gateways/g/sync").kind
    (Subject(kind='device', id='d-1'), 'gateway')
    >>> subject_of("/v1/devices/d-1").kind, subject_of("/v1/gateways/g/devices").kind
    ('operator', 'operator')
    """
    parts = path.split("/", 5)
    if len(parts) > 4 and parts[3] and parts[4]:
        if parts[2] == "devices":
            return Subject("device", parts[3])
        if parts[2] == "gateways" and parts[4] != "devices":  # assigning devices is the operator's
            return Subject("gateway", parts[3])
    return Subject("operator")


class MissCache:
    """Token hashes the registry does not know, for ``ttl`` seconds (0: off) and only under the credential
    generation they were looked up in (a registration heard from the database voids them)."""

    def __init__(self, ttl: float, size: int = 100_000) -> None:
        self.ttl = ttl
        self.size = size
        self._until: dict[str, tuple[float, int]] = {}

    def known_miss(self, token_hash: str, generation: int = 0) -> bool:
        entry = self._until.get(token_hash)
        return entry is not None and entry[0] > time.monotonic() and entry[1] == generation

    def add(self, token_hash: str, generation: int = 0) -> None:
        if self.ttl > 0:
            if len(self._until) >= self.size:
                self._until.clear()
            self._until[token_hash] = (time.monotonic() + self.ttl, generation)

    def clear(self) -> None:
        """A device was registered or rotated: any remembered miss may now be valid."""
        self._until.clear()


class FailureLimiter:
    """Fixed-window count of failed authentications per client address. Past the limit the address's
    requests get 429, except those presenting a credential that authenticated from the same address
    before (:meth:`succeeded`): the limiter keys on the peer *and* the presented credential's id (the
    sha256 of the secret, as the registry knows it), so the valid devices and the operator behind a
    NAT, a gateway host or a proxy keep working while a wrong token is tried from their address."""

    def __init__(
        self, limit: int = FAILURES_PER_WINDOW, window_s: float = FAILURE_WINDOW_S, size: int = 100_000
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self.size = size
        self._counts: dict[str, tuple[int, float]] = {}
        self._proven: dict[tuple[str, str], float] = {}

    def _window(self, client: str, now: float) -> tuple[int, float]:
        count, start = self._counts.get(client, (0, now))
        return (0, now) if now - start >= self.window_s else (count, start)

    def blocked_for(self, client: str, credential: str | None = None) -> float:
        """Seconds this client must wait with this credential id (0 when it may try)."""
        now = time.monotonic()
        count, start = self._window(client, now)
        if count < self.limit:
            return 0.0
        if credential is not None and self._proven.get((client, credential), 0.0) > now:
            return 0.0
        return start + self.window_s - now

    def fail(self, client: str) -> None:
        now = time.monotonic()
        count, start = self._window(client, now)
        if len(self._counts) > self.size:
            self._counts.clear()
        self._counts[client] = (count + 1, start)

    def succeeded(self, client: str, credential: str) -> None:
        """``credential`` (its id) authenticated from ``client``: that address's block spares it."""
        if len(self._proven) >= self.size:
            now = time.monotonic()
            self._proven = {k: t for k, t in self._proven.items() if t > now}
            if len(self._proven) >= self.size:
                self._proven.clear()
        self._proven[(client, credential)] = time.monotonic() + PROVEN_TTL_S


#: The gate's check of a credential for a subject: 0 (it may act on the subject), 401 (unknown
#: credential) or 403 (a known credential of someone else).
Verify = Callable[[Subject, str], Awaitable[int]]


class LargeBodies:
    """Requests with a body above ``large`` bytes in progress in this worker: at most ``per_subject``
    for one subject (a device, a gateway, the operator) and ``total`` in all, so the bodies a worker
    holds in memory at once are bounded and one credential gets a fair share of them (an agent sends
    one small window at a time)."""

    def __init__(self, large: int, per_subject: int, total: int) -> None:
        self.large = large
        self.per_subject = per_subject
        self.total = total
        self._held: dict[Subject, int] = {}

    def take(self, subject: Subject) -> bool:
        if sum(self._held.values()) >= self.total or self._held.get(subject, 0) >= self.per_subject:
            return False
        self._held[subject] = self._held.get(subject, 0) + 1
        return True

    def give_back(self, subject: Subject) -> None:
        self._held[subject] -= 1
        if self._held[subject] <= 0:
            del self._held[subject]


class AuthGate:
    """ASGI middleware: on ``/v1`` a request with a body must carry a credential valid for its path's
    :class:`Subject` before the body is read (``verify`` decides: 401 or 403 from the headers alone),
    and a client address with too many failed authentications gets 429 + Retry-After without touching
    the registry, except for the credentials that authenticated from it before."""

    def __init__(
        self,
        app: ASGIApp,
        verify: Callable[[], Verify],
        limiter: FailureLimiter,
        bodies: LargeBodies | None = None,
    ) -> None:
        self.app = app
        self.verify = verify
        self.limiter = limiter
        self.bodies = bodies

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or not path.startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        client = scope["client"][0] if scope.get("client") else "unknown"
        headers = dict(scope["headers"])
        token = _bearer(headers.get(b"authorization"))
        credential = hash_secret(token) if token is not None else None
        wait = self.limiter.blocked_for(client, credential)
        if wait > 0:
            detail = "too many failed authentications from this address"
            await _refuse(send, 429, detail, {"Retry-After": str(max(1, round(wait)))})
            return
        length = headers.get(b"content-length", b"0")
        has_body = length != b"0" or b"transfer-encoding" in headers
        subject = subject_of(path)
        if has_body:
            verdict = 401 if token is None else await self.verify()(subject, token)
            if verdict == 401:
                self.limiter.fail(client)
                detail = "missing bearer credential" if token is None else "unknown credential"
                await _refuse(send, 401, detail, {"WWW-Authenticate": "Bearer"})
                return
            if verdict == 403:
                await _refuse(send, 403, "the credential is not valid for this resource", {})
                return

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                if message["status"] == 401:
                    self.limiter.fail(client)
                elif message["status"] < 400 and credential is not None:
                    self.limiter.succeeded(client, credential)
            await send(message)

        bodies = self.bodies
        if bodies is None or not has_body or (length.isdigit() and int(length) <= bodies.large):
            await self.app(scope, receive, watch)
            return
        if not bodies.take(subject):
            detail = "too many large request bodies in progress for this credential"
            await _refuse(send, 429, detail, {"Retry-After": "1"}, "bodies_in_flight")
            return
        try:
            await self.app(scope, receive, watch)
        finally:
            bodies.give_back(subject)


def _bearer(value: bytes | None) -> str | None:
    if value is None:
        return None
    scheme, _, token = value.decode("latin-1").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


async def _refuse(
    send: Send, status: int, detail: str, headers: dict[str, str], reason: str | None = None
) -> None:
    raw = [(b"content-type", b"application/json"), (b"connection", b"close")]
    raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    body = {"detail": detail} | ({"reason": reason} if reason else {})
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})
