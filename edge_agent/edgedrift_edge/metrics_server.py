"""The agent's ``/metrics`` HTTP server: prometheus_client's exposition of the agent's registry, rendered
at most once per ``max_age_s``.

The endpoint needs no credential (Prometheus scrapes it) and listens on every address by default, and a
render reads every device of a gateway: 16 ms at 1,000 devices on a fast machine, 200 ms on a loaded one
(docs/benchmarks.md §20), all of it holding the GIL the worker needs. A client that asked in a loop took
the process's CPU from its devices. Here one render is made at a time and reused for ``max_age_s``
(Prometheus scrapes every 15 s or so: a second's reuse is invisible to it), so scrapes cost at most one
render a ``max_age_s`` whatever arrives; a connection that sends nothing is closed after ``IDLE_S``.

A render is kept per form (text or OpenMetrics, gzip or not: what the request's headers ask for); the
query string's ``name[]`` filter is not served (the whole exposition is).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS
from prometheus_client.registry import Collector

#: Seconds a render is reused (by default).
MAX_AGE_S = 1.0
#: Seconds a connection may stay silent before it is closed.
IDLE_S = 10.0

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class CachedExposition:
    """A WSGI app: the exposition of ``registry``, one render at a time, each reused for ``max_age_s``."""

    def __init__(self, registry: Collector, max_age_s: float = MAX_AGE_S) -> None:
        self.max_age_s = max_age_s
        self.renders = 0
        self._app = make_wsgi_app(registry)
        self._lock = threading.Lock()
        self._kept: dict[tuple[bool, bool], tuple[float, str, list[tuple[str, str]], bytes]] = {}

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "GET" or environ.get("PATH_INFO") == "/favicon.ico":
            return self._app(environ, start_response)  # type: ignore[no-any-return]
        form = (
            "application/openmetrics-text" in environ.get("HTTP_ACCEPT", ""),
            "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""),
        )
        with self._lock:
            kept = self._kept.get(form)
            if kept is None or time.monotonic() - kept[0] >= self.max_age_s:
                kept = self._kept[form] = (time.monotonic(), *self._render(*form))
        _, status, headers, body = kept
        start_response(status, headers)
        return [body]

    def _render(self, openmetrics: bool, gzip: bool) -> tuple[str, list[tuple[str, str]], bytes]:
        """The exposition in one form (the request's own headers normalised to it)."""
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": "/metrics",
            "QUERY_STRING": "",
            "HTTP_ACCEPT": OPENMETRICS if openmetrics else "text/plain",
            "HTTP_ACCEPT_ENCODING": "gzip" if gzip else "",
        }
        answer: list[Any] = []
        body = b"".join(self._app(environ, lambda status, headers: answer.extend((status, headers))))
        self.renders += 1
        return answer[0], list(answer[1]), body


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape; a silent connection is closed after :data:`IDLE_S`."""

    timeout = IDLE_S

    def log_message(self, format: str, *args: Any) -> None:
        return None


def serve(
    registry: Collector, port: int, addr: str, max_age_s: float = MAX_AGE_S
) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``registry`` on ``addr``:``port`` (0: a free port; an IPv6 address works) from a daemon
    thread; returns the server and its thread."""
    family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    class Server(ThreadingWSGIServer):
        address_family = family

    server = make_server(addr, port, CachedExposition(registry, max_age_s), Server, _QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="edgedrift-metrics", daemon=True)
    thread.start()
    return server, thread
