"""Fleet health for Prometheus, with a bounded number of series whatever the fleet's size: whether the
registry database answers, and how many devices are in each status of the fleet summary (``stale`` =
silent for three heartbeats at the agent's default period). The alerting rules in deploy/prometheus/
read these; per-device detail stays in the dashboard."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from edgedrift_cloud.fleet_query import STATUSES, fleet_summary

log = logging.getLogger("edgedrift_cloud")


class FleetCollector(Collector):
    """``edgedrift_database_up``, ``edgedrift_fleet_devices{status}`` and
    ``edgedrift_fleet_drifting_devices``, read at scrape time with one summary statement."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "edgedrift_database_up", "1 when the registry database answered this scrape, else 0."
        )
        try:
            with self.sessions() as session:
                summary = fleet_summary(session, None)
        except SQLAlchemyError as exc:
            log.warning("metrics: registry database unreachable", extra={"error": type(exc).__name__})
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        devices = GaugeMetricFamily(
            "edgedrift_fleet_devices", "Registered devices by status (fleet summary).", labels=["status"]
        )
        for status in STATUSES:
            devices.add_metric([status], getattr(summary, status))
        drifting = GaugeMetricFamily(
            "edgedrift_fleet_drifting_devices", "Devices whose latest heartbeat reports drift."
        )
        drifting.add_metric([], summary.drifting)
        return [up, devices, drifting]
