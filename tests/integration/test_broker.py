"""``edgedrift_harness.broker``: real brokers (Mosquitto and the embedded amqtt) with real paho 2.x clients.

Each test runs against both kinds. Mosquitto comes from Debian's ``mosquitto`` package; without it
the "mosquitto" tests fail, they do not skip.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Literal

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from edgedrift_harness.broker import Broker, BrokerError, start_broker
from edgedrift_harness.mosquitto import find_mosquitto
from edgedrift_harness.ports import can_connect, free_port

N_MESSAGES = 500
TIMEOUT_S = 10.0


@pytest.fixture(scope="module", params=["mosquitto", "embedded"])
def broker(request: pytest.FixtureRequest) -> Iterator[Broker]:
    with start_broker(prefer=request.param) as running:
        assert running.kind == request.param
        yield running


class Inbox:
    """Messages a client received, with a way to wait for a count."""

    def __init__(self) -> None:
        self.messages: list[mqtt.MQTTMessage] = []
        self._cond = threading.Condition()

    def add(self, _client: mqtt.Client, _userdata: object, msg: mqtt.MQTTMessage) -> None:
        with self._cond:
            self.messages.append(msg)
            self._cond.notify_all()

    def wait_for(self, n: int, timeout: float = TIMEOUT_S) -> list[mqtt.MQTTMessage]:
        with self._cond:
            self._cond.wait_for(lambda: len(self.messages) >= n, timeout)
            return list(self.messages)


def _topic(name: str) -> str:
    return f"test/{uuid.uuid4().hex[:8]}/{name}"


def _client(broker: Broker, client_id: str, *, clean_session: bool = True, start: bool = True) -> mqtt.Client:
    """A paho 2.x client connected to the broker (its network loop in a thread unless start=False)."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean_session)
    client.connect(broker.host, broker.port, keepalive=30)
    if start:
        client.loop_start()
    return client


def _wait_connected(client: mqtt.Client) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not client.is_connected():
        assert time.monotonic() < deadline, "client did not connect"
        time.sleep(0.01)


def _subscribe(client: mqtt.Client, topic: str, inbox: Inbox, qos: int = 1) -> None:
    """Subscribe and wait for the SUBACK."""
    done = threading.Event()
    client.on_message = inbox.add
    client.on_subscribe = lambda *_args: done.set()
    _wait_connected(client)
    client.subscribe(topic, qos)
    assert done.wait(TIMEOUT_S), "no SUBACK"


def _close(*clients: mqtt.Client) -> None:
    for client in clients:
        client.disconnect()
        client.loop_stop()


def test_qos1_messages_arrive_in_order_once(broker: Broker) -> None:
    topic = _topic("stream")
    inbox = Inbox()
    sub = _client(broker, f"sub-{uuid.uuid4().hex}")
    pub = _client(broker, f"pub-{uuid.uuid4().hex}")
    try:
        _subscribe(sub, topic, inbox)
        _wait_connected(pub)
        infos = [pub.publish(topic, f"{i:04d}".encode(), qos=1) for i in range(N_MESSAGES)]
        for info in infos:
            info.wait_for_publish(TIMEOUT_S)
        inbox.wait_for(N_MESSAGES)
        time.sleep(0.2)  # a duplicate would arrive right behind the last message
        received = inbox.wait_for(N_MESSAGES)
        assert [m.payload for m in received] == [f"{i:04d}".encode() for i in range(N_MESSAGES)]
        assert all(m.qos == 1 for m in received)
    finally:
        _close(sub, pub)


def test_retained_message_reaches_a_late_subscriber(broker: Broker) -> None:
    topic = _topic("model-version")
    pub = _client(broker, f"pub-{uuid.uuid4().hex}")
    _wait_connected(pub)
    pub.publish(topic, b"v7", qos=1, retain=True).wait_for_publish(TIMEOUT_S)
    inbox = Inbox()
    late = _client(broker, f"late-{uuid.uuid4().hex}")
    try:
        _subscribe(late, topic, inbox)
        (msg,) = inbox.wait_for(1)
        assert (msg.topic, msg.payload, msg.retain) == (topic, b"v7", True)
    finally:
        pub.publish(topic, b"", qos=1, retain=True).wait_for_publish(TIMEOUT_S)  # clear it
        _close(late, pub)


def test_last_will_is_published_on_ungraceful_disconnect_only(broker: Broker) -> None:
    topic = _topic("status")
    inbox = Inbox()
    watcher = _client(broker, f"watch-{uuid.uuid4().hex}")
    try:
        _subscribe(watcher, topic, inbox)

        polite = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"polite-{uuid.uuid4().hex}")
        polite.will_set(topic, b"polite-gone", qos=1)
        polite.connect(broker.host, broker.port, keepalive=30)
        polite.loop_start()
        _wait_connected(polite)
        _close(polite)  # sends DISCONNECT: no will

        crashing = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"crash-{uuid.uuid4().hex}")
        crashing.will_set(topic, b"offline", qos=1)
        crashing.connect(broker.host, broker.port, keepalive=30)
        while not crashing.is_connected():  # no loop thread: nothing can reconnect after the crash
            crashing.loop(0.05)
        sock = crashing.socket()
        assert isinstance(sock, socket.socket)
        sock.close()  # the TCP connection drops without DISCONNECT

        (will,) = inbox.wait_for(1)
        assert (will.topic, will.payload) == (topic, b"offline")
        time.sleep(0.1)
        assert [m.payload for m in inbox.messages] == [b"offline"]
    finally:
        _close(watcher)


def test_persistent_session_gets_what_was_published_while_offline(broker: Broker) -> None:
    topic = _topic("commands")
    client_id = f"persist-{uuid.uuid4().hex}"
    offline = _client(broker, client_id, clean_session=False)
    _subscribe(offline, topic, Inbox())
    _close(offline)

    pub = _client(broker, f"pub-{uuid.uuid4().hex}")
    _wait_connected(pub)
    for i in range(3):
        pub.publish(topic, f"cmd{i}".encode(), qos=1).wait_for_publish(TIMEOUT_S)

    inbox = Inbox()
    back = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=False)
    back.on_message = inbox.add
    back.connect(broker.host, broker.port, keepalive=30)
    back.loop_start()
    try:
        assert [m.payload for m in inbox.wait_for(3)] == [b"cmd0", b"cmd1", b"cmd2"]
    finally:
        _close(back, pub)


def test_an_external_url_is_used_as_is(broker: Broker) -> None:
    with start_broker(url=broker.url) as external:
        assert (external.kind, external.url) == ("external", broker.url)
    # stopping the external handle leaves the real broker running
    assert can_connect(broker.port, broker.host, 2)


def test_an_unreachable_url_is_a_clear_error() -> None:
    url = f"mqtt://127.0.0.1:{free_port()}"
    with pytest.raises(BrokerError, match=rf"MQTT broker at {url} is not reachable"):
        start_broker(url=url)
    with pytest.raises(BrokerError, match="unsupported MQTT broker URL"):
        start_broker(url="http://127.0.0.1:1883")


@pytest.mark.parametrize("prefer", ["mosquitto", "embedded"])
def test_stop_frees_the_port(prefer: Literal["mosquitto", "embedded"]) -> None:
    started = start_broker(prefer=prefer)
    started.stop()
    started.stop()  # idempotent
    assert not can_connect(started.port, started.host, 1)


def test_auto_prefers_mosquitto_when_installed() -> None:
    with start_broker() as started:
        assert started.kind == ("mosquitto" if find_mosquitto() else "embedded")
        assert started.url.startswith("mqtt://127.0.0.1:")
