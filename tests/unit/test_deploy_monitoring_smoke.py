"""deploy/monitoring_smoke.py and the monitoring profile's scrape configuration checked without a Docker
engine (the engine run is tests/container/test_monitoring_stack.py, its figures in
docs/benchmarks.md): the short rendering changes the windows and intervals only, Prometheus scrapes every
agent where compose serves its metrics, and the smoke test's services, devices, image, data sets and
alerts are the stack's and the rules'."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from support.compose import SERVICES, environment
from support.dockerfiles import ROOT
from support.scripts import load_script

from edgedrift.data import load_dataset
from edgedrift.strategies import STRATEGIES
from edgedrift_edge.settings import AgentSettings

PROMETHEUS = ROOT / "deploy" / "prometheus"


def smoke() -> ModuleType:
    return load_script(ROOT / "deploy" / "monitoring_smoke.py", "edgedrift_deploy_monitoring_smoke")


def rules(path: Path) -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]


def test_short_windows_change_only_the_windows_and_intervals(tmp_path: Path) -> None:
    windows = smoke().render_short(tmp_path)
    shipped, short = rules(PROMETHEUS / "rules.yml"), rules(tmp_path / "rules.yml")
    assert len(shipped) == len(short)
    for before, after in zip(shipped, short, strict=True):
        assert {k: v for k, v in before.items() if k != "for"} == {
            k: v for k, v in after.items() if k != "for"
        }
        if "for" in before:
            assert smoke().seconds(after["for"]) == max(1, round(smoke().seconds(before["for"]) / 10))
    assert windows.for_s["EdgeDriftQualityFalling"] == 60.0 and windows.for_s["EdgeDriftGatewayDown"] == 12.0
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    rendered = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    assert rendered["global"] == {"scrape_interval": "5s", "evaluation_interval": "5s"}
    assert {k: v for k, v in rendered.items() if k != "global"} == {
        k: v for k, v in config.items() if k != "global"
    }


def test_prometheus_scrapes_every_agent_at_its_metrics_port() -> None:
    m = smoke()
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = [t for group in jobs["edgedrift-gateways"]["static_configs"] for t in group["targets"]]
    agents = [
        name for name, service in SERVICES.items() if "EDGEDRIFT_EDGE_DEVICE_ID" in environment(service)
    ]
    assert sorted(targets) == sorted(f"{a}:{m.METRICS_PORT}" for a in agents) and len(agents) == 3
    for agent in agents:
        env = environment(SERVICES[agent])
        assert env["EDGEDRIFT_EDGE_METRICS_PORT"] == str(m.METRICS_PORT)
        assert not any(str(m.METRICS_PORT) in str(p) for p in SERVICES[agent].get("ports", [])), (
            "not published"
        )
    assert 'job="edgedrift-gateways"' in next(
        r["expr"] for r in rules(PROMETHEUS / "rules.yml") if r.get("alert") == "EdgeDriftGatewayDown"
    )


def test_the_smoke_test_matches_the_stack() -> None:
    m = smoke()
    assert set(m.SERVICES) <= set(SERVICES) and SERVICES["prometheus"]["profiles"] == ["monitoring"]
    assert m.prometheus_image() == SERVICES["prometheus"]["image"]
    assert f"-t {m.prometheus_image()} deploy/smoke/prometheus" in (m.STAND_IN / "Dockerfile").read_text()
    device = {a: environment(SERVICES[a])["EDGEDRIFT_EDGE_DEVICE_ID"] for a in m.AGENTS}
    assert device["edge-1"] == m.DRIFTING and device[m.HUNG] == m.HUNG_DEVICE and m.STOPPED in device
    assert len({"edge-1", m.HUNG, m.STOPPED}) == 3, "one fault per agent"
    assert STRATEGIES[m.STRATEGY].name == m.STRATEGY
    stable, drift = load_dataset(m.STABLE), load_dataset(m.DRIFT)
    assert not stable.drift_points and len(stable.y) >= m.STABLE_SAMPLES
    assert AgentSettings.model_fields["warmup_samples"].default < m.STABLE_SAMPLES, "a model before the drift"
    assert drift.drift_points[0] == m.CONCEPT and len(drift.y) == m.DRIFT_SAMPLES
    assert m.DRIFT_SAMPLES / m.DRIFT_RATE > 15 * 60, "the drifting stream outlasts the shipped quality window"
    # The same points (seed 0): concept A's labels, then the same labels flipped.
    assert (drift.y[: m.CONCEPT] == stable.y[: m.CONCEPT]).all()
    assert (drift.y[m.CONCEPT : m.STABLE_SAMPLES] == -stable.y[m.CONCEPT :]).all()
    assert environment(SERVICES["cloud"])["EDGEDRIFT_CLOUD_RECOMPUTE_BUDGET_PER_MINUTE"] == "unlimited"


def test_the_expected_alerts_are_the_rules_and_their_bounds_the_pipeline() -> None:
    m = smoke()
    windows = m.shipped_windows()
    assert (windows.scrape_s, windows.evaluation_s) == (15.0, 30.0)
    expected = {e.alert: e for e in m.expectations(windows)}
    assert set(expected) <= set(windows.for_s)
    assert set(expected) == {
        "EdgeDriftQualityFalling",
        "EdgeDriftDevicesSilent",
        "EdgeDriftDeviceSilent",
        "EdgeDriftGatewayDown",
    }
    assert expected["EdgeDriftGatewayDown"].onset_s == 45.0  # a failed scrape, then an evaluation
    assert expected["EdgeDriftDeviceSilent"].onset_s > 120.0 > expected["EdgeDriftDevicesSilent"].onset_s
    assert {e.fault for e in expected.values()} == {"drift", "hang", "stop"}


def test_alert_times_are_read_from_prometheus_s_format() -> None:
    at = smoke().active_at("2026-11-29T21:30:01.123456789Z")
    assert at == datetime(2026, 11, 29, 21, 30, 1, 123456, tzinfo=UTC).timestamp()
