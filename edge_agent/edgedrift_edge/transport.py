"""The MQTT side of an agent: a bounded inbox, acknowledgements after processing, checked publishes.

At-least-once, end to end. paho acknowledges a QoS-1 message as soon as ``on_message`` returns unless
the client runs with manual acknowledgements, so it does (paho 2.x ``manual_ack=True``): the worker
processes a message, publishes its predictions and events, and the message is acknowledged only when
the broker has confirmed every one of those publishes (``on_publish``). An agent killed at any moment
therefore leaves every sample it has not answered unacknowledged, and the broker delivers it again to
the restarted agent (persistent session, ``clean_session=False``). Acknowledgements go out in the order
the messages came in, as MQTT requires.

Back-pressure instead of drops. The broker sends at most ``max_inflight_messages`` unacknowledged QoS-1
messages (deploy/mosquitto/mosquitto.conf) and keeps the rest queued for the agent; the inbox is sized
above that. Should it fill anyway, the network thread waits for room (``backpressure_waits``) instead of
dropping: the broker then holds the messages. Only QoS-0 messages, which the broker will never send
again, are dropped when the inbox is full, and every drop is counted.

Publishes are checked: a publish paho refuses (its outgoing queue is full) is counted and retried by
the worker, and the message that produced it stays unacknowledged until it went out.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import paho.mqtt.client as mqtt

from edgedrift_edge.mqtt import broker_address, make_client, redact

log = logging.getLogger("edgedrift_edge.transport")


class Inbound(NamedTuple):
    """One received message; ``generation`` is the connection it came on (acks are per connection)."""

    topic: str
    payload: bytes
    mid: int
    qos: int
    generation: int


class _Pending:
    """A received message until it is acknowledged: how many of its publishes the broker has not
    confirmed yet, and whether the worker is done with it (slots: one per message)."""

    __slots__ = ("done", "message", "outstanding")

    def __init__(self, message: Inbound) -> None:
        self.message = message
        self.outstanding = 0
        self.done = False


class _Retry(NamedTuple):
    """A publish paho refused (its queue was full), to be tried again."""

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
    """paho client with manual acks, a bounded inbox and checked publishes (see the module docstring)."""

    def __init__(
        self,
        broker_url: str,
        client_id: str,
        subscriptions: list[str],
        status_topic: str,
        *,
        qos: int = 1,
        inbox_size: int = 20_000,
        publish_queue: int = 100_000,
        max_inbox_bytes: int = 256 * 1024 * 1024,
        tls_ca_file: str | None = None,
        on_connected: Callable[[], None] | None = None,
        on_fatal: Callable[[str], None] | None = None,
    ) -> None:
        self.broker_url = broker_url
        self.subscriptions = subscriptions
        self.status_topic = status_topic
        self.qos = qos
        self.inbox: queue.Queue[Inbound] = queue.Queue(maxsize=inbox_size)
        self.counters = TransportCounters()
        self.connected = threading.Event()
        self.subscribed = threading.Event()
        self.stopping = threading.Event()
        self.on_connected = on_connected
        self.on_fatal = on_fatal
        #: Why the network thread can no longer be trusted (an exception in a callback), or None.
        self.failure: str | None = None
        self._generation = 0
        self._lock = threading.Lock()
        self._pending: deque[_Pending] = deque()
        self._entries: dict[int, _Pending] = {}  # id(Inbound) -> its entry in _pending
        self._by_mid: dict[int, _Pending | None] = {}  # mid of a publish -> the message waiting for it
        self._confirmed_early: set[int] = set()
        self._retry: deque[_Retry] = deque()
        self._dropped_by_topic: dict[str, int] = {}
        self.max_inbox_bytes = max_inbox_bytes
        self._bytes_in = 0
        self._bytes_out = 0
        self.client = make_client(broker_url, client_id, clean_session=False, tls_ca_file=tls_ca_file)
        self.client.manual_ack_set(True)
        self.client.will_set(status_topic, json.dumps({"state": "offline"}), qos=1, retain=True)
        self.client.max_queued_messages_set(publish_queue)
        # No client-side cap on QoS-1 messages in flight (paho's default is 20): the cap made predictions
        # wait a broker round trip per 20 messages; max_queued_messages still bounds what paho holds.
        self.client.max_inflight_messages_set(0)
        self.client.on_connect = self._guarded(self._on_connect)
        self.client.on_disconnect = self._guarded(self._on_disconnect)
        self.client.on_subscribe = self._guarded(self._on_subscribe)
        self.client.on_message = self._guarded(self._on_message)
        self.client.on_publish = self._guarded(self._on_publish)

    def _guarded(self, callback: Callable[..., None]) -> Callable[..., None]:
        """An exception in a callback would end paho's network thread silently (the agent would stop
        receiving while it still looks alive): record it and report it as fatal instead."""

        def run(*args: Any) -> None:
            try:
                callback(*args)
            except Exception as exc:
                self.failure = f"MQTT callback {callback.__name__} failed: {type(exc).__name__}: {exc}"
                log.exception(self.failure)
                if self.on_fatal is not None:
                    self.on_fatal(self.failure)

        return run

    # --- connection -------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Connect in the background and return once subscribed (TimeoutError otherwise)."""
        host, port, _tls = broker_address(self.broker_url)
        self.client.connect_async(host, port, keepalive=30)
        self.client.loop_start()
        if not self.subscribed.wait(timeout):
            raise TimeoutError(f"not subscribed to {redact(self.broker_url)} after {timeout} s")

    def stop(self, drain_s: float = 5.0) -> None:
        """Wait up to ``drain_s`` for the broker to confirm what was published, then disconnect."""
        self.stopping.set()
        deadline = time.monotonic() + drain_s
        while time.monotonic() < deadline and self.connected.is_set():
            with self._lock:
                if not self._by_mid and not self._retry:
                    break
            time.sleep(0.01)
        self.client.disconnect()
        self.client.loop_stop()

    def subscribe(self, topics: list[str]) -> None:
        """Add subscriptions (a gateway's new device); sent at once when connected, else on connect."""
        with self._lock:
            self.subscriptions = [*self.subscriptions, *(t for t in topics if t not in self.subscriptions)]
        if self.connected.is_set():
            self._send_subscribe(topics)

    def unsubscribe(self, topics: list[str]) -> None:
        """Drop subscriptions (a device a gateway no longer serves)."""
        with self._lock:
            self.subscriptions = [t for t in self.subscriptions if t not in set(topics)]
        if self.connected.is_set() and topics:
            self.client.unsubscribe(topics)

    def _send_subscribe(self, topics: list[str]) -> None:
        """SUBSCRIBE in packets of at most 100 topics (a gateway may serve thousands of devices)."""
        for start in range(0, len(topics), 100):
            self.client.subscribe([(topic, self.qos) for topic in topics[start : start + 100]])

    def dropped_for(self, topic: str) -> int:
        """QoS-0 messages of ``topic`` dropped because the inbox was full."""
        return self._dropped_by_topic.get(topic, 0)

    def _on_connect(self, client: mqtt.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        if reason.is_failure:
            log.error("broker refused the connection: %s", reason)
            return
        # Subscribing here renews the subscriptions after every reconnect.
        with self._lock:
            topics = list(self.subscriptions)
        self._send_subscribe(topics)
        if not topics:  # a gateway that serves no device yet
            self.subscribed.set()
        self.connected.set()
        log.info("connected to %s", redact(self.broker_url))
        if self.on_connected is not None:
            self.on_connected()

    def _on_subscribe(self, _c: mqtt.Client, _u: Any, _mid: int, _codes: Any, _p: Any) -> None:
        self.subscribed.set()

    def _on_disconnect(self, _c: mqtt.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        self.connected.clear()
        with self._lock:
            # Messages of the lost connection are delivered again on the next one (and deduplicated
            # there); their packet ids may be reused, so they must never be acknowledged now.
            self._generation += 1
            self._ack_ready()  # forgets them
        if not self.stopping.is_set():
            self.counters.reconnects += 1
            log.warning("disconnected from the broker (%s); paho reconnects with backoff", reason)

    # --- in -------------------------------------------------------------------------------------------------

    def _on_message(self, _c: mqtt.Client, _u: Any, message: mqtt.MQTTMessage) -> None:
        """Network thread: enqueue (wait for room when QoS > 0; drop and count when QoS 0)."""
        item = Inbound(message.topic, bytes(message.payload), message.mid, message.qos, self._generation)
        size = len(item.payload)
        if message.qos == 0:
            if self._inbox_bytes + size > self.max_inbox_bytes:
                self._drop(item.topic)
                return
            try:
                self.inbox.put_nowait(item)
            except queue.Full:
                self._drop(item.topic)
                return
            self._bytes_in += size
            return
        waited = False
        while not self.stopping.is_set():
            if self._inbox_bytes + size <= self.max_inbox_bytes or self.inbox.empty():
                try:
                    self.inbox.put(item, timeout=0.5 if waited else 0.0)
                    self._bytes_in += size
                    return
                except queue.Full:
                    pass
            else:
                time.sleep(0.05)
            if not waited:
                self.counters.backpressure_waits += 1
                waited = True

    def _drop(self, topic: str) -> None:
        self.counters.dropped += 1
        self._dropped_by_topic[topic] = self._dropped_by_topic.get(topic, 0) + 1

    def get(self, timeout: float) -> Inbound | None:
        try:
            item = self.inbox.get(timeout=timeout)
        except queue.Empty:
            return None
        self._bytes_out += len(item.payload)
        return item

    @property
    def _inbox_bytes(self) -> int:
        """Payload bytes in the inbox: counted in by the network thread, out by the worker (each counter
        has one writer, so no lock is needed)."""
        return self._bytes_in - self._bytes_out

    # --- out ------------------------------------------------------------------------------------------------

    def publish(
        self, topic: str, payload: dict[str, Any], *, retain: bool = False, owner: Inbound | None = None
    ) -> None:
        """Publish a JSON payload; with ``owner``, that message is acknowledged only once this is out."""
        body = json.dumps(payload, separators=(",", ":"), allow_nan=False).encode()
        entry = None
        if owner is not None and owner.qos > 0:
            with self._lock:
                entry = self._entry(owner)
        self._attempt(topic, body, self.qos, retain, entry)

    def publish_raw(self, topic: str, body: bytes, *, retain: bool = False, qos: int | None = None) -> None:
        """Publish outside any message (status, for instance); a refused publish is counted and retried."""
        self._attempt(topic, body, self.qos if qos is None else qos, retain, None)

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

    def _attempt(self, topic: str, body: bytes, qos: int, retain: bool, entry: _Pending | None) -> bool:
        """One publish; the broker's confirmation (``on_publish``) releases ``entry`` later."""
        info = self.client.publish(topic, body, qos=qos, retain=retain)
        if info.rc == mqtt.MQTT_ERR_QUEUE_SIZE or (qos == 0 and info.rc != mqtt.MQTT_ERR_SUCCESS):
            self.counters.publish_failures += 1
            with self._lock:
                if entry is not None:
                    entry.outstanding += 1
                self._retry.append(_Retry(topic, body, qos, retain, entry))
            return False
        if qos == 0:
            return True
        with self._lock:
            if info.mid in self._confirmed_early:  # the broker was faster than this thread
                self._confirmed_early.discard(info.mid)
            else:
                self._by_mid[info.mid] = entry
                if entry is not None:
                    entry.outstanding += 1
        return True

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

    def _on_publish(self, _c: mqtt.Client, _u: Any, mid: int, _rc: Any, _p: Any) -> None:
        """Network thread: the broker confirmed ``mid``; release its message (one lock, little work)."""
        with self._lock:
            if mid not in self._by_mid:
                self._confirmed_early.add(mid)
                return
            entry = self._by_mid.pop(mid)
            if entry is not None:
                entry.outstanding -= 1
                if entry.done and not entry.outstanding and self._pending and self._pending[0] is entry:
                    self._ack_ready()

    def _ack_ready(self) -> None:
        """Acknowledge finished messages from the head of the queue, in arrival order (lock held)."""
        while self._pending:
            head = self._pending[0]
            stale = head.message.generation != self._generation
            if not stale and not (head.done and not head.outstanding):
                return
            self._pending.popleft()
            del self._entries[id(head.message)]
            if not stale:
                self.client.ack(head.message.mid, head.message.qos)

    def retry_failed(self) -> int:
        """Publish again what paho refused; returns how many are still waiting."""
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
            return len(self._pending) + self.inbox.qsize()

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
