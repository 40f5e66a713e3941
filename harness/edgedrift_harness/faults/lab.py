"""The fault lab: one broker with the shipped configuration and one cloud trainer, both our own processes,
the agents each scenario starts, and the ledger of what a device's publisher got acknowledged against
what the agent answered, rejected or dropped (see the package docstring).

With ``transport="tls"`` the broker also runs the shipped mutual-TLS listener (deploy/mosquitto/tls.conf,
certificates from deploy/mosquitto/make-certs.sh) and every agent connects there with its own device
certificate (no password: the certificate's name is its broker user); the publisher and the watcher stay
on the password listener, as the replay and an operator do."""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

from edgedrift.data import Stream
from edgedrift.data.generators import sine1plus
from edgedrift_edge.transport.mqtt import broker_address, make_client
from edgedrift_harness.agent import AgentProcess
from edgedrift_harness.cloud import CloudProcess
from edgedrift_harness.mosquitto import ShippedMosquitto, make_certs, save_window_s
from edgedrift_harness.mqtt import DeviceWatcher
from edgedrift_harness.rabbitmq import RabbitMQProcess

__all__ = [
    "BROKERS",
    "PASSWORD",
    "TRANSPORTS",
    "FaultLab",
    "Ledger",
    "Publisher",
    "ledger",
    "samples_topic",
    "single_payloads",
    "stream",
]

OPERATOR_TOKEN = "fault-operator-token-" + "x" * 24
PUBLISHER, WATCHER = "replay", "operator"
PASSWORD = "fault-suite-password-0123456789"
#: How the agents reach the broker: a password over plain TCP, or a device certificate over mutual TLS.
TRANSPORTS = ("tcp", "tls")
#: The brokers a lab runs: the shipped Mosquitto configuration or a RabbitMQ node with the MQTT plugin.
BROKERS = ("mosquitto", "rabbitmq")


@dataclass
class Ledger:
    """One scenario's accounting (see the package docstring) plus what it checked."""

    name: str
    published: int = 0
    predicted: int = 0
    rejected: int = 0
    dropped: int = 0
    checks: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def lost(self) -> int:
        return self.published - self.predicted - self.rejected - self.dropped

    def row(self) -> dict[str, Any]:
        return {**asdict(self), "lost": self.lost}


class Publisher:
    """Publishes samples as the replay user and counts what the broker acknowledged, per sample id."""

    def __init__(self, url: str) -> None:
        self.connected = threading.Event()
        self.client = make_client(url, f"pub-{secrets.token_hex(3)}", clean_session=True)
        self.client.reconnect_delay_set(1, 2)
        self.client.max_inflight_messages_set(1000)
        self.client.max_queued_messages_set(0)
        self.client.on_connect = lambda *_: self.connected.set()
        self.client.on_disconnect = lambda *_: self.connected.clear()
        host, port, _tls = broker_address(url)
        self.client.connect_async(host, port)
        self.client.loop_start()
        if not self.connected.wait(15):
            raise RuntimeError("the publisher could not connect")
        self.samples = 0
        self.per_id: Counter[Any] = Counter()

    def send(self, topic: str, payloads: list[bytes], counts: list[list[Any]], qos: int = 1) -> None:
        """Publish and wait for every acknowledgement; ``counts[i]`` are the sample ids of payload i."""
        if not self.connected.wait(30):
            raise RuntimeError("the publisher lost the broker")
        infos = [self.client.publish(topic, p, qos=qos) for p in payloads]
        for info in infos:
            if qos:
                info.wait_for_publish(120)
        for ids in counts:
            self.samples += len(ids)
            self.per_id.update(ids)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def samples_topic(device: str) -> str:
    return f"edgedrift/{device}/samples"


def single_payloads(stream: Stream, ids: range, label_every: int = 10) -> tuple[list[bytes], list[list[Any]]]:
    """One sample per message as the replay command encodes it (every ``label_every``-th labeled), and
    the sample ids of each message."""
    payloads, counts = [], []
    for i in ids:
        body: dict[str, Any] = {"id": i, "x": stream.X[i].tolist()}
        if i % label_every == 0:
            body["y"] = float(stream.y[i])
        payloads.append(json.dumps(body, separators=(",", ":")).encode())
        counts.append([i])
    return payloads, counts


def ledger(name: str, pub: Publisher, watch: DeviceWatcher, started: float) -> Ledger:
    """The accounting of one device from what was published and what the watcher saw."""
    predictions = watch.predictions()
    fresh: Counter[Any] = Counter(p["id"] for p in predictions if not p.get("repeat"))
    answered = {p["id"] for p in predictions}
    predicted = sum(min(fresh.get(i, 0) or (1 if i in answered else 0), n) for i, n in pub.per_id.items())
    rejected_by_digest: dict[str, int] = {}
    anonymous = 0
    events = watch.events()
    for e in events:
        if e.get("type") == "rejected" and e.get("topic") == "samples":
            digest = e.get("message")
            if digest is None:
                anonymous += int(e.get("count", 0))
            else:
                rejected_by_digest[digest] = int(e.get("count", 0))
    dropped = sum(int(e.get("count", 0)) for e in events if e.get("type") == "dropped")
    return Ledger(
        name, pub.samples, predicted, sum(rejected_by_digest.values()) + anonymous, dropped,
        seconds=round(time.monotonic() - started, 2),
    )  # fmt: skip


def stream(n_concepts: int = 2, length: int = 3000, seed: int = 1, d: int = 2) -> Stream:
    """The scenarios' seeded Sine1+ stream."""
    return sine1plus(d=d, n_concepts=n_concepts, concept_length=length, seed=seed)


class FaultLab:
    """A broker with the shipped configuration (``broker``: one of :data:`BROKERS`) and a cloud trainer,
    both our own processes; a context manager that also kills the agents a failed scenario left running."""

    def __init__(
        self,
        workdir: Path,
        devices: int = 24,
        transport: Literal["tcp", "tls"] = "tcp",
        broker: str = "mosquitto",
    ) -> None:
        if transport not in TRANSPORTS:
            raise ValueError(f"transport {transport!r}: one of {', '.join(TRANSPORTS)}")
        if broker not in BROKERS:
            raise ValueError(f"broker {broker!r}: one of {', '.join(BROKERS)}")
        self.broker_kind = broker
        self.workdir = workdir
        self.transport = transport
        self.devices = [f"fault-{i}" for i in range(devices)]
        self._free = list(self.devices)
        self.secrets: dict[str, str] = {}
        self.agents: list[AgentProcess] = []
        users = {PUBLISHER: PASSWORD, WATCHER: PASSWORD, **{d: PASSWORD for d in self.devices}}
        self.certs: Path | None = None
        if transport == "tls":
            self.certs = make_certs(workdir / "certs", "127.0.0.1", self.devices)
        self.broker: ShippedMosquitto | RabbitMQProcess = (
            ShippedMosquitto(workdir / "broker", users, certs=self.certs)
            if broker == "mosquitto"
            else RabbitMQProcess(workdir / "broker", users, certs=self.certs)
        )
        self.cloud = CloudProcess(
            f"sqlite:///{workdir / 'registry.db'}",
            workdir,
            operator_token=OPERATOR_TOKEN,
            env={"EDGEDRIFT_CLOUD_AUTH_CACHE_SECONDS": "0"},
        )

    def __enter__(self) -> Self:
        self.broker.start()
        self.cloud.start()
        return self

    def __exit__(self, *_: object) -> None:
        for agent in self.agents:
            agent.kill()
        self.cloud.stop()
        self.broker.stop()

    @property
    def save_window_s(self) -> float:
        """Seconds before a broker SIGKILL whose acknowledged messages it may lose: Mosquitto's save window
        (:func:`~edgedrift_harness.mosquitto.save_window_s`), 0 on RabbitMQ (quorum queues fsync before
        the PUBACK)."""
        if isinstance(self.broker, ShippedMosquitto):
            return save_window_s(self.broker.options)
        return 0.0

    def url(self, user: str) -> str:
        """The broker's URL with ``user``'s login."""
        return f"mqtt://{user}:{PASSWORD}@127.0.0.1:{self.broker.port}"

    def agent_broker(self, device: str) -> dict[str, str]:
        """The broker settings of ``device``'s agent: its password login over TCP, or its certificate and
        key (and the fleet's CA, which verifies the broker) over mutual TLS."""
        if self.certs is None:
            return {"broker_url": self.url(device)}
        return {
            "broker_url": f"mqtts://127.0.0.1:{self.broker.tls_port}",
            "tls_ca_file": str(self.certs / "ca.crt"),
            "tls_cert_file": str(self.certs / f"{device}.crt"),
            "tls_key_file": str(self.certs / f"{device}.key"),
        }

    def device(self) -> tuple[str, str]:
        """A device registered at the cloud with a fresh secret (and its broker user)."""
        device = self._free.pop(0)
        secret = secrets.token_urlsafe(24)
        self.cloud.register(device, secret)
        self.secrets[device] = secret
        return device, secret

    def agent(self, device: str, secret: str, **settings: Any) -> AgentProcess:
        """An agent process for ``device`` (not started) with the scenarios' settings plus ``settings``."""
        values = {
            "device_id": device,
            "device_secret": secret,
            **self.agent_broker(device),
            "cloud_url": self.cloud.url,
            "warmup_samples": 300,
            "window_labels": 30,
            "checkpoint_dir": self.workdir / f"state-{device}",
            "checkpoint_every_s": 0.5,
            "heartbeat_every_s": 1.0,
            "retry_base_s": 0.05,
            "retry_max_s": 1.0,
            **settings,
        }
        agent = AgentProcess(self.workdir / f"agent-{device}.log", values)
        self.agents.append(agent)
        return agent

    @contextlib.contextmanager
    def clients(self, device: str) -> Iterator[tuple[Publisher, DeviceWatcher]]:
        """The replay user's publisher and the operator's (persistent) watcher of ``device``."""
        watch = DeviceWatcher(self.url(WATCHER), device, persistent=True)
        pub = Publisher(self.url(PUBLISHER))
        try:
            yield pub, watch
        finally:
            pub.close()
            watch.close()
