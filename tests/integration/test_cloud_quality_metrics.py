"""Model quality in the cloud's ``/metrics`` after real heartbeats (SQLite and PostgreSQL): the fleet's
accuracy and RMSE histograms, the devices whose quality fell against their own baseline, the monitor's
drift state, and per-device series only when asked for (capped)."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from support.cloud import DEVICES, OPERATOR, CloudServer

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
REGRESSOR = ("reg-1", "secret-of-device-reg-1-0123456789")


def scrape(op: httpx.Client) -> Samples:
    text = op.get("/metrics").raise_for_status().text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def beat(cloud: CloudServer, device: str, secret: str, **body: object) -> None:
    with cloud.client(secret) as c:
        c.post(f"/v1/devices/{device}/stats", json={"samples": 100, **body}).raise_for_status()


def test_quality_after_heartbeats(database_url: str, tmp_path: Path) -> None:
    cloud = CloudServer(
        database_url,
        tmp_path,
        EDGEDRIFT_CLOUD_METRICS_QUALITY_MAX_AGE_S="0",
        EDGEDRIFT_CLOUD_METRICS_QUALITY_DEVICES="2",
    ).start()
    try:
        cloud.register(*REGRESSOR)
        beat(cloud, "dev-a", DEVICES["dev-a"], accuracy=0.92)
        beat(cloud, "dev-b", DEVICES["dev-b"], accuracy=0.97)
        beat(cloud, REGRESSOR[0], REGRESSOR[1], extra={"rmse": 0.2})
        with cloud.client(OPERATOR) as op:
            first = scrape(op)  # the baselines: each device's first figure
            beat(cloud, "dev-a", DEVICES["dev-a"], accuracy=0.55)
            beat(cloud, "dev-b", DEVICES["dev-b"], accuracy=0.96, warnings=1)
            beat(cloud, REGRESSOR[0], REGRESSOR[1], extra={"rmse": 0.9})
            after = scrape(op)
    finally:
        cloud.stop()
    assert value(first, "edgedrift_fleet_falling_quality_devices", task="classification") == 0
    assert value(first, "edgedrift_fleet_low_accuracy_devices") == 0
    # the fleet's histograms: two classifiers, one regressor
    assert value(after, "edgedrift_fleet_accuracy_count") == 2
    assert value(after, "edgedrift_fleet_accuracy_bucket", le="0.6") == 1
    assert value(after, "edgedrift_fleet_accuracy_bucket", le="+Inf") == 2
    assert abs(value(after, "edgedrift_fleet_accuracy_sum") - (0.55 + 0.96)) < 1e-9
    assert value(after, "edgedrift_fleet_rmse_count") == 1
    assert value(after, "edgedrift_fleet_rmse_bucket", le="0.5") == 0
    assert value(after, "edgedrift_fleet_rmse_bucket", le="1.0") == 1
    # dev-a fell 0.37 below its baseline and under the floor; the regressor's RMSE rose 4.5x
    assert value(after, "edgedrift_fleet_falling_quality_devices", task="classification") == 1
    assert value(after, "edgedrift_fleet_falling_quality_devices", task="regression") == 1
    assert value(after, "edgedrift_fleet_low_accuracy_devices") == 1
    assert value(after, "edgedrift_fleet_drift_state_devices", state="drifting") == 1
    assert value(after, "edgedrift_fleet_drift_state_devices", state="stable") == 2
    # per device: the first 2 by id (dev-a, dev-b); the regressor is counted as omitted
    assert value(after, "edgedrift_device_accuracy", device="dev-a") == 0.55
    assert value(after, "edgedrift_device_quality_baseline", device="dev-a") == 0.92
    assert value(after, "edgedrift_device_drifting", device="dev-b") == 1
    assert value(after, "edgedrift_device_series_omitted") == 1
    assert not [k for k in after if k[0].startswith("edgedrift_device_") and ("device", "reg-1") in k[1]]


def test_the_fleet_series_do_not_depend_on_the_fleet_s_size(sqlite_cloud: CloudServer) -> None:
    """Per-device series are off by default: a scrape names no device in a quality series, and a second
    scrape within the snapshot's period is answered from memory (same snapshot)."""
    with sqlite_cloud.client(OPERATOR) as op:
        beat(sqlite_cloud, "dev-a", DEVICES["dev-a"], accuracy=0.8)
        first = scrape(op)
        second = scrape(op)
    assert not [k for k in first if k[0].startswith("edgedrift_device_")]
    quality = [k for k in first if k[0].startswith(("edgedrift_fleet_", "edgedrift_quality_"))]
    assert not [k for k in quality if any(name == "device" for name, _ in k[1])]
    assert value(first, "edgedrift_fleet_accuracy_count") >= 1
    assert value(second, "edgedrift_quality_snapshot_age_seconds") >= value(
        first, "edgedrift_quality_snapshot_age_seconds"
    )
    assert value(second, "edgedrift_quality_snapshot_duration_seconds") == value(
        first, "edgedrift_quality_snapshot_duration_seconds"
    ), "the second scrape read the fleet again"
