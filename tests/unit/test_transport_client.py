"""The transport's paho client (``edgedrift_edge.transport.connection._FastClient``) on a real socket pair:
packets split out of whole reads whatever the read boundaries, the fast paths and paho's own for the rest,
queued packets written together across partial sends, and the I/O thread woken once per burst."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Iterator

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import MQTTErrorCode

from edgedrift_edge.transport.connection import WAKE_INTERVAL_S, Received, _FastClient, _packet_bounds
from edgedrift_edge.transport.mqtt import make_client


def _length(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def publish_packet(topic: bytes, payload: bytes, qos: int, mid: int, retain: bool = False) -> bytes:
    body = len(topic).to_bytes(2, "big") + topic + (mid.to_bytes(2, "big") if qos else b"") + payload
    return bytes((0x30 | qos << 1 | int(retain),)) + _length(len(body)) + body


@pytest.fixture
def wired() -> Iterator[tuple[_FastClient, socket.socket, list[Received]]]:
    """A client whose socket is one end of a socket pair (the test holds the broker's end)."""
    client = make_client("mqtt://127.0.0.1:1", "fast", clean_session=False, client_class=_FastClient)
    assert isinstance(client, _FastClient)
    ours, broker = socket.socketpair()
    ours.setblocking(False)
    client._sock = ours
    got: list[Received] = []
    client.on_received = got.append
    client.on_socket_register_write = lambda *_: None
    client.max_inflight_messages_set(0)  # as the transport has it
    try:
        yield client, broker, got
    finally:
        ours.close()
        broker.close()


def read_all(client: _FastClient) -> None:
    while client._packet_read() == MQTTErrorCode.MQTT_ERR_SUCCESS:
        pass


def test_packet_bounds_need_the_whole_packet_and_at_most_four_length_bytes() -> None:
    packet = publish_packet(b"t", b"x" * 300, 1, 7)  # a two-byte remaining length
    assert _packet_bounds(packet, 0) == (3, len(packet))
    assert _packet_bounds(packet[:-1], 0) is None
    assert _packet_bounds(packet[:2], 0) is None, "the length itself is cut"
    assert _packet_bounds(b"\x00" + packet, 1) == (4, len(packet) + 1)
    with pytest.raises(ValueError, match="4 bytes"):
        _packet_bounds(b"\x30\xff\xff\xff\xff\x01", 0)


def test_publishes_are_split_out_of_reads_whatever_their_boundaries(
    wired: tuple[_FastClient, socket.socket, list[Received]],
) -> None:
    client, broker, got = wired
    sent = [
        Received(f"edgedrift/d{i}/samples", bytes([i % 251]) * (i * 37 % 500), i + 1, i % 2, i % 5 == 0)
        for i in range(200)
    ]
    stream = b"".join(publish_packet(str(r.topic).encode(), r.payload, r.qos, r.mid, r.retain) for r in sent)
    for start in range(0, len(stream), 997):  # cuts inside headers, lengths and bodies
        broker.sendall(stream[start : start + 997])
        read_all(client)
    assert got == [r if r.qos else r._replace(mid=0) for r in sent]
    assert not client.buffered()


def test_a_topic_that_is_not_utf8_arrives_without_a_topic(
    wired: tuple[_FastClient, socket.socket, list[Received]],
) -> None:
    client, broker, got = wired
    broker.sendall(publish_packet(b"\xff\xfe", b"{}", 1, 5))
    read_all(client)
    assert got == [Received(None, b"{}", 5, 1, False)]


def test_a_qos2_publish_takes_paho_s_path(wired: tuple[_FastClient, socket.socket, list[Received]]) -> None:
    client, broker, got = wired
    paho_messages: list[mqtt.MQTTMessage] = []
    client.on_message = lambda _c, _u, m: paho_messages.append(m)
    broker.sendall(publish_packet(b"edgedrift/d/samples", b"{}", 2, 9))
    read_all(client)
    assert got == [] and client.want_write(), "paho answers PUBREC"
    client._packet_write()
    assert broker.recv(100) == b"\x50\x02\x00\x09"
    broker.sendall(b"\x62\x02\x00\x09")  # PUBREL: paho hands the message over
    read_all(client)
    assert [(m.topic, m.mid, m.qos) for m in paho_messages] == [("edgedrift/d/samples", 9, 2)]


def test_a_puback_confirms_its_publish_and_a_malformed_one_is_a_protocol_error(
    wired: tuple[_FastClient, socket.socket, list[Received]],
) -> None:
    client, broker, _ = wired
    confirmed: list[int] = []
    client.on_publish = lambda _c, _u, mid, _rc, _p: confirmed.append(mid)
    info = client.publish("edgedrift/d/predictions", b"{}", qos=1)
    assert info.rc == MQTTErrorCode.MQTT_ERR_SUCCESS and info.mid in client._out_messages
    broker.sendall(b"\x40\x02" + info.mid.to_bytes(2, "big"))
    read_all(client)
    assert confirmed == [info.mid] and info.is_published() and not client._out_messages
    broker.sendall(b"\x40\x00")  # a PUBACK without its packet id: paho's decoder refuses it
    assert client._packet_read() == MQTTErrorCode.MQTT_ERR_PROTOCOL


def test_queued_packets_go_out_together_in_order_across_partial_sends(
    wired: tuple[_FastClient, socket.socket, list[Received]],
) -> None:
    client, broker, _ = wired
    client._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # type: ignore[union-attr]
    written: list[int] = []
    client.on_publish = lambda _c, _u, mid, _rc, _p: written.append(mid)
    infos = [client.publish(f"edgedrift/d{i}/predictions", b"p" * (i % 300), qos=i % 2) for i in range(300)]
    for mid in range(1, 50):
        client.ack(mid, 1)
    expected = b"".join(bytes(p["packet"]) for p in client._out_packet)
    received = b""
    sends = 0
    while client.want_write() or len(received) < len(expected):
        if client.want_write():
            client._packet_write()
            sends += 1
        with contextlib.suppress(BlockingIOError):
            received += broker.recv(1 << 16)
    assert received == expected
    assert sends < 349 / 4, "written together, not one send per packet"
    assert sorted(written) == sorted(i.mid for n, i in enumerate(infos) if n % 2 == 0), "QoS 0: on_publish"


def test_the_io_thread_is_woken_once_per_burst(
    wired: tuple[_FastClient, socket.socket, list[Received]],
) -> None:
    client, _, _ = wired
    client.loop(timeout=0)  # paho makes its wake-up socket pair here
    wake = client._sockpairR
    assert wake is not None

    def wake_ups() -> bytes:
        got = b""
        while select.select([wake], [], [], 0.2)[0]:
            got += wake.recv(100)
        return got

    client.io_thread = threading.get_ident() + 1  # publishes come from another thread
    client._woken_at = 0.0
    for i in range(50):
        client.publish(f"edgedrift/d{i}/predictions", b"{}", qos=1)
    assert wake_ups() == b"0", "one wake-up for the burst"
    client._out_packet.clear()
    client._woken_at = time.monotonic() + 3600  # as if one had just gone out
    client.publish("edgedrift/d/predictions", b"{}", qos=1)
    assert wake_ups() == b"", "within WAKE_INTERVAL_S of the last: put off"
    client.wake_if_due()
    assert wake_ups() == b"0"
    client.io_thread = threading.get_ident()
    client._out_packet.clear()
    client._woken_at = 0.0
    client.publish("edgedrift/d/predictions", b"{}", qos=1)
    assert wake_ups() == b"", "the I/O thread writes what it queues itself"
    assert WAKE_INTERVAL_S <= 0.01, "a wake-up put off is late by at most this"
