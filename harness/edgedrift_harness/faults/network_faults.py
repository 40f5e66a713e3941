"""Faults of the other processes: the cloud refusing the device's credential, trickling or down, the
broker restarted or SIGKILLed."""

from __future__ import annotations

import contextlib
import secrets
import socket
import threading
import time

from edgedrift_harness.faults.lab import FaultLab, Ledger, ledger, samples_topic, single_payloads, stream
from edgedrift_harness.ports import free_port


def cloud_unauthorized(lab: FaultLab) -> Ledger:
    """The device's secret is rotated at the cloud after its first model: status ``unauthorized``, one
    event, slow retries, and every sample still predicted with what the device has."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(3, 1500)
    agent = lab.agent(device, secret, strategy="periodic", strategy_param=20, unauthorized_retry_s=5).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(600), label_every=2))
        watch.wait_ids(range(600))
        watch.wait_event("model_installed")
        lab.cloud.register(device, secrets.token_urlsafe(24))  # rotated: the agent's secret is now wrong
        pub.send(samples_topic(device), *single_payloads(s, range(600, 4500), label_every=2))
        watch.wait_ids(range(4500), 120)
        status = watch.wait_status("unauthorized")
        time.sleep(3.0)
        failures = len(watch.events("recompute_failed"))
        agent.stop()
        result = ledger("cloud_unauthorized", pub, watch, t0)
    result.checks = {
        "unauthorized_events": len(watch.events("unauthorized")),
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
    agent = lab.agent(device, secret, cloud_url=slow.url, http_deadline_s=2.0, http_timeout_s=30.0)
    agent.start()
    try:
        with lab.clients(device) as (pub, watch):
            pub.send(samples_topic(device), *single_payloads(s, range(1500)))
            watch.wait_ids(range(1500), 60)
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
    agent = lab.agent(device, secret, strategy="periodic", strategy_param=20).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(800), label_every=2))
        watch.wait_ids(range(800))
        lab.cloud.stop()
        pub.send(samples_topic(device), *single_payloads(s, range(800, 3000), label_every=2))
        watch.wait_ids(range(3000), 120)
        watch.wait_event("recompute_failed")
        finished_before = len(watch.events("recompute_finished"))
        lab.cloud.start()
        watch.wait(
            lambda: len(watch.events("recompute_finished")) > finished_before,
            60,
            "a recompute after the outage",
        )
        agent.stop()
        result = ledger("cloud_down", pub, watch, t0)
    result.checks = {"recompute_finished": len(watch.events("recompute_finished"))}
    return result


def broker_restart(lab: FaultLab) -> Ledger:
    """The broker is restarted (SIGTERM, it saves) in the middle of a QoS-1 stream."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 3000)
    agent = lab.agent(device, secret).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(1500)))
        watch.wait_ids(range(1500))
        lab.broker.stop()
        time.sleep(0.5)
        lab.broker.start()
        pub.send(samples_topic(device), *single_payloads(s, range(1500, 3000)))
        watch.wait_ids(range(3000), 120)
        agent.stop()
        result = ledger("broker_restart", pub, watch, t0)
    return result


def broker_kill9_offline_agent(lab: FaultLab) -> Ledger:
    """The agent is offline (its persistent session holds the queue) and the broker is SIGKILLed a
    second past its save window after the last publish: the shipped persistence keeps every acknowledged
    sample (what a kill inside Mosquitto's window loses: tests/integration/test_broker_durability.py)."""
    t0 = time.monotonic()
    device, secret = lab.device()
    s = stream(1, 2000)
    agent = lab.agent(device, secret).start()
    with lab.clients(device) as (pub, watch):
        pub.send(samples_topic(device), *single_payloads(s, range(500)))
        watch.wait_ids(range(500))
        agent.stop()
        pub.send(samples_topic(device), *single_payloads(s, range(500, 2000)))
        time.sleep(lab.save_window_s + 1.0)
        lab.broker.kill()
        lab.broker.start()
        agent.start()
        # The first answer waits for the agent's start and, on RabbitMQ, the queues' leader elections.
        watch.wait_quiet(set(range(2000)), idle_s=3.0, timeout=60, first_s=30.0)
        agent.stop()
        result = ledger("broker_kill9_offline_agent", pub, watch, t0)
    # Mosquitto 2.0 saves its store every second (up to 2 s apart), so a crash loses what it acknowledged
    # since (deploy/mosquitto/README.md); on RabbitMQ the window is 0: a quorum queue fsyncs before the
    # broker acknowledges.
    result.checks = {"broker": lab.broker_kind, "window_s": lab.save_window_s}
    return result
