"""A real Prometheus scrapes a real cloud trainer with the shipped rules (deploy/prometheus/rules.yml):
the recomputes and the fleet's state come back through PromQL, the rules load and evaluate without
error, every metric the rules and the Grafana dashboard name is one the cloud (or a gateway) exports, a
registry database that goes away turns edgedrift_database_up to 0 and the EdgeDriftDatabaseNotReady alert
on, a device whose accuracy falls turns the quality alerts on, and a gateway that stops the
EdgeDriftGatewayDown alert (pending: their ``for`` is minutes)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml
from prometheus_client import generate_latest
from support.cloud import DEVICES, CloudServer
from support.grafana import dashboard_queries

from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.settings import AgentSettings
from edgedrift_harness.agent import AgentProcess
from edgedrift_harness.mosquitto import local_mosquitto
from edgedrift_harness.ports import HOST, free_port
from edgedrift_harness.postgres import PostgresError, ThrowawayPostgres
from edgedrift_harness.prometheus import SHIPPED_RULES, PrometheusProcess, find_prometheus

pytestmark = [
    pytest.mark.kernel_agnostic,
    pytest.mark.skipif(
        find_prometheus() is None, reason="needs the Prometheus server (apt-get install -y prometheus)"
    ),
]
METRIC = re.compile(r"\bedgedrift[_:][A-Za-z0-9_:]*")


def value(result: list[dict[str, Any]]) -> float:
    assert len(result) == 1, result
    return float(result[0]["value"][1])


def train(cloud: CloudServer, device: str, reason: str) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 4))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    body = {"task": "classification", "learner": "logistic", "X": X.tolist(), "y": y.tolist()}
    with cloud.client(DEVICES[device]) as c:
        assert c.post(f"/v1/devices/{device}/models", json={**body, "reason": reason}).status_code == 201
        beat = {"samples": 100, "accuracy": 0.9, "warnings": 0, "model_version": 1}
        assert c.post(f"/v1/devices/{device}/stats", json=beat).status_code == 201


def target(cloud: CloudServer) -> str:
    return f"{HOST}:{cloud.port}"


@pytest.fixture
def sqlite_cloud(tmp_path: Path) -> Iterator[CloudServer]:
    """Per-device quality series on (the per-device alerts read them), the snapshot read every scrape."""
    cloud = CloudServer(
        f"sqlite:///{tmp_path / 'registry.db'}",
        tmp_path,
        EDGEDRIFT_CLOUD_METRICS_QUALITY_DEVICES="10",
        EDGEDRIFT_CLOUD_METRICS_QUALITY_MAX_AGE_S="0",
    ).start()
    try:
        yield cloud
    finally:
        cloud.stop()


def exported_families(text: str) -> set[str]:
    """The sample names of every family in an exposition (``# TYPE`` lines list families without samples
    too)."""
    names: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.MULTILINE):
        name = name.removesuffix("_total") if kind == "counter" else name
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(kind, [""])
        names |= {name + s for s in suffixes}
    return names


def test_prometheus_scrapes_the_cloud_and_evaluates_the_rules(
    sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    train(sqlite_cloud, "dev-a", "druid")
    with PrometheusProcess(tmp_path / "prometheus", [target(sqlite_cloud)]) as prom:
        found = prom.wait_for('edgedrift_recomputes_total{device="dev-a",reason="druid"}')
        assert value(found) == 1.0
        assert found[0]["metric"]["job"] == "edgedrift-cloud"
        assert value(prom.wait_for('up{job="edgedrift-cloud"} == 1')) == 1.0
        assert value(prom.wait_for("edgedrift_database_up")) == 1.0
        assert value(prom.wait_for('edgedrift_fleet_devices{status="online"}')) == 1.0
        # dev-b was provisioned but never sent a heartbeat: offline, so one silent device.
        assert value(prom.wait_for("edgedrift:devices_silent")) == 1.0
        train(sqlite_cloud, "dev-a", "periodic")
        found = prom.wait_for('edgedrift_recomputes_total{device="dev-a",reason="periodic"}')
        assert value(found) == 1.0
        groups = prom.api("rules")["groups"]
        assert {g["name"] for g in groups} == {
            "edgedrift-recording",
            "edgedrift-alerts",
            "edgedrift-quality",
            "edgedrift-gateways",
        }
        deadline = time.monotonic() + 20
        while True:
            rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
            if all(r["health"] == "ok" for r in rules) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
        deadline = time.monotonic() + 30  # the alerting group's first evaluation may come after the others
        while True:
            firing = {a["labels"]["alertname"] for a in prom.api("alerts")["alerts"]}
            if firing or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert firing == {"EdgeDriftDevicesSilent"}, "only dev-b's silence is wrong with this cloud"


def test_every_metric_of_the_rules_and_the_dashboard_is_exported(
    sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    """The cloud's (per-device quality series on) and, for ``edgedrift_edge_*``, a gateway's."""
    rules = yaml.safe_load(SHIPPED_RULES.read_text())["groups"]
    recorded = {r["record"] for g in rules for r in g["rules"] if "record" in r}
    expressions = [r["expr"] for g in rules for r in g["rules"]] + dashboard_queries()
    named = {m for e in expressions for m in METRIC.findall(e)}
    assert len(named) >= 12
    settings = {"gateway_id": "gw-x", "devices": "d-1", "checkpoint_dir": str(tmp_path), "metrics_port": 0}
    agent = EdgeAgent(AgentSettings.model_validate(settings))
    assert agent.metrics is not None
    edge = exported_families(generate_latest(agent.metrics.registry).decode())
    cloud = exported_families(httpx.get(f"{sqlite_cloud.url}/metrics", timeout=10).text)
    missing = named - cloud - edge - recorded
    assert not missing, f"neither the cloud nor a gateway exports {sorted(missing)}"
    assert {m for m in named if m.startswith("edgedrift_edge_")} <= edge


def test_database_outage_turns_the_alert_on(tmp_path: Path) -> None:
    try:
        database = ThrowawayPostgres().start()
    except PostgresError as exc:
        pytest.skip(f"needs PostgreSQL's initdb/pg_ctl for a server this test can stop: {exc}")
    cloud = CloudServer(database.admin_url.replace("postgresql://", "postgresql+psycopg://"), tmp_path)
    try:
        cloud.start()
        with PrometheusProcess(tmp_path / "prometheus", [target(cloud)]) as prom:
            assert value(prom.wait_for("edgedrift_database_up == 1")) == 1.0
            database.stop()
            assert httpx.get(f"{cloud.url}/readyz", timeout=10).status_code == 503
            assert value(prom.wait_for("edgedrift_database_up == 0")) == 0.0
            alert = prom.wait_for('ALERTS{alertname="EdgeDriftDatabaseNotReady"}')
            assert alert[0]["metric"]["alertstate"] in ("pending", "firing")
            assert alert[0]["metric"]["instance"] == target(cloud)
            assert value(prom.query('up{job="edgedrift-cloud"}')) == 1.0, "the scrape itself still works"
    finally:
        cloud.stop()
        database.stop()


def cloud_client(cloud: CloudServer, device: str) -> httpx.Client:
    return cloud.client(DEVICES[device])


def pending_or_firing(prom: PrometheusProcess, alert: str) -> dict[str, str]:
    found = prom.wait_for(f'ALERTS{{alertname="{alert}"}}', timeout=60)
    assert found[0]["metric"]["alertstate"] in ("pending", "firing")
    labels: dict[str, str] = found[0]["metric"]
    return labels


def test_a_device_whose_accuracy_falls_turns_the_quality_alerts_on(
    sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    with cloud_client(sqlite_cloud, "dev-a") as c:
        assert c.post("/v1/devices/dev-a/stats", json={"samples": 100, "accuracy": 0.92}).status_code == 201
        with PrometheusProcess(tmp_path / "prometheus", [target(sqlite_cloud)]) as prom:
            assert value(prom.wait_for("edgedrift_fleet_accuracy_count == 1")) == 1.0
            assert value(prom.query("edgedrift_fleet_falling_quality_devices{task='classification'}")) == 0
            assert (
                c.post("/v1/devices/dev-a/stats", json={"samples": 200, "accuracy": 0.5}).status_code == 201
            )
            assert value(prom.wait_for('edgedrift_device_accuracy{device="dev-a"} == 0.5')) == 0.5
            labels = pending_or_firing(prom, "EdgeDriftQualityFalling")
            assert labels["task"] == "classification"
            pending_or_firing(prom, "EdgeDriftLowAccuracyDevices")


def test_a_stopped_gateway_turns_the_gateway_alert_on(tmp_path: Path) -> None:
    port = free_port()
    with local_mosquitto(tmp_path / "broker") as broker:
        gateway = AgentProcess(
            tmp_path / "gateway.log",
            {
                "gateway_id": "gw-p",
                "devices": "gp-1,gp-2",
                "broker_url": broker.url,
                "checkpoint_dir": tmp_path / "state",
                "metrics_port": port,
                "metrics_addr": HOST,
            },
        ).start()
        try:
            with PrometheusProcess(
                tmp_path / "prometheus", [f"{HOST}:{port}"], job="edgedrift-gateways"
            ) as prom:
                assert value(prom.wait_for('up{job="edgedrift-gateways"} == 1')) == 1.0
                assert value(prom.wait_for("edgedrift_edge_devices")) == 2.0
                assert value(prom.wait_for('edgedrift_edge_state{state="online"}')) == 1.0
                gateway.stop()
                assert value(prom.wait_for('up{job="edgedrift-gateways"} == 0')) == 0.0
                labels = pending_or_firing(prom, "EdgeDriftGatewayDown")
                assert labels["instance"] == f"{HOST}:{port}"
        finally:
            gateway.stop()
