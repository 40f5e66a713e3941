"""Fault scenarios of an unattended device, run on real processes: the shipped Mosquitto configuration,
the cloud trainer under uvicorn, edge agents as ``edgedrift-edge run`` subprocesses (in process only
where a bug has to be injected into the worker).

Each scenario publishes samples, provokes one fault, and returns the **ledger**: every sample the
publisher got acknowledged is either predicted, counted as rejected, or counted as dropped, so
``lost = published − predicted − rejected − dropped`` must be 0. Predictions are counted per sample id
(a sample processed twice after a crash counts once, a reused id with new content counts twice; answers
to exact redeliveries are marked ``repeat`` and not counted). Rejections are counted from the agents'
``rejected`` events, one per message, deduplicated by the message digest they carry (a message
processed again after a crash is not counted twice). Drops come from the ``dropped`` events.

``bench/faults.py`` runs every scenario once and writes the table; ``tests/integration/test_faults.py``
runs each one and asserts its ledger and its specific checks.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from edgedrift.data import Stream
from edgedrift.data.generators import sine1plus
from edgedrift_harness.cloud_process import CloudProcess, free_port
from edgedrift_harness.shipped_broker import ShippedMosquitto

OPERATOR_TOKEN = "fault-operator-token-" + "x" * 24
PUBLISHER, WATCHER = "replay", "operator"
PASSWORD = "fault-suite-password-0123456789"


@dataclass
class Ledger:
    """One scenario's accounting (see the module docstring) plus what it checked."""

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


# --- MQTT clients -------------------------------------------------------------------------------------------


def _client(user: str, client_id: str, clean: bool = True) -> mqtt.Client:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean)
    client.username_pw_set(user, PASSWORD)
    client.reconnect_delay_set(1, 2)
    return client


def _connect(client: mqtt.Client, url: str) -> None:
    client.connect_async("127.0.0.1", int(url.rsplit(":", 1)[1]))
    client.loop_start()


class Watcher:
    """The operator's view of one device: predictions, events and status (a persistent session, so
    nothing published while it reconnects is missed)."""

    def __init__(self, url: str, device: str) -> None:
        self.device = device
        self.lock = threading.Lock()
        self.predictions: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []
        self.ready = threading.Event()
        self.client = _client(WATCHER, f"watch-{device}", clean=False)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *_: self.ready.set()
        self.client.on_message = self._on_message
        _connect(self.client, url)
        if not self.ready.wait(15):
            raise RuntimeError("the watcher could not subscribe")

    def _on_connect(self, client: mqtt.Client, *_: Any) -> None:
        base = f"edgedrift/{self.device}"
        client.subscribe([(f"{base}/predictions", 1), (f"{base}/events", 1), (f"{base}/status", 1)])

    def _on_message(self, _c: mqtt.Client, _u: Any, msg: mqtt.MQTTMessage) -> None:
        kind = msg.topic.rsplit("/", 1)[1]
        value = json.loads(msg.payload) if msg.payload else {}
        with self.lock:
            if kind == "predictions":
                self.predictions.extend(value.get("predictions", [value]))
            elif kind == "events":
                self.events.append(value)
            else:
                self.statuses.append(value)

    def of(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e.get("type") == kind]

    def answered(self) -> set[Any]:
        with self.lock:
            return {p["id"] for p in self.predictions}

    def wait(self, until: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if until():
                return
            time.sleep(0.05)
        raise TimeoutError(f"{self.device}: {what} not seen within {timeout:.0f} s")

    def wait_ids(self, ids: set[Any], timeout: float = 60.0) -> None:
        self.wait(lambda: ids <= self.answered(), timeout, f"predictions of {len(ids)} ids")

    def wait_quiet(self, ids: set[Any], idle_s: float, timeout: float) -> None:
        """Until every id is answered, or no new prediction came for ``idle_s`` (some may be lost)."""
        deadline = time.monotonic() + timeout
        seen, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            answered = self.answered()
            if ids <= answered:
                return
            if len(answered) != seen:
                seen, since = len(answered), time.monotonic()
            elif time.monotonic() - since >= idle_s:
                return
            time.sleep(0.05)

    def wait_event(self, kind: str, timeout: float = 30.0) -> dict[str, Any]:
        self.wait(lambda: bool(self.of(kind)), timeout, f"a {kind!r} event")
        return self.of(kind)[0]

    def wait_status(self, state: str, timeout: float = 30.0) -> dict[str, Any]:
        def seen() -> bool:
            with self.lock:
                return any(s.get("state") == state for s in self.statuses)

        self.wait(seen, timeout, f"status {state!r}")
        with self.lock:
            return next(s for s in self.statuses if s.get("state") == state)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


class Publisher:
    """Publishes samples as the replay user and counts what the broker acknowledged."""

    def __init__(self, url: str) -> None:
        self.connected = threading.Event()
        self.client = _client(PUBLISHER, f"pub-{secrets.token_hex(3)}")
        self.client.max_inflight_messages_set(1000)
        self.client.max_queued_messages_set(0)
        self.client.on_connect = lambda *_: self.connected.set()
        self.client.on_disconnect = lambda *_: self.connected.clear()
        _connect(self.client, url)
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
    payloads, counts = [], []
    for i in ids:
        body: dict[str, Any] = {"id": i, "x": stream.X[i].tolist()}
        if i % label_every == 0:
            body["y"] = float(stream.y[i])
        payloads.append(json.dumps(body, separators=(",", ":")).encode())
        counts.append([i])
    return payloads, counts


def ledger(name: str, pub: Publisher, watch: Watcher, started: float) -> Ledger:
    """The accounting of one device from what was published and what the watcher saw."""
    with watch.lock:
        fresh: Counter[Any] = Counter(p["id"] for p in watch.predictions if not p.get("repeat"))
        answered = {p["id"] for p in watch.predictions}
        events = list(watch.events)
    predicted = sum(min(fresh.get(i, 0) or (1 if i in answered else 0), n) for i, n in pub.per_id.items())
    rejected_by_digest: dict[str, int] = {}
    anonymous = 0
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


# --- processes ------------------------------------------------------------------------------------------


class AgentProcess:
    """``python -m edgedrift_edge.cli run`` for one device, configured through the environment."""

    def __init__(self, lab: FaultLab, device: str, secret: str, **settings: Any) -> None:
        self.lab = lab
        self.device = device
        self.log = lab.workdir / f"agent-{device}.log"
        values = {
            "device_id": device,
            "device_secret": secret,
            "broker_url": f"mqtt://{device}:{PASSWORD}@127.0.0.1:{lab.broker.port}",
            "cloud_url": lab.cloud.url,
            "warmup_samples": 300,
            "window_labels": 30,
            "checkpoint_dir": lab.workdir / f"state-{device}",
            "checkpoint_every_s": 0.5,
            "heartbeat_every_s": 1.0,
            "retry_base_s": 0.05,
            "retry_max_s": 1.0,
            **settings,
        }
        self.env = {
            **os.environ,
            **{f"EDGEDRIFT_EDGE_{k.upper()}": str(v) for k, v in values.items() if v is not None},
        }
        self.proc: subprocess.Popen[bytes] | None = None
        lab.agents.append(self)

    def start(self, timeout: float = 30.0, wrapper: list[str] | None = None) -> AgentProcess:
        offset = self.log.stat().st_size if self.log.exists() else 0
        cmd = [*(wrapper or [sys.executable]), "-m", "edgedrift_edge.cli", "run"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited with {self.proc.returncode}:\n{self.tail()}")
            if b"ready" in self.log.read_bytes()[offset:]:
                return self
            time.sleep(0.05)
        raise RuntimeError(f"agent not ready within {timeout} s:\n{self.tail()}")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and the exit code (SIGKILL after ``timeout``)."""
        proc = self.proc
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        return int(proc.returncode)

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


class FaultLab:
    """A broker with the shipped configuration and a cloud trainer, both our own processes."""

    def __init__(self, workdir: Path, devices: int = 24) -> None:
        self.workdir = workdir
        self.devices = [f"fault-{i}" for i in range(devices)]
        self._free = list(self.devices)
        self.secrets: dict[str, str] = {}
        self.agents: list[AgentProcess] = []
        users = {PUBLISHER: PASSWORD, WATCHER: PASSWORD, **{d: PASSWORD for d in self.devices}}
        self.broker = ShippedMosquitto(workdir / "broker", users)
        self.cloud = CloudProcess(
            f"sqlite:///{workdir / 'registry.db'}",
            workdir,
            operator_token=OPERATOR_TOKEN,
            env={"EDGEDRIFT_CLOUD_AUTH_CACHE_SECONDS": "0"},
        )

    def __enter__(self) -> FaultLab:
        self.broker.start()
        self.cloud.start()
        return self

    def __exit__(self, *_: object) -> None:
        for agent in self.agents:  # a scenario that failed half-way leaves its agent running
            if agent.proc is not None and agent.proc.poll() is None:
                agent.kill()
        self.cloud.stop()
        self.broker.stop()

    def device(self) -> tuple[str, str]:
        """A device registered at the cloud with a fresh secret (and its broker user)."""
        device = self._free.pop(0)
        secret = secrets.token_urlsafe(24)
        self.cloud.register(device, secret)
        self.secrets[device] = secret
        return device, secret

    @contextlib.contextmanager
    def clients(self, device: str) -> Iterator[tuple[Publisher, Watcher]]:
        watch = Watcher(self.broker.url, device)
        pub = Publisher(self.broker.url)
        try:
            yield pub, watch
        finally:
            pub.close()
            watch.close()


def stream(n_concepts: int = 2, length: int = 3000, seed: int = 1, d: int = 2) -> Stream:
    return sine1plus(d=d, n_concepts=n_concepts, concept_length=length, seed=seed)


# --- scenarios ------------------------------------------------------------------------------------------


def agent_sigkill(lab: FaultLab) -> Ledger:
    """SIGKILL while thousands of QoS-1 samples are queued; the restarted agent answers the rest."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 6000)
    agent = AgentProcess(lab, device, secret).start()
    with lab.clients(device) as (pub, watch):
        payloads, counts = single_payloads(s, range(6000))
        sender = threading.Thread(target=pub.send, args=(samples_topic(device), payloads, counts))
        sender.start()
        watch.wait(lambda: len(watch.answered()) >= 1500, 60, "1500 predictions")
        agent.kill()
        sender.join(120)
        answered_at_kill = len(watch.answered())
        agent.start()
        watch.wait_ids(set(range(6000)), 120)
        resumed = watch.wait_event("resumed")
        agent.stop()
        result = ledger("agent_sigkill", pub, watch, t0)
    result.checks = {"answered_at_kill": answered_at_kill, "resumed_samples": resumed.get("samples")}
    return result


def queue_overflow(lab: FaultLab) -> Ledger:
    """An inbox of 8 messages against a burst of 4,000 QoS-1 samples: back-pressure, no drop."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 4000)
    agent = AgentProcess(lab, device, secret, queue_size=8).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(4000)))
        watch.wait_ids(set(range(4000)), 120)
        time.sleep(1.5)  # one heartbeat: the status carries the counters
        code = agent.stop()
        status = watch.statuses[-1] if watch.statuses else {}
        result = ledger("queue_overflow", pub, watch, t0)
    counters = status.get("counters", {})
    result.checks = {
        "exit_code": code,
        "dropped": counters.get("dropped"),
        "backpressure": counters.get("backpressure_waits"),
    }
    return result


def qos0_overflow(lab: FaultLab) -> Ledger:
    """QoS 0 samples (never delivered again) beyond a small inbox: every drop is counted."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 4000)
    agent = AgentProcess(lab, device, secret, queue_size=4, qos=0).start()
    with lab.clients(device) as (pub, watch):
        payloads, counts = single_payloads(s, range(4000))
        pub.send(samples_topic(device), payloads, counts, qos=0)
        time.sleep(3.0)
        agent.stop()
        time.sleep(0.5)
        result = ledger("qos0_overflow", pub, watch, t0)
    result.checks = {"dropped": result.dropped}
    return result


def _bad_then_good(lab: FaultLab, name: str, bad: bytes, bad_count: int, **settings: Any) -> Ledger:
    """500 good samples, one bad message, 1,000 good samples: one summary event for the bad message,
    the good ones after it answered promptly."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 1500)
    agent = AgentProcess(lab, device, secret, n_features=2, **settings).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(500)))
        watch.wait_ids(set(range(500)))
        sent = time.monotonic()
        pub.send(samples_topic(device), [bad], [[f"bad-{i}" for i in range(bad_count)]])
        pub.send(samples_topic(device), *single_payloads(s, range(500, 1500)))
        watch.wait_ids(set(range(1500)), 120)
        answered_s = time.monotonic() - sent
        agent.stop()
        rejected_events = [e for e in watch.of("rejected") if e.get("topic") == "samples"]
        result = ledger(name, pub, watch, t0)
    result.checks = {
        "rejected_events": len(rejected_events),
        "reported_count": rejected_events[0]["count"] if rejected_events else None,
        "next_1000_answered_s": round(answered_s, 2),
    }
    return result


def bad_items_100k(lab: FaultLab) -> Ledger:
    """One message with 100,000 wrong items (under a raised cap, so each is checked): one event."""
    items = [{"id": i, "x": [1.0, 2.0, 3.0]} for i in range(100_000)]
    bad = json.dumps({"samples": items}).encode()
    return _bad_then_good(lab, "bad_items_100k", bad, len(items), max_items_per_message=200_000)


def oversized_batch_400k(lab: FaultLab) -> Ledger:
    """One 11 MB batch of 400,000 valid samples: refused whole by the item cap, with its count."""
    X = (np.random.default_rng(0).random((400_000, 2)) * 10).round(1).tolist()
    body = json.dumps(
        {"samples": [{"id": 10_000 + i, "x": x} for i, x in enumerate(X)]}, separators=(",", ":")
    )
    return _bad_then_good(lab, "oversized_batch_400k", body.encode(), 400_000)


def outlier(lab: FaultLab, value: float = 1e6) -> Ledger:
    """A labeled sample with ``value`` in every feature (default druid agent): predicted, reported, not
    learned; the stream goes on being predicted (accuracy is compared offline by the tests)."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 3000)
    agent = AgentProcess(lab, device, secret).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(1000)))
        watch.wait_ids(set(range(1000)))
        glitch = json.dumps({"id": "glitch", "x": [value, value], "y": 1.0}).encode()
        pub.send(samples_topic(device), [glitch], [["glitch"]])
        pub.send(samples_topic(device), *single_payloads(s, range(1000, 3000)))
        watch.wait_ids({*range(3000), "glitch"}, 120)
        event = watch.wait_event("outlier")
        agent.stop()
        glitch_pred = next(p for p in watch.predictions if p["id"] == "glitch")
        result = ledger(f"outlier_{value:g}", pub, watch, t0)
    result.checks = {"outlier_event": event.get("count"), "flagged": glitch_pred.get("outlier")}
    return result


def wrong_width_first(lab: FaultLab) -> Ledger:
    """The first sample after start has one feature, the rest two; a restart in the middle."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 2000)
    agent = AgentProcess(lab, device, secret).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), [b'{"id": "first", "x": [0.0]}'], [["first"]])
        pub.send(samples_topic(device), *single_payloads(s, range(1000)))
        watch.wait_ids(set(range(1000)))
        agent.stop()
        agent.start()
        pub.send(samples_topic(device), *single_payloads(s, range(1000, 2000)))
        watch.wait_ids(set(range(2000)))
        agent.stop()
        served = [p for p in watch.predictions if isinstance(p["id"], int) and p["id"] >= 1000]
        result = ledger("wrong_width_first", pub, watch, t0)
    result.checks = {
        "width": next((e["n_features"] for e in watch.of("width_locked")), None),
        "served_after_restart": sum(1 for p in served if p["y_hat"] is not None),
    }
    return result


def id_reused(lab: FaultLab) -> Ledger:
    """A sensor reboots and counts from 0 again with new readings: processed as new samples."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 2200)
    agent = AgentProcess(lab, device, secret).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(2000)))
        watch.wait_ids(set(range(2000)))
        again = [json.dumps({"id": i, "x": s.X[2000 + i].tolist()}).encode() for i in range(100)]
        pub.send(samples_topic(device), again, [[i] for i in range(100)])
        watch.wait(lambda: len(watch.of("id_reused")) >= 100, 30, "100 id_reused events")
        agent.stop()
        result = ledger("id_reused", pub, watch, t0)
    result.checks = {"id_reused_events": len(watch.of("id_reused"))}
    return result


def checkpoint_unwritable(lab: FaultLab) -> Ledger:
    """The checkpoint directory is not writable (a file where the directory should be): reported and
    retried while predictions go on; fixing it lets the next attempt succeed."""
    t0 = time.monotonic()
    device, secret = lab.device()
    blocker = lab.workdir / f"blocked-{device}"
    blocker.write_text("not a directory")
    s = stream(1, 2000)
    agent = AgentProcess(lab, device, secret, checkpoint_dir=blocker / "state").start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(1000)))
        watch.wait_ids(set(range(1000)))
        failed = watch.wait_event("checkpoint_failed")
        blocker.unlink()
        blocker.mkdir()
        recovered = watch.wait_event("checkpoint_recovered", timeout=30)
        pub.send(samples_topic(device), *single_payloads(s, range(1000, 2000)))
        watch.wait_ids(set(range(2000)))
        states = {st.get("state") for st in watch.statuses}
        code = agent.stop()
        result = ledger("checkpoint_unwritable", pub, watch, t0)
    result.checks = {
        "failed_reason": failed.get("reason", "")[:80],
        "recovered_after": recovered.get("failures"),
        "status_states": sorted(states),
        "exit_code": code,
    }
    return result


def disk_full(lab: FaultLab) -> Ledger:
    """Writes beyond 1 KiB fail (RLIMIT_FSIZE, as on a full disk): reported and retried, predictions go on."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 1500)
    wrapper = [
        sys.executable,
        "-c",
        "import resource, runpy, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024)); "
        "sys.argv = ['edgedrift-edge', 'run']; runpy.run_module('edgedrift_edge.cli', run_name='__main__')",
    ]
    agent = AgentProcess(lab, device, secret)
    agent.proc = None
    offset = agent.log.stat().st_size if agent.log.exists() else 0
    with agent.log.open("ab") as out:
        agent.proc = subprocess.Popen(wrapper, env=agent.env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while b"ready" not in agent.log.read_bytes()[offset:]:
        if agent.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"agent did not start:\n{agent.tail()}")
        time.sleep(0.05)
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(1500)))
        watch.wait_ids(set(range(1500)))
        failed = watch.wait_event("checkpoint_failed")
        code = agent.stop()
        result = ledger("disk_full", pub, watch, t0)
    result.checks = {"failed_reason": failed.get("reason", "")[:80], "exit_code": code}
    return result


def cloud_unauthorized(lab: FaultLab) -> Ledger:
    """The device's secret is rotated at the cloud after its first model: status ``unauthorized``, one
    event, slow retries, and every sample still predicted with what the device has."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(3, 1500)
    agent = AgentProcess(
        lab, device, secret, strategy="periodic", strategy_param=20, unauthorized_retry_s=5
    ).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(600), label_every=2))
        watch.wait_ids(set(range(600)))
        watch.wait_event("model_installed")
        lab.cloud.register(device, secrets.token_urlsafe(24))  # rotated: the agent's secret is now wrong
        pub.send(samples_topic(device), *single_payloads(s, range(600, 4500), label_every=2))
        watch.wait_ids(set(range(4500)), 120)
        status = watch.wait_status("unauthorized")
        time.sleep(3.0)
        failures = len(watch.of("recompute_failed"))
        agent.stop()
        result = ledger("cloud_unauthorized", pub, watch, t0)
    result.checks = {
        "unauthorized_events": len(watch.of("unauthorized")),
        "recompute_failed_events": failures,
        "status_unauthorized": status.get("unauthorized"),
    }
    return result


class TricklingServer:
    """Accepts HTTP connections and answers one byte every ``every`` seconds, forever."""

    def __init__(self, every: float = 5.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.every = every
        self.stop_flag = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", self.port))
        self.sock.settimeout(0.2)
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop_flag.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100_000:
                if self.stop_flag.wait(self.every):
                    return
                conn.sendall(bytes([byte]))

    def close(self) -> None:
        self.stop_flag.set()
        self.sock.close()


def cloud_trickle(lab: FaultLab) -> Ledger:
    """A cloud that trickles one byte every 5 s: every call hits its deadline; nothing hangs."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 1500)
    slow = TricklingServer()
    agent = AgentProcess(lab, device, secret, cloud_url=slow.url, http_deadline_s=2.0, http_timeout_s=30.0)
    agent.start()
    try:
        with lab.clients(device) as (pub, watch):
            pub.send(samples_topic(device), *single_payloads(s, range(1500)))
            watch.wait_ids(set(range(1500)), 60)
            failed = watch.wait_event("recompute_failed", timeout=30)
            code = agent.stop(timeout=20)
            result = ledger("cloud_trickle", pub, watch, t0)
    finally:
        slow.close()
    result.checks = {"failed_reason": failed.get("reason", "")[:80], "exit_code": code}
    return result


def cloud_down(lab: FaultLab) -> Ledger:
    """The cloud stops mid-stream and comes back: predictions never stop, the recompute completes."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(3, 1500)
    agent = AgentProcess(lab, device, secret, strategy="periodic", strategy_param=20).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(800), label_every=2))
        watch.wait_ids(set(range(800)))
        lab.cloud.stop()
        pub.send(samples_topic(device), *single_payloads(s, range(800, 3000), label_every=2))
        watch.wait_ids(set(range(3000)), 120)
        watch.wait_event("recompute_failed")
        lab.cloud.start()
        finished_before = len(watch.of("recompute_finished"))
        watch.wait(
            lambda: len(watch.of("recompute_finished")) > finished_before, 60, "a recompute after the outage"
        )
        agent.stop()
        result = ledger("cloud_down", pub, watch, t0)
    result.checks = {"recompute_finished": len(watch.of("recompute_finished"))}
    return result


class _Sentinel:
    """Unpickling this creates a file: proof that a checkpoint ran code."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path(self.path).touch, ())


def crafted_checkpoint(lab: FaultLab) -> Ledger:
    """A checkpoint file crafted to run code when unpickled: refused, quarantined, reported."""
    t0 = time.monotonic()
    device, secret = lab.device()
    state_dir = lab.workdir / f"state-{device}"
    state_dir.mkdir(parents=True, exist_ok=True)
    sentinel = lab.workdir / f"pwned-{device}"
    (state_dir / f"{device}.ckpt").write_bytes(pickle.dumps(_Sentinel(str(sentinel))))
    s = stream(1, 1000)
    with lab.clients(device) as (pub, watch):
        agent = AgentProcess(lab, device, secret).start()
        event = watch.wait_event("checkpoint_corrupt")
        pub.send(samples_topic(device), *single_payloads(s, range(1000)))
        watch.wait_ids(set(range(1000)))
        agent.stop()
        result = ledger("crafted_checkpoint", pub, watch, t0)
    quarantined = sorted(p.name for p in state_dir.glob(f"{device}.ckpt.corrupt-*"))
    result.checks = {
        "code_ran": sentinel.exists(),
        "quarantined": quarantined[:1],
        "event": event.get("reason", "")[:60],
    }
    return result


def broker_restart(lab: FaultLab) -> Ledger:
    """The broker is restarted (SIGTERM, it saves) in the middle of a QoS-1 stream."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 3000)
    agent = AgentProcess(lab, device, secret).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(1500)))
        watch.wait_ids(set(range(1500)))
        lab.broker.stop()
        time.sleep(0.5)
        lab.broker.start()
        pub.send(samples_topic(device), *single_payloads(s, range(1500, 3000)))
        watch.wait_ids(set(range(3000)), 120)
        agent.stop()
        result = ledger("broker_restart", pub, watch, t0)
    return result


def broker_kill9_offline_agent(lab: FaultLab) -> Ledger:
    """The agent is offline (its persistent session holds the queue) and the broker is SIGKILLed a
    second after the last publish: the shipped persistence keeps the acknowledged samples."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 2000)
    agent = AgentProcess(lab, device, secret).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(500)))
        watch.wait_ids(set(range(500)))
        agent.stop()
        pub.send(samples_topic(device), *single_payloads(s, range(500, 2000)))
        time.sleep(1.0)
        lab.broker.kill()
        lab.broker.start()
        agent.start()
        watch.wait_quiet(set(range(2000)), idle_s=3.0, timeout=60)
        agent.stop()
        result = ledger("broker_kill9_offline_agent", pub, watch, t0)
    # The one fault the ledger cannot close: Mosquitto 2.0 saves its store after every autosave_interval
    # changes, so a crash loses at most that many acknowledged messages (deploy/mosquitto/README.md).
    result.checks = {"window": int(lab.broker.options["autosave_interval"][0])}
    return result


SCENARIOS: dict[str, Callable[[FaultLab], Ledger]] = {
    "agent_sigkill": agent_sigkill,
    "queue_overflow": queue_overflow,
    "qos0_overflow": qos0_overflow,
    "bad_items_100k": bad_items_100k,
    "oversized_batch_400k": oversized_batch_400k,
    "outlier_1e6": outlier,
    "outlier_1e308": lambda lab: outlier(lab, 1e308),
    "wrong_width_first": wrong_width_first,
    "id_reused": id_reused,
    "checkpoint_unwritable": checkpoint_unwritable,
    "disk_full": disk_full,
    "cloud_unauthorized": cloud_unauthorized,
    "cloud_trickle": cloud_trickle,
    "cloud_down": cloud_down,
    "crafted_checkpoint": crafted_checkpoint,
    "broker_restart": broker_restart,
    "broker_kill9_offline_agent": broker_kill9_offline_agent,
}
