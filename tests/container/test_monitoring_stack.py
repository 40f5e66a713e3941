"""The compose stack with the ``monitoring`` profile up for real (deploy/monitoring_smoke.py, short
windows): in a real Prometheus, a device whose stream drifts while the recompute budget is 0 fires the
quality alert, a hung device the silence alerts and a stopped agent the gateway alert, each within its
rule's window. Container tier: skipped at once without a Docker engine or the project's images."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.dockerfiles import ROOT
from support.scripts import load_script

from edgedrift_harness.containers import engine_problem

pytestmark = pytest.mark.container

IMAGES = ("edgedrift-cloud:local", "edgedrift-edge:local", "eclipse-mosquitto:2", "python:3.11-slim")


@pytest.mark.timeout(1800)
def test_the_monitoring_profile_fires_the_alerts(tmp_path: Path) -> None:
    reason = engine_problem(IMAGES)
    if reason is not None:
        pytest.skip(reason)
    smoke = load_script(ROOT / "deploy" / "monitoring_smoke.py", "edgedrift_deploy_monitoring_smoke")
    out = tmp_path / "figures.json"
    assert smoke.main(["--windows", "short", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    alerts = figures["alerts"]
    for expected in figures["expected"]:
        fired = [
            row
            for key, row in alerts.items()
            if f"alertname={expected['alert']}" in key.split(",")
            and all(f"{k}={v}" in key.split(",") for k, v in expected["labels"].items())
        ]
        assert fired, f"{expected['alert']} {expected['labels']} did not fire: {sorted(alerts)}"
        row = fired[0]
        assert row["fault"] == expected["fault"]
        assert 0 < row["firing_after_s"] <= row["bound_s"], (expected["alert"], row)
        assert row["pending_to_firing_s"] >= expected["for_s"] - figures["intervals_s"]["evaluation"]
    assert figures["refused_for_budget"] > 0, "the drifting device asked for recomputes and was refused"
    assert figures["accuracy_after"] < min(figures["accuracy_before"].values()) - 0.1
