"""Model quality for Prometheus: what the devices' latest heartbeats say about their models, with a
number of series that does not grow with the fleet unless the operator asks for per-device series.

One statement reads every device's fleet row (:func:`~edgedrift_cloud.fleet_query.device_rows`: status,
drifting, accuracy, RMSE, versions) at most every ``metrics_quality_max_age_s`` per worker; a scrape in
between is answered from that snapshot, so a scrape never waits for a fleet-wide scan more than once per
period, whatever the number of scrapers. From it:

* ``edgedrift_fleet_accuracy`` and ``edgedrift_fleet_rmse``: histograms over the devices heard from
  recently (online or degraded) that report one; ``edgedrift_fleet_model_age_seconds``: over the devices
  with a model issued by the cloud (age of their newest version);
* ``edgedrift_fleet_low_accuracy_devices`` (below ``metrics_low_accuracy``) and
  ``edgedrift_fleet_falling_quality_devices{task}``: devices whose quality fell against their own
  baseline, a moving average of their past values (time constant ``metrics_quality_baseline_s``) kept in
  this worker; ``edgedrift_fleet_drift_state_devices{state}`` (the monitor's warning or a new drift
  event: ``drifting``; ``stable``; ``unknown`` when not heard from recently);
  ``edgedrift_fleet_outdated_devices`` (running an older version than the cloud's newest);
* per device, for at most ``metrics_quality_devices`` devices (off by default):
  ``edgedrift_device_accuracy``, ``edgedrift_device_rmse``, ``edgedrift_device_quality_baseline``,
  ``edgedrift_device_drifting``, ``edgedrift_device_model_age_seconds`` and
  ``edgedrift_device_last_seen_timestamp_seconds``.
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter
from typing import NamedTuple

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from sqlalchemy import null, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from edgedrift.wire_stats import stat_number
from edgedrift_cloud.db.tables import as_utc
from edgedrift_cloud.fleet_metrics import status_families
from edgedrift_cloud.fleet_query import STATUSES, device_rows
from edgedrift_cloud.settings import CloudSettings
from edgedrift_cloud.view_cache import STALE_FACTOR

log = logging.getLogger("edgedrift_cloud")

ACCURACY_BUCKETS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99, 1.0)
RMSE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 100.0)
MODEL_AGE_BUCKETS = (60.0, 300.0, 900.0, 3600.0, 6 * 3600.0, 86_400.0, 7 * 86_400.0, 30 * 86_400.0)
#: Statuses of a device heard from recently: its quality figures are current.
FRESH = ("online", "degraded")


@dataclass(frozen=True)
class QualityConfig:
    """The quality settings of :class:`~edgedrift_cloud.settings.CloudSettings`."""

    max_age_s: float = 15.0
    per_device: int = 0
    low_accuracy: float = 0.6
    accuracy_drop: float = 0.1
    rmse_rise: float = 0.5
    baseline_s: float = 3600.0

    @classmethod
    def of(cls, settings: CloudSettings) -> QualityConfig:
        return cls(
            max_age_s=settings.metrics_quality_max_age_s,
            per_device=settings.metrics_quality_devices,
            low_accuracy=settings.metrics_low_accuracy,
            accuracy_drop=settings.metrics_accuracy_drop,
            rmse_rise=settings.metrics_rmse_rise,
            baseline_s=settings.metrics_quality_baseline_s,
        )


class DeviceQuality(NamedTuple):
    """One device's quality as its latest heartbeat and the registry tell it (a tuple: 10,000 of them
    are built per snapshot)."""

    device_id: str
    status: str
    drifting: bool
    task: str | None
    accuracy: float | None
    rmse: float | None
    running_version: int | None
    latest_version: int | None
    last_recompute_at: datetime | None
    last_seen: datetime | None

    @property
    def fresh(self) -> bool:
        return self.status in FRESH

    @property
    def quality(self) -> float | None:
        """RMSE for regression, else accuracy."""
        return self.rmse if self.task == "regression" else self.accuracy


def read_quality(session: Session, last_seen: bool = True) -> list[DeviceQuality]:
    """Every device's quality row (in no particular order): one statement. Without ``last_seen`` (only
    the per-device series show it) that column is not read: parsing 10,000 timestamps is a third of the
    read on SQLite."""
    rows = device_rows(session).subquery("fleet")
    c = rows.c
    seen = c.last_seen if last_seen else null()
    statement = select(
        c.device_id, c.status, c.drifting, c.task, c.accuracy, c.rmse, c.running_version, c.recomputes,
        c.last_recompute_at, seen,
    )  # fmt: skip
    return [
        DeviceQuality(
            device,
            status,
            bool(drifting),
            task,
            stat_number(accuracy),
            stat_number(rmse),
            running,
            int(latest or 0) or None,
            as_utc(recomputed),
            as_utc(seen),
        )
        for device, status, drifting, task, accuracy, rmse, running, latest, recomputed, seen in (
            session.execute(statement)
        )
    ]


@dataclass
class Snapshot:
    """The fleet's quality rows and what this worker derived from them when they were read."""

    devices: list[DeviceQuality]
    #: Device id -> its baseline before this reading (devices heard from recently with a figure).
    baselines: dict[str, float]
    #: The devices whose quality fell against that baseline.
    falling: set[str]
    read_at: float  # time.time()
    took_s: float


class Baselines:
    """Each device's moving average of its quality (per worker): the reference a fall is measured
    against. Devices not heard from recently keep theirs unchanged; devices gone are forgotten."""

    def __init__(self, config: QualityConfig) -> None:
        self.config = config
        self._values: dict[str, tuple[float, float]] = {}  # device -> (average, updated at)

    def falls(self, device: DeviceQuality, baseline: float) -> bool:
        current = device.quality
        if current is None:
            return False
        if device.task == "regression":
            return current > baseline * (1.0 + self.config.rmse_rise)
        return current < baseline - self.config.accuracy_drop

    def update(self, devices: Sequence[DeviceQuality], now: float) -> tuple[dict[str, float], set[str]]:
        """Each fresh device's baseline before ``devices`` and the ones whose quality fell; then the
        baselines move towards the new values."""
        before: dict[str, float] = {}
        falling: set[str] = set()
        seen: set[str] = set()
        for device in devices:
            seen.add(device.device_id)
            current = device.quality
            if not device.fresh or current is None:
                continue
            old = self._values.get(device.device_id)
            if old is None:
                self._values[device.device_id] = (current, now)
                before[device.device_id] = current
                continue
            average, at = old
            before[device.device_id] = average
            if self.falls(device, average):
                falling.add(device.device_id)
            weight = 1.0 - math.exp(-max(now - at, 0.0) / self.config.baseline_s)
            self._values[device.device_id] = (average + weight * (current - average), now)
        for gone in set(self._values) - seen:
            del self._values[gone]
        return before, falling


class QualityCollector(Collector):
    """The quality series, from a snapshot at most ``max_age_s`` old, read once however many scrapes
    arrive meanwhile. As the fleet views' cache does (:mod:`view_cache`), a scrape that finds it stale
    is answered with it while one background thread reads the next; only a missing snapshot, or one
    older than ``STALE_FACTOR`` periods, is read while the scrape waits (0: read on every scrape)."""

    def __init__(self, sessions: sessionmaker[Session], config: QualityConfig) -> None:
        self.sessions = sessions
        self.config = config
        self.baselines = Baselines(config)
        self._snapshot: Snapshot | None = None
        self._lock = threading.Lock()
        self._refreshing = threading.Lock()

    def snapshot(self) -> Snapshot | None:
        """The current snapshot (None: never readable)."""
        held = self._snapshot
        period = self.config.max_age_s
        age = math.inf if held is None else time.time() - held.read_at
        if held is not None and age < period:
            return held
        if held is not None and age < period * STALE_FACTOR:
            if self._refreshing.acquire(blocking=False):
                threading.Thread(
                    target=self._refresh_then_release, name="edgedrift-quality", daemon=True
                ).start()
            return held
        return self._read()

    def _refresh_then_release(self) -> None:
        try:
            self._read()
        finally:
            self._refreshing.release()

    def _read(self) -> Snapshot | None:
        """Read the fleet's rows unless another thread just did (a reader in progress is waited for)."""
        with self._lock:
            held = self._snapshot
            if held is not None and time.time() - held.read_at < self.config.max_age_s:
                return held
            started = time.perf_counter()
            try:
                with self.sessions() as session:
                    devices = read_quality(session, last_seen=self.config.per_device > 0)
            except SQLAlchemyError as exc:  # edgedrift_database_up reports the outage
                log.warning("metrics: quality not read", extra={"error": type(exc).__name__})
                recent = (
                    held is not None and time.time() - held.read_at < self.config.max_age_s * STALE_FACTOR
                )
                return held if recent else None
            now = time.time()
            before, falling = self.baselines.update(devices, now)
            self._snapshot = Snapshot(devices, before, falling, now, time.perf_counter() - started)
            return self._snapshot

    def collect(self) -> Iterable[Metric]:
        snap = self.snapshot()
        if snap is None:
            return []
        return [*self._fleet(snap), *self._per_device(snap)]

    def _fleet(self, snap: Snapshot) -> list[Metric]:
        fresh = [d for d in snap.devices if d.fresh]
        accuracy = [d.accuracy for d in fresh if d.task != "regression" and d.accuracy is not None]
        rmse = [d.rmse for d in fresh if d.task == "regression" and d.rmse is not None]
        ages = [snap.read_at - d.last_recompute_at.timestamp() for d in snap.devices if d.last_recompute_at]
        low = GaugeMetricFamily(
            "edgedrift_fleet_low_accuracy_devices",
            "Classifiers heard from recently whose recent accuracy is below metrics_low_accuracy.",
        )
        low.add_metric([], sum(1 for a in accuracy if a < self.config.low_accuracy))
        falling = GaugeMetricFamily(
            "edgedrift_fleet_falling_quality_devices",
            "Devices whose accuracy fell (RMSE rose) against their own moving baseline.",
            labels=["task"],
        )
        by_id = {d.device_id: d for d in fresh}
        for task in ("classification", "regression"):
            count = sum(1 for i in snap.falling if (by_id[i].task == "regression") == (task == "regression"))
            falling.add_metric([task], count)
        drift = GaugeMetricFamily(
            "edgedrift_fleet_drift_state_devices",
            "Devices by the monitor's state in their latest heartbeat (unknown: not heard from recently).",
            labels=["state"],
        )
        drifting = sum(1 for d in fresh if d.drifting)
        drift.add_metric(["drifting"], drifting)
        drift.add_metric(["stable"], len(fresh) - drifting)
        drift.add_metric(["unknown"], len(snap.devices) - len(fresh))
        outdated = GaugeMetricFamily(
            "edgedrift_fleet_outdated_devices",
            "Devices heard from recently running an older model version than the cloud's newest.",
        )
        outdated.add_metric(
            [],
            sum(1 for d in fresh if d.latest_version and (d.running_version or 0) < d.latest_version),
        )
        read_age = GaugeMetricFamily(
            "edgedrift_quality_snapshot_age_seconds", "Age of the quality snapshot this scrape reports."
        )
        read_age.add_metric([], time.time() - snap.read_at)
        took = GaugeMetricFamily(
            "edgedrift_quality_snapshot_duration_seconds", "Time the last quality snapshot took to read."
        )
        took.add_metric([], snap.took_s)
        histograms = [
            ("edgedrift_fleet_accuracy", "Recent accuracy of classifiers heard from recently.", accuracy),
            ("edgedrift_fleet_rmse", "Recent RMSE of regressors heard from recently.", rmse),
            ("edgedrift_fleet_model_age_seconds", "Age of each device's newest model version.", ages),
        ]
        bounds = (ACCURACY_BUCKETS, RMSE_BUCKETS, MODEL_AGE_BUCKETS)
        made = [_histogram(n, t, v, b) for (n, t, v), b in zip(histograms, bounds, strict=True)]
        counts = dict.fromkeys((*STATUSES, "drifting"), 0)
        for d in snap.devices:
            counts[d.status] += 1
            counts["drifting"] += d.drifting
        return [*status_families(counts), *made, low, falling, drift, outdated, read_age, took]

    def _per_device(self, snap: Snapshot) -> list[Metric]:
        cap = self.config.per_device
        if cap <= 0:
            return []
        shown = heapq.nsmallest(cap, snap.devices, key=attrgetter("device_id"))
        families = {
            name: GaugeMetricFamily(f"edgedrift_device_{name}", text, labels=["device"])
            for name, text in (
                ("accuracy", "The device's recent accuracy (classification), from its latest heartbeat."),
                ("rmse", "The device's recent RMSE (regression), from its latest heartbeat."),
                ("quality_baseline", "The device's moving baseline of its accuracy or RMSE (this worker)."),
                ("drifting", "1 when the device's latest heartbeat reports a warning or a new drift."),
                ("model_age_seconds", "Age of the device's newest model version."),
                ("last_seen_timestamp_seconds", "When the device was last heard from (Unix time)."),
            )
        }
        for d in shown:
            key = [d.device_id]
            if d.fresh and d.task != "regression" and d.accuracy is not None:
                families["accuracy"].add_metric(key, d.accuracy)
            if d.fresh and d.task == "regression" and d.rmse is not None:
                families["rmse"].add_metric(key, d.rmse)
            if d.device_id in snap.baselines:
                families["quality_baseline"].add_metric(key, snap.baselines[d.device_id])
            families["drifting"].add_metric(key, float(d.fresh and d.drifting))
            if d.last_recompute_at is not None:
                families["model_age_seconds"].add_metric(key, snap.read_at - d.last_recompute_at.timestamp())
            if d.last_seen is not None:
                families["last_seen_timestamp_seconds"].add_metric(key, d.last_seen.timestamp())
        omitted = GaugeMetricFamily(
            "edgedrift_device_series_omitted",
            "Devices past metrics_quality_devices, without per-device series.",
        )
        omitted.add_metric([], len(snap.devices) - len(shown))
        return [*families.values(), omitted]


def _histogram(name: str, text: str, values: Sequence[float], bounds: Sequence[float]) -> Metric:
    """A histogram family of ``values`` (cumulative buckets, +Inf last)."""
    ordered = sorted(values)
    buckets: list[tuple[str, float]] = []
    index = 0
    for bound in bounds:
        while index < len(ordered) and ordered[index] <= bound:
            index += 1
        buckets.append((floatToGoString(bound), index))  # type: ignore[no-untyped-call]
    buckets.append(("+Inf", len(ordered)))
    family = HistogramMetricFamily(name, text)
    family.add_metric([], buckets, sum_value=math.fsum(ordered))
    return family
