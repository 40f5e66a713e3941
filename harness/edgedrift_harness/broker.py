"""An MQTT broker for the end-to-end demo: Mosquitto, an embedded amqtt broker, or an external one.

`start_broker()` picks, in order: the URL it is given (an external broker, only checked for
reachability); the Mosquitto binary when it is installed; otherwise amqtt, a pure-Python MQTT 3.1.1
broker, run in a background thread with its own asyncio event loop. Every broker it starts is bound
to 127.0.0.1 on a free port and is stopped by `Broker.stop()` or by leaving the `with` block.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Literal
from urllib.parse import urlsplit

from edgedrift_harness.cloud_process import free_port

__all__ = ["Broker", "BrokerError", "BrokerKind", "find_mosquitto", "start_broker"]

log = logging.getLogger(__name__)

BrokerKind = Literal["mosquitto", "embedded", "external"]

_HOST = "127.0.0.1"
_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 5.0
_CONNECT_TIMEOUT_S = 3.0
_MOSQUITTO_FALLBACK = "/usr/sbin/mosquitto"
_MOSQUITTO_RUNNING = re.compile(r"mosquitto version \S+ running")
# amqtt loads plugins by dotted path; the class is made on first use so importing this module
# does not import amqtt (see _open_auth_plugin_path).
_AUTH_PLUGIN_NAME = "_EdgeDriftOpenAuthPlugin"


class BrokerError(RuntimeError):
    """A broker could not be started or reached."""


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
        if not _can_connect(host, port, _CONNECT_TIMEOUT_S):
            raise BrokerError(
                f"MQTT broker at {url} is not reachable (TCP connect to {host}:{port} failed "
                f"within {_CONNECT_TIMEOUT_S:.0f} s); is it running?"
            )
        log.info("using external MQTT broker at %s", url)
        return Broker(f"mqtt://{host}:{port}", "external")
    if prefer != "embedded":
        binary = find_mosquitto()
        if binary is not None:
            return _start_mosquitto(binary)
        if prefer == "mosquitto":
            raise BrokerError("prefer='mosquitto' but no mosquitto binary was found on PATH or in /usr/sbin")
    return _start_embedded()


def find_mosquitto() -> str | None:
    """Path of the Mosquitto binary, or None when it is not installed."""
    found = shutil.which("mosquitto")
    if found is not None:
        return found
    fallback = Path(_MOSQUITTO_FALLBACK)
    return str(fallback) if fallback.is_file() else None


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


def _can_connect(host: str, port: int, timeout: float) -> bool:
    """Whether a TCP connection to host:port succeeds within timeout seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# --- Mosquitto ------------------------------------------------------------------------------------


def _start_mosquitto(binary: str, attempts: int = 3) -> Broker:
    """Start Mosquitto on a free port; retried when the port was taken between pick and bind."""
    error: BrokerError | None = None
    for _ in range(attempts):
        try:
            return _start_mosquitto_once(binary, free_port())
        except BrokerError as exc:
            error = exc
            if "Address already in use" not in str(exc):
                raise
            log.warning("mosquitto lost the race for its port, retrying")
    assert error is not None
    raise error


def _start_mosquitto_once(binary: str, port: int) -> Broker:
    workdir = Path(tempfile.mkdtemp(prefix="edgedrift-mosquitto-"))
    conf = workdir / "mosquitto.conf"
    log_path = workdir / "mosquitto.log"
    conf.write_text(
        f"listener {port} {_HOST}\n"
        "allow_anonymous true\n"
        "persistence false\n"
        # Mosquitto's default (1000 queued QoS-1/2 messages per client) silently drops a replay burst
        # that a slow subscriber has not acknowledged yet; the embedded broker has no such limit.
        "max_queued_messages 100000\n"
        "log_dest stderr\n"
        "log_type error\nlog_type warning\nlog_type notice\nlog_type information\n"
    )
    log_file = log_path.open("wb")
    try:
        proc = subprocess.Popen(
            [binary, "-c", str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )
    except OSError as exc:
        log_file.close()
        shutil.rmtree(workdir, ignore_errors=True)
        raise BrokerError(f"could not run {binary}: {exc}") from exc

    def stop() -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(_STOP_TIMEOUT_S)
        log_file.close()
        shutil.rmtree(workdir, ignore_errors=True)

    started = time.monotonic()
    deadline = started + _START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            text = _read_log(log_path)
            stop()
            raise BrokerError(f"mosquitto exited with code {proc.returncode} on start; its log:\n{text}")
        # A connection alone could reach another process that took the port first: also wait for
        # Mosquitto's "mosquitto version X running" line (logged once its listeners are bound), or,
        # should a future version word it differently, for it to have stayed up for a second.
        if _can_connect(_HOST, port, 0.2) and (
            _MOSQUITTO_RUNNING.search(_read_log(log_path)) or time.monotonic() - started > 1.0
        ):
            if proc.poll() is None:
                break
            continue
        if time.monotonic() > deadline:
            text = _read_log(log_path)
            stop()
            raise BrokerError(
                f"mosquitto did not accept connections on {_HOST}:{port} within "
                f"{_START_TIMEOUT_S:.0f} s; its log:\n{text}"
            )
        time.sleep(0.02)
    url = f"mqtt://{_HOST}:{port}"
    log.info("started mosquitto (pid %d) at %s", proc.pid, url)
    return Broker(url, "mosquitto", stop)


def _read_log(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip() or "(empty)"
    except OSError:
        return "(no log)"


# --- embedded amqtt ---------------------------------------------------------------------------------


def _open_auth_plugin_path() -> str:
    """Dotted path of an amqtt auth plugin that admits every client as a named (non-anonymous) one.

    amqtt's own AnonymousAuthPlugin marks clients as anonymous, and amqtt then keeps no messages
    for anonymous clients with clean_session=False while they are offline; this plugin admits
    everyone without that mark, so persistent sessions behave as they do on Mosquitto.
    """
    if _AUTH_PLUGIN_NAME not in globals():
        from amqtt.plugins.base import BaseAuthPlugin

        class OpenAuthPlugin(BaseAuthPlugin):  # type: ignore[misc]  # amqtt ships no type hints
            async def authenticate(self, *, session: Any) -> bool:
                return True

        OpenAuthPlugin.__name__ = OpenAuthPlugin.__qualname__ = _AUTH_PLUGIN_NAME
        globals()[_AUTH_PLUGIN_NAME] = OpenAuthPlugin
    return f"{__name__}.{_AUTH_PLUGIN_NAME}"


class _DemoteSpuriousAckWarnings(logging.Filter):
    """Demote amqtt's PUBACK bookkeeping warnings to DEBUG.

    amqtt logs them when a subscriber's PUBACK is processed after the broker stopped waiting for it
    (a client disconnecting right after its last acks, or an ack racing a slow socket drain); the
    message was delivered and acknowledged all the same, so they are noise, not a fault.
    """

    _PREFIXES = ("Received PUBACK for unknown pending message", "PUBACK waiter with Id")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and str(record.msg).startswith(self._PREFIXES):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def _install_amqtt_log_filter() -> None:
    handler_log = logging.getLogger("amqtt.mqtt.protocol.handler")
    if not any(isinstance(f, _DemoteSpuriousAckWarnings) for f in handler_log.filters):
        handler_log.addFilter(_DemoteSpuriousAckWarnings())


class _EmbeddedServer:
    """amqtt's broker on its own asyncio loop in a daemon thread."""

    def __init__(self) -> None:
        self.port = 0
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="edgedrift-mqtt-broker", daemon=True)

    def start(self) -> None:
        """Start the thread and wait until the broker listens."""
        self._thread.start()
        if not self._ready.wait(_START_TIMEOUT_S):
            self.stop()
            raise BrokerError(f"embedded MQTT broker did not start within {_START_TIMEOUT_S:.0f} s")
        if self._error is not None:
            raise BrokerError(f"embedded MQTT broker failed to start: {self._error}") from self._error

    def stop(self) -> None:
        """Shut the broker down (closing every client connection) and join the thread."""
        loop, stop_requested = self._loop, self._stop_requested
        if loop is not None and stop_requested is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop already finished
                loop.call_soon_threadsafe(stop_requested.set)
        self._thread.join(_STOP_TIMEOUT_S * 2)
        if self._thread.is_alive():
            log.warning("embedded MQTT broker thread did not finish within %.0f s", _STOP_TIMEOUT_S * 2)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to start() or logged; the thread must not die noisily
            if not self._ready.is_set():
                self._error = exc
            else:
                log.exception("embedded MQTT broker crashed")
        finally:
            self._ready.set()
            _close_loop(loop)

    async def _serve(self) -> None:
        from amqtt.broker import Broker as AmqttBroker

        config: dict[str, Any] = {
            "listeners": {"default": {"type": "tcp", "bind": f"{_HOST}:0"}},
            "plugins": {_open_auth_plugin_path(): {}},
        }
        broker = AmqttBroker(config, loop=asyncio.get_running_loop())
        self._stop_requested = asyncio.Event()
        await broker.start()
        try:
            # bound to port 0, so read back the port the OS chose
            server = broker._servers["default"].instance
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            await self._stop_requested.wait()
        finally:
            await asyncio.wait_for(broker.shutdown(), _STOP_TIMEOUT_S)


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what the broker left running on the loop, then close it."""
    try:
        pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()


def _start_embedded() -> Broker:
    _install_amqtt_log_filter()
    server = _EmbeddedServer()
    server.start()
    url = f"mqtt://{_HOST}:{server.port}"
    log.info("started embedded amqtt broker at %s", url)
    return Broker(url, "embedded", server.stop)
