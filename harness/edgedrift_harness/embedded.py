"""An embedded MQTT broker: amqtt, a pure-Python MQTT 3.1.1 broker, on its own asyncio loop in a daemon
thread, bound to 127.0.0.1 on a port the OS picks. The demo uses it where Mosquitto is not installed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any

from edgedrift_harness.mosquitto import BrokerError
from edgedrift_harness.ports import HOST

__all__ = ["EmbeddedBroker"]

log = logging.getLogger(__name__)

_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 5.0
# amqtt loads plugins by dotted path; the class is made on first use so importing this module
# does not import amqtt (see _open_auth_plugin_path).
_AUTH_PLUGIN_NAME = "_EdgeDriftOpenAuthPlugin"


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


class EmbeddedBroker:
    """amqtt's broker on its own asyncio loop in a daemon thread; ``port`` is set once ``start()`` returns."""

    def __init__(self, *, websockets: bool = False) -> None:
        self.port = 0
        #: Listen for MQTT over WebSockets (``ws://``) instead of plain TCP.
        self.websockets = websockets
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="edgedrift-mqtt-broker", daemon=True)

    def start(self) -> None:
        """Start the thread and wait until the broker listens."""
        _install_amqtt_log_filter()
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
            "listeners": {"default": {"type": "ws" if self.websockets else "tcp", "bind": f"{HOST}:0"}},
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
