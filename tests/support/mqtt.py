"""A real Mosquitto per test (``mosquitto -c conf`` on a free port) and a paho subscriber that collects
what the agent publishes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from support.cloud import free_port

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"


class Mosquitto:
    """A broker of our own, with persistence so that QoS-1 sessions survive a restart."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"mqtt://127.0.0.1:{self.port}"
        self.workdir = workdir
        self.conf = workdir / f"mosquitto-{self.port}.conf"
        (workdir / "mqtt-data").mkdir(exist_ok=True)
        self.conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
            f"persistence_location {workdir / 'mqtt-data'}/\nautosave_interval 1\n"
            "max_queued_messages 100000\n"
            "max_inflight_messages 1000\n" + ("user root\n" if os.geteuid() == 0 else "")
            # Started as root, mosquitto drops to its own user, which cannot write a pytest temp dir.
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Mosquitto:
        if not Path(MOSQUITTO).exists():
            raise RuntimeError("these tests need Debian's mosquitto (apt-get install -y mosquitto)")
        log = (self.workdir / f"mosquitto-{self.port}.log").open("ab")
        self.proc = subprocess.Popen([MOSQUITTO, "-c", str(self.conf)], stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"mosquitto did not start on port {self.port}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)
        self.proc = None


class Collector:
    """Subscribes to a device's predictions, events and status and keeps everything it receives."""

    def __init__(self, url: str, device: str, prefix: str = "edgedrift", persistent: bool = False) -> None:
        self.device = device
        self.prefix = prefix
        self.messages: dict[str, list[Any]] = defaultdict(list)
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=f"collector-{device}-{time.time_ns()}",
            clean_session=not persistent,
        )
        self.client.reconnect_delay_set(0.1, 1)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *a: self.ready.set()
        self.client.on_message = self._on_message
        port = int(url.rsplit(":", 1)[1])
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        if not self.ready.wait(10):
            raise RuntimeError("collector not subscribed")

    def _on_connect(self, client: mqtt.Client, *_: Any) -> None:
        base = f"{self.prefix}/{self.device}"
        client.subscribe([(f"{base}/{kind}", 1) for kind in ("predictions", "events", "status")])

    def _on_message(self, _c: mqtt.Client, _u: Any, msg: mqtt.MQTTMessage) -> None:
        kind = msg.topic.rsplit("/", 1)[1]
        try:
            value = json.loads(msg.payload) if msg.payload else None
        except ValueError as exc:
            value = {"undecodable": msg.payload.decode(errors="replace"), "error": str(exc)}
        with self.lock:
            self.messages[kind].append(value)

    def predictions(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        with self.lock:
            for m in self.messages["predictions"]:
                out.extend(m.get("predictions", [m]))
        return out

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.messages["events"] if kind is None or e["type"] == kind]

    def wait_predictions(self, n: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            preds = self.predictions()
            if len(preds) >= n:
                return preds
            time.sleep(0.05)
        raise TimeoutError(f"{len(self.predictions())} of {n} predictions after {timeout} s")

    def wait_events(self, kind: str, n: int = 1, timeout: float = 30.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.events(kind)
            if len(found) >= n:
                return found
            time.sleep(0.05)
        seen = [e.get("type") for e in self.events()]
        raise TimeoutError(
            f"{len(self.events(kind))} {kind!r} events of {n} after {timeout} s; events: {seen[-20:]}"
        )

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def publish(url: str, topic: str, payloads: list[bytes | str], qos: int = 1) -> None:
    """Publish raw payloads and wait until the broker acknowledged them."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"pub-{time.time_ns()}")
    client.connect("127.0.0.1", int(url.rsplit(":", 1)[1]))
    client.loop_start()
    infos = [client.publish(topic, p, qos=qos) for p in payloads]
    for info in infos:
        info.wait_for_publish(30)
    client.disconnect()
    client.loop_stop()
