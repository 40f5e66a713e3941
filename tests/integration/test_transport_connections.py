"""edgedrift_edge.transport.connection over the connections a fleet meets: the shipped Mosquitto's mutual-TLS
listener (certificates from deploy/mosquitto/make-certs.sh) over MQTT 3.1.1 and 5, WebSockets, an IPv6 broker
with a password file, a half-open connection (a proxy that stops forwarding) and a broker that sends packets
paho cannot decode. Brokers are real processes (Mosquitto) or amqtt where Mosquitto lacks the feature."""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgedrift_edge.settings import AgentSettings
from edgedrift_edge.transport.connection import MqttTransport
from edgedrift_harness.embedded import EmbeddedBroker
from edgedrift_harness.mosquitto import MosquittoProcess, ShippedMosquitto, local_mosquitto, make_certs
from edgedrift_harness.mqtt import Subscriber, publish
from edgedrift_harness.tcp_proxy import TcpProxy

TIMEOUT_S = 15.0
PASSWORDS = {"operator": "an-operator-password-0123456", "replay": "a-replay-password-0123456789"}


def _answer(t: MqttTransport, predictions: str, n: int, timeout: float = TIMEOUT_S) -> list[int]:
    """The worker's part: a prediction per sample, the sample acknowledged after it; the ids answered."""
    ids: list[int] = []
    deadline = time.monotonic() + timeout
    while len(ids) < n and time.monotonic() < deadline:
        for m in t.get_batch(0.1):
            sample = json.loads(m.payload)
            t.publish(predictions, {"id": sample["id"], "y_hat": 1.0}, owner=m)
            t.done(m)
            ids.append(sample["id"])
    return ids


class Seen:
    """Payloads a paho watcher received on one topic."""

    def __init__(self, url: str, topic: str) -> None:
        self.payloads: list[bytes] = []
        self.sub = Subscriber(
            url, [(topic, 1)], on_message=lambda _c, _u, m: self.payloads.append(bytes(m.payload))
        )

    def ids(self, n: int, timeout: float = TIMEOUT_S) -> list[int]:
        deadline = time.monotonic() + timeout
        while len(self.payloads) < n and time.monotonic() < deadline:
            time.sleep(0.02)
        return sorted(json.loads(p)["id"] for p in self.payloads)

    def close(self) -> None:
        self.sub.close()


# --- mutual TLS on the shipped Mosquitto ------------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ShippedMosquitto, Path]]:
    """The shipped broker with its TLS listeners and certificates for dev-1 and dev-2."""
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl")
    work = tmp_path_factory.mktemp("fleet")
    certs = make_certs(work / "certs", "127.0.0.1", ["dev-1", "dev-2"])
    with ShippedMosquitto(work / "broker", PASSWORDS, certs=certs) as broker:
        yield broker, certs


def _device(broker: ShippedMosquitto, certs: Path, device: str, version: str, **kw: object) -> MqttTransport:
    return MqttTransport(
        f"mqtts://127.0.0.1:{broker.tls_port}",
        f"edgedrift-agent-{device}",
        [f"edgedrift/{device}/samples"],
        f"edgedrift/{device}/status",
        tls_ca_file=str(certs / "ca.crt"),
        tls_cert_file=str(certs / f"{device}.crt"),
        tls_key_file=str(certs / f"{device}.key"),
        mqtt_version=version,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_a_device_with_its_certificate_works_end_to_end(
    fleet: tuple[ShippedMosquitto, Path], version: str
) -> None:
    broker, certs = fleet
    operator = f"mqtt://operator:{PASSWORDS['operator']}@127.0.0.1:{broker.port}"
    seen = Seen(operator, "edgedrift/dev-1/predictions")
    t = _device(broker, certs, "dev-1", version)
    t.start(TIMEOUT_S)
    try:
        replay = f"mqtt://replay:{PASSWORDS['replay']}@127.0.0.1:{broker.port}"
        publish(
            replay, "edgedrift/dev-1/samples", [json.dumps({"id": i, "x": [i]}) for i in range(50)], qos=1
        )
        assert sorted(_answer(t, "edgedrift/dev-1/predictions", 50)) == list(range(50))
        assert seen.ids(50) == list(range(50)), "the ACL of the certificate's name let the predictions out"
        assert t.wait_flushed(TIMEOUT_S)
    finally:
        t.stop()
        seen.close()


def test_no_certificate_or_another_cas_is_refused(
    fleet: tuple[ShippedMosquitto, Path], tmp_path: Path
) -> None:
    broker, certs = fleet
    bare = MqttTransport(
        f"mqtts://127.0.0.1:{broker.tls_port}",
        "edgedrift-agent-dev-1",
        [],
        "edgedrift/dev-1/status",
        tls_ca_file=str(certs / "ca.crt"),
    )
    with pytest.raises(TimeoutError):
        bare.start(3.0)
    bare.stop()
    assert not bare.connected.is_set() and bare.failure is None
    other = make_certs(tmp_path / "other-ca", "127.0.0.1", ["dev-1"])
    forged = MqttTransport(
        f"mqtts://127.0.0.1:{broker.tls_port}",
        "edgedrift-agent-dev-1",
        [],
        "edgedrift/dev-1/status",
        tls_ca_file=str(certs / "ca.crt"),
        tls_cert_file=str(other / "dev-1.crt"),
        tls_key_file=str(other / "dev-1.key"),
    )
    with pytest.raises(TimeoutError):
        forged.start(3.0)
    forged.stop()
    assert not forged.connected.is_set()


def test_another_devices_certificate_reads_nothing_of_this_device(
    fleet: tuple[ShippedMosquitto, Path],
) -> None:
    broker, certs = fleet
    t = MqttTransport(
        f"mqtts://127.0.0.1:{broker.tls_port}",
        "edgedrift-agent-dev-2",
        ["edgedrift/dev-1/samples"],
        "edgedrift/dev-2/status",
        tls_ca_file=str(certs / "ca.crt"),
        tls_cert_file=str(certs / "dev-2.crt"),
        tls_key_file=str(certs / "dev-2.key"),
        mqtt_version="5",
    )
    t.start(TIMEOUT_S)
    try:
        replay = f"mqtt://replay:{PASSWORDS['replay']}@127.0.0.1:{broker.port}"
        publish(replay, "edgedrift/dev-1/samples", [json.dumps({"id": 1, "x": [1]})], qos=1)
        assert t.get_batch(1.5) == []
    finally:
        t.stop()


def test_the_mutual_tls_websocket_listener(fleet: tuple[ShippedMosquitto, Path]) -> None:
    broker, certs = fleet
    if broker.wss_port is None:
        pytest.skip("this Mosquitto is built without WebSockets (the eclipse-mosquitto image has them)")
    t = MqttTransport(
        f"wss://127.0.0.1:{broker.wss_port}/mqtt",
        "edgedrift-agent-dev-1",
        ["edgedrift/dev-1/samples"],
        "edgedrift/dev-1/status",
        tls_ca_file=str(certs / "ca.crt"),
        tls_cert_file=str(certs / "dev-1.crt"),
        tls_key_file=str(certs / "dev-1.key"),
    )
    t.start(TIMEOUT_S)
    t.stop()


# --- WebSockets -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["3.1.1"])
def test_websockets(version: str) -> None:
    """amqtt's WebSocket listener (the Debian Mosquitto of the test machines has none)."""
    broker = EmbeddedBroker(websockets=True)
    broker.start()
    try:
        base = f"edgedrift/ws-{uuid.uuid4().hex[:6]}"
        t = MqttTransport(
            f"ws://127.0.0.1:{broker.port}/mqtt",
            f"ws-{uuid.uuid4().hex[:6]}",
            [f"{base}/samples"],
            f"{base}/status",
        )
        t.start(TIMEOUT_S)
        try:
            for i in range(20):
                t.publish(f"{base}/samples", {"id": i, "x": [i]})
            assert sorted(_answer(t, f"{base}/predictions", 20)) == list(range(20))
            assert t.wait_flushed(TIMEOUT_S)
        finally:
            t.stop()
    finally:
        broker.stop()


# --- IPv6 with a password file -----------------------------------------------------


def test_an_ipv6_broker_with_a_password_file(tmp_path: Path) -> None:
    password = "a/pass@word:with#specials-0123"
    passwd = tmp_path / "passwd"
    subprocess.run(
        ["mosquitto_passwd", "-c", "-b", str(passwd), "v6", password], check=True, capture_output=True
    )
    port6 = _free_port6()

    def config(port: int) -> str:
        return (
            f"listener {port} 127.0.0.1\nlistener {port6} ::1\nallow_anonymous false\n"
            f"password_file {passwd}\nuser root\n"
        )

    (tmp_path / "pw").write_text(password + "\n")
    settings = AgentSettings.load(
        environ={
            "EDGEDRIFT_EDGE_DEVICE_ID": "v6",
            "EDGEDRIFT_EDGE_BROKER_URL": f"mqtt://v6@[::1]:{port6}",
            "EDGEDRIFT_EDGE_BROKER_PASSWORD_FILE": str(tmp_path / "pw"),
        }
    )
    assert f"@[::1]:{port6}" in settings.effective_broker_url
    with MosquittoProcess(tmp_path / "broker", config):
        t = MqttTransport(
            settings.effective_broker_url, "v6", ["edgedrift/v6/samples"], "edgedrift/v6/status"
        )
        t.start(TIMEOUT_S)
        try:
            t.publish("edgedrift/v6/samples", {"id": 1})
            assert [m.topic for m in t.get_batch(TIMEOUT_S)] == ["edgedrift/v6/samples"]
        finally:
            t.stop()


def _free_port6() -> int:
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        return int(s.getsockname()[1])


# --- liveness ---------------------------------------------------------------------------------------------


def test_a_half_open_connection_is_noticed_within_one_and_a_half_keepalives(tmp_path: Path) -> None:
    """The proxy stops forwarding (a NAT that dropped the flow) while the agent keeps publishing its status;
    the samples of that time reach the agent over the next connection, none lost."""
    keepalive = 4
    base = f"edgedrift/ho-{uuid.uuid4().hex[:6]}"
    with local_mosquitto(tmp_path / "broker") as mosq, TcpProxy("127.0.0.1", mosq.port) as proxy:
        t = MqttTransport(
            f"mqtt://127.0.0.1:{proxy.port}",
            f"ho-{uuid.uuid4().hex[:6]}",
            [f"{base}/samples"],
            f"{base}/status",
            keepalive=keepalive,
            reconnect_delay=(0.2, 1.0),
        )
        t.start(TIMEOUT_S)
        try:
            publish(mosq.url, f"{base}/samples", [json.dumps({"id": i}) for i in range(10)], qos=1)
            answered = _answer(t, f"{base}/predictions", 10)
            proxy.hang()
            hung = time.monotonic()
            publish(mosq.url, f"{base}/samples", [json.dumps({"id": i}) for i in range(10, 20)], qos=1)
            while t.connected.is_set() and time.monotonic() - hung < 3 * keepalive:
                t.publish_raw(f"{base}/status", b'{"state": "online"}', qos=1)  # busy publishing
                time.sleep(0.2)
            noticed = time.monotonic() - hung
            assert noticed <= 1.5 * keepalive, f"noticed after {noticed:.1f} s"
            proxy.resume()
            deadline = time.monotonic() + 30.0
            while len(set(answered)) < 20 and time.monotonic() < deadline:  # a redelivery may come twice
                answered += _answer(t, f"{base}/predictions", 20 - len(set(answered)), timeout=1.0)
            assert sorted(set(answered)) == list(range(20)), f"nothing lost across the reconnect: {answered}"
            assert t.counters.reconnects >= 1 and t.failure is None
        finally:
            t.stop()


class ChattyBroker:
    """A TCP server that answers CONNECT with CONNACK, stays quiet for ``quiet_s`` (a PINGREQ comes) and then
    sends a QoS-0 PUBLISH every 50 ms but never a PINGRESP: a broker whose answer to the ping waits behind
    the traffic (the fairness bench's restart). It reads what the client sends."""

    def __init__(self, quiet_s: float) -> None:
        self.quiet_s = quiet_s
        self.connections = 0
        self.pings = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._closed = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        publish = b"\x30\x0d\x00\x09chatter/x{}"
        with conn:
            try:
                conn.recv(65536)  # CONNECT
                conn.sendall(b"\x20\x02\x00\x00")
                conn.settimeout(0.05)
                start = time.monotonic()
                while not self._closed.is_set():
                    with contextlib.suppress(TimeoutError):
                        data = conn.recv(65536)
                        if not data:
                            return
                        self.pings += data.count(b"\xc0\x00")
                    if time.monotonic() - start >= self.quiet_s:
                        conn.sendall(publish)
            except OSError:
                return

    def close(self) -> None:
        self._closed.set()
        self._server.close()


def test_a_pingresp_late_behind_the_broker_s_traffic_does_not_end_the_connection() -> None:
    """Bytes keep coming from the broker while the agent publishes; the answer to its ping does not come
    within the keep-alive (it waits behind the traffic). paho gave such a connection up (reason 141) 47-57 s
    after the fairness bench's gateway returned; the broker is alive, the connection holds."""
    keepalive = 2
    broker = ChattyBroker(quiet_s=1.5 * keepalive / 2)
    t = MqttTransport(f"mqtt://127.0.0.1:{broker.port}", "chatty", [], "s", keepalive=keepalive)
    try:
        t.start(TIMEOUT_S)
        start = time.monotonic()
        while time.monotonic() - start < 3 * keepalive:
            for _ in range(50):  # the agent is busy too: bursts of predictions, written together
                t.publish_raw("edgedrift/d/predictions", b"{}", qos=0)
            time.sleep(0.05)
        assert broker.pings >= 1, "a ping went out while the broker was quiet"
        assert t.connected.is_set() and t.counters.reconnects == 0 and broker.connections == 1
    finally:
        t.stop()
        broker.close()


class FakeBroker:
    """A TCP server that answers CONNECT with CONNACK and then sends ``after``; counts connections."""

    def __init__(self, after: bytes) -> None:
        self.after = after
        self.connections: list[float] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.connections.append(time.monotonic())
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)  # CONNECT
                conn.sendall(b"\x20\x02\x00\x00" + self.after)
                while conn.recv(65536):
                    pass
            except OSError:
                return

    def close(self) -> None:
        self._closed = True
        self._server.close()


@pytest.mark.parametrize(
    "after",
    [b"\x40\x00", b"\x90\x00", b"\x30\x01\x00", b"\x30\xff\xff\xff\xff\xff", b"\x00\x00"],
    ids=["puback-without-id", "suback-without-id", "truncated-publish", "five-byte-length", "reserved-type"],
)
def test_malformed_packets_lead_to_reconnects_with_backoff(after: bytes) -> None:
    fake = FakeBroker(after)
    t = MqttTransport(f"mqtt://127.0.0.1:{fake.port}", "m", [], "s", reconnect_delay=(0.25, 2.0))
    try:
        t.start(TIMEOUT_S)  # no subscription to wait for: started at the CONNACK
        time.sleep(5.0)
        assert t.failure is None and t.io_running, "never an exit"
        times = fake.connections
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert 2 <= len(times) <= 6, f"{len(times)} connections in 5 s: a tight loop"
        assert all(later >= earlier * 0.9 for earlier, later in itertools.pairwise(gaps)), gaps
        assert gaps[-1] >= 0.9, f"the backoff grew: {gaps}"
    finally:
        t.stop()
        fake.close()
