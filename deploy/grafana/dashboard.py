"""Generates the Grafana dashboard of the compose profile "monitoring" (dashboards/edgedrift.json).

The JSON is never edited by hand: change the panels here and run ``python deploy/grafana/dashboard.py``.
The test suite checks that the committed file is this script's output and that every metric a query
names is one the cloud or a gateway exports or a recording rule of deploy/prometheus/rules.yml.

Template variables: ``datasource`` (any Prometheus data source, so no uid is hard-coded), ``gateway`` (the
scrape targets of the job ``edgedrift-gateways``, as the gateway alerts name them) and ``device`` (the
devices of the chosen gateways, from their per-device counters, and of the cloud's per-device quality
series); both multi-valued with "All" matching everything, also a fleet whose gateways are not scraped.
Annotations mark recomputes: the cloud's stored retrains and the models the gateways installed.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parent / "dashboards" / "edgedrift.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: Label matchers of the template variables, for the gateway's series and the cloud's per-device ones.
ON_GATEWAY = 'instance=~"$gateway", device=~"$device"'
ON_DEVICE = 'device=~"$device"'
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
        "Model quality",
        (
            Panel(
                "Fleet accuracy: median and 10th percentile",
                (
                    ("histogram_quantile(0.5, max by (le) (edgedrift_fleet_accuracy_bucket))", "median"),
                    (
                        "histogram_quantile(0.1, max by (le) (edgedrift_fleet_accuracy_bucket))",
                        "10th percentile",
                    ),
                ),
                unit="percentunit",
                description="Classifiers heard from recently, each at its latest heartbeat's accuracy.",
            ),
            Panel(
                "Devices whose quality fell, below the floor, drifting",
                (
                    ("max by (task) (edgedrift_fleet_falling_quality_devices)", "falling ({{task}})"),
                    ("max(edgedrift_fleet_low_accuracy_devices)", "below the accuracy floor"),
                    ('max(edgedrift_fleet_drift_state_devices{state="drifting"})', "drifting"),
                ),
                description="Falling: accuracy 0.1 below (RMSE 50 % above) the device's own moving baseline.",
            ),
            Panel(
                "Accuracy by device",
                ((f"max by (device) (edgedrift_device_accuracy{{{ON_DEVICE}}})", "{{device}}"),),
                unit="percentunit",
                description="Per-device series: only with EDGEDRIFT_CLOUD_METRICS_QUALITY_DEVICES > 0.",
            ),
            Panel(
                "RMSE by device",
                ((f"max by (device) (edgedrift_device_rmse{{{ON_DEVICE}}})", "{{device}}"),),
                description="Per-device series: only with EDGEDRIFT_CLOUD_METRICS_QUALITY_DEVICES > 0.",
            ),
        ),
    ),
    (
        "Gateways",
        (
            Panel(
                "Samples per second by gateway",
                (
                    (
                        f"sum by (instance) (rate(edgedrift_edge_samples_total{{{ON_GATEWAY}}}[5m]))",
                        "{{instance}}",
                    ),
                ),
                unit="reqps",
            ),
            Panel(
                "Dropped and rejected per minute by gateway",
                (
                    (
                        f"sum by (instance) (rate(edgedrift_edge_dropped_total{{{ON_GATEWAY}}}[5m])) * 60",
                        "dropped {{instance}}",
                    ),
                    (
                        f"sum by (instance) (rate(edgedrift_edge_rejected_total{{{ON_GATEWAY}}}[5m])) * 60",
                        "rejected {{instance}}",
                    ),
                ),
            ),
            Panel(
                "Message latency p99 by gateway",
                (
                    (
                        "histogram_quantile(0.99, sum by (le, instance)"
                        f" (rate(edgedrift_edge_message_latency_seconds_bucket{{{ON_GATEWAY}}}[5m])))",
                        "{{instance}}",
                    ),
                ),
                unit="s",
            ),
            Panel(
                "Inbox depth by gateway",
                (
                    (
                        'max by (instance) (edgedrift_edge_inbox_messages{instance=~"$gateway"})',
                        "{{instance}}",
                    ),
                ),
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
                        f" (rate(edgedrift_recomputes_total{{{ON_DEVICE}}}[5m]))) * 60",
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


def variable(name: str, label: str, query: str) -> dict[str, Any]:
    """A multi-valued query variable whose "All" matches every value, none at all included."""
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-values"},
        "definition": query,
        "refresh": 2,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


TEMPLATING: list[dict[str, Any]] = [
    {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "refresh": 1,
        "current": {},
    },
    variable("gateway", "Gateway", 'label_values(up{job="edgedrift-gateways"}, instance)'),
    variable(
        "device",
        "Device",
        'label_values({__name__=~"edgedrift_edge_samples_total|edgedrift_device_accuracy|edgedrift_device_rmse",'
        ' instance=~"$gateway"}, device)',
    ),
]

#: Recompute markers on every time series panel: the cloud's stored retrains, the gateways' installs.
ANNOTATIONS: list[dict[str, Any]] = [
    {
        "name": "Recomputes (cloud)",
        "datasource": DATASOURCE,
        "enable": True,
        "iconColor": "purple",
        "expr": f"sum by (device, reason) (increase(edgedrift_recomputes_total{{{ON_DEVICE}}}[1m])) > 0",
        "step": "1m",
        "titleFormat": "recompute",
        "textFormat": "{{device}}: {{reason}}",
        "tagKeys": "reason",
    },
    {
        "name": "Models installed (gateways)",
        "datasource": DATASOURCE,
        "enable": True,
        "iconColor": "blue",
        "expr": "sum by (instance, device)"
        f" (increase(edgedrift_edge_recomputes_completed_total{{{ON_GATEWAY}}}[1m])) > 0",
        "step": "1m",
        "titleFormat": "model installed",
        "textFormat": "{{device}} on {{instance}}",
        "tagKeys": "instance",
    },
]


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
        "templating": {"list": TEMPLATING},
        "annotations": {"list": ANNOTATIONS},
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
