"""edgedrift_edge.mqtt_packets: MQTT 3.1.1 encodings checked byte for byte against the specification's
layouts, and the stream decoder against every way a socket can split the stream."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgedrift_edge import mqtt_packets as mp


@pytest.mark.parametrize(
    ("n", "encoded"),
    [
        (0, b"\x00"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (16_383, b"\xff\x7f"),
        (16_384, b"\x80\x80\x01"),
        (2_097_151, b"\xff\xff\x7f"),
        (2_097_152, b"\x80\x80\x80\x01"),
        (268_435_455, b"\xff\xff\xff\x7f"),
    ],
)
def test_remaining_length_matches_the_table_of_section_2_2_3(n: int, encoded: bytes) -> None:
    assert mp.remaining_length(n) == encoded


def test_remaining_length_beyond_the_protocol_is_refused() -> None:
    with pytest.raises(ValueError, match="longer than MQTT allows"):
        mp.remaining_length(268_435_456)


def test_connect_carries_will_credentials_and_persistent_session() -> None:
    packet = mp.connect(
        "gw-1",
        clean_session=False,
        keepalive=30,
        will=mp.Will("edgedrift/gw-1/status", b'{"state":"offline"}', qos=1, retain=True),
        username="gw-1",
        password="pw",
    )
    body = b"\x00\x04MQTT\x04" + bytes([0x80 | 0x40 | 0x20 | 0x08 | 0x04]) + b"\x00\x1e"
    body += b"\x00\x04gw-1" + b"\x00\x15edgedrift/gw-1/status" + b'\x00\x13{"state":"offline"}'
    body += b"\x00\x04gw-1" + b"\x00\x02pw"
    assert packet == b"\x10" + mp.remaining_length(len(body)) + body


def test_connect_without_will_or_user_is_a_clean_minimal_packet() -> None:
    assert (
        mp.connect("c", clean_session=True, keepalive=0) == b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x00\x00\x01c"
    )


def test_a_password_without_a_user_name_is_refused() -> None:
    with pytest.raises(ValueError, match="user name"):
        mp.connect("c", clean_session=True, keepalive=30, password="x")


def test_subscribe_puback_and_unsubscribe_layouts() -> None:
    assert mp.subscribe(10, [("a/b", 1)]) == b"\x82\x08\x00\x0a\x00\x03a/b\x01"
    assert mp.unsubscribe(11, ["a/b"]) == b"\xa2\x07\x00\x0b\x00\x03a/b"
    assert mp.puback(0x1234) == b"\x40\x02\x12\x34"


@given(
    topic=st.text(min_size=1, max_size=40).filter(lambda t: "\x00" not in t),
    payload=st.binary(max_size=300),
    qos=st.sampled_from([0, 1]),
    packet_id=st.integers(1, 65535),
    retain=st.booleans(),
)
def test_publish_round_trips_through_the_decoder(
    topic: str, payload: bytes, qos: int, packet_id: int, retain: bool
) -> None:
    packet = mp.publish(topic.encode(), payload, qos, packet_id, retain)
    [(first, body)] = mp.PacketReader().feed(packet)
    got = mp.decode_publish(first, body)
    assert got == mp.Publish(topic, payload, qos, packet_id if qos else 0, False, retain)
    dup = mp.decode_publish(*mp.PacketReader().feed(mp.as_duplicate(packet))[0])
    assert dup.dup and dup.payload == payload


@given(
    payloads=st.lists(st.binary(max_size=400), min_size=1, max_size=8),
    cuts=st.lists(st.integers(0, 4000), max_size=12),
)
def test_the_reader_returns_the_same_packets_however_the_stream_is_split(
    payloads: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(mp.publish(b"t/x", p, 1, i + 1) for i, p in enumerate(payloads)) + mp.PINGREQ
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    reader = mp.PacketReader()
    got: list[tuple[int, bytes]] = []
    for a, b in itertools.pairwise(points):
        got.extend(reader.feed(stream[a:b]))
    assert reader.pending == 0
    assert [mp.decode_publish(f, b).payload for f, b in got[:-1]] == payloads
    assert got[-1] == (0xC0, b"")


def test_the_reader_keeps_a_partial_length_for_the_next_chunk() -> None:
    packet = mp.publish(b"t", b"x" * 300, 0, 0)
    reader = mp.PacketReader()
    assert reader.feed(packet[:2]) == [] and reader.pending == 2
    [(first, body)] = reader.feed(packet[2:])
    assert mp.decode_publish(first, body).payload == b"x" * 300


def test_a_five_byte_length_and_an_oversized_packet_are_protocol_errors() -> None:
    with pytest.raises(mp.ProtocolError, match="four bytes"):
        mp.PacketReader().feed(b"\x30\xff\xff\xff\xff\x01")
    with pytest.raises(mp.ProtocolError, match="over the limit"):
        mp.PacketReader(max_packet=1000).feed(b"\x30" + mp.remaining_length(5000))


def test_qos2_and_truncated_publishes_are_protocol_errors() -> None:
    with pytest.raises(mp.ProtocolError, match="QoS 2"):
        mp.decode_publish(0x34, b"\x00\x01t\x00\x01")
    with pytest.raises(mp.ProtocolError, match="shorter"):
        mp.decode_publish(0x32, b"\x00\x05ab")
    with pytest.raises(mp.ProtocolError, match="UTF-8"):
        mp.decode_publish(0x30, b"\x00\x02\xff\xfe")


def test_a_large_packet_arrives_whole_from_many_small_reads() -> None:
    payload = bytes(range(256)) * 20_000  # 5 MB, as a batch of many samples
    stream = mp.publish(b"t/x", payload, 1, 7) + mp.publish(b"t/y", b"after", 1, 8)
    reader = mp.PacketReader()
    got: list[tuple[int, bytes]] = []
    for start in range(0, len(stream), 65_536):
        got.extend(reader.feed(stream[start : start + 65_536]))
        assert reader.pending < len(stream)
    first, second = (mp.decode_publish(f, b) for f, b in got)
    assert (first.payload == payload, first.packet_id, second.payload) == (True, 7, b"after")
    assert reader.pending == 0
