"""Issue 30 row 2: the broker keeps one queue per client and a gateway is one client, so while the
gateway is away one device's backlog fills that queue and the broker drops its quiet neighbours' samples,
without telling anyone. On the shipped Mosquitto configuration (its queue limit lowered, so that a
backlog of hundreds rather than 64 MiB fills it) and the gateway as a subprocess, the drops are told from
the gaps in each publisher's ``seq`` and show in each device's counters and ledger, a ``dropped`` event,
the gateway's status and its ``/metrics``. With a broker session per device (``--broker-sessions device``)
the backlog overflows its own device's queue only: the neighbours lose nothing."""

from __future__ import annotations

import json
import secrets
import shutil
import time
from pathlib import Path

import httpx
import pytest
from support.cloud import CloudServer
from support.compose import run_entrypoint
from support.gateways import gateway_process
from support.operator import OperatorView, shipped_env, user_url

from edgedrift_harness.mosquitto import ShippedMosquitto
from edgedrift_harness.mqtt import publish
from edgedrift_harness.ports import free_port

QUEUE = 150  # the broker's max_queued_messages for this test (the shipped 100,000 takes minutes to fill)


def sample(i: int) -> str:
    """Sample ``i`` of a device, with ``seq``: the device's samples before it."""
    return json.dumps({"id": i, "x": [(i % 17) / 8.0 - 1.0, 0.5], "seq": i})


@pytest.mark.parametrize("sessions", ["gateway", "device"])
def test_a_backlog_that_fills_the_brokers_queue_leaves_counted_drops(
    sqlite_cloud: CloudServer, tmp_path: Path, sessions: str
) -> None:
    if not all(shutil.which(t) for t in ("mosquitto", "mosquitto_passwd")):
        pytest.skip("needs mosquitto and mosquitto_passwd installed locally")
    tag = secrets.token_hex(3)
    big, quiet = f"big-{tag}", [f"q{i}-{tag}" for i in range(3)]
    devices = [big, *quiet]
    env = {**shipped_env({"gw-1": devices}), "MQTT_GW_1_SESSIONS": sessions}
    result = run_entrypoint(tmp_path, env, passwd=shutil.which("mosquitto_passwd"))
    assert result.returncode == 0, result.stderr
    metrics_port = free_port()
    sent = dict.fromkeys(devices, 0)
    overrides = {"max_queued_messages": str(QUEUE)}
    with ShippedMosquitto(tmp_path, None, overrides=overrides) as broker:
        url = {u: user_url(u, broker.port) for u in ("operator", "replay", "gw-1")}
        gateway = gateway_process(
            tmp_path,
            sqlite_cloud,
            devices,
            url["gw-1"],
            gateway_id="gw-1",
            broker_sessions=sessions,
            n_features=2,
            warmup_samples=10_000,  # predictions without a model: the ledger is what is tested
            heartbeat_every_s=0.5,
            seq_grace_s=1.0,  # gaps count 1 s after they are seen (30 s by default)
            metrics_port=metrics_port,
            metrics_addr="127.0.0.1",
        )
        view = OperatorView(url["operator"])

        def send(device: str, n: int) -> None:
            publish(
                url["replay"], f"edgedrift/{device}/samples", [sample(sent[device] + k) for k in range(n)]
            )
            sent[device] += n

        def answered(device: str) -> int:
            return len({p["id"] for p in view.of(device, "predictions")})

        def settle(what: str) -> None:
            deadline = time.monotonic() + 60
            while any(
                answered(d) + view.counters(d)["dropped"] < sent[d] for d in devices if view.of(d, "status")
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError(what)
                time.sleep(0.1)

        gateway.start()
        try:
            for device in devices:
                send(device, 10)
            deadline = time.monotonic() + 60
            while any(answered(d) < 10 for d in devices) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert gateway.stop() == 0  # a restart: away while the backlog comes
            send(big, 2 * QUEUE)  # fills the gateway's queue at the broker: the rest is dropped
            for device in quiet:
                send(device, 20)  # all dropped: the queue is full
            gateway.start()
            for device in devices:
                send(device, 5)  # their seq tells the gateway what it missed
            time.sleep(2.0)
            settle("every device's samples answered or counted as dropped")
            time.sleep(1.0)
            scrape = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
        finally:
            code = gateway.stop()
            time.sleep(0.5)
            gateway_status = view.of("gw-1", "gateway")[-1]  # its last word, at the stop
            view.close()
    assert code == 0
    total_dropped = 0
    for device in devices:
        counters = view.counters(device)
        predicted = answered(device)
        rejected = sum(e["count"] for e in view.of(device, "events") if e["type"] == "rejected")
        assert sent[device] == predicted + rejected + counters["dropped"], (device, predicted, counters)
        assert counters["dropped"] == counters["broker_dropped"], counters
        events = [e for e in view.of(device, "events") if e["type"] == "dropped"]
        assert sum(e["count"] for e in events) == counters["broker_dropped"]
        assert all("broker" in e["reason"] for e in events)
        total_dropped += counters["broker_dropped"]
        assert (
            f'edgedrift_edge_broker_dropped_total{{device="{device}"}} {float(counters["broker_dropped"])}'
            in scrape
        )
    for device in quiet:  # the neighbours' samples sent while the gateway was away
        # one session: lost with the backlog's overflow, and counted; a session each: all kept
        assert view.counters(device)["broker_dropped"] == (20 if sessions == "gateway" else 0)
        assert answered(device) == (15 if sessions == "gateway" else 35)
    assert view.counters(big)["broker_dropped"] > 0
    assert gateway_status["broker_dropped"] == total_dropped
