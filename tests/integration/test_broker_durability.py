"""The shipped broker configuration (``deploy/mosquitto/mosquitto.conf``) under the faults of an unattended
fleet, run as a real Mosquitto with the shipped ACL and ``mosquitto_passwd`` passwords
(``edgedrift_harness.mosquitto.ShippedMosquitto``: the shipped file with only the listener, auth and data
paths moved).

* A SIGKILL with 2,000 acknowledged QoS-1 messages queued for an offline agent, the documented window
  (a save every second, up to 2 s apart) after the last acknowledgement, loses none of them; with the
  first persistence settings (``autosave_interval 60``) it loses them all (the control).
* Another device's credentials with the agent's client id neither take over the agent's session nor get
  its queued messages, and do not disconnect it; without ``use_username_as_clientid`` they do (the control).
* Messages beyond the queue limit are dropped and counted on the ``$SYS`` topic the README names.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from edgedrift_edge.transport.mqtt import make_client
from edgedrift_harness.mosquitto import SHIPPED_CONF, ShippedMosquitto, parse_config, save_window_s
from edgedrift_harness.mqtt import publish as publish_to

USERS = {
    "dev-1": "dev-1-test-password-0123456789",
    "dev-2": "dev-2-test-password-0123456789",
    "replay": "replay-test-password-0123456789",
    "operator": "operator-test-password-0123456789",
}
SAMPLES = "edgedrift/dev-1/samples"
MESSAGES = 2000
#: Seconds before a SIGKILL whose acknowledged messages it may still lose: deploy/mosquitto/README.md
#: ("Durability") and the comment at autosave_interval in mosquitto.conf (a save every second; Mosquitto
#: counts whole seconds, so saves come up to 2 s apart).
DOCUMENTED_WINDOW_S = 2
#: The first persistence settings: a save once a minute.
PREVIOUS_PERSISTENCE: dict[str, str | None] = {"autosave_on_changes": None, "autosave_interval": "60"}
WITHOUT_USERNAME_IDS: dict[str, str | None] = {"use_username_as_clientid": None}
TIMEOUT_S = 15.0

BrokerFactory = Callable[..., ShippedMosquitto]


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[BrokerFactory]:
    """Start the shipped configuration (with ``overrides``) in its own directory; stopped after the test."""
    started: list[ShippedMosquitto] = []

    def make(overrides: dict[str, str | None] | None = None) -> ShippedMosquitto:
        broker = ShippedMosquitto(tmp_path / f"broker-{len(started)}", USERS, overrides=overrides)
        started.append(broker)
        return broker.start()

    yield make
    for broker in started:
        broker.stop()


class Session:
    """A client that keeps what it receives, its disconnects and whether the broker had its session."""

    def __init__(self, client: mqtt.Client, broker: ShippedMosquitto) -> None:
        self.client = client
        self.broker = broker
        self.messages: list[bytes] = []
        self.disconnects = 0
        self.session_present: bool | None = None
        self.cond = threading.Condition()
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        client.on_subscribe = lambda *_a: self._notify()
        self.subscribed = False
        client.connect("127.0.0.1", broker.port, keepalive=30)
        client.loop_start()
        if not self.wait(lambda: self.session_present is not None):
            raise AssertionError(f"no CONNACK:\n{broker.log_tail()}")

    def _notify(self) -> None:
        with self.cond:
            self.subscribed = True
            self.cond.notify_all()

    def _on_connect(self, _c: mqtt.Client, _u: Any, flags: Any, reason: Any, _p: Any) -> None:
        with self.cond:
            if self.session_present is None:
                self.session_present = bool(flags.session_present)
            self.cond.notify_all()

    def _on_disconnect(self, *_a: Any) -> None:
        with self.cond:
            self.disconnects += 1
            self.cond.notify_all()

    def _on_message(self, _c: mqtt.Client, _u: Any, message: mqtt.MQTTMessage) -> None:
        with self.cond:
            self.messages.append(bytes(message.payload))
            self.cond.notify_all()

    def wait(self, predicate: Callable[[], bool], timeout: float = TIMEOUT_S) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, timeout)

    def subscribe(self, topic: str) -> None:
        self.client.subscribe(topic, 1)
        assert self.wait(lambda: self.subscribed), "no SUBACK"

    def received(self) -> list[bytes]:
        with self.cond:
            return list(self.messages)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def agent(broker: ShippedMosquitto, device: str = "dev-1") -> Session:
    """The agent's MQTT client as the agent builds it: client id edgedrift-agent-{device}, persistent."""
    url = f"mqtt://{device}:{USERS[device]}@127.0.0.1:{broker.port}"
    return Session(make_client(url, f"edgedrift-agent-{device}", clean_session=False), broker)


def intruder(broker: ShippedMosquitto) -> Session:
    """dev-2's credentials with dev-1's agent client id; no automatic reconnect."""
    client = mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id="edgedrift-agent-dev-1",
        clean_session=False,
        reconnect_on_failure=False,
    )
    client.username_pw_set("dev-2", USERS["dev-2"])
    return Session(client, broker)


def publish(broker: ShippedMosquitto, payloads: list[bytes], topic: str = SAMPLES) -> None:
    """The replay user publishes at QoS 1 and waits until the broker acknowledged every message."""
    publish_to(f"mqtt://replay:{USERS['replay']}@127.0.0.1:{broker.port}", topic, payloads)


def samples(n: int, tag: str = "s") -> list[bytes]:
    return [json.dumps({"id": i, "x": [0.1 * i, 1.0], "tag": tag}).encode() for i in range(n)]


def kill_with_a_queue(broker: ShippedMosquitto) -> set[int]:
    """dev-1 offline with MESSAGES acknowledged QoS-1 messages queued, SIGKILL the documented window (and a
    second of the broker's main loop) after the last acknowledgement, restart: the ids dev-1 gets."""
    offline = agent(broker)
    offline.subscribe(SAMPLES)
    offline.close()
    publish(broker, samples(MESSAGES))
    time.sleep(DOCUMENTED_WINDOW_S + 1.0)
    broker.kill()
    broker.start()
    back = agent(broker)
    back.wait(lambda: len(back.messages) >= MESSAGES, 5.0)
    time.sleep(0.3)  # nothing more (duplicates) on its way
    back.close()
    ids = [json.loads(m)["id"] for m in back.received()]
    assert set(ids) <= set(range(MESSAGES))
    return set(ids)


# --------------------------------------------------------------------------------------------------
# A. Durability across a SIGKILL
# --------------------------------------------------------------------------------------------------


def test_the_shipped_persistence_is_what_the_docs_say() -> None:
    options = parse_config(SHIPPED_CONF.read_text())
    assert options["persistence"] == ["true"]
    assert "autosave_on_changes" not in options, "a save every N changes is quadratic in a long queue"
    assert save_window_s(options) <= DOCUMENTED_WINDOW_S
    readme = (SHIPPED_CONF.parent / "README.md").read_text()
    assert f"autosave_interval {options['autosave_interval'][0]}\n" in readme, (
        "the README shows another setting"
    )
    assert f"acknowledged in the last {DOCUMENTED_WINDOW_S} s" in readme


def test_acknowledged_messages_survive_a_sigkill(make_broker: BrokerFactory) -> None:
    broker = make_broker()
    received = kill_with_a_queue(broker)
    assert len(received) == MESSAGES, (
        f"{MESSAGES - len(received)} of {MESSAGES} acknowledged messages lost, all older than the "
        f"documented window of {DOCUMENTED_WINDOW_S} s\n{broker.log_tail()}"
    )


def test_control_the_previous_settings_lose_them(make_broker: BrokerFactory) -> None:
    """autosave_interval 60: nothing was saved before the kill."""
    received = kill_with_a_queue(make_broker(PREVIOUS_PERSISTENCE))
    assert len(received) < MESSAGES // 2


# --------------------------------------------------------------------------------------------------
# B. Client ids bound to the user name
# --------------------------------------------------------------------------------------------------


def takeover(broker: ShippedMosquitto) -> tuple[Session, list[bytes], Session, bool]:
    """dev-1 offline with 5 queued messages; dev-2 logs in with dev-1's client id (offline, then again while
    dev-1 is online). Returns (first intruder, what dev-1 got back after it, dev-1, dev-1 disconnected)."""
    offline = agent(broker)
    offline.subscribe(SAMPLES)
    offline.close()
    queued = samples(5, "queued")
    publish(broker, queued)
    first = intruder(broker)
    first.wait(lambda: len(first.messages) >= 5, 1.5)
    first.close()
    dev1 = agent(broker)
    dev1.wait(lambda: len(dev1.messages) >= 5, 3.0)
    got_back = dev1.received()
    second = intruder(broker)
    dev1_disconnected = dev1.wait(lambda: dev1.disconnects > 0, 1.5)
    second.close()
    return first, got_back, dev1, dev1_disconnected


def test_another_devices_login_cannot_take_over_a_session(make_broker: BrokerFactory) -> None:
    broker = make_broker()
    assert broker.options["use_username_as_clientid"] == ["true"]
    first, got_back, dev1, dev1_disconnected = takeover(broker)
    assert first.session_present is False, "dev-2 was given dev-1's session"
    assert first.received() == [], "dev-2 received dev-1's queued messages"
    assert got_back == samples(5, "queued"), "dev-1 did not get its queued messages back"
    assert dev1.session_present is True
    assert not dev1_disconnected, "dev-2's login disconnected dev-1"
    live = samples(1, "live")
    publish(broker, live)
    assert dev1.wait(lambda: len(dev1.messages) >= 6), "dev-1 stopped receiving"
    dev1.close()


def test_control_without_username_ids_the_session_is_taken_over(make_broker: BrokerFactory) -> None:
    """The fault as it was: the intruder gets the session (the ACL then discards the queued messages, so
    dev-1 never gets them) and every login of the intruder disconnects dev-1."""
    broker = make_broker(WITHOUT_USERNAME_IDS)
    first, got_back, dev1, dev1_disconnected = takeover(broker)
    assert first.session_present is True
    assert got_back != samples(5, "queued")
    assert dev1_disconnected
    dev1.close()


def test_a_reconnecting_agent_keeps_its_session(make_broker: BrokerFactory) -> None:
    """With the user name as client id the agent's own client id is ignored: its session is its user's."""
    broker = make_broker()
    dev1 = agent(broker)
    assert dev1.session_present is False
    dev1.subscribe(SAMPLES)
    dev1.close()
    publish(broker, samples(50))
    broker.stop()  # a clean restart too: the session and its queue are in the database
    broker.start()
    back = agent(broker)
    assert back.session_present is True
    assert back.wait(lambda: len(back.messages) >= 50)
    assert back.received() == samples(50)
    back.close()


# --------------------------------------------------------------------------------------------------
# The queue limit: dropped messages are counted on $SYS
# --------------------------------------------------------------------------------------------------


def test_messages_beyond_the_queue_limit_are_counted_on_sys(make_broker: BrokerFactory) -> None:
    """The shipped limits with a small max_queued_messages: the overflow shows on the documented topic."""
    broker = make_broker({"max_queued_messages": "10", "sys_interval": "1"})
    offline = agent(broker)
    offline.subscribe(SAMPLES)
    offline.close()
    publish(broker, samples(30))
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="test-operator")
    client.username_pw_set("operator", USERS["operator"])
    watcher = Session(client, broker)
    watcher.subscribe("$SYS/broker/publish/messages/dropped")
    assert watcher.wait(lambda: any(int(m) >= 20 for m in watcher.messages)), watcher.received()
    watcher.close()
    back = agent(broker)
    back.wait(lambda: len(back.messages) >= 10)
    time.sleep(0.3)
    assert len(back.received()) == 10
    back.close()
