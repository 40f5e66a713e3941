"""An MQTT broker for the end-to-end demo: Mosquitto, an embedded amqtt broker, or an external one.

`start_broker()` picks, in order: the URL it is given (an external broker, only checked for
reachability); the Mosquitto binary when it is installed; otherwise amqtt, a pure-Python MQTT 3.1.1
broker, run in a background thread with its own asyncio event loop. Every broker it starts is bound
to 127.0.0.1 on a free port and is stopped by `Broker.stop()` or by leaving the `with` block.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Literal
from urllib.parse import urlsplit

from edgedrift_harness.embedded import EmbeddedBroker
from edgedrift_harness.mosquitto import BrokerError, demo_mosquitto, find_mosquitto
from edgedrift_harness.ports import can_connect

__all__ = ["Broker", "BrokerError", "BrokerKind", "find_mosquitto", "start_broker"]

log = logging.getLogger(__name__)

BrokerKind = Literal["mosquitto", "embedded", "external"]

_CONNECT_TIMEOUT_S = 3.0


class Broker:
    """A running (or external) MQTT broker; a context manager that stops it on exit."""

    def __init__(self, url: str, kind: BrokerKind, stopper: Callable[[], None] | None = None) -> None:
        self.url = url
        self.kind: BrokerKind = kind
        self._stopper = stopper
        self._lock = threading.Lock()
        if stopper is not None:  # a broker we started must not outlive the interpreter
            atexit.register(self.stop)

    @property
    def host(self) -> str:
        """Host name or address to connect to."""
        return _parse_url(self.url)[0]

    @property
    def port(self) -> int:
        """TCP port to connect to."""
        return _parse_url(self.url)[1]

    def stop(self) -> None:
        """Stop the broker if this object started it; idempotent, a no-op for an external broker."""
        with self._lock:
            stopper, self._stopper = self._stopper, None
        if stopper is not None:
            atexit.unregister(self.stop)
            stopper()
            log.info("stopped %s broker at %s", self.kind, self.url)

    def __enter__(self) -> Broker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Broker(url={self.url!r}, kind={self.kind!r})"


def start_broker(
    url: str | None = None,
    prefer: Literal["auto", "mosquitto", "embedded"] = "auto",
) -> Broker:
    """Start (or attach to) an MQTT broker and return it once it accepts TCP connections.

    `url` ("mqtt://host:port") selects an external broker, which is only checked for reachability.
    Otherwise Mosquitto is started when its binary is found and `prefer` is not "embedded", else
    the embedded amqtt broker. `prefer="mosquitto"` without a Mosquitto binary is an error.
    """
    if url is not None:
        host, port = _parse_url(url)
        if not can_connect(port, host, _CONNECT_TIMEOUT_S):
            raise BrokerError(
                f"MQTT broker at {url} is not reachable (TCP connect to {host}:{port} failed "
                f"within {_CONNECT_TIMEOUT_S:.0f} s); is it running?"
            )
        log.info("using external MQTT broker at %s", url)
        return Broker(f"mqtt://{host}:{port}", "external")
    if prefer != "embedded":
        if find_mosquitto() is not None:
            return _start_mosquitto()
        if prefer == "mosquitto":
            raise BrokerError("prefer='mosquitto' but no mosquitto binary was found on PATH or in /usr/sbin")
    return _start_embedded()


def _parse_url(url: str) -> tuple[str, int]:
    """(host, port) of an "mqtt://host[:port]" (or "tcp://") URL; the port defaults to 1883."""
    parts = urlsplit(url if "://" in url else f"mqtt://{url}")
    if parts.scheme not in ("mqtt", "tcp") or not parts.hostname:
        raise BrokerError(f"unsupported MQTT broker URL {url!r}; expected mqtt://host:port")
    try:
        port = parts.port
    except ValueError as exc:
        raise BrokerError(f"bad port in MQTT broker URL {url!r}") from exc
    return parts.hostname, port if port is not None else 1883


def _start_mosquitto() -> Broker:
    """Mosquitto on a free port in a temporary directory (removed when it stops)."""
    workdir = Path(tempfile.mkdtemp(prefix="edgedrift-mosquitto-"))
    process = demo_mosquitto(workdir)
    try:
        process.start(timeout=10.0)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise

    def stop() -> None:
        process.stop(timeout=5.0)
        shutil.rmtree(workdir, ignore_errors=True)

    log.info("started mosquitto (pid %d) at %s", process.pid, process.url)
    return Broker(process.url, "mosquitto", stop)


def _start_embedded() -> Broker:
    server = EmbeddedBroker()
    server.start()
    url = f"mqtt://127.0.0.1:{server.port}"
    log.info("started embedded amqtt broker at %s", url)
    return Broker(url, "embedded", server.stop)
