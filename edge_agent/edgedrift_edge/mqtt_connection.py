"""One MQTT 3.1.1 connection kept alive in a thread of its own (the *I/O thread*, an asyncio loop).

It connects and reconnects with exponential backoff (1 s doubling to 30 s), logs in with the URL's user
name and password over TCP or TLS (``mqtts://``), leaves a last will, sends keep-alive pings, subscribes
after a reconnect to what the broker's session does not hold (everything when the broker kept no session:
a SUBSCRIBE makes the broker send its retained messages again, so one the session holds is not renewed),
and decodes whole chunks of the byte stream at once
(:mod:`edgedrift_edge.mqtt_packets`). What carries data, PUBLISH and PUBACK, goes to its
:class:`Session` (the agent's :class:`~edgedrift_edge.transport.MqttTransport`), which decides what is
acknowledged and when; everything written leaves through :meth:`MqttConnection.write` on the I/O thread.

Packet ids 1–65,000 are the session's (its publishes); SUBSCRIBE and UNSUBSCRIBE use 65,001–65,535, so
neither needs to know which ids the other has in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from edgedrift_edge import mqtt_packets as mp
from edgedrift_edge.mqtt import broker_address, redact

log = logging.getLogger("edgedrift_edge.transport")

#: The first packet id of SUBSCRIBE and UNSUBSCRIBE (below it: the session's publishes).
CONTROL_IDS = 65_001
#: Topic filters per SUBSCRIBE packet (a gateway may serve thousands of devices).
TOPICS_PER_SUBSCRIBE = 100
#: Seconds to wait for the TCP (and TLS) connection, and then for the CONNACK.
CONNECT_TIMEOUT_S = 10.0


class Session(Protocol):
    """What a connection tells the side that owns the messages (all on the I/O thread)."""

    def resend(self) -> bytes:
        """The broker accepted a connection: what must go first (unconfirmed publishes, with DUP)."""
        ...

    def traffic(self, link: Link, messages: list[mp.Publish], confirmed: list[int]) -> None:
        """Messages the broker delivered and packet ids it confirmed, in one read."""
        ...

    def lost(self, exc: Exception | None) -> None:
        """The connection is gone; nothing of it may be acknowledged any more."""
        ...


class Link(asyncio.Protocol):
    """One TCP (or TLS) connection to the broker; everything it receives goes to its owner."""

    def __init__(self, owner: MqttConnection) -> None:
        self.owner = owner
        self.transport: asyncio.Transport | None = None
        self.reader = mp.PacketReader(max_packet=owner.max_packet)
        loop = asyncio.get_running_loop()
        #: Done when the connection is gone; ``answered``: the broker answered the CONNECT (or it is gone).
        self.closed: asyncio.Future[None] = loop.create_future()
        self.answered: asyncio.Future[None] = loop.create_future()
        self.connack = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.owner.link = self  # before anything it receives is handled
        transport.write(self.owner.connect_packet())

    def data_received(self, data: bytes) -> None:
        self.owner.received(self, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner.lost(self, exc)
        for future in (self.answered, self.closed):
            if not future.done():
                future.set_result(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class MqttConnection:
    """A persistent-session connection for ``client_id`` (see the module docstring)."""

    def __init__(
        self,
        broker_url: str,
        client_id: str,
        session: Session,
        *,
        subscriptions: list[str],
        qos: int,
        will: mp.Will,
        keepalive: int = 30,
        reconnect_delay: tuple[float, float] = (1.0, 30.0),
        tls_ca_file: str | None = None,
        max_packet: int = mp.MAX_REMAINING,
        on_connected: Callable[[], None] | None = None,
        on_fatal: Callable[[str], None] | None = None,
    ) -> None:
        self.broker_url = broker_url
        self.client_id = client_id
        self.session = session
        self.subscriptions = list(subscriptions)
        self.qos = qos
        self.will = will
        self.keepalive = keepalive
        self.reconnect_delay = reconnect_delay
        self.tls_ca_file = tls_ca_file
        self.max_packet = max_packet
        self.on_connected = on_connected
        self.on_fatal = on_fatal
        self.connected = threading.Event()
        self.subscribed = threading.Event()
        self.stopping = threading.Event()
        #: Why the I/O thread can no longer be trusted (an exception in it), or None.
        self.failure: str | None = None
        #: Why the broker refused the last connection (a CONNACK code), or None.
        self.refused: str | None = None
        #: The connection of the moment (None between connections).
        self.link: Link | None = None
        self.reconnects = 0
        self._host, self._port, self._tls = broker_address(broker_url)
        parts = urlsplit(broker_url)
        self._username = unquote(parts.username) if parts.username else None
        self._password = unquote(parts.password) if parts.password else None
        self._lock = threading.Lock()  # guards ``subscriptions`` (changed from the worker)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._io_ident: int | None = None
        self._stop_event: asyncio.Event | None = None
        self._last_write = 0.0
        self._ping_sent: float | None = None
        self._next_control = CONTROL_IDS
        self._suback_waiting: set[int] = set()
        #: Topics of SUBSCRIBEs in flight, by packet id; the topics the broker's session holds (granted in
        #: a SUBACK of this process, forgotten when a CONNACK says the broker kept no session).
        self._subscribing: dict[int, list[str]] = {}
        self._granted: set[str] = set()
        self._paused = False

    # --- lifecycle (any thread) -------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Connect in the background and return once subscribed (TimeoutError otherwise)."""
        self._thread = threading.Thread(target=self._run, name="edgedrift-mqtt", daemon=True)
        self._thread.start()
        if not self.subscribed.wait(timeout):
            why = f": the broker refused the connection ({self.refused})" if self.refused else ""
            raise TimeoutError(f"not subscribed to {redact(self.broker_url)} after {timeout} s{why}")

    def stop(self, timeout: float = 10.0) -> None:
        """DISCONNECT (the broker then publishes no last will), close, end the I/O thread."""
        self.stopping.set()
        self.call_soon(self._disconnect)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def in_io_thread(self) -> bool:
        return threading.get_ident() == self._io_ident

    def call_soon(self, callback: Callable[..., None], *args: Any) -> None:
        """Run ``callback`` on the I/O thread (nothing once it has ended)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (the agent is stopping)
            loop.call_soon_threadsafe(callback, *args)

    def subscribe(self, topics: list[str]) -> None:
        """Add subscriptions (a gateway's new device); sent at once when connected, else on connect."""
        with self._lock:
            new = [t for t in topics if t not in self.subscriptions]
            self.subscriptions = [*self.subscriptions, *new]
        if self.connected.is_set() and new:
            self.call_soon(self._send_subscribe, new)

    def unsubscribe(self, topics: list[str]) -> None:
        """Drop subscriptions (a device a gateway no longer serves)."""
        gone = set(topics)
        with self._lock:
            self.subscriptions = [t for t in self.subscriptions if t not in gone]
            self._granted -= gone
        if self.connected.is_set() and topics:
            self.call_soon(self._send_unsubscribe, list(topics))

    # --- the I/O thread ---------------------------------------------------------------------------------

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._io_ident = threading.get_ident()
        try:
            loop.run_until_complete(self._supervise())
        except Exception as exc:
            self.fail(f"MQTT connection thread failed: {type(exc).__name__}: {exc}")
        finally:
            self.connected.clear()
            loop.close()

    async def _supervise(self) -> None:
        """Connect, wait for the connection to end, back off (doubling up to the maximum), again."""
        loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        delay = self.reconnect_delay[0]
        ticker = loop.create_task(self._keepalive_ticks())
        context = ssl.create_default_context(cafile=self.tls_ca_file) if self._tls else None
        where = redact(self.broker_url)
        try:
            while not self.stopping.is_set():
                answered = False
                try:
                    _, link = await asyncio.wait_for(
                        loop.create_connection(lambda: Link(self), self._host, self._port, ssl=context),
                        CONNECT_TIMEOUT_S,
                    )
                    done, _ = await asyncio.wait({link.answered}, timeout=CONNECT_TIMEOUT_S)
                    if not done:
                        log.error("no CONNACK within %.0f s from %s", CONNECT_TIMEOUT_S, where)
                        link.close()
                    elif self.stopping.is_set():  # stopped while connecting
                        self._disconnect()
                    await link.closed
                    answered = link.connack
                except (OSError, TimeoutError) as exc:
                    log.warning("cannot connect to %s: %s", where, exc or type(exc).__name__)
                if answered:
                    delay = self.reconnect_delay[0]
                if self.stopping.is_set():
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop_event.wait(), delay)
                delay = min(delay * 2, self.reconnect_delay[1])
        finally:
            ticker.cancel()

    async def _keepalive_ticks(self) -> None:
        """PINGREQ when nothing was written for half the keep-alive (checked every quarter: idle at most
        3/4 of it; amqtt closes at 1x); a connection whose PINGRESP is overdue by the keep-alive is dead
        (closed, then reconnected). Not enforced while reading is paused (the PINGRESP waits unread)."""
        period = max(0.1, self.keepalive / 4)
        while True:
            await asyncio.sleep(period)
            link = self.link
            if link is None or link.transport is None or not link.connack or link.transport.is_closing():
                continue
            now = time.monotonic()
            if self._ping_sent is not None and not self._paused and now - self._ping_sent > self.keepalive:
                log.warning("no PINGRESP within %d s: the connection is dead", self.keepalive)
                link.close()
            elif self._ping_sent is None and now - self._last_write >= self.keepalive / 2:
                self._ping_sent = now
                self.write(mp.PINGREQ)

    def _disconnect(self) -> None:
        if self._stop_event is not None:
            self._stop_event.set()
        link = self.link
        if link is not None and link.transport is not None and not link.transport.is_closing():
            if link.connack:
                link.transport.write(mp.DISCONNECT)
            link.close()

    def connect_packet(self) -> bytes:
        return mp.connect(
            self.client_id,
            clean_session=False,
            keepalive=self.keepalive,
            will=self.will,
            username=self._username,
            password=self._password,
        )

    def write(self, data: bytes) -> None:
        """I/O thread: bytes for the broker (nothing before the CONNACK or after the connection is gone)."""
        link = self.link
        if (
            link is not None
            and link.connack
            and link.transport is not None
            and not link.transport.is_closing()
        ):
            link.transport.write(data)
            self._last_write = time.monotonic()

    def pause_reading(self) -> None:
        """I/O thread: stop reading the socket (the broker holds what follows)."""
        link = self.link
        if link is not None and link.transport is not None and not self._paused:
            self._paused = True
            link.transport.pause_reading()

    def resume_reading(self) -> None:
        link = self.link
        self._paused = False
        if link is not None and link.transport is not None and not link.transport.is_closing():
            link.transport.resume_reading()

    def _control_id(self) -> int:
        mid = self._next_control
        self._next_control = CONTROL_IDS if mid == 65_535 else mid + 1
        return mid

    def _send_subscribe(self, topics: list[str]) -> None:
        """SUBSCRIBE in packets of at most 100 topics."""
        for start in range(0, len(topics), TOPICS_PER_SUBSCRIBE):
            mid = self._control_id()
            self._suback_waiting.add(mid)
            self._subscribing[mid] = part = topics[start : start + TOPICS_PER_SUBSCRIBE]
            self.write(mp.subscribe(mid, [(t, self.qos) for t in part]))

    def _send_unsubscribe(self, topics: list[str]) -> None:
        for start in range(0, len(topics), TOPICS_PER_SUBSCRIBE):
            self.write(mp.unsubscribe(self._control_id(), topics[start : start + TOPICS_PER_SUBSCRIBE]))

    def received(self, link: Link, data: bytes) -> None:
        try:
            self._dispatch(link, link.reader.feed(data))
        except mp.ProtocolError as exc:
            log.error("protocol error from %s: %s; reconnecting", redact(self.broker_url), exc)
            link.close()
        except Exception as exc:
            self.fail(f"MQTT receive failed: {type(exc).__name__}: {exc}")
            link.close()

    def _dispatch(self, link: Link, packets: list[tuple[int, bytes]]) -> None:
        """Every packet of one read; messages and confirmations go to the session together."""
        messages: list[mp.Publish] = []
        confirmed: list[int] = []
        for first, body in packets:
            kind = first & 0xF0
            if kind == mp.PUBLISH:
                messages.append(mp.decode_publish(first, body))
            elif kind == mp.PUBACK:
                confirmed.append((body[0] << 8) | body[1])
            elif kind == mp.CONNACK:
                self._on_connack(link, body)
            elif kind == mp.SUBACK:
                self._on_suback(body)
            elif kind == mp.PINGRESP:
                self._ping_sent = None
            elif kind != mp.UNSUBACK:
                raise mp.ProtocolError(f"unexpected packet type {kind >> 4}")
        self.session.traffic(link, messages, confirmed)

    def _on_connack(self, link: Link, body: bytes) -> None:
        code = body[1] if len(body) >= 2 else -1
        if not link.answered.done():
            link.answered.set_result(None)
        if code != 0:
            self.refused = mp.CONNECT_REFUSALS.get(code, f"return code {code}")
            log.error("broker refused the connection: %s", self.refused)
            link.close()
            return
        link.connack = True
        self.refused = None
        self._ping_sent = None
        self._suback_waiting.clear()
        self._subscribing.clear()
        self.write(self.session.resend())  # publishes the broker has not confirmed go first (4.4)
        self.connected.set()
        with self._lock:
            if not body or not body[0] & 0x01:  # no session present: the broker holds no subscription
                self._granted.clear()
            topics = [t for t in self.subscriptions if t not in self._granted]
        if topics:
            self._send_subscribe(topics)
        else:  # the broker's session holds every subscription, or a gateway serves no device yet
            self.subscribed.set()
        log.info("connected to %s", redact(self.broker_url))
        if self.on_connected is not None:
            self.on_connected()

    def _on_suback(self, body: bytes) -> None:
        if any(code == 0x80 for code in body[2:]):
            log.error("the broker refused a subscription (SUBACK failure): check its ACL for this client")
        mid = (body[0] << 8) | body[1]
        topics = self._subscribing.pop(mid, [])
        with self._lock:
            current = set(self.subscriptions)
            self._granted.update(
                t for t, code in zip(topics, body[2:], strict=False) if code != 0x80 and t in current
            )
        self._suback_waiting.discard(mid)
        if not self._suback_waiting:
            self.subscribed.set()

    def lost(self, link: Link, exc: Exception | None) -> None:
        if link is not self.link:
            return
        self.connected.clear()
        self.link = None
        self._paused = False
        if link.connack and not self.stopping.is_set():
            self.reconnects += 1
            log.warning("disconnected from the broker (%s); reconnecting with backoff", exc or "closed")
        self.session.lost(exc)

    def fail(self, reason: str) -> None:
        """An exception in the I/O thread: the agent must not go on looking alive (reported as fatal)."""
        self.failure = reason
        log.error(reason)
        if self.on_fatal is not None:
            self.on_fatal(reason)
