"""MQTT 5 expiries and reason codes of edgedrift_edge.transport.connection on a real Mosquitto, read by paho
MQTT 5 clients: the message expiry is on the wire of predictions and events (not of the retained status) and
the broker discards what waited longer for an offline subscriber; the session expiry keeps the samples queued
for an agent that is away within the interval, and only then; the broker's DISCONNECT reason is logged."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.settings import AgentSettings, SettingsError
from edgedrift_edge.transport.connection import MqttTransport
from edgedrift_harness.mosquitto import MosquittoProcess, as_root, local_mosquitto
from edgedrift_harness.mqtt import Subscriber, publish
from edgedrift_harness.ports import HOST

TIMEOUT_S = 15.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MosquittoProcess]:
    with local_mosquitto(tmp_path_factory.mktemp("mqtt5")) as running:
        yield running


def _base() -> str:
    return f"edgedrift/m5-{uuid.uuid4().hex[:8]}"


class Received:
    """What an MQTT 5 paho subscriber got: (topic, payload, properties) in arrival order."""

    def __init__(self, url: str, topics: list[str], client_id: str | None = None) -> None:
        self.messages: list[tuple[str, bytes, object]] = []
        self.sub = Subscriber(
            url,
            [(t, 1) for t in topics],
            client_id=client_id,
            clean_session=client_id is None,
            mqtt_version="5",
            on_message=lambda _c, _u, m: self.messages.append((m.topic, bytes(m.payload), m.properties)),
        )

    def on(self, topic: str, n: int, timeout: float = TIMEOUT_S) -> list[tuple[bytes, object]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = [(p, props) for t, p, props in self.messages if t == topic]
            if len(got) >= n:
                return got
            time.sleep(0.02)
        return [(p, props) for t, p, props in self.messages if t == topic]

    def close(self) -> None:
        self.sub.close()


def _transport(broker: MosquittoProcess, client_id: str, topics: list[str], **kw: object) -> MqttTransport:
    return MqttTransport(
        broker.url,
        client_id,
        topics,
        f"{client_id}/status",
        mqtt_version="5",
        **kw,  # type: ignore[arg-type]
    )


def _take(t: MqttTransport, n: int, timeout: float) -> list[int]:
    """Sample ids the transport delivers within ``timeout`` (each acknowledged), stopping at ``n``."""
    ids: list[int] = []
    deadline = time.monotonic() + timeout
    while len(ids) < n and time.monotonic() < deadline:
        for m in t.get_batch(0.1):
            ids.append(json.loads(m.payload)["id"])
            t.done(m)
    return ids


def test_predictions_and_events_carry_the_message_expiry_not_the_status(broker: MosquittoProcess) -> None:
    base = _base()
    seen = Received(broker.url, [f"{base}/predictions", f"{base}/events", f"{base}/status"])
    t = _transport(broker, f"agent-{uuid.uuid4().hex[:6]}", [], message_expiry_s=600)
    t.start(TIMEOUT_S)
    try:
        t.publish(f"{base}/predictions", {"id": 1, "y_hat": 1.0})
        t.publish(f"{base}/events", {"type": "outlier"})
        t.publish_raw(f"{base}/status", b'{"state":"online"}', retain=True)
        for kind in ("predictions", "events"):
            [(_payload, props)] = seen.on(f"{base}/{kind}", 1)
            expiry = getattr(props, "MessageExpiryInterval", None)
            assert expiry is not None and 590 <= expiry <= 600, (kind, expiry)
        [(_payload, props)] = seen.on(f"{base}/status", 1)
        assert getattr(props, "MessageExpiryInterval", None) is None, "a retained status must not expire"
    finally:
        t.stop()
        seen.close()


def test_an_offline_subscriber_does_not_get_expired_predictions(broker: MosquittoProcess) -> None:
    base = _base()
    expiring, kept = f"{base}/a/predictions", f"{base}/b/predictions"
    watcher = f"watch-{uuid.uuid4().hex[:6]}"
    Received(broker.url, [expiring, kept], client_id=watcher).close()  # its session queues from now on
    short = _transport(broker, f"agent-a-{uuid.uuid4().hex[:6]}", [], message_expiry_s=1)
    plain = _transport(broker, f"agent-b-{uuid.uuid4().hex[:6]}", [])
    for t, topic in ((short, expiring), (plain, kept)):
        t.start(TIMEOUT_S)
        for i in range(10):
            t.publish(topic, {"id": i, "y_hat": 1.0})
        assert t.wait_flushed(TIMEOUT_S)
        t.stop()
    time.sleep(3.0)
    back = Received(broker.url, [expiring, kept], client_id=watcher)
    try:
        assert len(back.on(kept, 10)) == 10, "without an expiry the queued predictions are delivered"
        assert back.on(expiring, 1, timeout=1.0) == [], "expired predictions were delivered"
    finally:
        back.close()


def test_the_session_expiry_keeps_queued_samples_within_the_interval_only(broker: MosquittoProcess) -> None:
    base = _base()
    replay = broker.url
    for expiry, kept in ((60, True), (1, False)):
        samples = f"{base}/{expiry}/samples"
        client_id = f"agent-{expiry}-{uuid.uuid4().hex[:6]}"
        first = _transport(broker, client_id, [samples], session_expiry_s=expiry)
        first.start(TIMEOUT_S)
        first.stop()  # DISCONNECT: the session stays for ``expiry`` seconds
        time.sleep(3.0)
        publish(replay, samples, [json.dumps({"id": i, "x": [i]}) for i in range(20)], qos=1)
        again = _transport(broker, client_id, [samples], session_expiry_s=expiry)
        again.start(TIMEOUT_S)
        try:
            ids = _take(again, 20, TIMEOUT_S if kept else 2.0)
        finally:
            again.stop()
        if kept:
            assert sorted(ids) == list(range(20)), "the broker lost the session within its expiry"
        else:
            assert ids == [], "the session outlived its 1 s expiry"


def test_the_brokers_disconnect_reason_code_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker with a packet size limit (as managed brokers have) ends an MQTT 5 connection that sends a
    larger packet with DISCONNECT "Packet too large" (149): the log says so, not just "disconnected"."""
    config = f"allow_anonymous true\nmax_packet_size 2000\n{as_root()}"
    limited = MosquittoProcess(tmp_path, lambda port: f"listener {port} {HOST}\n{config}")
    with limited:
        t = _transport(limited, f"agent-{uuid.uuid4().hex[:6]}", [], reconnect_delay=(5.0, 5.0))
        t.start(TIMEOUT_S)
        caplog.set_level(logging.WARNING, logger="edgedrift_edge.transport.connection")
        try:
            t.publish(f"{_base()}/predictions", {"id": 1, "x": "x" * 5000})
            deadline = time.monotonic() + TIMEOUT_S
            while time.monotonic() < deadline and "disconnected from" not in caplog.text:
                time.sleep(0.05)
        finally:
            t.stop(drain_s=0.5)
    assert "Packet too large (reason code 149)" in caplog.text, caplog.text


def test_the_agents_settings_reach_the_transport_and_mqtt_3_refuses_an_expiry(tmp_path: Path) -> None:
    settings = AgentSettings.load(
        {
            "device_id": "d-1",
            "mqtt_version": "5",
            "message_expiry_s": "90",
            "session_expiry_s": "3600",
            "checkpoint_dir": str(tmp_path),
        },
        environ={},
    )
    transport = EdgeAgent(settings).transport
    assert isinstance(transport, MqttTransport)
    assert (transport.message_expiry_s, transport.session_expiry_s) == (90, 3600)
    with pytest.raises(SettingsError, match=r"--message-expiry-s .*needs mqtt_version 5"):
        AgentSettings.load({"device_id": "d-1", "message_expiry_s": "90"}, environ={})
    with pytest.raises(ValueError, match="needs MQTT 5"):
        MqttTransport("mqtt://127.0.0.1:1883", "x", [], "x/status", message_expiry_s=60)
