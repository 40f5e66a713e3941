"""The few MQTT 3.1.1 packets the benchmark's load generator writes by hand (OASIS MQTT 3.1.1, 3.1–3.14).

The publishers of ``bench/mqtt_ingest.py`` must outrun every client they measure, so they write
pre-encoded PUBLISH packets to a socket rather than going through a client library; the agent, the
replay and the harness speak MQTT through paho-mqtt only.
"""

from __future__ import annotations

from typing import Final

CONNACK: Final = 0x20
PUBLISH: Final = 0x30
PUBACK: Final = 0x40
PINGRESP: Final = 0xD0
PINGREQ: Final = b"\xc0\x00"
DISCONNECT: Final = b"\xe0\x00"


def remaining_length(n: int) -> bytes:
    """The variable-length encoding of a remaining length (section 2.2.3)."""
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _string(value: str) -> bytes:
    raw = value.encode()
    return len(raw).to_bytes(2, "big") + raw


def connect(client_id: str, *, clean_session: bool, keepalive: int) -> bytes:
    """CONNECT with protocol level 4, no will and no credentials (section 3.1)."""
    body = b"\x00\x04MQTT\x04" + bytes((0x02 if clean_session else 0,)) + keepalive.to_bytes(2, "big")
    body += _string(client_id)
    return bytes((0x10,)) + remaining_length(len(body)) + body


def publish(topic: bytes, payload: bytes, qos: int, packet_id: int, retain: bool = False) -> bytes:
    """PUBLISH (section 3.3); ``topic`` already UTF-8 encoded; ``packet_id`` ignored for QoS 0."""
    first = PUBLISH | (qos << 1) | (1 if retain else 0)
    var = len(topic).to_bytes(2, "big") + topic + (packet_id.to_bytes(2, "big") if qos else b"")
    return bytes((first,)) + remaining_length(len(var) + len(payload)) + var + payload
