"""The agent's side of MQTT: a bounded inbox, acknowledgements after processing, checked publishes.

Threads. :class:`~edgedrift_edge.mqtt_connection.MqttConnection` keeps the connection on an asyncio loop
in a thread of its own (the *I/O thread*) and hands every read's messages over at once; the worker takes
them in batches (:meth:`MqttTransport.get_batch`), and what it publishes is coalesced into one write per
batch. Per message the I/O thread runs a few microseconds of Python, so the worker and it seldom fight for
the GIL (paho's network thread, with three ``recv`` calls and a callback per packet, held the GIL half the
time: docs/benchmarks-history.md, §6).

At-least-once, end to end. A QoS-1 message is acknowledged (PUBACK) only once the worker processed it and
the broker has confirmed every one of its publishes (their PUBACKs). An agent killed at any moment
therefore leaves every sample it has not answered unacknowledged, and the broker delivers it again to the
restarted agent (persistent session, ``clean_session=False``). Acknowledgements go out in the order the
messages came in, as MQTT requires. QoS-1 publishes the broker has not confirmed are sent again, with the
DUP flag, after a reconnect (MQTT 3.1.1, 4.4).

Back-pressure instead of drops. The broker sends at most ``max_inflight_messages`` unacknowledged QoS-1
messages (deploy/mosquitto/mosquitto.conf) and keeps the rest queued for the agent. When a QoS-1 message
finds the inbox holding ``inbox_size`` messages or ``max_inbox_bytes`` (it is kept, with the rest of that
read), the I/O thread stops reading the socket (``backpressure_waits``) until the worker has taken half:
the broker then holds the messages. Only QoS-0 messages, which the broker will never send again, are
dropped when the inbox is full, and every drop is counted.

Publishes are checked: a publish that cannot be queued (``publish_queue`` unconfirmed QoS-1 publishes, or
QoS 0 while disconnected) is counted and retried by the worker, and the message that produced it stays
unacknowledged until it went out.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec

from edgedrift_edge import mqtt_packets as mp
from edgedrift_edge.mqtt_connection import CONTROL_IDS, Link, MqttConnection

log = logging.getLogger("edgedrift_edge.transport")

_encode = msgspec.json.Encoder().encode

#: Packet ids of publishes: 1 to this (the connection's SUBSCRIBE and UNSUBSCRIBE use the ids above).
MAX_UNCONFIRMED = CONTROL_IDS - 1


class Inbound(NamedTuple):
    """One received message; ``generation`` is the connection it came on (acks are per connection);
    ``retain``: the broker sent it from its retained store (at a subscribe), not as it was published."""

    topic: str
    payload: bytes
    mid: int
    qos: int
    generation: int
    #: When it entered the inbox (``time.monotonic``): the metrics' message latency starts here.
    received: float = 0.0
    retain: bool = False


class _Pending:
    """A received message until it is acknowledged: how many of its publishes the broker has not
    confirmed yet, and whether the worker is done with it (slots: one per message)."""

    __slots__ = ("done", "message", "outstanding")

    def __init__(self, message: Inbound) -> None:
        self.message = message
        self.outstanding = 0
        self.done = False


class _Retry(NamedTuple):
    """A publish that could not be queued, to be tried again."""

    topic: str
    body: bytes
    qos: int
    retain: bool
    entry: _Pending | None


@dataclass
class TransportCounters:
    """What the transport counts on its own (the session counts samples)."""

    dropped: int = 0
    backpressure_waits: int = 0
    publish_failures: int = 0
    reconnects: int = 0


class MqttTransport:
    """The worker's MQTT client: inbox, acknowledgements after processing, checked publishes (module
    docstring); the connection itself is :attr:`connection`."""

    def __init__(
        self,
        broker_url: str,
        client_id: str,
        subscriptions: list[str],
        status_topic: str,
        *,
        qos: int = 1,
        inbox_size: int = 20_000,
        publish_queue: int = MAX_UNCONFIRMED,
        max_inbox_bytes: int = 256 * 1024 * 1024,
        tls_ca_file: str | None = None,
        keepalive: int = 30,
        reconnect_delay: tuple[float, float] = (1.0, 30.0),
        on_connected: Callable[[], None] | None = None,
        on_fatal: Callable[[str], None] | None = None,
    ) -> None:
        if qos not in (0, 1):
            raise ValueError(f"QoS {qos}: the agent subscribes and publishes with QoS 0 or 1")
        if not 1 <= publish_queue <= MAX_UNCONFIRMED:
            raise ValueError(
                f"publish_queue {publish_queue}: from 1 to {MAX_UNCONFIRMED} unconfirmed publishes "
                "(MQTT packet ids are 16 bits)"
            )
        self.broker_url = broker_url
        self.status_topic = status_topic
        self.qos = qos
        self.inbox_size = inbox_size
        self.max_inbox_bytes = max_inbox_bytes
        self.publish_queue = publish_queue
        self.counters = TransportCounters()
        self.connection = MqttConnection(
            broker_url,
            client_id,
            self,
            subscriptions=subscriptions,
            qos=qos,
            will=mp.Will(status_topic, json.dumps({"state": "offline"}).encode(), qos=1, retain=True),
            keepalive=keepalive,
            reconnect_delay=reconnect_delay,
            tls_ca_file=tls_ca_file,
            max_packet=max_inbox_bytes,
            on_connected=on_connected,
            on_fatal=on_fatal,
        )
        self.connected = self.connection.connected
        self.subscribed = self.connection.subscribed
        self.stopping = self.connection.stopping
        self._lock = threading.Lock()
        self._has_mail = threading.Condition(self._lock)
        self._generation = 0
        self._inbox: deque[Inbound] = deque()
        self._inbox_bytes = 0
        self._paused = False
        self._pending: deque[_Pending] = deque()
        self._entries: dict[int, _Pending] = {}  # id(Inbound) -> its entry in _pending
        self._unconfirmed: dict[int, bytes] = {}  # packet id of a QoS-1 publish -> the packet
        self._by_mid: dict[int, _Pending | None] = {}  # packet id -> the message waiting for it
        self._next_mid = 1
        self._out = bytearray()
        self._flush_scheduled = False
        self._retry: deque[_Retry] = deque()
        self._dropped_by_topic: dict[str, int] = {}
        self._topic_bytes: dict[str, bytes] = {}

    @property
    def failure(self) -> str | None:
        """Why the I/O thread can no longer be trusted, or None."""
        return self.connection.failure

    @property
    def refused(self) -> str | None:
        """Why the broker refused the last connection, or None."""
        return self.connection.refused

    # --- connection -------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Connect in the background and return once subscribed (TimeoutError otherwise)."""
        self.connection.start(timeout)

    def stop(self, drain_s: float = 5.0) -> None:
        """Wait up to ``drain_s`` for the broker to confirm what was published, then disconnect."""
        self.stopping.set()
        deadline = time.monotonic() + drain_s
        while time.monotonic() < deadline and self.connected.is_set():
            with self._lock:
                if not self._unconfirmed and not self._retry:
                    break
            time.sleep(0.01)
        self.connection.call_soon(self._flush_now)
        self.connection.stop(drain_s + 5)

    def subscribe(self, topics: list[str]) -> None:
        """Add subscriptions (a gateway's new device); sent at once when connected, else on connect."""
        self.connection.subscribe(topics)

    def unsubscribe(self, topics: list[str]) -> None:
        """Drop subscriptions (a device a gateway no longer serves)."""
        self.connection.unsubscribe(topics)

    def dropped_for(self, topic: str) -> int:
        """QoS-0 messages of ``topic`` dropped because the inbox was full."""
        return self._dropped_by_topic.get(topic, 0)

    # --- the I/O thread (the connection's session) ------------------------------------------------------

    def resend(self) -> bytes:
        """A new connection: the publishes the broker has not confirmed, in the order they were made."""
        with self._lock:
            self._out.clear()
            return b"".join(mp.as_duplicate(p) for p in self._unconfirmed.values())

    def traffic(self, link: Link, messages: list[mp.Publish], confirmed: list[int]) -> None:
        """One read: confirmations release their messages, messages go into the inbox; one write."""
        if confirmed or messages:
            with self._lock:
                for mid in confirmed:
                    self._confirm(mid)
                if messages:
                    self._enqueue(messages)
        self._flush_now()

    def lost(self, exc: Exception | None) -> None:
        with self._lock:
            # Messages of the lost connection are delivered again on the next one (and deduplicated
            # there); their packet ids may be reused, so they must never be acknowledged now.
            self._generation += 1
            self._out.clear()
            self._paused = False
            self._ack_ready()  # forgets them
        self.counters.reconnects = self.connection.reconnects

    def _enqueue(self, messages: list[mp.Publish]) -> None:
        """Lock held: into the inbox (QoS 0 dropped and counted when full; QoS 1 pauses the reading)."""
        generation = self._generation
        inbox = self._inbox
        full = False
        now = time.monotonic()
        for m in messages:
            size = len(m.payload)
            over = len(inbox) >= self.inbox_size or self._inbox_bytes + size > self.max_inbox_bytes
            if over and m.qos == 0:
                self._drop(m.topic)
                continue
            full = full or over
            inbox.append(Inbound(m.topic, m.payload, m.packet_id, m.qos, generation, now, m.retain))
            self._inbox_bytes += size
        if full and not self._paused:
            self._paused = True
            self.counters.backpressure_waits += 1
            self.connection.pause_reading()
        self._has_mail.notify()

    # --- the worker: messages in ------------------------------------------------------------------------

    def get_batch(self, timeout: float, limit: int = 1000) -> list[Inbound]:
        """Up to ``limit`` messages in arrival order, waiting up to ``timeout`` for the first."""
        with self._has_mail:
            if not self._inbox and not self._has_mail.wait_for(lambda: bool(self._inbox), timeout):
                return []
            inbox = self._inbox
            batch = [inbox.popleft() for _ in range(min(limit, len(inbox)))]
            self._inbox_bytes -= sum(len(m.payload) for m in batch)
            if (
                self._paused
                and len(inbox) <= self.inbox_size // 2
                and self._inbox_bytes <= self.max_inbox_bytes // 2
            ):
                self._paused = False
                self.connection.call_soon(self.connection.resume_reading)
        return batch

    @property
    def queued(self) -> int:
        """Messages received and not taken by the worker yet."""
        return len(self._inbox)

    # --- out --------------------------------------------------------------------------------------------

    def publish(
        self, topic: str, payload: dict[str, Any], *, retain: bool = False, owner: Inbound | None = None
    ) -> None:
        """Publish a JSON payload (a float that is not finite becomes null); with ``owner``, that message is
        acknowledged only once this is out."""
        self.publish_raw(topic, _encode(payload), retain=retain, owner=owner)

    def publish_raw(
        self,
        topic: str,
        body: bytes,
        *,
        retain: bool = False,
        qos: int | None = None,
        owner: Inbound | None = None,
    ) -> None:
        """Publish bytes (a status, an encoded payload); a publish that cannot be queued is counted and
        retried; with ``owner``, that message is acknowledged only once this is out."""
        entry = None
        if owner is not None and owner.qos > 0:
            with self._lock:
                entry = self._entry(owner)
        self._attempt(topic, body, self.qos if qos is None else min(qos, 1), retain, entry)

    def _entry(self, message: Inbound) -> _Pending | None:
        """The pending-ack entry of ``message`` (created on first use; lock held); None if it must not be
        acknowledged (QoS 0, or it came on a connection that is gone)."""
        if message.qos == 0 or message.generation != self._generation:
            return None
        entry = self._entries.get(id(message))
        if entry is None:
            entry = self._entries[id(message)] = _Pending(message)
            self._pending.append(entry)
        return entry

    def _allocate_mid(self) -> int:
        """A packet id not in use (lock held; fewer than MAX_UNCONFIRMED are)."""
        mid = self._next_mid
        while mid in self._unconfirmed:
            mid = mid % MAX_UNCONFIRMED + 1
        self._next_mid = mid % MAX_UNCONFIRMED + 1
        return mid

    def _attempt(self, topic: str, body: bytes, qos: int, retain: bool, entry: _Pending | None) -> bool:
        """One publish into the outgoing buffer; the broker's PUBACK releases ``entry`` later."""
        encoded = self._topic_bytes.get(topic)
        if encoded is None:
            encoded = self._topic_bytes[topic] = topic.encode()
        with self._lock:
            refused = len(self._unconfirmed) >= self.publish_queue if qos else not self.connected.is_set()
            if refused:
                self.counters.publish_failures += 1
                if entry is not None:
                    entry.outstanding += 1
                self._retry.append(_Retry(topic, body, qos, retain, entry))
                return False
            if qos:
                mid = self._allocate_mid()
                packet = mp.publish(encoded, body, qos, mid, retain)
                self._unconfirmed[mid] = packet
                self._by_mid[mid] = entry
                if entry is not None:
                    entry.outstanding += 1
            else:
                packet = mp.publish(encoded, body, 0, 0, retain)
            if self.connected.is_set():
                self._out += packet
                self._schedule_flush()
        return True

    def _confirm(self, mid: int) -> None:
        """Lock held: the broker confirmed publish ``mid``; release its message."""
        if self._unconfirmed.pop(mid, None) is None:
            return
        entry = self._by_mid.pop(mid, None)
        if entry is not None:
            entry.outstanding -= 1
            if entry.done and not entry.outstanding and self._pending and self._pending[0] is entry:
                self._ack_ready()

    def done(self, message: Inbound) -> None:
        """The worker finished ``message``: acknowledge it as soon as its publishes are confirmed
        (at once when it published nothing)."""
        if message.qos == 0:
            return
        with self._lock:
            entry = self._entry(message)
            if entry is not None:
                entry.done = True
                self._ack_ready()

    def _ack_ready(self) -> None:
        """Acknowledge finished messages from the head of the queue, in arrival order (lock held)."""
        pending = self._pending
        acked = False
        while pending:
            head = pending[0]
            stale = head.message.generation != self._generation
            if not stale and not (head.done and not head.outstanding):
                break
            pending.popleft()
            del self._entries[id(head.message)]
            if not stale:
                self._out += mp.puback(head.message.mid)
                acked = True
        if acked:
            self._schedule_flush()

    def _schedule_flush(self) -> None:
        """Lock held: write the outgoing buffer soon (once per batch of publishes from the worker; the
        I/O thread writes at the end of what it is doing)."""
        if self._flush_scheduled or self.connection.in_io_thread():
            return
        self._flush_scheduled = True
        self.connection.call_soon(self._flush_now)

    def _flush_now(self) -> None:
        """I/O thread: write what was queued, in one call."""
        with self._lock:
            self._flush_scheduled = False
            if not self._out:
                return
            data = bytes(self._out)
            self._out.clear()
        self.connection.write(data)

    def _drop(self, topic: str) -> None:
        self.counters.dropped += 1
        self._dropped_by_topic[topic] = self._dropped_by_topic.get(topic, 0) + 1

    def retry_failed(self) -> int:
        """Publish again what could not be queued; returns how many are still waiting."""
        with self._lock:
            waiting = len(self._retry)
        for _ in range(waiting):
            with self._lock:
                retry = self._retry.popleft()
                if retry.entry is not None:
                    retry.entry.outstanding -= 1
            if not self._attempt(retry.topic, retry.body, retry.qos, retry.retain, retry.entry):
                break
        with self._lock:
            return len(self._retry)

    @property
    def unacked(self) -> int:
        """Messages processed or in the inbox whose acknowledgement is still due."""
        with self._lock:
            return len(self._pending) + len(self._inbox)

    def wait_flushed(self, timeout: float) -> bool:
        """Wait until every processed message is acknowledged (used on stop)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.retry_failed()
            with self._lock:
                if not self._pending and not self._retry:
                    return True
            time.sleep(0.01)
        return False
