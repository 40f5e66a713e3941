"""edgedrift_edge.transport.connection against real brokers: Mosquitto (plain, TLS, with passwords) and the
embedded amqtt broker the demo falls back to. Watchers are paho clients, so every packet the agent's codec
writes is read by another implementation."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgedrift_edge.transport.connection import MqttTransport
from edgedrift_harness.broker import Broker, start_broker
from edgedrift_harness.mosquitto import MosquittoProcess, ShippedMosquitto
from edgedrift_harness.mqtt import Subscriber, publish

TIMEOUT_S = 15.0


def _topics() -> tuple[str, str, str]:
    base = f"edgedrift/t-{uuid.uuid4().hex[:8]}"
    return f"{base}/samples", f"{base}/predictions", f"{base}/status"


class Seen:
    """Messages a paho watcher received, by topic."""

    def __init__(self, url: str, topics: list[str]) -> None:
        self.messages: list[tuple[str, bytes, bool]] = []
        self.sub = Subscriber(
            url,
            [(t, 1) for t in topics],
            on_message=lambda _c, _u, m: self._add(m.topic, bytes(m.payload), m.retain),
        )

    def _add(self, topic: str, payload: bytes, retain: bool) -> None:
        self.messages.append((topic, payload, retain))

    def wait(self, topic: str, n: int = 1, timeout: float = TIMEOUT_S) -> list[bytes]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = [p for t, p, _ in self.messages if t == topic]
            if len(got) >= n:
                return got
            time.sleep(0.02)
        raise AssertionError(f"{len(got)} of {n} messages on {topic}")

    def close(self) -> None:
        self.sub.close()


def _answer_all(t: MqttTransport, predictions: str, n: int) -> list[int]:
    """The worker's part: answer ``n`` messages with a prediction each; their ids."""
    ids: list[int] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(ids) < n and time.monotonic() < deadline:
        for m in t.get_batch(0.1):
            sample = json.loads(m.payload)
            assert "id" in sample, (m.topic, m.payload)
            t.publish(predictions, {"id": sample["id"], "y_hat": 1.0}, owner=m)
            t.done(m)
            ids.append(sample["id"])
    return ids


@pytest.fixture(scope="module", params=["mosquitto", "embedded"])
def broker(request: pytest.FixtureRequest) -> Iterator[Broker]:
    with start_broker(prefer=request.param) as running:
        yield running


def test_samples_in_predictions_out_and_acknowledged(broker: Broker) -> None:
    samples, predictions, status = _topics()
    seen = Seen(broker.url, [predictions])
    t = MqttTransport(broker.url, f"t-{uuid.uuid4().hex[:6]}", [samples], status)
    t.start(TIMEOUT_S)
    try:
        publish(broker.url, samples, [json.dumps({"id": i, "x": [i]}) for i in range(300)], qos=1)
        assert sorted(_answer_all(t, predictions, 300)) == list(range(300))
        got = [json.loads(p)["id"] for p in seen.wait(predictions, 300)]
        assert sorted(got) == list(range(300))
        assert t.wait_flushed(TIMEOUT_S), "every sample acknowledged once its prediction was confirmed"
    finally:
        t.stop()
        seen.close()


def test_last_will_on_a_lost_connection_only(broker: Broker) -> None:
    _, _, status = _topics()
    seen = Seen(broker.url, [status])
    polite = MqttTransport(broker.url, f"polite-{uuid.uuid4().hex[:6]}", [], status)
    polite.start(TIMEOUT_S)
    polite.stop()
    crashing = MqttTransport(
        broker.url, f"crash-{uuid.uuid4().hex[:6]}", [], status, reconnect_delay=(60, 60)
    )
    crashing.start(TIMEOUT_S)
    try:
        sock = crashing.client.socket()
        assert isinstance(sock, socket.socket)
        sock.shutdown(socket.SHUT_RDWR)  # the TCP connection drops without DISCONNECT
        (will,) = seen.wait(status)
        assert json.loads(will) == {"state": "offline"}
        time.sleep(0.3)
        assert len([m for m in seen.messages if m[0] == status]) == 1, "a clean stop sends no will"
    finally:
        crashing.stop()
        seen.close()


def test_keepalive_pings_keep_an_idle_connection(broker: Broker) -> None:
    if broker.kind == "embedded":
        pytest.skip("amqtt 0.12 hands retained messages of other tests' topics to this session")
    samples, predictions, status = _topics()
    t = MqttTransport(broker.url, f"idle-{uuid.uuid4().hex[:6]}", [samples], status, keepalive=1)
    t.start(TIMEOUT_S)
    try:
        time.sleep(4.0)  # without PINGREQs the broker drops a 1 s keep-alive after 1.5 s
        assert t.connected.is_set() and t.counters.reconnects == 0
        publish(broker.url, samples, [json.dumps({"id": 1, "x": [1]})], qos=1)
        assert _answer_all(t, predictions, 1) == [1]
    finally:
        t.stop()


def test_a_broker_restart_resends_and_resubscribes(tmp_path: Path) -> None:
    from edgedrift_harness.mosquitto import local_mosquitto

    samples, predictions, status = _topics()
    with local_mosquitto(tmp_path / "broker") as mosq:
        t = MqttTransport(
            mosq.url, f"r-{uuid.uuid4().hex[:6]}", [samples], status, reconnect_delay=(0.2, 1.0)
        )
        t.start(TIMEOUT_S)
        try:
            mosq.stop()
            t.publish(predictions, {"id": 0, "y_hat": 1.0})  # made while the broker is down
            mosq.start()
            seen = Seen(mosq.url, [predictions])
            try:
                deadline = time.monotonic() + TIMEOUT_S
                while not seen.messages and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert t.counters.reconnects == 1
                publish(mosq.url, samples, [json.dumps({"id": 5, "x": [5]})], qos=1)
                assert _answer_all(t, predictions, 1) == [5], "subscribed again on the new connection"
                assert sorted(json.loads(p)["id"] for p in seen.wait(predictions, 2)) == [0, 5]
            finally:
                seen.close()
        finally:
            t.stop()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MosquittoProcess, Path]]:
    """Mosquitto with a TLS listener (a throwaway CA) and the shipped password and ACL rules."""
    work = tmp_path_factory.mktemp("tls")
    ca, key, cert = work / "ca.pem", work / "server.key", work / "server.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
         "-keyout", work / "ca.key", "-out", ca],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(
        ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", key,
         "-out", work / "server.csr"],
        check=True, capture_output=True,
    )  # fmt: skip
    (work / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    subprocess.run(
        ["openssl", "x509", "-req", "-in", work / "server.csr", "-CA", ca, "-CAkey", work / "ca.key",
         "-CAcreateserial", "-days", "1", "-extfile", work / "san.ext", "-out", cert],
        check=True, capture_output=True,
    )  # fmt: skip
    users = {"dev-tls": "a-long-device-password-123", "watch": "a-long-watcher-password-456"}
    broker = ShippedMosquitto(
        work / "broker", users, overrides={"certfile": str(cert), "keyfile": str(key), "cafile": str(ca)}
    )
    with broker:
        yield broker, ca


def test_tls_with_credentials(secured: tuple[MosquittoProcess, Path]) -> None:
    broker, ca = secured
    url = f"mqtts://dev-tls:a-long-device-password-123@127.0.0.1:{broker.port}"
    t = MqttTransport(
        url,
        "edgedrift-agent-dev-tls",
        ["edgedrift/dev-tls/samples"],
        "edgedrift/dev-tls/status",
        tls_ca_file=str(ca),
    )
    t.start(TIMEOUT_S)
    try:
        assert t.connected.is_set() and t.refused is None
    finally:
        t.stop()


@pytest.mark.parametrize("password", ["wrong-password-0123456789"])
def test_bad_credentials_are_a_clear_error(secured: tuple[MosquittoProcess, Path], password: str) -> None:
    broker, ca = secured
    url = f"mqtts://dev-tls:{password}@127.0.0.1:{broker.port}"
    t = MqttTransport(url, "edgedrift-agent-dev-tls", [], "edgedrift/dev-tls/status", tls_ca_file=str(ca))
    with pytest.raises(TimeoutError, match=r"refused the connection .*(not authorized|bad user name)"):
        t.start(3.0)
    t.stop()
    assert password not in str(t.refused)
