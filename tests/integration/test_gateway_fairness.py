"""Issue 30, rows 1, 5 and 8: a gateway that is fair between its devices, says when one receives nothing,
and bounds recent samples in bytes, against a real Mosquitto and the gateway as a subprocess. Each test
asserts the per-device ledger (published = predicted + rejected + dropped)."""

from __future__ import annotations

import json
import secrets
import shutil
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.cloud import OPERATOR, CloudServer
from support.compose import run_entrypoint
from support.gateways import gateway_process
from support.operator import OperatorView

from edgedrift_edge.transport.mqtt import broker_address, make_client
from edgedrift_harness.mosquitto import MosquittoProcess, ShippedMosquitto, local_mosquitto
from edgedrift_harness.mqtt import DeviceWatcher, Subscriber, publish
from edgedrift_harness.ports import free_port
from edgedrift_harness.publisher_process import publish_from_process

PASSWORDS = {
    "operator": "operator-password-0123456789",
    "replay": "replay-password-0123456789",
    "gw-1": "gw-1-password-0123456789",
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoProcess]:
    with local_mosquitto(tmp_path / "broker") as server:
        yield server


def sample(i: int) -> bytes:
    x = [((i * 7919) % 200 - 100) / 50.0, (i % 13) / 6.0 - 1.0]
    return json.dumps({"id": i, "x": x, "y": 1 if x[0] > 0 else -1}).encode()


class Arrivals(Subscriber):
    """When each prediction of each device arrived (``time.monotonic``), by sample id."""

    def __init__(self, url: str) -> None:
        self.at: dict[str, dict[int, float]] = {}
        super().__init__(url, [("edgedrift/+/predictions", 1)])

    def handle(self, topic: str, payload: bytes) -> None:
        now = time.monotonic()
        body = json.loads(payload)
        with self.lock:
            seen = self.at.setdefault(topic.split("/")[1], {})
            for p in body.get("predictions", [body]):
                seen.setdefault(p["id"], now)

    def of(self, device: str) -> dict[int, float]:
        with self.lock:
            return dict(self.at.get(device, {}))


def final_counters(watch: DeviceWatcher) -> dict[str, Any]:
    counters: dict[str, Any] = next(s for s in reversed(watch.statuses()) if "counters" in s)["counters"]
    return counters


@pytest.mark.parametrize("sessions", ["gateway", "device"])
def test_a_flooding_device_does_not_delay_its_quiet_neighbours(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path, sessions: str
) -> None:
    """Row 1: one device of 21, past its warm-up (every labeled sample predicted and learned), bursts
    60,000 samples while 20 quiet devices go on sending 5 samples/s each: the quiet devices' p99 latency
    stays within a second, nothing of theirs is lost, and every device's ledger adds up. With one broker
    session the flood is refused past its share, counted (``dropped``, one ``overloaded`` event per
    second); with one per device it waits at the broker in its own queue, taken at its share: nothing of
    it is refused."""
    tag = secrets.token_hex(3)
    flood, quiet = f"flood-{tag}", [f"q{i}-{tag}" for i in range(20)]
    gateway = gateway_process(
        tmp_path,
        sqlite_cloud,
        [flood, *quiet],
        broker.url,
        warmup_samples=200,
        window_labels=50,
        n_features=2,
        heartbeat_every_s=0.5,
        broker_sessions=sessions,
    )
    arrivals = Arrivals(broker.url)
    watches = {d: DeviceWatcher(broker.url, d) for d in [flood, *quiet]}
    sent: dict[str, dict[int, float]] = {d: {} for d in quiet}
    warm, flood_n, before, rounds = 300, 60_000, 60, 150  # the flood starts after 12 s of quiet traffic
    flood_started = threading.Event()

    def stream() -> None:
        """5 samples/s per quiet device, one client for all, for 30 s."""
        client = make_client(broker.url, f"quiet-{tag}", clean_session=True)
        host, port, _tls = broker_address(broker.url)
        client.connect(host, port)
        client.loop_start()
        start = time.monotonic()
        for r in range(rounds):
            if r == before:
                flood_started.set()
            for device in quiet:
                sent[device][r] = time.monotonic()
                client.publish(f"edgedrift/{device}/samples", sample(r), qos=1)
            time.sleep(max(0.0, start + 0.2 * (r + 1) - time.monotonic()))
        time.sleep(1.0)
        client.disconnect()
        client.loop_stop()

    gateway.start()
    quiet_stream = threading.Thread(target=stream)
    try:
        quiet_stream.start()
        publish(broker.url, f"edgedrift/{flood}/samples", [sample(i) for i in range(warm)])
        watches[flood].wait_event("model_installed", 60)
        burst = [sample(i) for i in range(warm, warm + flood_n)]
        assert flood_started.wait(60)
        publish_from_process(broker.url, f"edgedrift/{flood}/samples", burst, timeout=180)
        quiet_stream.join(120)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and any(len(arrivals.of(d)) < rounds for d in quiet):
            time.sleep(0.1)
        flood_watch = watches[flood]
        total = warm + flood_n

        def flood_settled() -> bool:
            counters = [s["counters"] for s in flood_watch.statuses() if "counters" in s]
            return bool(counters) and counters[-1]["predictions"] + counters[-1]["dropped"] >= total

        flood_watch.wait(flood_settled, 300, "the flood handled or refused")
        time.sleep(0.5)
    finally:
        code = gateway.stop()
        arrivals.close()
        for w in watches.values():
            w.close()
    assert code == 0
    latencies = []  # of the quiet samples sent while the flood was published or handled
    for device in quiet:
        got = arrivals.of(device)
        assert sorted(got) == list(range(rounds)), f"{device}: quiet samples lost"
        latencies += [got[r] - sent[device][r] for r in range(before, rounds)]
        counters = final_counters(watches[device])
        assert counters["predictions"] == counters["samples"] == rounds and counters["dropped"] == 0
    latencies.sort()
    p50, p99 = statistics.median(latencies), latencies[int(0.99 * len(latencies))]
    counters = final_counters(watches[flood])
    print(f"quiet p50 {p50:.3f} s p99 {p99:.3f} s; flood {counters}")
    # The target. The flood is published from a process of its own: from this one it held the GIL
    # and the arrivals were stamped late (p99 0.5-2.5 s then, 0.13-0.15 s measured so on a quiet machine).
    assert p99 <= 1.0, f"quiet p50 {p50:.3f} s, p99 {p99:.3f} s"
    overloaded = watches[flood].events("overloaded")
    predicted = len(arrivals.of(flood))
    assert predicted == counters["predictions"]
    assert total == predicted + counters["rejected"] + counters["dropped"], counters
    if sessions == "gateway":
        assert counters["dropped"] == counters["overloaded"] == sum(e["count"] for e in overloaded) > 0
        assert len(overloaded) < 60, "one summary event per second, not one per refused message"
    else:  # back-pressure per device
        assert counters["dropped"] == counters["overloaded"] == len(overloaded) == 0, counters
        assert predicted == total


def test_a_device_the_acl_does_not_grant_is_reported_silent_up_to_the_fleet_view(
    sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    """Row 5: on the shipped Mosquitto configuration, with the ACL the entry point generates from
    ``MQTT_GW_1_DEVICES``, a gateway configured with one device more than the ACL grants it receives
    nothing for that device (Mosquitto acknowledges the subscription and filters delivery). That device
    is reported ``silent`` (status, event, gateway status, metric, the cloud's fleet view); the granted
    devices are served and stay ``online``, each device's ledger holds."""
    if not all(shutil.which(t) for t in ("mosquitto", "mosquitto_passwd", "mosquitto_sub")):
        pytest.skip("needs mosquitto and its clients installed locally")
    tag = secrets.token_hex(3)
    granted, ungranted = [f"a{i}-{tag}" for i in range(2)], f"x-{tag}"
    env = {
        "EDGEDRIFT_MODE": "production",
        "MQTT_OPERATOR_PASSWORD": PASSWORDS["operator"],
        "MQTT_REPLAY_PASSWORD": PASSWORDS["replay"],
        "MQTT_GATEWAYS": "gw-1",
        "MQTT_GW_1_PASSWORD": PASSWORDS["gw-1"],
        "MQTT_GW_1_DEVICES": ",".join(granted),
    }
    result = run_entrypoint(tmp_path, env, passwd=shutil.which("mosquitto_passwd"))
    assert result.returncode == 0, result.stderr
    devices = [*granted, ungranted]
    metrics_port = free_port()
    with ShippedMosquitto(tmp_path, None) as broker:
        url = {u: f"mqtt://{u}:{PASSWORDS[u]}@127.0.0.1:{broker.port}" for u in PASSWORDS}
        gateway = gateway_process(
            tmp_path,
            sqlite_cloud,
            devices,
            url["gw-1"],
            gateway_id="gw-1",
            n_features=2,
            heartbeat_every_s=0.5,
            silent_after_s=6,
            metrics_port=metrics_port,
            metrics_addr="127.0.0.1",
        )
        view = OperatorView(url["operator"])
        sent = {d: 0 for d in devices}
        streaming = {granted[0]: True, granted[1]: True, ungranted: True}
        stop = threading.Event()

        def stream() -> None:
            """2 samples/s for each device still streaming, as the replay user (one login)."""
            client = make_client(url["replay"], f"replay-{tag}", clean_session=True)
            host, port, _tls = broker_address(url["replay"])
            client.connect(host, port)
            client.loop_start()
            while not stop.is_set():
                for device, on in streaming.items():
                    if on:
                        topic = f"edgedrift/{device}/samples"
                        client.publish(topic, sample(sent[device]), qos=1).wait_for_publish(10)
                        sent[device] += 1
                time.sleep(0.5)
            client.disconnect()
            client.loop_stop()

        gateway.start()
        publisher = threading.Thread(target=stream)
        publisher.start()
        try:
            # a1's publisher stops: silent on its own topics; x was never granted: silent in the gateway's
            # status, the metrics and the fleet view (its own topics are not the gateway's to write)
            time.sleep(2.0)
            streaming[granted[1]] = False

            def silent_listed() -> bool:
                status = view.of("gw-1", "gateway")
                return bool(status) and sorted(status[-1]["silent"]) == sorted([granted[1], ungranted])

            view.wait(silent_listed, 60, "both silent devices in the gateway's status")
            view.wait(lambda: bool(view.events(granted[1], "silent")), 10, "a1's silent event")
            assert view.of(granted[1], "status")[-1]["state"] == "silent"
            scrape = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
            deadline = time.monotonic() + 30
            fleet: dict[str, str] = {}
            while time.monotonic() < deadline and (fleet.get(ungranted), fleet.get(granted[1])) != (
                "silent",
                "silent",
            ):
                page = httpx.get(
                    f"{sqlite_cloud.url}/v1/fleet",
                    params={"q": tag, "limit": 10},
                    headers={"Authorization": f"Bearer {OPERATOR}"},
                    timeout=10,
                ).json()
                fleet = {row["device_id"]: row["status"] for row in page["devices"]}
                time.sleep(0.3)
            live = view.of(granted[0], "status")[-1]
            streaming[granted[1]] = True  # its next message ends the silence
            view.wait(lambda: bool(view.events(granted[1], "silent_ended")), 30, "a1's silent_ended event")
            stop.set()
            publisher.join(30)
            for device in granted:

                def answered(d: str = device, n: int = sent[device]) -> bool:
                    return len(view.of(d, "predictions")) >= n

                view.wait(answered, 60, f"{device} answered")
            time.sleep(1.0)
        finally:
            stop.set()
            code = gateway.stop()
            view.close()
    assert code == 0
    [event] = view.events(granted[1], "silent")
    assert "ACL" in event["reason"] and event["silent_s"] >= 6
    assert f'edgedrift_edge_devices_silent{{device="{ungranted}"}} 1.0' in scrape
    assert f'edgedrift_edge_devices_silent{{device="{granted[1]}"}} 1.0' in scrape
    assert f'edgedrift_edge_devices_silent{{device="{granted[0]}"}} 0.0' in scrape
    assert fleet == {granted[0]: "online", granted[1]: "silent", ungranted: "silent"}, fleet
    assert live["state"] == "online" and not view.events(granted[0], "silent")
    assert sent[ungranted] > 0 and not view.of(ungranted, "predictions")
    assert all(s["state"] in ("online", "offline") for s in view.of("gw-1", "gateway"))
    for device in granted:  # the ledger: every sample published answered
        final = next(s for s in reversed(view.of(device, "status")) if "counters" in s)["counters"]
        assert len({p["id"] for p in view.of(device, "predictions")}) == sent[device]
        assert final["predictions"] == final["samples"] == sent[device] and final["dropped"] == 0
