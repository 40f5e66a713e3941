"""RabbitMQ's MQTT plugin as EdgeDrift's durable broker (``edgedrift_harness.rabbitmq``: a node of its own on
free ports with deploy/rabbitmq/rabbitmq.conf, users and ACL from a definitions file), on real processes:

* a SIGKILL with 2,000 acknowledged QoS-1 messages queued for an offline persistent session (paho 2.x,
  MQTT 3.1.1, clean_session=False) loses none of them: the session is a quorum queue;
* the ACL of deploy/mosquitto/acl as topic permissions: a device reads its own samples only, cannot take
  another device's session by its client id, and the replay user reads nothing;
* mutual TLS logs a client in by its certificate's common name;
* the fault lab on RabbitMQ: ``edgedrift-edge run`` agents, the cloud trainer, and the ledger
  (published = predicted + rejected + dropped) of an agent SIGKILL and of a broker SIGKILL while the agent
  is offline, with no exemption (Mosquitto's run of the same scenario may lose its save window).
"""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.settings import AgentSettings
from edgedrift_edge.transport.mqtt import make_client
from edgedrift_harness import faults
from edgedrift_harness.faults import FaultLab
from edgedrift_harness.mosquitto import make_certs
from edgedrift_harness.mqtt import publish as publish_to
from edgedrift_harness.rabbitmq import RabbitMQProcess, find_rabbitmq

pytestmark = [
    pytest.mark.kernel_agnostic,
    pytest.mark.skipif(find_rabbitmq() is None, reason="RabbitMQ is not installed"),
]

USERS = {
    "dev-1": "dev-1-test-password-0123456789",
    "dev-2": "dev-2-test-password-0123456789",
    "replay": "replay-test-password-0123456789",
    "operator": "operator-test-password-0123456789",
}
SAMPLES = "edgedrift/dev-1/samples"
MESSAGES = 2000
TIMEOUT_S = 15.0
#: Seconds a new session is given before a crash: RabbitMQ 3.10 loses a session (and its acknowledged
#: messages) whose queue was declared about a second before the node was killed (docs/brokers.md).
SETTLE_S = 3.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQProcess]:
    with RabbitMQProcess(tmp_path_factory.mktemp("rabbitmq"), USERS) as running:
        yield running


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[RabbitMQProcess]:
    """A node for one test that kills it, so that what the kill leaves behind reaches no other test."""
    with RabbitMQProcess(tmp_path / "rabbitmq", USERS) as running:
        yield running


def url(broker: RabbitMQProcess, user: str) -> str:
    return f"mqtt://{user}:{USERS[user]}@127.0.0.1:{broker.port}"


def connected(client: mqtt.Client, port: int) -> tuple[mqtt.Client, list[Any]]:
    """Connect ``client`` (network loop started); the CONNACK reason codes it got."""
    codes: list[Any] = []
    done = threading.Event()

    def on_connect(_c: mqtt.Client, _u: Any, _f: Any, rc: Any, _p: Any) -> None:
        codes.append(rc)
        done.set()

    client.on_connect = on_connect
    client.connect("127.0.0.1", port)
    client.loop_start()
    done.wait(TIMEOUT_S)
    return client, codes


def session(broker: RabbitMQProcess, user: str, client_id: str) -> mqtt.Client:
    """A persistent session subscribed (QoS 1) to ``user``'s samples topic of dev-1, then disconnected."""
    client, codes = connected(make_client(url(broker, user), client_id, clean_session=False), broker.port)
    assert codes and not codes[0].is_failure, codes
    subscribed = threading.Event()
    client.on_subscribe = lambda *_a: subscribed.set()
    client.subscribe(SAMPLES, 1)
    assert subscribed.wait(TIMEOUT_S)
    client.disconnect()
    client.loop_stop()
    return client


def receive(
    broker: RabbitMQProcess,
    user: str,
    client_id: str,
    expected: int,
    quiet_s: float = 3.0,
    first_s: float = 30.0,
) -> list[int]:
    """Reconnect a persistent session; the sample ids it receives until ``expected`` or quiet (``first_s`` for
    the first message: after a restart the session's quorum queue elects its leader first)."""
    got: list[int] = []
    last = [time.monotonic()]
    client = make_client(url(broker, user), client_id, clean_session=False)

    def on_message(_c: mqtt.Client, _u: Any, message: mqtt.MQTTMessage) -> None:
        got.append(int(json.loads(message.payload)["id"]))
        last[0] = time.monotonic()

    client.on_message = on_message
    connected(client, broker.port)
    last[0] = time.monotonic()
    while len(set(got)) < expected and time.monotonic() - last[0] < (quiet_s if got else first_s):
        time.sleep(0.05)
    client.disconnect()
    client.loop_stop()
    return got


def test_sigkill_loses_no_acknowledged_message_of_an_offline_session(own_broker: RabbitMQProcess) -> None:
    broker = own_broker
    session(broker, "dev-1", "edgedrift-agent-dev-1")
    time.sleep(SETTLE_S)
    payloads = [json.dumps({"id": i, "x": [0.5, 1.5]}).encode() for i in range(MESSAGES)]
    publish_to(url(broker, "replay"), SAMPLES, payloads)  # returns once every PUBACK arrived
    (queue,) = [q for q in broker.queues() if q["name"] == "mqtt-subscription-edgedrift-agent-dev-1qos1"]
    assert queue["type"] == "quorum" and queue["durable"] is True
    broker.kill()
    broker.start()
    got = receive(broker, "dev-1", "edgedrift-agent-dev-1", MESSAGES)
    assert set(got) == set(range(MESSAGES)), f"lost {MESSAGES - len(set(got))} acknowledged messages"


def test_the_acl_keeps_devices_to_their_own_topics_and_sessions(broker: RabbitMQProcess) -> None:
    session(broker, "dev-1", "edgedrift-agent-dev-1")  # dev-1's session queue exists (not left to test order)
    # dev-2 may not subscribe to dev-1's samples: it gets none of them (the broker refuses the subscription).
    got: list[bytes] = []
    thief, codes = connected(
        make_client(url(broker, "dev-2"), "edgedrift-agent-dev-2", clean_session=True), broker.port
    )
    assert codes and not codes[0].is_failure
    thief.on_message = lambda _c, _u, m: got.append(bytes(m.payload))
    thief.subscribe(SAMPLES, 1)
    time.sleep(1.0)
    # dev-2 cannot log in with dev-1's client id (its session queue belongs to dev-1).
    _, stolen = connected(
        make_client(url(broker, "dev-2"), "edgedrift-agent-dev-1", clean_session=False), broker.port
    )
    assert stolen and stolen[0].is_failure, stolen
    # The control: dev-1 subscribes to its own samples and gets what replay publishes there.
    own: list[bytes] = []
    client, _ = connected(
        make_client(url(broker, "dev-1"), "edgedrift-agent-dev-1", clean_session=True), broker.port
    )
    client.on_message = lambda _c, _u, m: own.append(bytes(m.payload))
    subscribed = threading.Event()
    client.on_subscribe = lambda *_a: subscribed.set()
    client.subscribe(SAMPLES, 1)
    assert subscribed.wait(TIMEOUT_S)
    publish_to(url(broker, "replay"), SAMPLES, [b'{"id": 1, "x": [1.0]}'] * 10)
    deadline = time.monotonic() + TIMEOUT_S
    while len(own) < 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(own) == 10
    time.sleep(0.5)  # what dev-2 would get arrives with dev-1's
    assert got == [], "dev-2 read dev-1's samples"
    for c in (thief, client):
        c.disconnect()
        c.loop_stop()


def test_mutual_tls_logs_a_device_in_by_its_certificate(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs", "127.0.0.1", ["dev-1"])
    with RabbitMQProcess(tmp_path / "node", USERS, certs=certs) as node:
        assert node.tls_port is not None
        client = make_client(
            f"mqtts://127.0.0.1:{node.tls_port}",
            "edgedrift-agent-dev-1",
            clean_session=True,
            tls_ca_file=str(certs / "ca.crt"),
            tls_cert_file=str(certs / "dev-1.crt"),
            tls_key_file=str(certs / "dev-1.key"),
        )
        client, codes = connected(client, node.tls_port)
        assert codes and not codes[0].is_failure, node.log_tail()
        granted: list[Any] = []
        done = threading.Event()

        def on_subscribe(_c: mqtt.Client, _u: Any, _m: int, rc: list[Any], _p: Any) -> None:
            granted.extend(rc)
            done.set()

        client.on_subscribe = on_subscribe
        client.subscribe(SAMPLES, 1)
        assert done.wait(TIMEOUT_S) and not granted[0].is_failure
        client.disconnect()
        client.loop_stop()
        # Without a client certificate the broker never answers the CONNECT (the TLS handshake fails).
        bare = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="anon")
        bare.tls_set(ca_certs=str(certs / "ca.crt"), cert_reqs=ssl.CERT_REQUIRED)
        acked = threading.Event()
        bare.on_connect = lambda *_a: acked.set()
        with contextlib.suppress(ssl.SSLError, OSError):
            bare.connect("127.0.0.1", node.tls_port)
            bare.loop_start()
            acked.wait(3.0)
        bare.loop_stop()
        assert not acked.is_set(), "a client without a certificate got a CONNACK"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultLab]:
    with FaultLab(tmp_path_factory.mktemp("faults-rabbitmq"), devices=4, broker="rabbitmq") as running:
        yield running


@pytest.mark.slow
def test_an_agent_on_rabbitmq_loses_nothing_when_killed(lab: FaultLab) -> None:
    result = faults.SCENARIOS["agent_sigkill"](lab)
    assert result.published > 0 and result.lost == 0, result.row()
    assert result.rejected == 0 and result.dropped == 0


@pytest.mark.slow
def test_broker_sigkill_on_rabbitmq_loses_no_acknowledged_sample(lab: FaultLab) -> None:
    """The scenario Mosquitto is exempted from (its save window): on RabbitMQ the window is 0."""
    result = faults.SCENARIOS["broker_kill9_offline_agent"](lab)
    assert result.checks == {"broker": "rabbitmq", "window": 0}
    assert result.published == 2000 and result.lost == 0, result.row()


GATEWAY_PASSWORDS = {
    "gw-1": "gw-1-test-password-0123456789",
    "replay": USERS["replay"],
    "operator": USERS["operator"],
}


def gateway_settings(node: RabbitMQProcess, devices: str, state: Path) -> AgentSettings:
    """gw-1 in gateway mode for ``devices`` (no cloud: warm-up predictions need none)."""
    return AgentSettings.model_validate(
        {
            "gateway_id": "gw-1",
            "devices": devices,
            "broker_url": f"mqtt://gw-1:{GATEWAY_PASSWORDS['gw-1']}@127.0.0.1:{node.port}",
            "cloud_url": "http://127.0.0.1:9",
            "checkpoint_dir": str(state),
            "n_features": 2,
        }
    )


@pytest.fixture
def gateway_node(tmp_path: Path) -> Iterator[RabbitMQProcess]:
    with RabbitMQProcess(tmp_path / "node", GATEWAY_PASSWORDS, gateways={"gw-1": ["dev-1", "dev-2"]}) as node:
        yield node


def test_a_gateway_serves_its_devices_and_reads_no_other(
    gateway_node: RabbitMQProcess, tmp_path: Path
) -> None:
    """A gateway user reads its devices' samples and answers them; another device's samples reach nobody."""
    node = gateway_node
    agent = EdgeAgent(gateway_settings(node, "dev-1,dev-2", tmp_path / "state")).start()
    answers: dict[str, list[int]] = {}
    lock = threading.Lock()
    operator = f"mqtt://operator:{GATEWAY_PASSWORDS['operator']}@127.0.0.1:{node.port}"
    watch, _ = connected(make_client(operator, "watch-gw", clean_session=True), node.port)

    def on_message(_c: mqtt.Client, _u: Any, m: mqtt.MQTTMessage) -> None:
        with lock:
            answers.setdefault(m.topic.split("/")[1], []).append(json.loads(m.payload)["id"])

    watch.on_message = on_message
    subscribed = threading.Event()
    watch.on_subscribe = lambda *_a: subscribed.set()
    watch.subscribe("edgedrift/+/predictions", 1)
    try:
        assert subscribed.wait(TIMEOUT_S)
        replay = f"mqtt://replay:{GATEWAY_PASSWORDS['replay']}@127.0.0.1:{node.port}"
        for device in ("dev-1", "dev-2", "dev-9"):
            publish_to(
                replay,
                f"edgedrift/{device}/samples",
                [json.dumps({"id": i, "x": [0.1 * i, 1.0]}) for i in range(5)],
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and sum(len(answers.get(d, [])) for d in ("dev-1", "dev-2")) < 10:
            time.sleep(0.05)
        time.sleep(1.0)
        with lock:
            assert answers.get("dev-1") == list(range(5)) and answers.get("dev-2") == list(range(5)), answers
            assert "dev-9" not in answers
    finally:
        watch.disconnect()
        watch.loop_stop()
        agent.stop()


def test_a_gateway_given_a_device_outside_its_acl_is_refused(
    gateway_node: RabbitMQProcess, tmp_path: Path
) -> None:
    """Unlike Mosquitto (which refuses one topic and serves the rest), RabbitMQ 3.10 closes the connection of
    a client that subscribes or publishes outside its topic permissions: a gateway configured with a device
    its broker user does not cover never gets subscribed (docs/brokers.md)."""
    agent = EdgeAgent(gateway_settings(gateway_node, "dev-1,dev-2,dev-9", tmp_path / "state"))
    try:
        with pytest.raises(TimeoutError):
            agent.start(timeout=10.0)
    finally:
        agent.stop()
    assert "access to topic 'edgedrift.dev-9." in gateway_node.log_path.read_text(errors="replace")
