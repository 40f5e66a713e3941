"""A gateway process's ``/metrics`` (``EDGEDRIFT_EDGE_METRICS_PORT``) against a real Mosquitto and the
cloud: the counters scraped with httpx are the ledger the devices published on MQTT, devices past
``metrics_device_labels`` are summed under ``device="_other"``, and the latency histogram counts every
message handled."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.cloud import CloudServer
from support.gateways import gateway_process

from edgedrift import __version__, kernels
from edgedrift_harness.mosquitto import MosquittoProcess, local_mosquitto
from edgedrift_harness.mqtt import DeviceWatcher, publish
from edgedrift_harness.ports import free_port

pytestmark = pytest.mark.kernel_agnostic

VALID, INVALID = 300, 7


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoProcess]:
    with local_mosquitto(tmp_path / "broker") as server:
        yield server


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape by (name, sorted labels)."""
    text = httpx.get(url, timeout=5).raise_for_status().text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def rejected_all(watch: DeviceWatcher) -> bool:
    return sum(int(e["count"]) for e in watch.events("rejected")) >= INVALID


def value(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return metrics[(name, tuple(sorted(labels.items())))]


def test_a_gateway_s_metrics_are_its_ledger(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    devices = [f"m-{secrets.token_hex(3)}-{i}" for i in range(3)]
    port = free_port()
    agent = gateway_process(
        tmp_path,
        sqlite_cloud,
        devices,
        broker.url,
        gateway_id="gw-metrics",
        checkpoint_every_s=0.5,
        heartbeat_every_s=0.5,
        warmup_samples=100,
        n_features=2,
        metrics_port=port,
        metrics_addr="127.0.0.1",
        metrics_device_labels=2,
    )
    watchers = {d: DeviceWatcher(broker.url, d) for d in devices}
    agent.start()
    url = f"http://127.0.0.1:{port}/metrics"
    rng = np.random.default_rng(3)
    try:
        for device in devices:
            good = [json.dumps({"id": i, "x": rng.normal(size=2).tolist()}) for i in range(VALID)]
            bad = [json.dumps({"id": 10_000 + i, "x": [1.0, 2.0, 3.0]}) for i in range(INVALID)]
            publish(broker.url, f"edgedrift/{device}/samples", good + bad)
        for watch in watchers.values():
            watch.wait_predictions(VALID)
            watch.wait(partial(rejected_all, watch), 30, "rejections")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            metrics = scrape(url)
            if value(metrics, "edgedrift_edge_messages_total", device="_other") == VALID + INVALID:
                break
            time.sleep(0.2)
        metrics = scrape(url)
    finally:
        code = agent.stop()
        for watch in watchers.values():
            watch.close()
    assert code == 0
    labels = dict(zip(devices, [*list(devices)[:2], "_other"], strict=True))
    for device, watch in watchers.items():
        label = labels[device]
        predicted = len({p["id"] for p in watch.predictions()})
        rejected = sum(e["count"] for e in watch.events("rejected"))
        assert (predicted, rejected) == (VALID, INVALID)
        got = {
            name: value(metrics, f"edgedrift_edge_{name}_total", device=label)
            for name in ("samples", "predictions", "rejected", "dropped", "duplicates", "messages")
        }
        assert got["predictions"] == predicted and got["rejected"] == rejected, (device, got)
        assert got["predictions"] + got["duplicates"] + got["rejected"] + got["dropped"] == VALID + INVALID
        assert got["samples"] == VALID, "a rejected sample is not a sample"
        handled = value(metrics, "edgedrift_edge_message_latency_seconds_count", device=label)
        assert handled == got["messages"] == VALID + INVALID
        assert 0 <= value(metrics, "edgedrift_edge_checkpoint_age_seconds", device=label) < 30
    assert {labels for (name, labels) in metrics if name == "edgedrift_edge_samples_total"} == {
        (("device", d),) for d in labels.values()
    }, "the third device has no series of its own"
    assert value(metrics, "edgedrift_edge_devices") == 3
    assert value(metrics, "edgedrift_edge_inbox_messages") == 0
    assert value(metrics, "edgedrift_edge_state", state="online") == 1
    path = "numpy" if kernels.MODULE is None else "compiled"
    assert value(metrics, "edgedrift_edge_info", gateway="gw-metrics", kernels=path, version=__version__) == 1
