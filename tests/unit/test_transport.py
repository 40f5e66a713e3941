"""Tests of edgedrift_edge.transport.MqttTransport without a broker: the inbox, back-pressure and the
acknowledgement bookkeeping (paho's client is real but never connects; PUBACKs are simulated)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, cast

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.reasoncodes import ReasonCode

from edgedrift_edge.settings import AgentSettings, SettingsError
from edgedrift_edge.transport import Inbound, MqttTransport


def transport(**kw: int) -> tuple[MqttTransport, list[tuple[int, int]]]:
    t = MqttTransport("mqtt://127.0.0.1:1", "t-client", ["edgedrift/d/samples"], "edgedrift/d/status", **kw)  # type: ignore[arg-type]
    acks: list[tuple[int, int]] = []

    def ack(mid: int, qos: int) -> MQTTErrorCode:
        acks.append((mid, qos))
        return MQTTErrorCode.MQTT_ERR_SUCCESS

    t.client.ack = ack  # type: ignore[method-assign]
    return t, acks


def message(mid: int, qos: int = 1, payload: bytes = b"{}") -> mqtt.MQTTMessage:
    msg = mqtt.MQTTMessage(mid=mid, topic=b"edgedrift/d/samples")
    msg.payload = payload
    msg.qos = qos
    return msg


def receive(t: MqttTransport, msg: mqtt.MQTTMessage) -> None:
    t._on_message(t.client, None, msg)


def puback(t: MqttTransport, mid: int) -> None:
    t._on_publish(t.client, None, mid, None, None)


def test_qos0_overflow_is_dropped_and_counted() -> None:
    t, _ = transport(inbox_size=3)
    for i in range(10):
        receive(t, message(i, qos=0))
    assert t.inbox.qsize() == 3 and t.counters.dropped == 7


def test_qos1_waits_for_room_instead_of_dropping() -> None:
    t, _ = transport(inbox_size=2)
    receive(t, message(1))
    receive(t, message(2))
    blocked = threading.Thread(target=receive, args=(t, message(3)), daemon=True)
    blocked.start()
    time.sleep(0.3)
    assert blocked.is_alive() and t.counters.backpressure_waits == 1 and t.counters.dropped == 0
    first = t.get(1.0)
    assert first is not None and first.mid == 1
    blocked.join(2.0)
    assert not blocked.is_alive() and t.inbox.qsize() == 2


def test_a_message_is_acknowledged_after_its_publishes_and_in_arrival_order() -> None:
    t, acks = transport()
    receive(t, message(11))
    receive(t, message(12))
    m1, m2 = t.get(1.0), t.get(1.0)
    assert m1 is not None and m2 is not None
    t.publish("edgedrift/d/predictions", {"id": 1}, owner=m1)
    t.publish("edgedrift/d/predictions", {"id": 2}, owner=m2)
    t.done(m1)
    t.done(m2)
    assert acks == [], "nothing is acknowledged before the broker confirmed the predictions"
    out1, out2 = sorted(t._by_mid)
    puback(t, out2)
    assert acks == [], "m2 must wait for m1 (acknowledgements go out in order)"
    puback(t, out1)
    assert acks == [(11, 1), (12, 1)]


def test_a_message_with_nothing_to_publish_is_acknowledged_when_done() -> None:
    t, acks = transport()
    receive(t, message(5))
    m = t.get(1.0)
    assert m is not None
    t.done(m)
    assert acks == [(5, 1)]


def test_messages_of_a_lost_connection_are_never_acknowledged() -> None:
    t, acks = transport()
    receive(t, message(7))
    m = t.get(1.0)
    assert m is not None
    t.publish("edgedrift/d/predictions", {"id": 7}, owner=m)
    t._on_disconnect(t.client, None, None, ReasonCode(PacketTypes.DISCONNECT, "Normal disconnection"), None)
    t.done(m)
    puback(t, next(iter(t._by_mid)))
    assert acks == [], "the broker delivers it again on the new connection"


def test_a_confirmation_after_the_connection_was_lost_is_harmless() -> None:
    """The broker confirms a prediction of a message whose connection is gone: nothing to acknowledge,
    and the network thread must not fail (it once raised IndexError on the emptied queue)."""
    t, acks = transport()
    fatal: list[str] = []
    t.on_fatal = fatal.append
    receive(t, message(8))
    m = t.get(1.0)
    assert m is not None
    t.publish("edgedrift/d/predictions", {"id": 8}, owner=m)
    t.done(m)
    t._on_disconnect(t.client, None, None, ReasonCode(PacketTypes.DISCONNECT, "Normal disconnection"), None)
    cast(Any, t.client.on_publish)(t.client, None, next(iter(t._by_mid)), None, None)
    assert acks == [] and fatal == [] and t.failure is None


def test_an_exception_in_a_callback_is_reported_not_swallowed() -> None:
    t, _ = transport()
    fatal: list[str] = []
    t.on_fatal = fatal.append
    t.inbox = None  # type: ignore[assignment]  # any bug in the callback
    cast(Any, t.client.on_message)(t.client, None, message(1))
    assert t.failure is not None and fatal == [t.failure] and "on_message" in t.failure


def test_a_refused_publish_is_counted_retried_and_holds_the_ack() -> None:
    t, acks = transport(publish_queue=1)
    receive(t, message(21))
    m = t.get(1.0)
    assert m is not None
    t.publish("edgedrift/d/events", {"type": "a"})  # fills paho's outgoing queue (not connected)
    t.publish("edgedrift/d/predictions", {"id": 21}, owner=m)
    assert t.counters.publish_failures == 1 and t.retry_failed() == 1
    t.done(m)
    assert acks == []
    puback(t, next(iter(t._by_mid)))  # the event went out: room again
    t.client._out_messages.clear()
    assert t.retry_failed() == 0
    puback(t, max(t._by_mid))
    assert acks == [(21, 1)]


def test_inbound_carries_its_connection_generation() -> None:
    t, _ = transport()
    receive(t, message(1))
    item = t.get(1.0)
    assert isinstance(item, Inbound) and item.generation == 0 and json.loads(item.payload) == {}


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
