"""The agent's side of MQTT: a paho-mqtt 2.x client with a bounded inbox, acknowledgements after processing
and checked publishes.

Threads. An I/O thread (:class:`~edgedrift_edge.transport.io_loop.IoLoop`, of this connection's own or
shared by a gateway's device sessions) drives paho (``loop_read``, ``loop_write``, ``loop_misc``) and
reconnects with backoff; connecting, which blocks, runs in a short-lived thread of its own. paho's
callbacks only append to a queue; the I/O thread handles that queue after each turn, outside paho's locks,
so the worker can call paho (publish, ack) under the transport's lock without a lock-order cycle. The
worker takes messages in batches (:meth:`MqttTransport.get_batch`). paho's client is subclassed
(:class:`_FastClient`) only to cut its Python per packet: whole reads split in place, PUBLISH and PUBACK
without paho's per-message objects, queued packets written in one ``send``, the I/O thread woken once per
burst of publishes.

At-least-once, end to end. Acknowledgements are manual (``manual_ack=True``): a QoS-1 message is
acknowledged (``Client.ack``) only once the worker processed it and the broker has confirmed every one of
its publishes (their PUBACKs), in the order the messages came in, as MQTT requires. An agent killed at any
moment therefore leaves every sample it has not answered unacknowledged, and the broker delivers it again
to the restarted agent (persistent session: ``clean_session=False``, or MQTT 5 ``clean_start=False`` with
a session expiry, ``session_expiry_s``). Messages of a lost connection are never acknowledged on the next
one (their packet ids may be reused); paho sends the QoS-1 publishes the broker has not confirmed again,
with DUP, after a reconnect.

Back-pressure instead of drops. The broker holds what the agent has not acknowledged beyond a bound: MQTT
5's Receive Maximum (sent in CONNECT: the inbox size, at most 65,535) or, over MQTT 3.1.1, the broker's
``max_inflight_messages`` (deploy/mosquitto/mosquitto.conf). Should a QoS-1 message still find the inbox
full (``inbox_size`` messages or ``max_inbox_bytes``) it is kept and the I/O thread stops reading the
socket (``backpressure_waits``) until the worker has taken half. Only QoS-0 messages, which the broker
never sends again, are dropped when the inbox is full, and every drop is counted.

Publishes are checked: a publish paho cannot queue (``publish_queue`` unconfirmed QoS-1 publishes, or
QoS 0 while disconnected) is counted and retried by the worker, and the message that produced it stays
unacknowledged until it went out.

MQTT 5 expiries. The session expiry (``session_expiry_s``, sent in CONNECT) is how long the broker keeps
the agent's session, and the samples queued in it, while the agent is away. A message expiry
(``message_expiry_s``) goes on every prediction and event the agent publishes (not on the retained
status): the broker discards a copy that waited that long for an offline subscriber, so a prediction is
not delivered hours after it was made. Reason codes of a refused CONNECT or of the broker's DISCONNECT
(and its reason string) are logged.

Liveness. The client pings when nothing came in for its keep-alive and gives the connection up when, a
ping unanswered, the broker gave no sign of life for another one: it is given half the agent's
``keepalive``, so a half-open connection (the flow silently dropped by a NAT or a load balancer) is
noticed within the agent's keep-alive whatever the agent publishes. A sign of life is a byte from the
broker, or room it made in a full send buffer (it read what the agent sent), not only the PINGRESP: that
answer waits behind every byte queued before it in either direction, and behind a backlog of publishes
both ways it took longer than the keep-alive from a broker that was answering (paho gave such connections
up). While back-pressure stops the reading the broker's silence says nothing; it is measured again from
when the reading resumes. Reconnects back off from ``reconnect_delay[0]`` doubling to ``reconnect_delay[1]``,
and the backoff starts over only after a connection held for ``STABLE_S`` (a broker that accepts and
then drops every connection is not hammered). A broker sending something paho cannot decode gets the
same reconnect with backoff; the agent never exits for it.

One module of over 500 lines: the inbox, the acknowledgement bookkeeping and the I/O thread share one lock
and one invariant (a message is acknowledged on the connection it came on, after its publishes), which
reads best in one place.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, cast

import msgspec
import paho.mqtt.client as mqtt
from paho.mqtt.enums import MQTTErrorCode, _ConnectionState
from paho.mqtt.exception import MalformedPacket
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from edgedrift_edge.transport.io_loop import LOOP_TIMEOUT_S, IoLoop, yield_to
from edgedrift_edge.transport.mqtt import (
    MAX_EXPIRY_S,
    SESSION_EXPIRY_S,
    make_client,
    parse_broker_url,
    redact,
)

log = logging.getLogger("edgedrift_edge.transport.connection")

_encode = msgspec.json.Encoder().encode

#: Most unconfirmed QoS-1 publishes: paho numbers them with 16-bit packet ids and never skips one in use.
MAX_UNCONFIRMED = 65_000
#: Topic filters per SUBSCRIBE packet (a gateway may serve thousands of devices).
TOPICS_PER_SUBSCRIBE = 100
#: Seconds to wait for the TCP (and TLS, WebSocket) connection, and then for the CONNACK.
CONNECT_TIMEOUT_S = 10.0
#: Bytes asked for per ``recv``.
CHUNK = 65_536
#: Packets read per turn of the I/O thread at most (paho's ``loop_read`` reads one by default): the worker
#: then gets a read's messages together, as one batch.
READ_BURST = 1000
#: Least seconds between two wake-ups of the I/O thread by publishes of another thread.
WAKE_INTERVAL_S = 0.001
#: A connection that held this long starts the reconnect backoff over (one dropped sooner does not).
STABLE_S = 10.0
_OK = MQTTErrorCode.MQTT_ERR_SUCCESS
_NO_CONN = MQTTErrorCode.MQTT_ERR_NO_CONN


class Bell(Protocol):
    """What a transport rings when a message enters its inbox (a ``threading.Event``, or a gateway's
    per-session bell, :class:`~edgedrift_edge.transport.sessions.DeviceSessions`)."""

    def set(self) -> None: ...


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
    #: The transport's ``name`` (a gateway's session of one device: the device id), whose ack it needs.
    session: str | None = None


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


def describe_reason(reason: Any, properties: Any = None) -> str:
    """A broker's reason code as the log says it: its name, its number, and the reason string the broker
    may add (MQTT 5 CONNACK and DISCONNECT)."""
    text = str(reason)
    value = getattr(reason, "value", None)
    if isinstance(value, int):
        text += f" (reason code {value})"
    why = getattr(properties, "ReasonString", None)
    if why:
        text += f": {why}"
    return text


class Received(NamedTuple):
    """A PUBLISH as the client hands it over (paho's ``MQTTMessage`` is costlier to build: a lock each);
    ``topic`` is None when it is not UTF-8."""

    topic: str | None
    payload: bytes
    mid: int
    qos: int
    retain: bool


#: What paho passes to ``on_publish`` for a PUBACK without reason code and properties (success): built
#: once, not per packet; the transport's callback ignores both.
_PUBACK_OK = ReasonCode(PacketTypes.PUBACK)
_NO_PROPERTIES = Properties(PacketTypes.PUBACK)  # type: ignore[no-untyped-call]


class _Unwaited:
    """The stand-in for the ``threading.Condition`` paho gives every publish's ``MQTTMessageInfo``: the
    transport never waits on a publish (the PUBACK reaches it through ``on_publish``), so none is built."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None

    def notify(self) -> None:
        return None

    def wait(self, timeout: float | None = None) -> bool:
        raise RuntimeError("the transport's publishes are confirmed through on_publish, not waited on")


_UNWAITED = _Unwaited()


def _message_info(mid: int, rc: MQTTErrorCode) -> mqtt.MQTTMessageInfo:
    """paho's ``MQTTMessageInfo`` of a publish, without the condition nobody here waits on."""
    info = mqtt.MQTTMessageInfo.__new__(mqtt.MQTTMessageInfo)
    info.mid, info.rc, info._published, info._iterpos = mid, rc, False, 0
    info._condition = _UNWAITED  # type: ignore[assignment]
    return info


def _packet_bounds(buf: bytes, at: int) -> tuple[int, int] | None:
    """(start, end) of the body of the packet at ``buf[at:]``, None while it is incomplete; ValueError for a
    remaining length of more than 4 bytes (MQTT 3.1.1 and 5, section 2.2.3)."""
    length, shift, i, end = 0, 0, at + 1, len(buf)
    while True:
        if i >= end:
            return None
        byte = buf[i]
        length |= (byte & 0x7F) << shift
        i += 1
        if not byte & 0x80:
            break
        shift += 7
        if shift > 21:
            raise ValueError("remaining length of more than 4 bytes")
    return (i, i + length) if i + length <= end else None


class _FastClient(mqtt.Client):
    """paho's client with its per-packet Python cut down, everything else paho's (``on_socket_register_write``
    must be set: only the I/O thread writes):

    * reads: one ``recv`` of up to 64 KiB, split into packets in place (paho asks for a packet's first
      byte, its length and its body in separate ``recv`` calls, each a system call that gives the GIL up);
    * PUBLISH (QoS 0 and 1, MQTT 3.1.1) goes to :attr:`on_received` as a :class:`Received` tuple, without
      paho's ``MQTTMessage`` and its lock; a PUBACK without properties (success) is confirmed without
      building MQTT 5 ``ReasonCode`` and ``Properties`` objects for it; other packets and MQTT 5
      PUBLISHes take paho's own path (``_packet_handle``);
    * writes: the queued packets go out in one ``send`` (paho sends each on its own), and the I/O thread
      is woken only when the queue was empty (paho writes its socket pair for every packet);
    * keep-alive (:meth:`loop_misc`): a connection is given up when a ping is unanswered and the broker
      gave no sign of life (a byte in, or room in a full send buffer) for the keep-alive, not when only the
      PINGRESP is late (module docstring, "Liveness")."""

    _buffer = b""
    _at = 0
    #: Where PUBLISH packets go (set by the transport), in the order they came.
    on_received: Callable[[Received], None] | None = None
    #: The I/O thread (it writes what it queues itself: no wake-up needed).
    io_thread: int | None = None
    #: Breaks the I/O loop's wait (:meth:`IoLoop.wake`); without one, paho's socket pair.
    waker: Callable[[], None] | None = None
    _wake_due = False
    _woken_at = 0.0
    #: The last send found the socket's buffer full (the broker had not read what came before).
    _blocked = False
    #: When the broker last took bytes out of a full send buffer, or when reading resumed (``time_func``).
    _alive_at = 0.0
    #: False while back-pressure keeps the socket unread: the broker's silence is not held against it.
    _listening = True

    def _packet_read(self) -> MQTTErrorCode:
        buf, at = self._buffer, self._at
        try:
            bounds = _packet_bounds(buf, at) if at < len(buf) else None
        except ValueError:
            return MQTTErrorCode.MQTT_ERR_PROTOCOL
        if bounds is None:  # read more: paho's errors as paho's _packet_read gives them
            try:
                data = self._sock_recv(CHUNK)
            except BlockingIOError:
                return MQTTErrorCode.MQTT_ERR_AGAIN
            except OSError as err:  # TimeoutError and ConnectionError included
                self._easy_log(mqtt.MQTT_LOG_ERR, "failed to receive on socket: %s", err)
                return MQTTErrorCode.MQTT_ERR_CONN_LOST
            if not data:
                return MQTTErrorCode.MQTT_ERR_CONN_LOST
            with self._msgtime_mutex:
                self._last_bytes_received = mqtt.time_func()
            buf = buf[at:] + data if at < len(buf) else data
            at = 0
            self._buffer, self._at = buf, 0
            try:
                bounds = _packet_bounds(buf, 0)
            except ValueError:
                return MQTTErrorCode.MQTT_ERR_PROTOCOL
            if bounds is None:
                return MQTTErrorCode.MQTT_ERR_AGAIN
        start, end = bounds
        self._at = end
        command = buf[at]
        kind = command & 0xF0
        if kind == mqtt.PUBLISH and not command & 0x04 and self._protocol != mqtt.MQTTv5:
            if self._fast_publish(command, buf, start, end):
                return MQTTErrorCode.MQTT_ERR_SUCCESS
        elif kind == mqtt.PUBACK and end - start == 2:
            mid = (buf[start] << 8) | buf[start + 1]
            with self._out_message_mutex:
                if mid in self._out_messages:
                    return self._do_on_publish(mid, _PUBACK_OK, _NO_PROPERTIES)
            return MQTTErrorCode.MQTT_ERR_SUCCESS
        return self._paho_handle(command, buf[start:end])

    def publish(
        self,
        topic: str,
        payload: mqtt.PayloadType = None,
        qos: int = 0,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> mqtt.MQTTMessageInfo:
        """paho's ``publish`` for bytes at QoS 0 or 1 without properties, minus a lock per message (paho's
        ``MQTTMessageInfo`` condition, which nobody here waits on); anything else is paho's own."""
        topic_bytes = topic.encode() if topic else b""
        if (
            properties is not None
            or qos not in (0, 1)
            or type(payload) is not bytes
            or not topic_bytes
            or len(topic_bytes) > 65535
            or b"+" in topic_bytes
            or b"#" in topic_bytes
            or len(payload) > 268_435_455
        ):
            return super().publish(topic, payload, qos, retain, properties)
        if qos and 0 < self._max_queued_messages <= len(self._out_messages):
            # Refused before an id is taken: paho takes one first, and the retries of a full queue then
            # wrapped the 16-bit ids while older publishes still waited for their PUBACK.
            return _message_info(0, MQTTErrorCode.MQTT_ERR_QUEUE_SIZE)
        mid = self._mid_generate()
        info = _message_info(mid, _OK)
        if qos == 0:
            info.rc = self._send_publish(mid, topic_bytes, payload, 0, retain, False, info, None)
            return info
        message = mqtt.MQTTMessage.__new__(mqtt.MQTTMessage)
        message.timestamp = mqtt.time_func()
        message.mid, message._topic, message.payload, message.qos = mid, topic_bytes, payload, 1
        message.retain, message.dup, message.properties, message.info = retain, False, None, info
        message.state = mqtt.mqtt_ms_invalid
        with self._out_message_mutex:  # from here on paho's publish, line for line
            if self._max_queued_messages > 0 and len(self._out_messages) >= self._max_queued_messages:
                info.rc = MQTTErrorCode.MQTT_ERR_QUEUE_SIZE
                return info
            if mid in self._out_messages:
                info.rc = MQTTErrorCode.MQTT_ERR_QUEUE_SIZE
                return info
            self._out_messages[mid] = message
            if self._max_inflight_messages == 0 or self._inflight_messages < self._max_inflight_messages:
                self._inflight_messages += 1
                message.state = mqtt.mqtt_ms_wait_for_puback
                rc = self._send_publish(mid, topic_bytes, payload, 1, retain, False, info, None)
                if rc == _NO_CONN:  # sent after the next CONNACK
                    self._inflight_messages -= 1
                    message.state = mqtt.mqtt_ms_publish
                info.rc = rc
            else:
                message.state = mqtt.mqtt_ms_queued
                info.rc = _OK
            return info

    def _fast_publish(self, command: int, buf: bytes, start: int, end: int) -> bool:
        """A QoS-0 or QoS-1 PUBLISH to :attr:`on_received` (False: paho's path, e.g. when it is malformed)."""
        on_received = self.on_received
        qos = (command >> 1) & 0x03
        if on_received is None or end - start < 2:
            return False
        topic_end = start + 2 + ((buf[start] << 8) | buf[start + 1])
        body = topic_end + (2 if qos else 0)
        if topic_end == start + 2 or body > end:
            return False
        mid = (buf[topic_end] << 8) | buf[topic_end + 1] if qos else 0
        try:
            topic: str | None = buf[start + 2 : topic_end].decode()
        except UnicodeDecodeError:
            topic = None
        on_received(Received(topic, buf[body:end], mid, qos, bool(command & 0x01)))
        return True

    def _paho_handle(self, command: int, body: bytes) -> MQTTErrorCode:
        """paho's handling of one whole packet, as its ``_packet_read`` ends."""
        self._in_packet = {
            "command": command,
            "have_remaining": 1,
            "remaining_count": [],
            "remaining_mult": 1,
            "remaining_length": len(body),
            "packet": bytearray(body),
            "to_process": 0,
            "pos": 0,
        }
        try:
            rc = self._packet_handle()
        except MalformedPacket as exc:
            self._easy_log(mqtt.MQTT_LOG_DEBUG, "Received malformed packet: %s", exc)
            rc = MQTTErrorCode.MQTT_ERR_PROTOCOL
        self._in_packet = {
            "command": 0,
            "have_remaining": 0,
            "remaining_count": [],
            "remaining_mult": 1,
            "remaining_length": 0,
            "packet": bytearray(b""),
            "to_process": 0,
            "pos": 0,
        }
        return rc

    def buffered(self) -> bool:
        """Whether a whole packet is read and not handled yet (a select on the socket would not see it)."""
        try:
            return self._at < len(self._buffer) and _packet_bounds(self._buffer, self._at) is not None
        except ValueError:
            return True  # the next read reports it

    def forget_buffer(self) -> None:
        self._buffer, self._at = b"", 0
        self._blocked = False

    def _sock_send(self, buf: bytes | bytearray) -> int:
        """paho's send, noting when the broker took bytes out of a full buffer: a sign of life (TCP makes
        room only for what the other end acknowledged)."""
        try:
            sent = super()._sock_send(buf)
        except BlockingIOError:
            self._blocked = True
            raise
        if sent and self._blocked:
            with self._msgtime_mutex:
                self._alive_at = mqtt.time_func()
        self._blocked = sent < len(buf)
        return sent

    def stop_listening(self) -> None:
        """Back-pressure: the socket stays unread for a while, so the broker's silence says nothing."""
        self._listening = False

    def listen(self) -> None:
        """Reading (again): the broker's silence counts, from now on after a pause."""
        if not self._listening:
            self._listening = True
            with self._msgtime_mutex:
                self._alive_at = mqtt.time_func()

    def loop_misc(self) -> MQTTErrorCode:
        """paho's keep-alive once connected, with any sign of life of the broker counting, not only the
        PINGRESP (class docstring); paho's own before the CONNACK."""
        keepalive = self._keepalive
        if self._sock is None or not keepalive or self._state != _ConnectionState.MQTT_CS_CONNECTED:
            return super().loop_misc()
        now = mqtt.time_func()
        with self._msgtime_mutex:
            heard = max(self._last_bytes_received, self._alive_at)
            sent = self._last_msg_out
        if self._ping_t and self._listening and now - max(self._ping_t, heard) >= keepalive:
            self._sock_close()
            self._state = _ConnectionState.MQTT_CS_CONNECTION_LOST
            self._do_on_disconnect(packet_from_broker=False, v1_rc=MQTTErrorCode.MQTT_ERR_KEEPALIVE)
            return MQTTErrorCode.MQTT_ERR_CONN_LOST
        if now - sent >= keepalive or (now - heard >= keepalive and not self._ping_t):
            # a ping when nothing came in; and something within every keep-alive, as MQTT asks of a client
            if self._ping_t:
                self._send_simple_command(mqtt.PINGREQ)
            else:
                self._send_pingreq()
            with self._msgtime_mutex:
                self._last_msg_out = now
        return _OK

    def _packet_queue(
        self,
        command: int,
        packet: bytes | bytearray,
        mid: int,
        qos: int,
        info: mqtt.MQTTMessageInfo | None = None,
    ) -> MQTTErrorCode:
        out = self._out_packet
        out.append(
            {
                "command": command,
                "mid": mid,
                "qos": qos,
                "pos": 0,
                "to_process": len(packet),
                "packet": packet,
                "info": info,
            }
        )
        # A wake-up only when the queue was empty (while packets wait, the I/O thread selects for writing
        # anyway), at most one per WAKE_INTERVAL_S (a worker publishing message after message would
        # otherwise hand the GIL to the I/O thread for every one); the one put off goes with the next
        # publish past the interval or with :meth:`wake_if_due`.
        if (len(out) == 1 or self._wake_due) and threading.get_ident() != self.io_thread:
            if time.monotonic() - self._woken_at >= WAKE_INTERVAL_S:
                self.wake()
            else:
                self._wake_due = True
        self._call_socket_register_write()
        return MQTTErrorCode.MQTT_ERR_SUCCESS

    def wake(self) -> None:
        """Wake the I/O thread out of its ``select`` to write what is queued."""
        self._wake_due = False
        self._woken_at = time.monotonic()
        if self.waker is not None:
            self.waker()
        elif self._sockpairW is not None:
            with contextlib.suppress(BlockingIOError):
                self._sockpairW.send(b"0")

    def wake_if_due(self) -> None:
        """The wake-up put off by the last publishes, if any (the worker calls it before it waits)."""
        if self._wake_due:
            self.wake()

    def _packet_write(self) -> MQTTErrorCode:
        out = self._out_packet
        while len(out) > 1:
            batch: list[Any] = []
            size = 0
            while out and size < CHUNK and out[0]["command"] & 0xF0 != mqtt.DISCONNECT:
                packet = out.popleft()
                batch.append(packet)
                size += packet["to_process"]
            if len(batch) < 2:  # a DISCONNECT next, or one big packet: paho's own way
                out.extendleft(reversed(batch))
                break
            data = b"".join(p["packet"][p["pos"] :] if p["pos"] else p["packet"] for p in batch)
            try:
                written = self._sock_send(data)
            except (AttributeError, ValueError):
                out.extendleft(reversed(batch))
                return MQTTErrorCode.MQTT_ERR_SUCCESS
            except BlockingIOError:
                out.extendleft(reversed(batch))
                return MQTTErrorCode.MQTT_ERR_AGAIN
            except OSError as err:
                out.extendleft(reversed(batch))
                self._easy_log(mqtt.MQTT_LOG_ERR, "failed to send on socket: %s", err)
                return MQTTErrorCode.MQTT_ERR_CONN_LOST
            with self._msgtime_mutex:
                self._last_msg_out = mqtt.time_func()
            for i, packet in enumerate(batch):
                taken = min(written, packet["to_process"])
                written -= taken
                packet["to_process"] -= taken
                packet["pos"] += taken
                if packet["to_process"]:  # the socket took part: the rest when it is writable again
                    out.extendleft(reversed(batch[i:]))
                    return MQTTErrorCode.MQTT_ERR_SUCCESS
                if packet["command"] & 0xF0 == mqtt.PUBLISH and packet["qos"] == 0:
                    self._written_qos0(packet)
        return super()._packet_write()

    def _written_qos0(self, packet: Any) -> None:
        """A QoS-0 PUBLISH is out: what paho's ``_packet_write`` does then."""
        on_publish = cast("mqtt.CallbackOnPublish_v2 | None", self.on_publish)  # VERSION2 (make_client)
        if on_publish is not None:
            with self._in_callback_mutex:
                on_publish(self, self._userdata, packet["mid"], _PUBACK_OK, _NO_PROPERTIES)
        if packet["info"] is not None:
            packet["info"]._set_as_published()


def _pending(sock: Any) -> bool:
    """Whether a TLS (or WebSocket) socket holds decrypted bytes a ``select`` on it would not see."""
    pending = getattr(sock, "pending", None)
    return bool(pending is not None and pending() > 0)


def _received(message: mqtt.MQTTMessage) -> Received:
    """paho's message (the path of MQTT 5 PUBLISHes) as the fast path hands one over."""
    try:
        topic: str | None = message.topic
    except UnicodeDecodeError:
        topic = None
    return Received(topic, bytes(message.payload), message.mid, message.qos, message.retain)


class MqttTransport:
    """The worker's MQTT client: inbox, acknowledgements after processing, checked publishes (module
    docstring); paho's client is :attr:`client`."""

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
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        mqtt_version: str = "3.1.1",
        session_expiry_s: int = SESSION_EXPIRY_S,
        message_expiry_s: int | None = None,
        keepalive: int = 30,
        reconnect_delay: tuple[float, float] = (1.0, 30.0),
        on_connected: Callable[[], None] | None = None,
        on_fatal: Callable[[str], None] | None = None,
        will: bool = True,
        doorbell: Bell | None = None,
        name: str | None = None,
        persistent: bool = True,
    ) -> None:
        """``persistent``: the broker keeps the session (subscriptions, queued messages) while away; False
        for a session that only publishes, which then starts clean at every connect (whatever an earlier
        run left under its client id is dropped). ``name``: put on each message received
        (:attr:`Inbound.session`); ``will``: the broker publishes
        ``{"state": "offline"}`` (retained) on ``status_topic`` when this connection dies; ``doorbell``: set
        whenever a message enters the inbox (one event shared by several transports,
        :class:`~edgedrift_edge.transport.sessions.DeviceSessions`)."""
        if qos not in (0, 1):
            raise ValueError(f"QoS {qos}: the agent subscribes and publishes with QoS 0 or 1")
        if not 1 <= publish_queue <= MAX_UNCONFIRMED:
            raise ValueError(
                f"publish_queue {publish_queue}: from 1 to {MAX_UNCONFIRMED} unconfirmed publishes "
                "(MQTT packet ids are 16 bits)"
            )
        self.broker_url = broker_url
        self.status_topic = status_topic
        self.subscriptions = list(subscriptions)
        self.qos = qos
        self.inbox_size = inbox_size
        self.max_inbox_bytes = max_inbox_bytes
        self.publish_queue = publish_queue
        self.mqtt_version = mqtt_version
        if not 0 <= session_expiry_s <= MAX_EXPIRY_S:
            raise ValueError(f"session_expiry_s {session_expiry_s}: from 0 to {MAX_EXPIRY_S}")
        if message_expiry_s is not None and not 1 <= message_expiry_s <= MAX_EXPIRY_S:
            raise ValueError(f"message_expiry_s {message_expiry_s}: from 1 to {MAX_EXPIRY_S}")
        if message_expiry_s is not None and mqtt_version != "5":
            raise ValueError("a message expiry needs MQTT 5 (mqtt_version 5)")
        self.session_expiry_s = session_expiry_s
        self.message_expiry_s = message_expiry_s
        #: The PUBLISH properties of predictions and events (their expiry), or None.
        self._expiry: Properties | None = None
        if message_expiry_s is not None:
            self._expiry = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            self._expiry.MessageExpiryInterval = message_expiry_s
        self.keepalive = keepalive
        self.reconnect_delay = reconnect_delay
        self.on_connected = on_connected
        self.on_fatal = on_fatal
        self.counters = TransportCounters()
        self.connected = threading.Event()
        self.subscribed = threading.Event()
        self.stopping = threading.Event()
        #: Why the I/O thread can no longer be trusted (an exception in it), or None.
        self.failure: str | None = None
        #: Why the broker refused the last connection (its reason code), or None.
        self.refused: str | None = None
        self._address = parse_broker_url(broker_url)
        self._where = redact(broker_url)
        client = make_client(
            broker_url,
            client_id,
            client_class=_FastClient,
            clean_session=not persistent,
            tls_ca_file=tls_ca_file,
            tls_cert_file=tls_cert_file,
            tls_key_file=tls_key_file,
            mqtt_version=mqtt_version,
            manual_ack=True,
        )
        assert isinstance(client, _FastClient)
        self.client: _FastClient = client
        if will:
            client.will_set(status_topic, json.dumps({"state": "offline"}), qos=1, retain=True)
        self._doorbell = doorbell
        self.name = name
        self.persistent = persistent
        # Unconfirmed publishes are bounded by the queue limit; an in-flight limit as well would make paho
        # walk every unconfirmed publish at each PUBACK (its _update_inflight).
        client.max_inflight_messages_set(0)
        client.max_queued_messages_set(publish_queue)
        client.connect_timeout = CONNECT_TIMEOUT_S
        # paho's callbacks only queue what happened (module docstring: no lock of ours under paho's).
        events: deque[tuple[str, Any]] = deque()
        self._events = events
        client.on_received = lambda r: events.append(("message", r))
        client.on_message = lambda _c, _u, m: events.append(("message", _received(m)))
        client.on_publish = lambda _c, _u, mid, _rc, _p: events.append(("confirmed", mid))
        client.on_connect = self._on_connect_callback
        client.on_disconnect = lambda _c, _u, _f, code, p: events.append(("lost", describe_reason(code, p)))
        client.on_subscribe = lambda _c, _u, mid, codes, _p: events.append(("suback", (mid, codes)))
        client.on_unsubscribe = lambda _c, _u, mid, _codes, _p: events.append(("unsuback", mid))
        # Set, so that paho never writes to the socket from the worker's thread: the I/O thread writes
        # everything, woken by :meth:`_FastClient.wake`.
        client.on_socket_register_write = lambda *_: None
        self._lock = threading.Lock()
        self._has_mail = threading.Condition(self._lock)
        #: The I/O loop driving this connection (:meth:`begin`), and where the connection is in its life:
        #: ``idle`` (not begun), ``connecting`` (a connector thread), ``serving``, ``backoff`` (until
        #: ``_io_due``), ``closing`` (DISCONNECT going out, until ``_io_due``), ``ended``.
        self._io: IoLoop | None = None
        self._io_state = "idle"
        self._io_due = 0.0
        self._answer_by = 0.0
        self._polled_write = False
        self._delay = reconnect_delay[0]
        self._ended = threading.Event()
        self._generation = 0
        self._inbox: deque[Inbound] = deque()
        self._inbox_bytes = 0
        self._paused = False
        self._pending: deque[_Pending] = deque()
        self._entries: dict[int, _Pending] = {}  # id(Inbound) -> its entry in _pending
        self._by_mid: dict[int, _Pending | None] = {}  # packet id of a QoS-1 publish -> its message
        #: Packet ids whose next queued confirmation was applied already (paho gave the id out again first).
        self._read_early: dict[int, int] = {}
        self._retry: deque[_Retry] = deque()
        self._held: deque[_Retry] = deque()  # publishes made while paho reconnects
        self._reconnecting = True
        self._up = False
        self._connected_at: float | None = None
        self._subscribing: dict[int, list[str]] = {}
        self._sent: set[str] = set()  # topics subscribed (or being subscribed) on this connection
        self._granted: set[str] = set()  # topics the broker's session holds
        self._unsubscribing: dict[int, list[str]] = {}
        self._leaving: set[str] = set()  # unsubscribed, the broker's UNSUBACK not received yet
        #: Topic -> messages enqueued before its UNSUBACK; ``_taken``: messages the worker took so far.
        self._left: dict[str, int] = {}
        self._enqueued = 0
        self._taken = 0
        self._dropped_by_topic: dict[str, int] = {}
        self.reconnects = 0

    # --- connection -------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Connect in the background and return once subscribed (TimeoutError otherwise)."""
        self.begin()
        self.wait_subscribed(timeout)

    def begin(self, name: str = "edgedrift-mqtt", io: IoLoop | None = None) -> None:
        """Start connecting on ``io`` (shared by several connections), or on an I/O thread of this one's
        own named ``name``; the loop connects, subscribes and reconnects on its own."""
        address = self._address
        properties = None
        if self.mqtt_version == "5":
            properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            properties.SessionExpiryInterval = self.session_expiry_s if self.persistent else 0
            properties.ReceiveMaximum = max(1, min(self.inbox_size, 65_535))
        self.client.connect_async(
            address.host,
            address.port,
            keepalive=max(1, self.keepalive // 2),
            clean_start=(not self.persistent)
            if self.mqtt_version == "5"
            else mqtt.MQTT_CLEAN_START_FIRST_ONLY,
            properties=properties,
        )
        self._io = io if io is not None else IoLoop(name)
        loop = self._io
        self.client.waker = lambda: loop.wake(self)
        self._io_due = 0.0
        self._io_state = "backoff"  # due at once: the first connect
        self._io.add(self)

    def wait_subscribed(self, timeout: float) -> None:
        """Return once connected and subscribed (TimeoutError after ``timeout``)."""
        if not self.subscribed.wait(timeout):
            why = f": the broker refused the connection ({self.refused})" if self.refused else ""
            raise TimeoutError(f"not subscribed to {self._where} after {timeout} s{why}")

    def stop(self, drain_s: float = 5.0) -> None:
        """Wait up to ``drain_s`` for the broker to confirm what was published, then DISCONNECT (the broker
        then publishes no last will) and end the I/O thread."""
        self.drain(time.monotonic() + drain_s)
        self.halt()
        self.join(drain_s + 5)

    def drain(self, deadline: float) -> None:
        """Wait until the broker confirmed every publish (or ``deadline``, a ``time.monotonic()``)."""
        while time.monotonic() < deadline and self.connected.is_set():
            self.client.wake_if_due()
            with self._lock:
                if not self._publishing():
                    break
            time.sleep(0.01)

    def _publishing(self) -> bool:
        """Lock held: whether a publish awaits the broker's confirmation, a retry or a connection."""
        return bool(self._by_mid or self._retry or self._held)

    @property
    def owes_publishes(self) -> bool:
        """Whether a publish waits for a retry or for a connection (:meth:`retry_failed` has work)."""
        with self._lock:
            return bool(self._retry or self._held)

    def halt(self) -> None:
        """Tell the I/O thread to DISCONNECT and end."""
        self.stopping.set()
        self._wake_loop()

    def join(self, timeout: float) -> None:
        """Wait for the I/O thread to end (after :meth:`halt`)."""
        if self._io is not None and threading.get_ident() != self._io.ident:
            self._ended.wait(timeout)

    def subscribe(self, topics: list[str]) -> None:
        """Add subscriptions (a gateway's new device); sent at once when connected, else on connect."""
        with self._lock:
            self.subscriptions = [*self.subscriptions, *(t for t in topics if t not in self.subscriptions)]
            self._leaving -= set(topics)
            self._sync_subscriptions()

    def unsubscribe(self, topics: list[str]) -> None:
        """Drop subscriptions (a device a gateway no longer serves)."""
        gone = set(topics)
        with self._lock:
            self.subscriptions = [t for t in self.subscriptions if t not in gone]
            self._granted -= gone
            self._leaving |= gone
            for topic in gone:
                self._left.pop(topic, None)
            self._sync_subscriptions()

    def holds(self, topics: list[str]) -> bool:
        """Whether the broker acknowledged the subscription to every one of ``topics`` (its SUBACK)."""
        with self._lock:
            return all(t in self._granted for t in topics)

    def left(self, topics: list[str]) -> bool:
        """Whether the broker acknowledged the unsubscription from every one of ``topics`` (its UNSUBACK:
        nothing of them comes after it) and the worker took every message received before."""
        with self._lock:
            return all(t in self._left and self._taken >= self._left[t] for t in topics)

    @property
    def unsubscribed(self) -> bool:
        """No subscription wanted or awaiting its UNSUBACK, every message received taken and acknowledged,
        every publish confirmed: nothing more can come or be owed on this session."""
        with self._lock:
            owed = self._inbox or self._pending or self._publishing()
            return not self.subscriptions and not self._leaving and not owed

    def dropped_for(self, topic: str) -> int:
        """QoS-0 messages of ``topic`` dropped because the inbox was full."""
        return self._dropped_by_topic.get(topic, 0)

    # --- the I/O thread (io_loop.py drives these; _io_connect runs in a connector thread) -----------------

    def io_adopt(self, ident: int) -> None:
        """The loop's thread drives this connection from now on (its publishes need no wake-up)."""
        self.client.io_thread = ident

    @property
    def io_ended(self) -> bool:
        return self._io_state == "ended"

    @property
    def io_running(self) -> bool:
        """Whether an I/O loop still drives this connection (it ends only at a stop or a failure)."""
        return self._io is not None and self._io.running and not self.io_ended

    def io_poll(self, now: float) -> tuple[Any, bool, bool, float]:
        """The loop asks what this connection waits for: its socket (None: nothing to select on), whether
        to read and to write, and the seconds until a deadline of its own (a reconnect, a CONNACK)."""
        state = self._io_state
        if state == "serving" and self.stopping.is_set():
            state = self._io_close(now)
        if state == "backoff":
            if self.stopping.is_set():
                self._io_end()
                return None, False, False, LOOP_TIMEOUT_S
            if now < self._io_due:
                return None, False, False, self._io_due - now
            self._io_state = "connecting"
            name = f"{threading.current_thread().name}-connect"
            threading.Thread(target=self._io_connect, name=name, daemon=True).start()
            return None, False, False, LOOP_TIMEOUT_S
        client = self.client
        sock = client.socket()
        if state == "closing":
            if sock is None or not client.want_write() or now >= self._io_due:
                self._io_end()
                return None, False, False, LOOP_TIMEOUT_S
            return sock, False, True, self._io_due - now
        if state != "serving":  # connecting (its thread wakes the loop when done) or ended
            return None, False, False, LOOP_TIMEOUT_S
        if sock is None:  # closed without paho telling (never expected): reconnect
            self._lost("closed")
            self._io_backoff(now)
            return None, False, False, 0.0
        reading = not self._paused
        if reading:
            client.listen()
        else:  # back-pressure: nothing is read; what the worker sends (and pings) still go out
            client.stop_listening()
        wait = LOOP_TIMEOUT_S
        if reading and (client.buffered() or _pending(sock)):
            wait = 0.0
        elif self._connected_at is None:
            wait = max(0.0, self._answer_by - now)
        self._polled_write = client.want_write()
        return sock, reading, self._polled_write, wait

    def io_ready(self, readable: bool, writable: bool, misc: bool) -> None:
        """The loop's turn for this connection: read what came (all of it), write what is queued, check the
        keep-alive (``misc``), then handle what paho reported; a lost connection is retried with backoff."""
        if self._io_state != "serving":
            if self._io_state == "closing" and writable:
                self.client.loop_write()
            return
        client = self.client
        rc = _OK
        try:
            if not self._paused and (readable or client.buffered() or _pending(client.socket())):
                rc = client.loop_read(max_packets=READ_BURST)
                while rc == _OK and client.buffered():
                    rc = client.loop_read(max_packets=READ_BURST)
            # what the worker queued after the poll goes out in this turn (the wake-up broke the select)
            if rc == _OK and (writable or (not self._polled_write and client.want_write())):
                rc = client.loop_write()
            if rc == _OK and misc:
                rc = client.loop_misc()
        except Exception as exc:  # a packet paho cannot decode: the broker is broken or hostile
            self._handle_events()  # what came before it (a RuntimeError if a callback of ours failed)
            log.error("protocol error from %s: %s: %s; reconnecting", self._where, type(exc).__name__, exc)
            self._close_socket()
            self._lost(f"protocol error: {type(exc).__name__}")
            self._io_backoff(time.monotonic())
            return
        if self._events:
            self._handle_events()
        now = time.monotonic()
        if not self._up:
            self._io_backoff(now)
        elif rc != _OK:
            self._lost(mqtt.error_string(rc))
            self._io_backoff(now)
        elif self._connected_at is None and now > self._answer_by:
            log.error("no CONNACK within %.0f s from %s", CONNECT_TIMEOUT_S, self._where)
            self._close_socket()
            self._lost("no CONNACK")
            self._io_backoff(now)

    def io_failed(self, exc: Exception) -> None:
        """An exception in the I/O code of this connection: it ends, and the agent is told (fatal)."""
        self.fail(f"MQTT connection thread failed: {type(exc).__name__}: {exc}")
        with contextlib.suppress(Exception):
            self._io_end()
        self._io_state = "ended"
        self._ended.set()

    def _io_connect(self) -> None:
        """A connector thread: open the connection and send CONNECT (blocking), then hand it to the loop."""
        self._connected_at = None
        try:
            opened = self._connect()
        except Exception as exc:
            self.fail(f"MQTT connection thread failed: {type(exc).__name__}: {exc}")
            self._io_state = "ended"
            self._ended.set()
            return
        now = time.monotonic()
        if opened:
            self._answer_by = now + CONNECT_TIMEOUT_S
            self._io_state = "serving"
        else:
            self._io_backoff(now)
        self._wake_loop()

    def _connect(self) -> bool:
        """Open a connection and send CONNECT (publishes made meanwhile are held, then queued after it)."""
        with self._lock:
            self._reconnecting = True
        self.client.forget_buffer()
        try:
            self.client.reconnect()
            opened = True
        except Exception as exc:  # OSError, ssl.SSLError, a WebSocket handshake refused, ...
            log.warning("cannot connect to %s: %s", self._where, exc or type(exc).__name__)
            opened = False
        with self._lock:
            self._reconnecting = False
            self._up = opened
            held, self._held = self._held, deque()
        for h in held:
            self._attempt(h.topic, h.body, h.qos, h.retain, h.entry, held=True)
        return opened

    def _io_backoff(self, now: float) -> None:
        """Reconnect after the backoff (started over only after a connection that held ``STABLE_S``)."""
        if self._connected_at is not None and now - self._connected_at >= STABLE_S:
            self._delay = self.reconnect_delay[0]
        self._connected_at = None
        self._io_due = now + self._delay
        self._delay = min(self._delay * 2, self.reconnect_delay[1])
        self._io_state = "backoff"

    def _io_close(self, now: float) -> str:
        """Stopping: DISCONNECT (the broker then publishes no last will), written within a second."""
        if self._up and self._connected_at is not None:
            self.client.disconnect()
            self._io_due = now + 1.0
            self._io_state = "closing"
        else:
            self._io_end()
        return self._io_state

    def _io_end(self) -> None:
        self._lost(None)
        self.connected.clear()
        self._close_socket()
        self._io_state = "ended"
        self._ended.set()

    def _wake_loop(self) -> None:
        if self._io is not None:
            self._io.wake(self)

    def _close_socket(self) -> None:
        sock = self.client.socket()
        if sock is not None:
            sock.close()

    def _on_connect_callback(
        self, client: mqtt.Client, _u: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        """paho's thread: limit publishes in flight to the broker's Receive Maximum before paho resends
        (MQTT 5), then queue the event."""
        try:
            maximum = getattr(properties, "ReceiveMaximum", None)
            if maximum:
                # paho 2.2 neither applies a broker's Receive Maximum nor lets max_inflight_messages_set
                # change the limit once connected: the attribute it reads is set here, before it resends.
                client._max_inflight_messages = min(self.publish_queue, int(maximum))
            self._events.append(("connack", (flags.session_present, reason, properties)))
        except Exception as exc:  # a bug here must not pass for the broker's protocol error
            self._events.append(("fatal", f"on_connect failed: {type(exc).__name__}: {exc}"))

    def _handle_events(self) -> None:
        """What paho's callbacks queued, in order; messages and confirmations of one read together."""
        events = self._events
        messages: list[Received] = []
        confirmed: list[int] = []
        while events:
            kind, value = events.popleft()
            if kind == "message":
                messages.append(value)
                continue
            if kind == "confirmed":
                confirmed.append(value)
                continue
            self._traffic(messages, confirmed)
            messages, confirmed = [], []
            if kind == "connack":
                self._on_connack(*value)
            elif kind == "suback":
                self._on_suback(*value)
            elif kind == "unsuback":
                self._on_unsuback(value)
            elif kind == "lost":
                self._lost(str(value))
            elif kind == "fatal":
                raise RuntimeError(value)
        self._traffic(messages, confirmed)

    def _on_connack(self, session_present: bool, reason: Any, properties: Any) -> None:
        if reason.is_failure:
            self.refused = describe_reason(reason, properties).lower()
            log.error("broker refused the connection: %s", self.refused)
            return
        self.refused = None
        self._connected_at = time.monotonic()
        with self._lock:
            if not session_present:  # the broker holds no subscription
                self._granted.clear()
                for topic in self._leaving:
                    self._left[topic] = self._enqueued
                self._leaving.clear()
            # an unsubscription the broker did not acknowledge goes out again
            self._sent = self._granted | self._leaving
            self._subscribing.clear()
            self._unsubscribing.clear()
            self.connected.set()
            if not self._sync_subscriptions():  # everything held by the broker's session, or no device yet
                self.subscribed.set()
        log.info("connected to %s (MQTT %s)", self._where, self.mqtt_version)
        if self.on_connected is not None:
            self.on_connected()

    def _sync_subscriptions(self) -> bool:
        """Lock held: subscribe to what is wanted and not sent on this connection, unsubscribe what is no
        longer wanted (nothing before the CONNACK or while paho reconnects: the CONNACK does it); whether
        a SUBSCRIBE went out."""
        if not self.connected.is_set() or self._reconnecting or not self._up:
            return False
        wanted = self.subscriptions
        new = [t for t in wanted if t not in self._sent]
        gone = self._sent - set(wanted)
        self._sent.update(new)
        self._sent -= gone
        for start in range(0, len(gone), TOPICS_PER_SUBSCRIBE):
            part = sorted(gone)[start : start + TOPICS_PER_SUBSCRIBE]
            rc, mid = self.client.unsubscribe(part)
            if rc == _OK and mid is not None:
                self._unsubscribing[mid] = part
        for start in range(0, len(new), TOPICS_PER_SUBSCRIBE):
            part = new[start : start + TOPICS_PER_SUBSCRIBE]
            rc, mid = self.client.subscribe([(t, self.qos) for t in part])
            if rc == _OK and mid is not None:
                self._subscribing[mid] = part
        return bool(new)

    def _on_suback(self, mid: int, codes: list[Any]) -> None:
        if any(code.is_failure for code in codes):
            log.error("the broker refused a subscription (SUBACK failure): check its ACL for this client")
        with self._lock:
            topics = self._subscribing.pop(mid, [])
            current = set(self.subscriptions)
            self._granted.update(
                t for t, code in zip(topics, codes, strict=False) if not code.is_failure and t in current
            )
            if not self._subscribing:
                self.subscribed.set()

    def _on_unsuback(self, mid: int) -> None:
        with self._lock:
            for topic in self._unsubscribing.pop(mid, []):
                if topic in self._leaving and topic not in self.subscriptions:
                    self._leaving.discard(topic)
                    self._left[topic] = self._enqueued

    def _lost(self, why: str | None) -> None:
        """The connection is gone: nothing received on it may be acknowledged any more."""
        if not self._up:
            return
        was_connected = self._connected_at is not None
        self.connected.clear()
        with self._lock:
            self._up = False
            # Messages of the lost connection are delivered again on the next one (and deduplicated
            # there); their packet ids may be reused, so they must never be acknowledged now.
            self._generation += 1
            self._paused = False
            self._ack_ready()  # forgets them
        if was_connected and not self.stopping.is_set():
            self.reconnects += 1
            self.counters.reconnects = self.reconnects
            log.warning("disconnected from %s (%s); reconnecting with backoff", self._where, why or "closed")

    def _traffic(self, messages: list[Received], confirmed: list[int]) -> None:
        """One read: confirmations release their messages, messages go into the inbox."""
        if not messages and not confirmed:
            return
        with self._lock:
            for mid in confirmed:
                self._confirm(mid)
            if messages:
                self._enqueue(messages)

    def _enqueue(self, messages: list[Received]) -> None:
        """Lock held: into the inbox (QoS 0 dropped and counted when full; QoS 1 pauses the reading)."""
        generation = self._generation
        inbox = self._inbox
        full = False
        now = time.monotonic()
        for topic, payload, mid, qos, retain in messages:
            size = len(payload)
            if topic is None:  # not a topic the agent subscribed to: drop it, never see it again
                log.error("a message with a topic that is not UTF-8: dropped")
                self._drop("")
                if qos and self._up:
                    self.client.ack(mid, qos)
                continue
            over = len(inbox) >= self.inbox_size or self._inbox_bytes + size > self.max_inbox_bytes
            if over and qos == 0:
                self._drop(topic)
                continue
            full = full or over
            inbox.append(Inbound(topic, payload, mid, qos, generation, now, retain, self.name))
            self._inbox_bytes += size
            self._enqueued += 1
        if full and not self._paused:
            self._paused = True
            self.counters.backpressure_waits += 1
        self._has_mail.notify()
        if self._doorbell is not None:
            self._doorbell.set()

    # --- the worker: messages in ------------------------------------------------------------------------

    def get_batch(self, timeout: float, limit: int = 1000) -> list[Inbound]:
        """Up to ``limit`` messages in arrival order, waiting up to ``timeout`` for the first."""
        self.client.wake_if_due()  # what the last ones published goes out while these are handled
        with self._has_mail:
            if not self._inbox and not self._has_mail.wait_for(lambda: bool(self._inbox), timeout):
                return []
            inbox = self._inbox
            batch = [inbox.popleft() for _ in range(min(limit, len(inbox)))]
            self._inbox_bytes -= sum(len(m.payload) for m in batch)
            self._taken += len(batch)
            if (
                self._paused
                and len(inbox) <= self.inbox_size // 2
                and self._inbox_bytes <= self.max_inbox_bytes // 2
            ):
                self._paused = False
                self.client.wake()  # the loop reads this connection again
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
        self._attempt(topic, body, self.qos if qos is None else min(qos, 1), retain, None, owner=owner)

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

    def _attempt(
        self,
        topic: str,
        body: bytes,
        qos: int,
        retain: bool,
        entry: _Pending | None,
        *,
        held: bool = False,
        owner: Inbound | None = None,
    ) -> bool:
        """One publish handed to paho; the broker's PUBACK releases ``entry`` (or the entry of ``owner``)
        later. While paho reconnects it is held (and handed over right after the CONNECT). ``held``:
        ``entry`` counts it already."""
        with self._lock:
            if owner is not None and owner.qos > 0:
                entry = self._entry(owner)
            if self._reconnecting:
                if entry is not None and not held:
                    entry.outstanding += 1
                self._held.append(_Retry(topic, body, qos, retain, entry))
                return True
            if held and entry is not None:
                entry.outstanding -= 1
            rc = _NO_CONN
            mid = 0
            if qos or self._up:
                info = self.client.publish(topic, body, qos, retain, None if retain else self._expiry)
                rc, mid = info.rc, info.mid
            # QoS 1 without a connection: paho keeps it and sends it after the CONNACK.
            accepted = rc == _OK or (qos and rc == _NO_CONN)
            if not accepted:
                self.counters.publish_failures += 1
                if entry is not None:
                    entry.outstanding += 1
                self._retry.append(_Retry(topic, body, qos, retain, entry))
                return False
            if qos:
                if mid in self._by_mid:  # paho confirmed the id's last publish; that event is still queued
                    self._release(mid)
                    self._read_early[mid] = self._read_early.get(mid, 0) + 1
                self._by_mid[mid] = entry
                if entry is not None:
                    entry.outstanding += 1
        return True

    def _confirm(self, mid: int) -> None:
        """Lock held: the broker confirmed publish ``mid``; release its message (unless that confirmation
        was applied already, when paho handed the id out again before it was read)."""
        early = self._read_early.get(mid, 0)
        if early:
            if early == 1:
                del self._read_early[mid]
            else:
                self._read_early[mid] = early - 1
            return
        self._release(mid)

    def _release(self, mid: int) -> None:
        """Lock held: publish ``mid`` needs no more waiting for; its message may be acknowledged."""
        if mid not in self._by_mid:
            return  # a QoS-0 publish written
        entry = self._by_mid.pop(mid)
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
        while pending:
            head = pending[0]
            stale = head.message.generation != self._generation
            if not stale and not (head.done and not head.outstanding):
                break
            pending.popleft()
            del self._entries[id(head.message)]
            if not stale:
                self.client.ack(head.message.mid, head.message.qos)

    def _drop(self, topic: str) -> None:
        self.counters.dropped += 1
        self._dropped_by_topic[topic] = self._dropped_by_topic.get(topic, 0) + 1

    def retry_failed(self) -> int:
        """Publish again what could not be queued; returns how many are still waiting."""
        with self._lock:
            waiting = len(self._retry)
        for _ in range(waiting):
            with self._lock:
                if not self._retry:
                    break
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

    def yield_io(self) -> None:
        """Let the I/O thread's turn end first (the worker, between two of its turns: :func:`yield_to`)."""
        yield_to(self._io)

    def wait_flushed(self, timeout: float) -> bool:
        """Wait until every processed message is acknowledged (used on stop)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.retry_failed()
            self.client.wake_if_due()
            with self._lock:
                if not self._pending and not self._retry and not self._held:
                    return True
            time.sleep(0.01)
        return False

    def fail(self, reason: str) -> None:
        """An exception in the I/O thread: the agent must not go on looking alive (reported as fatal)."""
        self.failure = reason
        log.error(reason)
        if self.on_fatal is not None:
            self.on_fatal(reason)
