"""MQTT 3.1.1 packets, as the agent's transport needs them: pure encoding and a stream decoder (no I/O).

Why the agent has its own codec (the replay command, the harness and the tests keep using paho-mqtt): a
gateway's throughput is bounded by the Python executed per message, and paho spends about 50 µs of it on
receiving a sample, acknowledging it, publishing the prediction and taking that publish's PUBACK (three
``recv`` calls per packet, per-packet ``send`` calls, MQTT 5 property objects on every PUBACK). Measured
against the bare paho subscriber on one broker, with 30 µs of work per message, paho reaches 0.28x of the
peer in its threaded mode and 0.43x driven from the worker's own thread, gmqtt 0.49–0.53x, and a decoder of
whole chunks with one ``write`` per batch 0.73–0.89x (docs/benchmarks.md, "Choosing the MQTT client").

Only what the agent uses is here: CONNECT (clean or persistent session, keep-alive, last will, user name
and password), CONNACK, PUBLISH at QoS 0 and 1 both ways, PUBACK, SUBSCRIBE/SUBACK,
UNSUBSCRIBE/UNSUBACK, PINGREQ/PINGRESP and DISCONNECT (OASIS MQTT 3.1.1, sections 3.1–3.14). A packet of
QoS 2 (PUBREC, PUBREL, PUBCOMP, or a PUBLISH with QoS 2) is a :class:`ProtocolError`: the agent
subscribes with QoS 1 at most, so a broker never sends one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NamedTuple

__all__ = [
    "CONNACK",
    "CONNECT_REFUSALS",
    "DISCONNECT",
    "PINGREQ",
    "PINGRESP",
    "PUBACK",
    "PUBLISH",
    "SUBACK",
    "UNSUBACK",
    "PacketReader",
    "ProtocolError",
    "Publish",
    "Will",
    "as_duplicate",
    "connect",
    "decode_publish",
    "puback",
    "publish",
    "remaining_length",
    "subscribe",
    "unsubscribe",
]

# Packet types: the high nibble of the first byte (section 2.2.1).
CONNECT: Final = 0x10
CONNACK: Final = 0x20
PUBLISH: Final = 0x30
PUBACK: Final = 0x40
SUBSCRIBE: Final = 0x80
SUBACK: Final = 0x90
UNSUBSCRIBE: Final = 0xA0
UNSUBACK: Final = 0xB0
PINGRESP: Final = 0xD0

PINGREQ: Final = b"\xc0\x00"
DISCONNECT: Final = b"\xe0\x00"

#: The largest remaining length the protocol can express (section 2.2.3).
MAX_REMAINING: Final = 268_435_455

#: CONNACK return codes other than 0 (section 3.2.2.3).
CONNECT_REFUSALS: Final = {
    1: "unacceptable protocol version",
    2: "client identifier rejected",
    3: "server unavailable",
    4: "bad user name or password",
    5: "not authorized",
}


class ProtocolError(ValueError):
    """The broker sent something this client does not speak (the connection must be closed)."""


class Will(NamedTuple):
    """The message the broker publishes for the client when its connection is lost (section 3.1.2.5)."""

    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = True


class Publish(NamedTuple):
    """A PUBLISH from the broker; ``packet_id`` is 0 for QoS 0."""

    topic: str
    payload: bytes
    qos: int
    packet_id: int
    dup: bool
    retain: bool


def remaining_length(n: int) -> bytes:
    """The variable-length encoding of a remaining length (section 2.2.3)."""
    if not 0 <= n <= MAX_REMAINING:
        raise ValueError(f"a packet of {n} bytes is longer than MQTT allows ({MAX_REMAINING})")
    if n < 128:
        return bytes((n,))
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _string(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    if len(raw) > 0xFFFF:
        raise ValueError(f"a string of {len(raw)} bytes is longer than MQTT allows (65535)")
    return len(raw).to_bytes(2, "big") + raw


def _packet(first: int, body: bytes) -> bytes:
    return bytes((first,)) + remaining_length(len(body)) + body


def connect(
    client_id: str,
    *,
    clean_session: bool,
    keepalive: int,
    will: Will | None = None,
    username: str | None = None,
    password: str | None = None,
) -> bytes:
    """CONNECT with protocol level 4 (section 3.1)."""
    if password is not None and username is None:
        raise ValueError("MQTT 3.1.1 sends a password only with a user name")
    if not 0 <= keepalive <= 0xFFFF:
        raise ValueError(f"keep-alive {keepalive} s is outside 0..65535")
    flags = 0x02 if clean_session else 0
    payload = _string(client_id)
    if will is not None:
        if will.qos not in (0, 1):
            raise ValueError(f"will QoS {will.qos}: this client speaks QoS 0 and 1")
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
        payload += _string(will.topic) + _string(will.payload)
    if username is not None:
        flags |= 0x80
        payload += _string(username)
    if password is not None:
        flags |= 0x40
        payload += _string(password)
    header = b"\x00\x04MQTT\x04" + bytes((flags,)) + keepalive.to_bytes(2, "big")
    return _packet(CONNECT, header + payload)


def publish(topic: bytes, payload: bytes, qos: int, packet_id: int, retain: bool = False) -> bytes:
    """PUBLISH (section 3.3); ``topic`` already UTF-8 encoded; ``packet_id`` ignored for QoS 0."""
    first = PUBLISH | (qos << 1) | (1 if retain else 0)
    if qos:
        var = len(topic).to_bytes(2, "big") + topic + packet_id.to_bytes(2, "big")
    else:
        var = len(topic).to_bytes(2, "big") + topic
    n = len(var) + len(payload)
    if n < 128:
        return bytes((first, n)) + var + payload
    return bytes((first,)) + remaining_length(n) + var + payload


def as_duplicate(packet: bytes) -> bytes:
    """The same PUBLISH with the DUP flag set: a QoS-1 publish sent again after a reconnect (3.3.1.1)."""
    return bytes((packet[0] | 0x08,)) + packet[1:]


def puback(packet_id: int) -> bytes:
    """PUBACK (section 3.4)."""
    return b"\x40\x02" + packet_id.to_bytes(2, "big")


def subscribe(packet_id: int, topics: list[tuple[str, int]]) -> bytes:
    """SUBSCRIBE with one requested QoS per topic filter (section 3.8)."""
    if not topics:
        raise ValueError("SUBSCRIBE needs at least one topic filter")
    body = packet_id.to_bytes(2, "big") + b"".join(_string(t) + bytes((q,)) for t, q in topics)
    return _packet(SUBSCRIBE | 0x02, body)


def unsubscribe(packet_id: int, topics: list[str]) -> bytes:
    """UNSUBSCRIBE (section 3.10)."""
    if not topics:
        raise ValueError("UNSUBSCRIBE needs at least one topic filter")
    return _packet(UNSUBSCRIBE | 0x02, packet_id.to_bytes(2, "big") + b"".join(_string(t) for t in topics))


def decode_publish(first: int, body: bytes) -> Publish:
    """The fields of a PUBLISH packet's variable header and payload."""
    qos = (first >> 1) & 0x03
    if qos > 1:
        raise ProtocolError(f"PUBLISH with QoS {qos}: this client subscribes with QoS 0 or 1")
    if len(body) < 2:
        raise ProtocolError("PUBLISH shorter than its topic length")
    n = (body[0] << 8) | body[1]
    start = 2 + n + (2 if qos else 0)
    if len(body) < start:
        raise ProtocolError("PUBLISH shorter than its topic and packet id")
    try:
        topic = body[2 : 2 + n].decode()
    except UnicodeDecodeError:
        raise ProtocolError("PUBLISH topic is not UTF-8") from None
    packet_id = ((body[2 + n] << 8) | body[3 + n]) if qos else 0
    return Publish(topic, body[start:], qos, packet_id, bool(first & 0x08), bool(first & 0x01))


#: A partial packet longer than this is assembled in a growing buffer (:class:`PacketReader`).
LARGE = 1 << 16


@dataclass
class PacketReader:
    """Splits a byte stream into packets: ``feed`` takes what the socket gave and returns every complete
    packet as (first byte, body); a partial packet waits for the next chunk. ``max_packet`` bounds what
    a broker can make this client buffer. A large packet (a batch of many samples) is assembled in one
    growing buffer instead of being copied again with every chunk."""

    max_packet: int = MAX_REMAINING
    _buffer: bytes = b""
    _large: bytearray | None = None
    _need: int = 0

    def feed(self, chunk: bytes) -> list[tuple[int, bytes]]:
        if self._large is not None:
            self._large += chunk
            if len(self._large) < self._need:
                return []
            buf, self._large = bytes(self._large), None
        else:
            buf = self._buffer + chunk if self._buffer else chunk
        n = len(buf)
        pos = 0
        out: list[tuple[int, bytes]] = []
        append = out.append
        while n - pos >= 2:
            i = pos + 1
            length = buf[i]
            i += 1
            if length & 0x80:  # a multi-byte remaining length (at most four bytes)
                length &= 0x7F
                shift = 7
                while True:
                    if i >= n:
                        self._buffer = buf[pos:]
                        return out
                    byte = buf[i]
                    i += 1
                    length |= (byte & 0x7F) << shift
                    if not byte & 0x80:
                        break
                    shift += 7
                    if shift > 21:
                        raise ProtocolError("remaining length longer than four bytes")
            if length > self.max_packet:
                raise ProtocolError(f"a packet of {length:,} bytes is over the limit of {self.max_packet:,}")
            end = i + length
            if end > n:
                if end - pos > LARGE:
                    self._large, self._need, self._buffer = bytearray(buf[pos:]), end - pos, b""
                    return out
                break
            append((buf[pos], buf[i:end]))
            pos = end
        self._buffer = buf[pos:] if pos < n else b""
        return out

    @property
    def pending(self) -> int:
        """Bytes of a packet not complete yet."""
        return len(self._large) if self._large is not None else len(self._buffer)
