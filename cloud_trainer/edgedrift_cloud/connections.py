"""Limits of an HTTP connection below the ASGI app: how long a request may take to arrive, how large its
headers may be, and how many connections one client address may hold.

uvicorn bounds the idle time between two requests of a connection (``--timeout-keep-alive``) and the
connections and tasks of a worker (``--limit-concurrency``, 503 beyond), but nothing bounds the time a
request takes to *arrive*: its keep-alive timer is disarmed by every byte received, so a client that
trickles a header or a body a byte at a time holds the connection, a file descriptor and the request's
buffers for ever (slowloris), and no ASGI middleware runs before the headers are complete. The
deadlines of Go's ``http.Server`` (``ReadHeaderTimeout``, ``ReadTimeout``) and nginx's
``client_header_timeout``/``client_body_timeout`` are added here, to uvicorn's own httptools protocol:

- the request line and headers must arrive within ``header_timeout_s`` of the connection's opening or
  of the request's first byte, and within ``max_header_bytes``: 408 or 431, and the connection closes;
- the body must arrive within ``body_timeout_s`` of the headers: 408 (the app sees the client leave:
  a request that waited for its body is answered 499 in the log), and the connection closes;
- one client address holds at most ``max_connections_per_address`` connections per worker; a further
  one is answered 429 with ``Retry-After`` and closed at once.

``edgedrift-cloud serve`` runs uvicorn with ``http="edgedrift_cloud.connections:LimitedHttpProtocol"``.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

__all__ = ["ConnectionLimits", "LimitedHttpProtocol", "connection_limits"]

#: Open connections per client address in this worker process.
_OPEN: Counter[str] = Counter()


@dataclass(frozen=True)
class ConnectionLimits:
    """The per-connection limits (``EDGEDRIFT_CLOUD_*`` settings of the same names)."""

    header_timeout_s: float
    body_timeout_s: float
    max_header_bytes: int
    max_connections_per_address: int


@lru_cache(maxsize=1)
def connection_limits() -> ConnectionLimits:
    """The limits of this process's settings (read once)."""
    from edgedrift_cloud.settings import get_settings

    s = get_settings()
    return ConnectionLimits(
        s.header_timeout_s, s.body_timeout_s, s.max_header_bytes, s.max_connections_per_address
    )


def _response(status: int, reason: str, detail: str, headers: dict[str, str] | None = None) -> bytes:
    body = json.dumps({"detail": detail, "reason": reason}).encode()
    lines = [f"HTTP/1.1 {status} {_PHRASES[status]}", "content-type: application/json", "connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


_PHRASES = {408: "Request Timeout", 429: "Too Many Requests", 431: "Request Header Fields Too Large"}


class LimitedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with request receipt deadlines, a header size cap and a cap on the
    connections of one client address (see the module's docstring)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = connection_limits()
        self._address: str | None = None
        self._phase: Literal["headers", "body", "answering"] = "headers"
        self._header_bytes = 0
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address = self.client[0] if self.client else ""
        if _OPEN[address] >= self.limits.max_connections_per_address:
            detail = f"more than {self.limits.max_connections_per_address} connections from this address"
            self._refuse(_response(429, "connections_per_address", detail, {"Retry-After": "1"}))
            return
        _OPEN[address] += 1
        self._address = address
        self._arm(self.limits.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._address is not None:
            _OPEN[self._address] -= 1
            if _OPEN[self._address] <= 0:
                del _OPEN[self._address]
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._phase == "answering" and (self.cycle is None or self.cycle.response_complete):
            self._phase = "headers"  # bytes of the next request (uvicorn's keep-alive timer stops here)
            self._header_bytes = 0
            self._arm(self.limits.header_timeout_s)
        if self._phase == "headers":
            self._header_bytes += len(data)
        super().data_received(data)
        if self._phase == "headers" and self._header_bytes > self.limits.max_header_bytes:
            self._too_large()

    def _too_large(self) -> None:
        detail = f"request line and headers above {self.limits.max_header_bytes} bytes"
        self._refuse(_response(431, "headers_too_large", detail))

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._phase != "headers":  # the next request of a kept-alive connection starts
            self._phase = "headers"
            self._arm(self.limits.header_timeout_s)

    def on_headers_complete(self) -> None:
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        super().on_headers_complete()
        self._phase = "body"
        self._header_bytes = 0
        if size > self.limits.max_header_bytes:
            self._too_large()
            return
        self._arm(self.limits.body_timeout_s)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._phase = "answering"
        self._disarm()

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        """The request did not arrive in time: 408 while no answer to it has begun, then close."""
        self._deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if self._phase == "headers" and (cycle is None or cycle.response_complete):
            detail = f"request line and headers not received within {self.limits.header_timeout_s:g} s"
        elif self._phase == "body" and cycle is not None and not cycle.response_started:
            detail = f"request body not received within {self.limits.body_timeout_s:g} s"
        else:
            self.transport.close()
            return
        self._refuse(_response(408, "request_timeout", detail))

    def _refuse(self, answer: bytes) -> None:
        """Write ``answer`` and close; a request under way sees its client leave."""
        self._disarm()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
        if not self.transport.is_closing():
            self.transport.write(answer)
            self.transport.close()
