"""Fleet health for Prometheus, with a bounded number of series whatever the fleet's size: whether the
registry database answers, and how many devices are in each status of the fleet summary (``stale`` =
silent for three heartbeats at the agent's default period). The alerting rules in deploy/prometheus/
read these; per-device detail stays in the dashboard.

With a :class:`~edgedrift_cloud.quality_metrics.QualityCollector`, that collector exports the counts
from its snapshot of the fleet's rows (the same rows the summary counts, at most
``metrics_quality_max_age_s`` old) and this one asks the database only ``SELECT 1`` per scrape: one
fleet-wide read per period instead of one per scrape."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from edgedrift_cloud.fleet_query import STATUSES, fleet_summary

if TYPE_CHECKING:
    from edgedrift_cloud.quality_metrics import QualityCollector

log = logging.getLogger("edgedrift_cloud")


class FleetCollector(Collector):
    """``edgedrift_database_up``, ``edgedrift_fleet_devices{status}`` and
    ``edgedrift_fleet_drifting_devices``, read at scrape time with one summary statement."""

    def __init__(self, sessions: sessionmaker[Session], quality: QualityCollector | None = None) -> None:
        self.sessions = sessions
        self.quality = quality

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "edgedrift_database_up", "1 when the registry database answered this scrape, else 0."
        )
        try:
            with self.sessions() as session:
                if self.quality is not None:  # it exports the counts, from its snapshot
                    session.execute(text("SELECT 1"))
                    up.add_metric([], 1)
                    return [up]
                summary = fleet_summary(session, None)
        except SQLAlchemyError as exc:
            log.warning("metrics: registry database unreachable", extra={"error": type(exc).__name__})
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        counts: dict[str, int] = {s: getattr(summary, s) for s in STATUSES}
        counts["drifting"] = summary.drifting
        return [up, *status_families(counts)]


def status_families(counts: dict[str, int]) -> list[Metric]:
    """``edgedrift_fleet_devices{status}`` and ``edgedrift_fleet_drifting_devices`` from their counts."""
    devices = GaugeMetricFamily(
        "edgedrift_fleet_devices", "Registered devices by status (fleet summary).", labels=["status"]
    )
    for status in STATUSES:
        devices.add_metric([status], counts[status])
    drifting = GaugeMetricFamily(
        "edgedrift_fleet_drifting_devices", "Devices whose latest heartbeat reports drift."
    )
    drifting.add_metric([], counts["drifting"])
    return [devices, drifting]
