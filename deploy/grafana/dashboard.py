"""Generates the Grafana dashboard of the compose profile "monitoring" (dashboards/edgedrift.json).

The JSON is never edited by hand: change the panels here and run ``python deploy/grafana/dashboard.py``.
The test suite checks that the committed file is this script's output and that every metric a query
names is one the cloud exports or a recording rule of deploy/prometheus/rules.yml.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parent / "dashboards" / "edgedrift.json"
DATASOURCE = {"type": "prometheus", "uid": "edgedrift-prometheus"}
#: Grid: 24 columns; every panel of a row has the same height.
WIDTH = 24
HEIGHT = 8


@dataclass(frozen=True)
class Panel:
    """One panel: its queries (PromQL, legend) and how to show them."""

    title: str
    queries: tuple[tuple[str, str], ...]
    kind: str = "timeseries"
    unit: str = "short"
    width: int = 12
    description: str = ""
    thresholds: tuple[tuple[float, str], ...] = field(default=())


ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    (
        "Fleet",
        (
            Panel(
                "Devices by status",
                (("max by (status) (edgedrift_fleet_devices)", "{{status}}"),),
                kind="stat",
                width=10,
                description="Fleet summary: stale = silent for 3 heartbeats, offline = 2 minutes or never.",
            ),
            Panel(
                "Silent devices",
                (("edgedrift:devices_silent", "silent"),),
                kind="stat",
                width=5,
                thresholds=((0, "green"), (1, "orange")),
            ),
            Panel(
                "Drifting now",
                (("max(edgedrift_fleet_drifting_devices)", "drifting"),),
                kind="stat",
                width=5,
            ),
            Panel(
                "Database reachable",
                (("min(edgedrift_database_up)", "up"),),
                kind="stat",
                width=4,
                thresholds=((0, "red"), (1, "green")),
            ),
        ),
    ),
    (
        "Recomputes",
        (
            Panel(
                "Recomputes per minute by reason",
                (
                    (
                        "sum by (reason) (max by (device, learner, reason)"
                        " (rate(edgedrift_recomputes_total[5m]))) * 60",
                        "{{reason}}",
                    ),
                ),
                unit="short",
            ),
            Panel(
                "Demand, admitted and budget (per minute)",
                (
                    ("edgedrift:recompute_requested_per_minute:rate5m", "requested"),
                    ("edgedrift:recompute_admitted_per_minute:rate5m", "admitted"),
                    ("edgedrift:recompute_budget_per_minute", "budget"),
                ),
            ),
            Panel(
                "Refused recomputes per minute by reason",
                (("sum by (reason) (rate(edgedrift_recompute_rejected_total[5m])) * 60", "{{reason}}"),),
            ),
            Panel(
                "Trainings in flight",
                (("sum(edgedrift_trainings_in_flight)", "in flight"),),
            ),
        ),
    ),
    (
        "Cloud",
        (
            Panel(
                "Requests per second by status",
                (("sum by (status) (rate(edgedrift_http_requests_total[5m]))", "{{status}}"),),
                unit="reqps",
            ),
            Panel(
                "Share of 5xx answers",
                (("edgedrift:http_5xx:ratio_rate5m", "5xx"),),
                unit="percentunit",
            ),
            Panel(
                "Request latency p99 by route",
                (
                    (
                        "histogram_quantile(0.99, sum by (le, route)"
                        " (rate(edgedrift_http_request_seconds_bucket[5m])))",
                        "{{route}}",
                    ),
                ),
                unit="s",
            ),
            Panel(
                "Training time p99 by learner",
                (("edgedrift:training_seconds:p99_5m", "{{learner}}"),),
                unit="s",
            ),
            Panel(
                "Refused requests per second by reason",
                (("sum by (reason) (rate(edgedrift_rejected_requests_total[5m]))", "{{reason}}"),),
                unit="reqps",
                width=24,
            ),
        ),
    ),
)


def panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    steps = [{"color": color, "value": None if i == 0 else value} for i, (value, color) in
             enumerate(panel.thresholds or ((0, "green"),))]  # fmt: skip
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": HEIGHT, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {
            "defaults": {"unit": panel.unit, "thresholds": {"mode": "absolute", "steps": steps}},
            "overrides": [],
        },
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}}
        if panel.kind == "timeseries"
        else {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(panel.queries)
        ],
    }


def dashboard() -> dict[str, Any]:
    """The dashboard document: one collapsed-free row per group, panels laid out left to right."""
    panels: list[dict[str, Any]] = []
    y = 0
    next_id = 1
    for title, row in ROWS:
        panels.append({"id": next_id, "type": "row", "title": title, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": WIDTH, "x": 0, "y": y}})  # fmt: skip
        next_id += 1
        y += 1
        x = 0
        for panel in row:
            if x + panel.width > WIDTH:
                x, y = 0, y + HEIGHT
            panels.append(panel_json(panel, next_id, x, y))
            next_id += 1
            x += panel.width
        y += HEIGHT
    return {
        "uid": "edgedrift-operations",
        "title": "EdgeDrift operations",
        "tags": ["edgedrift"],
        "timezone": "utc",
        "editable": False,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": []},
        "annotations": {"list": []},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"


def main() -> int:
    OUTPUT.write_text(render())
    print(f"wrote {OUTPUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
