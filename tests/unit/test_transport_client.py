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
from packaging.requirements import Requirement
from packaging.version import Version
from paho.mqtt.enums import MQTTErrorCode, _ConnectionState
from support.dockerfiles import ROOT, pyproject

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


# --- keep-alive -------------------------------------------------------------------------------------------

PINGREQ = b"\xc0\x00"


def _connected(client: _FastClient, keepalive: int) -> list[MQTTErrorCode]:
    """The client as paho has it after a CONNACK, keep-alive ``keepalive`` s; the disconnects it reports."""
    client._state = _ConnectionState.MQTT_CS_CONNECTED
    client._keepalive = keepalive
    client._ping_t = 0.0
    client._last_bytes_received = client._last_msg_out = time.monotonic()
    lost: list[MQTTErrorCode] = []

    def on_disconnect(packet_from_broker: bool, v1_rc: MQTTErrorCode, *_: object) -> None:
        lost.append(v1_rc)

    client._do_on_disconnect = on_disconnect  # type: ignore[method-assign, assignment]
    return lost


def _turn(client: _FastClient) -> None:
    """One turn of the I/O thread: read what came, write what is queued, the keep-alive check."""
    if client._sock is None:
        return
    if select.select([client._sock], [], [], 0)[0]:
        client.loop_read(max_packets=1000)
    if client._sock is not None and client.want_write():
        client.loop_write()
    if client._sock is not None:
        client.loop_misc()


def _exchange(client: _FastClient, broker: socket.socket, chatter: bool) -> None:
    """A prediction out and a turn of the I/O thread; the broker reads what came and, with ``chatter``,
    sends a sample first (any byte but the PINGRESP)."""
    if chatter:
        broker.sendall(publish_packet(b"edgedrift/d/samples", b"{}", 0, 0))
    client.publish("edgedrift/d/predictions", b"{}", qos=0)
    _turn(client)
    with contextlib.suppress(BlockingIOError):
        while broker.recv(1 << 16):
            pass
    time.sleep(0.05)


def test_a_pingresp_late_behind_traffic_is_no_dead_broker_and_silence_still_is(
    wired: tuple[_FastClient, socket.socket, list[Received]],
) -> None:
    """The fairness bench's disconnect: a PINGREQ went out, then the broker kept sending (publishes, the
    PUBACKs of a backlog) while the agent kept publishing, and the PINGRESP, behind all of it, came later
    than the keep-alive. paho gave the connection up; bytes from the broker are a sign of life. Once the
    broker falls silent the connection is given up within a keep-alive of its last byte and the ping."""
    client, broker, _ = wired
    broker.setblocking(False)
    lost = _connected(client, keepalive=1)
    start = time.monotonic()
    while not client._ping_t and time.monotonic() - start < 3:  # the broker is quiet: a ping goes out
        client.publish("edgedrift/d/predictions", b"{}", qos=0)
        _turn(client)
        time.sleep(0.05)
    assert client._ping_t, "no PINGREQ after a keep-alive of silence"
    pinged = time.monotonic()
    while not lost and time.monotonic() - pinged < 3.0:  # busy both ways, the PINGRESP never comes
        _exchange(client, broker, chatter=True)
    assert lost == [] and client._sock is not None, "bytes came in all along: the broker is alive"
    last_byte = time.monotonic()
    while not lost and time.monotonic() - last_byte < 5.0:  # now it says nothing at all
        _exchange(client, broker, chatter=False)
    silent = time.monotonic() - last_byte
    assert lost == [MQTTErrorCode.MQTT_ERR_KEEPALIVE], lost
    assert 0.9 <= silent <= 2.5, f"given up {silent:.1f} s after the broker's last byte"


def test_a_broker_reading_what_filled_the_send_buffer_is_alive(
    wired: tuple[_FastClient, socket.socket, list[Received]],
) -> None:
    """A broker too busy to send anything (the bench's Mosquitto rewriting its database) that still reads
    the agent's publishes, slowly, out of a full send buffer is alive; one that stops reading is not."""
    client, broker, _ = wired
    client._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)  # type: ignore[union-attr]
    broker.setblocking(False)
    lost = _connected(client, keepalive=1)
    for i in range(4000):  # far more than the socket holds: the agent's backlog of predictions
        client.publish(f"edgedrift/d{i % 100}/predictions", b"p" * 200, qos=0)
    start = time.monotonic()
    while time.monotonic() - start < 3.5:  # not a byte comes in
        _turn(client)
        with contextlib.suppress(BlockingIOError):
            broker.recv(2048)  # a slow reader: a little every turn
        time.sleep(0.05)
    assert client.want_write(), "the backlog still waits: the send buffer stayed full"
    assert lost == [] and client._sock is not None, "the broker took bytes all along: alive"
    stopped = time.monotonic()
    while not lost and time.monotonic() - stopped < 5.0:  # it stops reading too
        _turn(client)
        time.sleep(0.05)
    assert lost == [MQTTErrorCode.MQTT_ERR_KEEPALIVE], lost
    assert time.monotonic() - stopped <= 2.5


def test_the_broker_s_silence_is_not_held_against_it_while_the_agent_does_not_read(
    wired: tuple[_FastClient, socket.socket, list[Received]],
) -> None:
    """Back-pressure stops the reading: pings still go out (the broker's keep-alive of the agent) but the
    connection is not given up for what was not read; from the resumption the broker has a keep-alive."""
    client, broker, _ = wired
    broker.setblocking(False)
    lost = _connected(client, keepalive=1)
    client.stop_listening()
    start = time.monotonic()
    while time.monotonic() - start < 2.5:
        client.loop_misc()
        if client.want_write():
            client.loop_write()
        time.sleep(0.05)
    assert lost == [] and client._ping_t, "a ping went out and the connection held"
    assert PINGREQ in broker.recv(1 << 16)
    client.listen()
    resumed = time.monotonic()
    while not lost and time.monotonic() - resumed < 3.0:
        _turn(client)
        time.sleep(0.05)
    assert lost == [MQTTErrorCode.MQTT_ERR_KEEPALIVE]
    assert 0.9 <= time.monotonic() - resumed <= 1.5, "a keep-alive from the resumption"


def test_the_paho_requirement_is_the_minor_release_the_suite_runs() -> None:
    """``_FastClient`` uses paho's internals, so the edge package admits only the minor release of the
    pinned paho (constraints.txt): a pin moved without the requirement, or paho 2.1 (no
    ``paho.mqtt.exception``, which the transport imports), fails here instead of at a user's import."""
    requirements = map(Requirement, pyproject("edge_agent")["project"]["dependencies"])
    (paho,) = [r for r in requirements if r.name == "paho-mqtt"]
    pinned = next(
        line.split("==")[1].strip()
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line.startswith("paho-mqtt==")
    )
    assert Version(pinned) in paho.specifier
    major, minor = Version(pinned).release[:2]
    assert Version(f"{major}.{minor + 1}.0") not in paho.specifier, "an upper bound at the next minor"
    assert Version("2.1.0") not in paho.specifier
