"""edgedrift_edge.transport.MqttTransport without a broker: the inbox, back-pressure, the acknowledgement
bookkeeping and reconnect resends. A fake link stands for the socket: the test thread plays the I/O
thread, feeds it broker packets and reads back what the transport wrote."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from edgedrift_edge import mqtt_packets as mp
from edgedrift_edge.settings import AgentSettings, SettingsError
from edgedrift_edge.transport import Inbound, MqttTransport

TOPIC = "edgedrift/d/samples"


class FakeSocket:
    """What asyncio's transport would be: records writes and pause/resume."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.paused = False
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


class FakeLink:
    """A connection as the transport sees one (the attributes of ``_Link`` it uses)."""

    def __init__(self) -> None:
        self.transport = FakeSocket()
        self.reader = mp.PacketReader()
        self.connack = False

        class Answered:
            def done(self) -> bool:
                return True

        self.answered = Answered()

    def close(self) -> None:
        self.transport.close()


def connected(**kw: Any) -> tuple[MqttTransport, FakeLink]:
    """A transport on a fake link, after the broker's CONNACK (and the SUBACK of its one topic)."""
    t = MqttTransport("mqtt://127.0.0.1:1", "t-client", [TOPIC], "edgedrift/d/status", **kw)
    t.connection._io_ident = threading.get_ident()  # this thread plays the I/O thread
    return t, reconnect(t)


def reconnect(t: MqttTransport) -> FakeLink:
    link = FakeLink()
    t.connection.link = link  # type: ignore[assignment]
    broker(t, link, b"\x20\x02\x00\x00")  # CONNACK, accepted
    subscribe = [p for p in sent(link) if p[0] & 0xF0 == 0x80]
    for _first, body in subscribe:
        broker(t, link, b"\x90\x03" + body[:2] + b"\x01")  # SUBACK, QoS 1 granted
    return link


def broker(t: MqttTransport, link: FakeLink, data: bytes) -> None:
    """Bytes from the broker, as the socket would hand them over."""
    t.connection.received(link, data)  # type: ignore[arg-type]


def receive(t: MqttTransport, link: FakeLink, mid: int, qos: int = 1, payload: bytes = b"{}") -> None:
    broker(t, link, mp.publish(TOPIC.encode(), payload, qos, mid))


def sent(link: FakeLink) -> list[tuple[int, bytes]]:
    return mp.PacketReader().feed(bytes(link.transport.written))


def acks(link: FakeLink) -> list[int]:
    """Packet ids the transport acknowledged (PUBACKs it wrote), in order."""
    return [(b[0] << 8) | b[1] for f, b in sent(link) if f == 0x40]


def published(link: FakeLink) -> list[mp.Publish]:
    return [mp.decode_publish(f, b) for f, b in sent(link) if f & 0xF0 == 0x30]


def confirm(t: MqttTransport, link: FakeLink, mid: int) -> None:
    broker(t, link, mp.puback(mid))


def flush(t: MqttTransport) -> None:
    """What the I/O thread does when the worker asked for a write."""
    t._flush_now()


def test_qos0_overflow_is_dropped_and_counted() -> None:
    t, link = connected(inbox_size=3)
    for i in range(10):
        receive(t, link, i, qos=0)
    assert t.queued == 3 and t.counters.dropped == 7 and t.dropped_for(TOPIC) == 7
    assert not link.transport.paused


def test_qos1_pauses_reading_instead_of_dropping_and_resumes_when_half_is_taken() -> None:
    t, link = connected(inbox_size=4)
    for i in range(1, 6):
        receive(t, link, i)
    assert link.transport.paused and t.counters.backpressure_waits == 1 and t.counters.dropped == 0
    assert t.queued == 5, "what was read is kept: the broker holds the rest"
    scheduled: list[Any] = []
    t.connection.call_soon = lambda callback, *args: scheduled.append(callback)  # type: ignore[method-assign]
    assert [m.mid for m in t.get_batch(0.1, limit=2)] == [1, 2]
    assert scheduled == [], "3 left: more than half of the inbox"
    assert [m.mid for m in t.get_batch(0.1, limit=1)] == [3]
    assert scheduled == [t.connection.resume_reading]
    t.connection.resume_reading()
    assert not link.transport.paused


def test_a_message_is_acknowledged_after_its_publishes_and_in_arrival_order() -> None:
    t, link = connected()
    receive(t, link, 11)
    receive(t, link, 12)
    m1, m2 = t.get_batch(1.0)
    t.publish("edgedrift/d/predictions", {"id": 1}, owner=m1)
    t.publish("edgedrift/d/predictions", {"id": 2}, owner=m2)
    t.done(m1)
    t.done(m2)
    flush(t)
    assert acks(link) == [], "nothing is acknowledged before the broker confirmed the predictions"
    out1, out2 = (p.packet_id for p in published(link))
    assert [json.loads(p.payload) for p in published(link)] == [{"id": 1}, {"id": 2}]
    confirm(t, link, out2)
    assert acks(link) == [], "m2 must wait for m1 (acknowledgements go out in order)"
    confirm(t, link, out1)
    assert acks(link) == [11, 12]


def test_a_batch_of_publishes_leaves_in_one_write() -> None:
    t, link = connected()
    for i in range(1, 4):
        receive(t, link, i)
    writes: list[bytes] = []
    link.transport.write = writes.append  # type: ignore[method-assign, assignment]
    scheduled: list[Any] = []
    t.connection._io_ident = None  # the worker's thread now
    t.connection.call_soon = lambda callback, *args: scheduled.append(callback)  # type: ignore[method-assign]
    for m in t.get_batch(1.0):
        t.publish("edgedrift/d/predictions", {"id": m.mid}, owner=m)
        t.done(m)
    assert scheduled == [t._flush_now], "one flush asked for the whole batch"
    flush(t)
    assert len(writes) == 1 and len(mp.PacketReader().feed(writes[0])) == 3


def test_a_message_with_nothing_to_publish_is_acknowledged_when_done() -> None:
    t, link = connected()
    receive(t, link, 5)
    (m,) = t.get_batch(1.0)
    t.done(m)
    flush(t)
    assert acks(link) == [5]


def test_messages_of_a_lost_connection_are_never_acknowledged() -> None:
    t, link = connected()
    receive(t, link, 7)
    (m,) = t.get_batch(1.0)
    t.publish("edgedrift/d/predictions", {"id": 7}, owner=m)
    flush(t)
    t.connection.lost(link, None)  # type: ignore[arg-type]
    t.done(m)
    new = reconnect(t)
    confirm(t, new, published(link)[0].packet_id)
    flush(t)
    assert acks(link) == [] and acks(new) == [], "the broker delivers it again on the new connection"
    assert t.counters.reconnects == 1


def test_unconfirmed_publishes_are_sent_again_with_dup_first_after_a_reconnect() -> None:
    t, link = connected()
    t.publish("edgedrift/d/events", {"n": 1})
    t.publish("edgedrift/d/events", {"n": 2})
    flush(t)
    first, second = published(link)
    confirm(t, link, first.packet_id)
    t.connection.lost(link, None)  # type: ignore[arg-type]
    t.publish("edgedrift/d/events", {"n": 3})  # made while disconnected: kept for the next connection
    new = reconnect(t)
    again = published(new)
    assert [json.loads(p.payload) for p in again] == [{"n": 2}, {"n": 3}]
    assert again[0].dup and again[0].packet_id == second.packet_id
    assert [f & 0xF0 for f, _ in sent(new)][:2] == [0x30, 0x30], "resends before the SUBSCRIBE"


def test_a_confirmation_after_the_connection_was_lost_is_harmless() -> None:
    t, link = connected()
    fatal: list[str] = []
    t.connection.on_fatal = fatal.append
    receive(t, link, 8)
    (m,) = t.get_batch(1.0)
    t.publish("edgedrift/d/predictions", {"id": 8}, owner=m)
    t.done(m)
    flush(t)
    t.connection.lost(link, None)  # type: ignore[arg-type]
    confirm(t, link, published(link)[0].packet_id)
    assert acks(link) == [] and fatal == [] and t.failure is None


def test_an_exception_in_the_io_thread_is_reported_not_swallowed() -> None:
    t, link = connected()
    fatal: list[str] = []
    t.connection.on_fatal = fatal.append
    t._inbox = None  # type: ignore[assignment]  # any bug while receiving
    receive(t, link, 1)
    assert t.failure is not None and fatal == [t.failure] and "receive failed" in t.failure
    assert link.transport.closed


def test_a_protocol_error_closes_the_connection_without_killing_the_agent() -> None:
    t, link = connected()
    fatal: list[str] = []
    t.connection.on_fatal = fatal.append
    broker(t, link, b"\x34\x05\x00\x01t\x00\x01")  # a PUBLISH with QoS 2
    assert link.transport.closed and fatal == [] and t.failure is None


def test_a_refused_connection_is_recorded_with_its_reason() -> None:
    t = MqttTransport("mqtt://u:p@127.0.0.1:1", "t-client", [TOPIC], "edgedrift/d/status")
    link = FakeLink()
    t.connection.link = link  # type: ignore[assignment]
    broker(t, link, b"\x20\x02\x00\x05")
    assert t.refused == "not authorized" and link.transport.closed and not t.connected.is_set()


def test_a_refused_publish_is_counted_retried_and_holds_the_ack() -> None:
    t, link = connected(publish_queue=1)
    receive(t, link, 21)
    (m,) = t.get_batch(1.0)
    t.publish("edgedrift/d/events", {"type": "a"})  # the one unconfirmed publish allowed
    t.publish("edgedrift/d/predictions", {"id": 21}, owner=m)
    assert t.counters.publish_failures == 1 and t.retry_failed() == 1
    t.done(m)
    flush(t)
    assert acks(link) == []
    confirm(t, link, published(link)[0].packet_id)  # the event went out: room again
    assert t.retry_failed() == 0
    flush(t)
    confirm(t, link, published(link)[1].packet_id)
    assert acks(link) == [21]


def test_qos0_publishes_while_disconnected_are_retried_not_lost() -> None:
    t, link = connected(qos=0)
    t.connection.lost(link, None)  # type: ignore[arg-type]
    t.publish("edgedrift/d/events", {"n": 1})
    assert t.counters.publish_failures == 1 and t.retry_failed() == 1
    new = reconnect(t)
    assert t.retry_failed() == 0
    flush(t)
    assert [json.loads(p.payload) for p in published(new)] == [{"n": 1}]


def test_inbound_carries_its_connection_generation() -> None:
    t, link = connected()
    receive(t, link, 1)
    (item,) = t.get_batch(1.0)
    assert isinstance(item, Inbound) and item.generation == 0 and json.loads(item.payload) == {}


def test_qos2_is_refused_by_the_transport_and_the_settings() -> None:
    with pytest.raises(ValueError, match="QoS 0 or 1"):
        MqttTransport("mqtt://127.0.0.1:1", "c", [], "s", qos=2)
    with pytest.raises(SettingsError, match="QOS"):
        AgentSettings.load({"device_id": "d", "qos": 2})


def test_settings_come_from_the_environment_and_flags_win() -> None:
    env = {"EDGEDRIFT_EDGE_DEVICE_ID": "gw-2", "EDGEDRIFT_EDGE_QOS": "0", "EDGEDRIFT_EDGE_C": "100"}
    s = AgentSettings.load({"qos": "1"}, environ=env)
    assert (s.device_id, s.qos, s.C) == ("gw-2", 1, 100.0)
    assert "EDGEDRIFT_EDGE_BROKER_URL" in AgentSettings.env_names()


def test_settings_errors_never_show_a_secret(tmp_path: pytest.TempPathFactory) -> None:
    env = {
        "EDGEDRIFT_EDGE_DEVICE_ID": "gw-3",
        "EDGEDRIFT_EDGE_BROKER_URL": "ftp://user:hunter2-very-secret@host:1",
        "EDGEDRIFT_EDGE_MODE": "production",
        "EDGEDRIFT_EDGE_DEVICE_SECRET": "short-s3cret",
    }
    with pytest.raises(SettingsError) as err:
        AgentSettings.load(environ=env)
    text = str(err.value)
    assert "--broker-url / EDGEDRIFT_EDGE_BROKER_URL" in text
    assert "hunter2" not in text and "short-s3cret" not in text


def test_production_refuses_default_and_short_secrets_and_reads_secret_files(tmp_path: object) -> None:
    from pathlib import Path

    base = {"EDGEDRIFT_EDGE_DEVICE_ID": "gw-4", "EDGEDRIFT_EDGE_MODE": "production"}
    strong = "a-real-device-secret-0123456789"
    for secret, url in [
        ("dev-1-insecure", f"mqtt://gw-4:{strong}@broker:1883"),
        (strong, "mqtt://gw-4:dev-1-mqtt-insecure@broker:1883"),
        (strong, "mqtt://gw-4:short@broker:1883"),
    ]:
        with pytest.raises(SettingsError, match="production mode"):
            AgentSettings.load(
                environ={**base, "EDGEDRIFT_EDGE_DEVICE_SECRET": secret, "EDGEDRIFT_EDGE_BROKER_URL": url}
            )
    secret_file = Path(str(tmp_path)) / "secret"
    secret_file.write_text(strong + "\n")
    password_file = Path(str(tmp_path)) / "password"
    password_file.write_text("p@ss/word-0123456789")
    s = AgentSettings.load(
        environ={
            **base,
            "EDGEDRIFT_EDGE_DEVICE_SECRET_FILE": str(secret_file),
            "EDGEDRIFT_EDGE_BROKER_URL": "mqtt://gw-4@broker:1883",
            "EDGEDRIFT_EDGE_BROKER_PASSWORD_FILE": str(password_file),
        }
    )
    assert s.device_secret is not None and s.device_secret.get_secret_value() == strong
    assert s.effective_broker_url == "mqtt://gw-4:p%40ss%2Fword-0123456789@broker:1883"
