"""edgedrift_edge.transport.connection.MqttTransport without a broker: the inbox, back-pressure and the
acknowledgement bookkeeping on top of paho-mqtt. The test thread plays the I/O thread: it hands the transport
what paho's callbacks would have queued (messages, confirmations, a lost connection) and records the
acknowledgements the transport gives paho (``Client.ack``, spied on; paho itself runs unchanged and, with no
socket, keeps what is published for the next connection)."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from paho.mqtt.enums import MQTTErrorCode

from edgedrift_edge.settings import AgentSettings, SettingsError
from edgedrift_edge.transport.connection import Inbound, MqttTransport, Received
from edgedrift_edge.transport.mqtt import parse_broker_url

TOPIC = "edgedrift/d/samples"


class Connected:
    """A transport as it is between CONNACK and a lost connection, and the acks it gave paho."""

    def __init__(self, **kw: Any) -> None:
        self.t = t = MqttTransport("mqtt://127.0.0.1:1", "t-client", [TOPIC], "edgedrift/d/status", **kw)
        t._reconnecting, t._up = False, True
        t.connected.set()
        self.acks: list[tuple[int, int]] = []
        real_ack = t.client.ack

        def ack(mid: int, qos: int) -> MQTTErrorCode:
            self.acks.append((mid, qos))
            return real_ack(mid, qos)

        t.client.ack = ack  # type: ignore[method-assign]

    def receive(self, mid: int, qos: int = 1, payload: bytes = b"{}") -> None:
        self.t._events.append(("message", Received(TOPIC, payload, mid, qos, False)))
        self.t._handle_events()

    def confirm(self, mid: int) -> None:
        """The broker's PUBACK: paho forgets the publish and reports it."""
        self.t.client._out_messages.pop(mid, None)
        self.t._events.append(("confirmed", mid))
        self.t._handle_events()

    def lose(self) -> None:
        self.t._events.append(("lost", "connection lost"))
        self.t._handle_events()

    def publish_for(self, owner: Inbound) -> int:
        """A prediction for ``owner``; its packet id."""
        before = set(self.t._by_mid)
        self.t.publish("edgedrift/d/predictions", {"y": 1}, owner=owner)
        (mid,) = set(self.t._by_mid) - before
        return mid


def test_qos0_overflow_is_dropped_and_counted() -> None:
    c = Connected(inbox_size=2)
    for mid in range(3):
        c.receive(mid, qos=0)
    assert c.t.queued == 2 and c.t.counters.dropped == 1 and c.t.dropped_for(TOPIC) == 1


def test_qos1_pauses_reading_instead_of_dropping_and_resumes_when_half_is_taken() -> None:
    c = Connected(inbox_size=4)
    for mid in range(1, 5):
        c.receive(mid)
    assert not c.t._paused
    c.receive(5)
    woken: list[int] = []
    c.t.client.waker = lambda: woken.append(1)  # the I/O loop's wake-up
    assert c.t._paused
    assert c.t.queued == 5 and c.t.counters.backpressure_waits == 1 and c.t.counters.dropped == 0
    c.t.get_batch(0.1, limit=2)
    assert c.t._paused, "three left of four: still more than half"
    c.t.get_batch(0.1, limit=1)
    assert not c.t._paused and woken, "the loop is woken to read the connection again"


def test_a_message_is_acknowledged_after_its_publishes_and_in_arrival_order() -> None:
    c = Connected()
    c.receive(1)
    c.receive(2)
    first, second = c.t.get_batch(0.1)
    mid = c.publish_for(first)
    c.t.done(second)
    assert c.acks == [], "the second waits for the first"
    c.t.done(first)
    assert c.acks == [], "the first waits for its prediction's PUBACK"
    c.confirm(mid)
    assert c.acks == [(1, 1), (2, 1)]
    assert c.t.wait_flushed(0.1)


def test_a_message_with_nothing_to_publish_is_acknowledged_when_done() -> None:
    c = Connected()
    c.receive(7)
    (m,) = c.t.get_batch(0.1)
    c.t.done(m)
    assert c.acks == [(7, 1)]


def test_a_qos2_delivery_is_completed_after_processing() -> None:
    c = Connected()
    c.receive(9, qos=2)
    (m,) = c.t.get_batch(0.1)
    assert c.acks == []
    c.t.done(m)
    assert c.acks == [(9, 2)], "PUBCOMP once processed: no reconnect, no loop"


def test_messages_of_a_lost_connection_are_never_acknowledged() -> None:
    c = Connected()
    c.receive(3)
    (m,) = c.t.get_batch(0.1)
    c.lose()
    assert c.t.counters.reconnects == 0, "no CONNACK on this connection: not counted as a reconnect"
    c.t.done(m)
    assert c.acks == [] and c.t.unacked == 0


def test_a_confirmation_after_the_connection_was_lost_is_harmless() -> None:
    c = Connected()
    c.receive(4)
    (m,) = c.t.get_batch(0.1)
    mid = c.publish_for(m)
    c.t.done(m)
    c.lose()
    c.confirm(mid)
    assert c.acks == [] and not c.t._by_mid


def test_publishes_made_while_paho_reconnects_are_held_then_handed_over() -> None:
    c = Connected()
    c.receive(5)
    (m,) = c.t.get_batch(0.1)
    c.t._reconnecting = True
    c.t.publish("edgedrift/d/predictions", {"y": 1}, owner=m)
    c.t.done(m)
    assert len(c.t._held) == 1 and not c.t._by_mid and c.acks == []
    c.t._reconnecting = False
    (held,) = c.t._held
    c.t._held.clear()
    c.t._attempt(held.topic, held.body, held.qos, held.retain, held.entry, held=True)
    (mid,) = c.t._by_mid
    c.confirm(mid)
    assert c.acks == [(5, 1)]


def test_a_refused_publish_is_counted_retried_and_holds_the_ack() -> None:
    c = Connected(publish_queue=1)
    c.receive(1)
    c.receive(2)
    first, second = c.t.get_batch(0.1)
    mid = c.publish_for(first)  # paho holds one unconfirmed publish: its queue is full now
    c.t.publish("edgedrift/d/predictions", {"y": 2}, owner=second)
    assert c.t.counters.publish_failures == 1 and len(c.t._retry) == 1
    c.t.done(first)
    c.t.done(second)
    c.confirm(mid)
    assert c.acks == [(1, 1)], "the second waits for its publish"
    assert c.t.retry_failed() == 0
    (mid2,) = c.t._by_mid
    c.confirm(mid2)
    assert c.acks == [(1, 1), (2, 1)]


def test_a_packet_id_taken_again_before_its_confirmation_was_read_releases_the_right_message() -> None:
    """paho's packet ids are 16 bits and wrap (its refused publishes took ids too): a new publish can take
    the id of one paho has confirmed whose confirmation the transport has not read yet. That confirmation
    releases the old publish's message, not the new one's; released the other way round, the old message
    waited for a confirmation that never came, and every acknowledgement behind it with it (the fairness
    bench's stalled gateway after a restart)."""
    c = Connected()
    c.receive(1)
    c.receive(2)
    first, second = c.t.get_batch(0.1)
    mid = c.publish_for(first)
    c.t.done(first)
    c.t.client._out_messages.pop(mid)  # paho read the PUBACK and forgot the publish ...
    c.t._events.append(("confirmed", mid))  # ... and the transport has not read the confirmation yet
    c.t.client._last_mid = mid - 1  # the id counter came round to it again
    c.t.publish("edgedrift/d/predictions", {"y": 2}, owner=second)
    assert mid in c.t.client._out_messages, "the new publish took the same id"
    c.t.done(second)
    c.t._handle_events()
    assert c.acks == [(1, 1)], "the first is released; the second waits for its own PUBACK"
    c.confirm(mid)
    assert c.acks == [(1, 1), (2, 1)] and not c.t._by_mid


def test_a_publish_refused_for_the_queue_takes_no_packet_id() -> None:
    """A refusal consumes no id, so retries of a full queue do not wrap the 16-bit ids."""
    c = Connected(publish_queue=1)
    c.receive(1)
    (m,) = c.t.get_batch(0.1)
    c.publish_for(m)
    before = c.t.client._last_mid
    for _ in range(5):
        c.t.publish("edgedrift/d/predictions", {"y": 2}, owner=m)
    assert c.t.counters.publish_failures == 5 and c.t.client._last_mid == before


def test_qos0_publishes_while_disconnected_are_retried_not_lost() -> None:
    c = Connected(qos=0)
    c.t._up = False
    c.t.connected.clear()
    c.t.publish("edgedrift/d/predictions", {"y": 1})
    assert c.t.counters.publish_failures == 1 and c.t.retry_failed() == 1
    c.t._up = True
    c.t.client._sock, other = socket.socketpair()  # connected again (paho queues, its loop would write)
    try:
        assert c.t.retry_failed() == 0 and c.t.counters.publish_failures == 2, "each refusal counted"
    finally:
        c.t.client._sock.close()
        other.close()


def test_inbound_carries_its_connection_generation() -> None:
    c = Connected()
    c.receive(1)
    c.lose()
    c.t._up = True
    c.receive(1)
    old, new = c.t.get_batch(1.0)
    assert isinstance(old, Inbound) and (old.generation, new.generation) == (0, 1)
    assert json.loads(new.payload) == {}


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


def test_a_raw_password_with_a_slash_is_never_printed() -> None:
    with pytest.raises(SettingsError) as err:
        AgentSettings.load(
            environ={
                "EDGEDRIFT_EDGE_DEVICE_ID": "d",
                "EDGEDRIFT_EDGE_BROKER_URL": "mqtt://u:pa/ss-hunter2@h:1883",
            }
        )
    assert (
        "--broker-url" in str(err.value) and "hunter2" not in str(err.value) and "pa/ss" not in str(err.value)
    )


def test_ipv6_urls_keep_their_brackets_when_a_password_is_put_in() -> None:
    from edgedrift_edge.cli import replay_broker_url
    from edgedrift_edge.transport.mqtt import parse_broker_url, redact

    s = AgentSettings.load(
        {"broker_password": "pa/ss"},
        environ={"EDGEDRIFT_EDGE_DEVICE_ID": "d", "EDGEDRIFT_EDGE_BROKER_URL": "mqtt://u@[::1]:1884"},
    )
    assert s.effective_broker_url == "mqtt://u:pa%2Fss@[::1]:1884"
    assert replay_broker_url(
        "mqtts://replay@[fd00::5]", None, {"EDGEDRIFT_REPLAY_BROKER_PASSWORD": "x/y"}
    ) == ("mqtts://replay:x%2Fy@[fd00::5]")
    address = parse_broker_url(s.effective_broker_url)
    assert (address.host, address.port, address.password) == ("::1", 1884, "pa/ss")
    assert redact(s.effective_broker_url) == "mqtt://[::1]:1884"


def test_new_connection_settings_are_checked() -> None:
    base = {"EDGEDRIFT_EDGE_DEVICE_ID": "d"}
    with pytest.raises(SettingsError, match="needs TLS"):
        AgentSettings.load({"tls_cert_file": "/c.pem"}, environ=base)
    with pytest.raises(SettingsError, match="tls_key_file needs tls_cert_file"):
        AgentSettings.load({"broker_url": "mqtts://h", "tls_key_file": "/k.pem"}, environ=base)
    with pytest.raises(SettingsError, match="MQTT_VERSION"):
        AgentSettings.load({"mqtt_version": "4"}, environ=base)
    s = AgentSettings.load(
        {"broker_url": "wss://h/mqtt", "tls_cert_file": "/c.pem", "mqtt_version": "5"}, environ=base
    )
    assert (s.mqtt_version, parse_broker_url(s.broker_url).transport) == ("5", "websockets")


def test_a_device_session_logs_in_as_its_own_user() -> None:
    from edgedrift_edge.transport.mqtt import session_login

    url = "mqtt://gw-1:p%2Fw@[::1]:1884"
    assert session_login(url, "dev-7") == "mqtt://gw-1.dev-7:p%2Fw@[::1]:1884"
    address = parse_broker_url(session_login(url, "dev-7"))
    assert (address.username, address.password, address.host) == ("gw-1.dev-7", "p/w", "::1")
    assert session_login("mqtt://127.0.0.1:1883", "dev-7") == "mqtt://127.0.0.1:1883"  # anonymous
    base = {"EDGEDRIFT_EDGE_GATEWAY_ID": "gw-1", "EDGEDRIFT_EDGE_DEVICES": "dev-1"}
    assert AgentSettings.load({}, environ=base).broker_sessions == "gateway"
    assert AgentSettings.load({"broker_sessions": "device"}, environ=base).broker_sessions == "device"
    with pytest.raises(SettingsError, match="needs gateway_id"):
        AgentSettings.load({"broker_sessions": "device"}, environ={"EDGEDRIFT_EDGE_DEVICE_ID": "d"})
    with pytest.raises(SettingsError, match="client certificate"):
        AgentSettings.load(
            {"broker_sessions": "device", "broker_url": "mqtts://h", "tls_cert_file": "/c.pem"}, environ=base
        )
    with pytest.raises(SettingsError, match="BROKER_SESSIONS"):
        AgentSettings.load({"broker_sessions": "group"}, environ=base)


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
