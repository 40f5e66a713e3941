"""The gate in front of every ``/v1`` route: the credential is checked before any body is read, failed
authentications are rate-limited per client address, and unknown credentials are remembered for a
while (a flood of wrong tokens does not reach the database)."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Gateway routes check their own credential (a gateway secret, per gateway) in their dependency.
GATEWAY_PREFIX = "/v1/gateways/"
#: Failed authentications one client address may make per window before it gets 429.
FAILURES_PER_WINDOW = 50
FAILURE_WINDOW_S = 10.0


class MissCache:
    """Token hashes the registry does not know, for ``ttl`` seconds (0: off)."""

    def __init__(self, ttl: float, size: int = 100_000) -> None:
        self.ttl = ttl
        self.size = size
        self._until: dict[str, float] = {}

    def known_miss(self, token_hash: str) -> bool:
        until = self._until.get(token_hash)
        return until is not None and until > time.monotonic()

    def add(self, token_hash: str) -> None:
        if self.ttl > 0:
            if len(self._until) >= self.size:
                self._until.clear()
            self._until[token_hash] = time.monotonic() + self.ttl

    def clear(self) -> None:
        """A device was registered or rotated: any remembered miss may now be valid."""
        self._until.clear()


class FailureLimiter:
    """Fixed-window count of failed authentications per client address."""

    def __init__(self, limit: int = FAILURES_PER_WINDOW, window_s: float = FAILURE_WINDOW_S) -> None:
        self.limit = limit
        self.window_s = window_s
        self._counts: dict[str, tuple[int, float]] = {}

    def _window(self, client: str, now: float) -> tuple[int, float]:
        count, start = self._counts.get(client, (0, now))
        return (0, now) if now - start >= self.window_s else (count, start)

    def blocked_for(self, client: str) -> float:
        """Seconds this client must wait (0 when it may try)."""
        now = time.monotonic()
        count, start = self._window(client, now)
        return start + self.window_s - now if count >= self.limit else 0.0

    def fail(self, client: str) -> None:
        now = time.monotonic()
        count, start = self._window(client, now)
        if len(self._counts) > 100_000:
            self._counts.clear()
        self._counts[client] = (count + 1, start)


Verify = Callable[[str], Awaitable[bool]]


class AuthGate:
    """ASGI middleware: on ``/v1`` a request with a body must carry a known bearer credential before
    the body is read (``verify`` decides), and a client address with too many failed authentications
    gets 429 + Retry-After without touching the registry."""

    def __init__(self, app: ASGIApp, verify: Callable[[], Verify], limiter: FailureLimiter) -> None:
        self.app = app
        self.verify = verify
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or not path.startswith("/v1/") or path.startswith(GATEWAY_PREFIX):
            await self.app(scope, receive, send)
            return
        client = scope["client"][0] if scope.get("client") else "unknown"
        wait = self.limiter.blocked_for(client)
        if wait > 0:
            detail = "too many failed authentications from this address"
            await _refuse(send, 429, detail, {"Retry-After": str(max(1, round(wait)))})
            return
        headers = dict(scope["headers"])
        has_body = headers.get(b"content-length", b"0") != b"0" or b"transfer-encoding" in headers
        if has_body:
            token = _bearer(headers.get(b"authorization"))
            if token is None or not await self.verify()(token):
                self.limiter.fail(client)
                detail = "missing bearer credential" if token is None else "unknown credential"
                await _refuse(send, 401, detail, {"WWW-Authenticate": "Bearer"})
                return

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                self.limiter.fail(client)
            await send(message)

        await self.app(scope, receive, watch)


def _bearer(value: bytes | None) -> str | None:
    if value is None:
        return None
    scheme, _, token = value.decode("latin-1").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


async def _refuse(send: Send, status: int, detail: str, headers: dict[str, str]) -> None:
    raw = [(b"content-type", b"application/json"), (b"connection", b"close")]
    raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": json.dumps({"detail": detail}).encode()})
