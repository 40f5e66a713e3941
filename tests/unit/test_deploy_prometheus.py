"""deploy/prometheus/ and deploy/grafana/: ``promtool check rules`` and ``promtool test rules`` pass, every
alert is unit-tested firing, the compose profile's Prometheus configuration is valid and mounts what it
names, and the committed Grafana dashboard is the generator's output with queries on its data source."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.compose import COMPOSE, load_compose
from support.dockerfiles import ROOT
from support.grafana import dashboard_generator

from edgedrift_cloud.fleet_query import STALE_AFTER_S
from edgedrift_edge.settings import AgentSettings

PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "rules.yml"
RULE_TESTS = PROMETHEUS / "rules_test.yml"
GRAFANA = ROOT / "deploy" / "grafana"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="needs promtool (apt-get install -y prometheus; .ci/run installs it)"
)


def promtool(*args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    argv = [PROMTOOL, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd, check=False)


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    out = promtool("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules())} rules found" in out.stdout


@needs_promtool
def test_promtool_unit_tests_of_the_rules_pass() -> None:
    out = promtool("test", "rules", RULE_TESTS.name)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


@needs_promtool
def test_promtool_fails_a_wrong_expectation(tmp_path: Path) -> None:
    """A negative control: the unit tests would catch an alert that no longer fires."""
    tests = yaml.safe_load(RULE_TESTS.read_text())
    shutil.copy(RULES, tmp_path / "rules.yml")
    first = tests["tests"][0]["alert_rule_test"]
    firing = next(t for t in first if t["exp_alerts"])
    firing["exp_alerts"] = []
    (tmp_path / "rules_test.yml").write_text(yaml.safe_dump(tests))
    out = promtool("test", "rules", "rules_test.yml", cwd=tmp_path)
    assert out.returncode != 0 and "FAILED" in out.stdout + out.stderr


def test_every_alert_is_tested_firing_and_the_issue_s_alerts_exist() -> None:
    alerts = {r["alert"] for r in rules() if "alert" in r}
    assert {
        "EdgeDriftDevicesSilent",
        "EdgeDriftRecomputeDemandAboveBudget",
        "EdgeDriftRecomputeFailures",
        "EdgeDriftCloud5xx",
        "EdgeDriftTrainingSlow",
        "EdgeDriftDatabaseNotReady",
        # issue 31: quality, degraded and silent devices, gateways, drops, the budget
        "EdgeDriftQualityFalling",
        "EdgeDriftLowAccuracyDevices",
        "EdgeDriftDeviceAccuracyFalling",
        "EdgeDriftDeviceRmseRising",
        "EdgeDriftDevicesDegraded",
        "EdgeDriftDeviceSilent",
        "EdgeDriftGatewayDown",
        "EdgeDriftGatewayDrops",
        "EdgeDriftRecomputeBudgetExhausted",
    } <= alerts
    tested = {
        case["alertname"]
        for group in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in group.get("alert_rule_test", [])
        if case["exp_alerts"]
    }
    assert alerts == tested, f"alerts never tested firing: {alerts - tested}"
    for rule in rules():
        if "alert" in rule:
            assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
            assert rule["annotations"]["summary"], rule["alert"]


def test_silence_means_three_heartbeats_of_the_agent() -> None:
    """The alert's "3 heartbeats" is the fleet summary's stale threshold at the agent's default period."""
    period = AgentSettings.model_fields["heartbeat_every_s"].default
    assert 3 * period == STALE_AFTER_S
    silent = next(r for r in rules() if r.get("alert") == "EdgeDriftDevicesSilent")
    assert f"default {period:g} s" in silent["annotations"]["description"]


@needs_promtool
def test_compose_profile_prometheus_config_is_valid(tmp_path: Path) -> None:
    service = load_compose(COMPOSE)["services"]["prometheus"]
    assert service["profiles"] == ["monitoring"]
    mounts = {}
    for volume in service["volumes"]:
        source, _, rest = volume.partition(":")
        if source.startswith("./"):
            mounts[rest.split(":")[0]] = ROOT / source
    config_path = next(a.split("=", 1)[1] for a in service["command"] if a.startswith("--config.file="))
    config = yaml.safe_load(mounts[config_path].read_text())
    assert config["rule_files"] == ["/etc/prometheus/rules.yml"]
    assert mounts["/etc/prometheus/rules.yml"] == RULES
    assert config["scrape_configs"][0]["static_configs"][0]["targets"] == ["cloud:8000"]
    assert config["scrape_configs"][0]["job_name"] == "edgedrift-cloud", "EdgeDriftCloudDown selects this job"
    # promtool resolves rule files itself: check the configuration with the rules where it names them.
    shutil.copy(RULES, tmp_path / "rules.yml")
    config["rule_files"] = [str(tmp_path / "rules.yml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    out = promtool("check", "config", str(tmp_path / "prometheus.yml"), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


def test_committed_dashboard_is_the_generator_s_output() -> None:
    generator = dashboard_generator()
    committed = (GRAFANA / "dashboards" / "edgedrift.json").read_text()
    assert committed == generator.render(), "run: python deploy/grafana/dashboard.py"


def test_dashboard_panels_use_the_provisioned_data_source_and_do_not_overlap() -> None:
    generator = dashboard_generator()
    board = generator.dashboard()
    source = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    uid = source["datasources"][0]["uid"]
    cells: set[tuple[int, int]] = set()
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert len(panels) >= 10
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        covered = {(grid["x"] + dx, grid["y"] + dy) for dx in range(grid["w"]) for dy in range(grid["h"])}
        assert not covered & cells, f"{panel['title']} overlaps another panel"
        cells |= covered
    assert uid not in generator.render(), "the dashboard must not hard-code the data source's uid"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    for name in ("gateway", "device"):
        assert (
            variables[name]["multi"] and variables[name]["includeAll"] and variables[name]["allValue"] == ".*"
        )
        assert variables[name]["datasource"]["uid"] == "${datasource}"
    assert "$gateway" in variables["device"]["definition"], "the device list follows the chosen gateways"
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
        assert all(t["expr"] and t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])
        for target in panel["targets"]:
            if "edgedrift_device_" in target["expr"] or "edgedrift_edge_" in target["expr"]:
                assert "$device" in target["expr"] or "$gateway" in target["expr"], target["expr"]
    quality = [p for p in panels if any("edgedrift_fleet_accuracy" in t["expr"] for t in p["targets"])]
    assert quality and quality[0]["fieldConfig"]["defaults"]["unit"] == "percentunit"
    annotations = board["annotations"]["list"]
    assert any("edgedrift_recomputes_total" in a["expr"] for a in annotations)
    assert all(a["enable"] and a["datasource"]["uid"] == "${datasource}" for a in annotations)
    provider = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "edgedrift.yml").read_text())
    grafana = load_compose(COMPOSE)["services"]["grafana"]
    path = provider["providers"][0]["options"]["path"]
    assert f"./deploy/grafana/dashboards:{path}:ro" in grafana["volumes"]


@needs_promtool
def test_the_kubernetes_scrape_jobs_are_the_ones_the_rules_select(tmp_path: Path) -> None:
    """kubernetes-scrape.yml keeps the pods of each component by their prometheus.io annotations, under
    the job names the "down" alerts select; promtool checks it with the pod discovery replaced by a static
    target (Debian's promtool is built without the Kubernetes discovery), so every relabelling is checked."""
    config = yaml.safe_load((PROMETHEUS / "kubernetes-scrape.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    exprs = {r["alert"]: r["expr"] for r in rules() if "alert" in r}
    for job, component, alert in [
        ("edgedrift-cloud", "cloud", "EdgeDriftCloudDown"),
        ("edgedrift-gateways", "gateway", "EdgeDriftGatewayDown"),
    ]:
        assert f'job="{job}"' in exprs[alert]
        keeps = {
            tuple(r["source_labels"]): r["regex"]
            for r in jobs[job]["relabel_configs"]
            if r.get("action") == "keep"
        }
        assert keeps[("__meta_kubernetes_pod_label_app_kubernetes_io_component",)] == component
        assert keeps[("__meta_kubernetes_pod_annotation_prometheus_io_scrape",)] == "true"
    for job in jobs.values():
        assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}]
        job["static_configs"] = [{"targets": ["127.0.0.1:9464"]}]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    out = promtool("check", "config", str(tmp_path / "prometheus.yml"), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
