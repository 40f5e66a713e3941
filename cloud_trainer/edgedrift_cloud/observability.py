"""Structured logs and Prometheus metrics.

Recompute counters are read from the registry at scrape time (:class:`RegistryCollector`), so they
are exact across workers and restarts. Training-time and HTTP histograms are per process.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edgedrift_cloud.admission import TrainingPool
from edgedrift_cloud.fleet_metrics import FleetCollector
from edgedrift_cloud.quality_metrics import QualityCollector, QualityConfig
from edgedrift_cloud.registry import recompute_totals
from edgedrift_cloud.settings import CloudSettings

log = logging.getLogger("edgedrift_cloud")

REJECT_REASONS = {
    400: "malformed",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    409: "conflict",
    415: "unsupported_media_type",
    422: "invalid",
    429: "overloaded",
    499: "client_closed",
}

#: uvicorn's ``color_message`` extra repeats the message with ANSI colours: never in a JSON line.
_RESERVED = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "color_message",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the record's ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in _RESERVED})
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str, as_json: bool) -> None:
    """Send the service's and uvicorn's logs to stderr in one format; uvicorn's access log is off
    (the service logs each request itself, without headers, so tokens never reach a log)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if as_json else logging.Formatter("%(levelname)s %(name)s: %(message)s")
    )
    for name in ("edgedrift_cloud", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level)
        logger.propagate = False
    logging.getLogger("uvicorn.access").disabled = True


class RegistryCollector(Collector):
    """Recomputes, training time and bytes by device, learner and reason, read from the database."""

    def __init__(self, sessions: sessionmaker[Session], per_device: bool = False) -> None:
        self.sessions = sessions
        self.per_device = per_device

    def collect(self) -> Iterable[Metric]:
        labels = ["device", "learner", "reason"] if self.per_device else ["learner", "reason"]
        recomputes = CounterMetricFamily(
            "edgedrift_recomputes", "Batch retrains stored in the registry.", labels=labels
        )
        train = CounterMetricFamily(
            "edgedrift_recompute_train_seconds", "Training time of the stored retrains.", labels=labels
        )
        bytes_in = CounterMetricFamily(
            "edgedrift_recompute_bytes_in", "Request bytes of the stored retrains.", labels=labels
        )
        bytes_out = CounterMetricFamily(
            "edgedrift_recompute_bytes_out", "Model document bytes of the stored retrains.", labels=labels
        )
        try:
            with self.sessions() as session:
                rows = recompute_totals(session, self.per_device)
        except SQLAlchemyError:  # edgedrift_database_up (FleetCollector) reports the outage
            return []
        for device, learner, reason, count, ms, b_in, b_out in rows:
            key = [device, learner, reason] if self.per_device else [learner, reason]
            recomputes.add_metric(key, count)
            train.add_metric(key, ms / 1000.0)
            bytes_in.add_metric(key, b_in)
            bytes_out.add_metric(key, b_out)
        return [recomputes, train, bytes_in, bytes_out]


class Metrics:
    """The service's metric objects, in a registry of their own (one per app)."""

    def __init__(
        self, sessions: sessionmaker[Session], per_device: bool = False, quality: QualityConfig | None = None
    ) -> None:
        self.registry = CollectorRegistry()
        #: Model quality, from a snapshot of the fleet's rows (one per worker, shared by both registries);
        #: the fleet's counts by status come from the same snapshot.
        self.quality = QualityCollector(sessions, quality or QualityConfig())
        self.registry.register(RegistryCollector(sessions, per_device))
        self.registry.register(FleetCollector(sessions, self.quality))
        self.registry.register(self.quality)
        #: prometheus_client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, set by ``serve
        #: --workers N``): every worker writes its values to files there and a scrape sums them.
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self._scrape = CollectorRegistry() if self.multiprocess else self.registry
        if self.multiprocess:
            MultiProcessCollector(self._scrape)  # type: ignore[no-untyped-call]
            self._scrape.register(RegistryCollector(sessions, per_device))
            self._scrape.register(FleetCollector(sessions, self.quality))
            self._scrape.register(self.quality)
        self.training_seconds = Histogram(
            "edgedrift_training_seconds",
            "Pure training time per retrain.",
            ["learner"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.http_requests = Counter(
            "edgedrift_http_requests",
            "HTTP requests.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.http_seconds = Histogram(
            "edgedrift_http_request_seconds",
            "HTTP request latency.",
            ["method", "route"],
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.rejected = Counter(
            "edgedrift_rejected_requests",
            "Refused requests by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.recompute_admitted = Counter(
            "edgedrift_recompute_admitted",
            "Recomputes admitted by admission control and the budget.",
            registry=self.registry,
        )
        self.recompute_rejected = Counter(
            "edgedrift_recompute_rejected",
            "Recomputes refused by reason: queue_full, budget_fleet, budget_device (429), cost_cap (422).",
            ["reason"],
            registry=self.registry,
        )
        self.credential_checks = Counter(
            "edgedrift_credential_checks",
            "Device credentials checked, by where the answer came from: cache (this worker's, voided at "
            "every credential change the database notifies) or registry (a database round trip).",
            ["source"],
            registry=self.registry,
        )

        self.retune_deferred = Counter(
            "edgedrift_retune_deferred",
            "Re-tuning recomputes answered as plain recomputes because trainings were queued.",
            registry=self.registry,
        )
        self.jobs_waiting = Gauge(
            "edgedrift_training_jobs_waiting",
            "Jobs waiting for a training worker on the queue (training=queue), read from Redis at each "
            "scrape and admission.",
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )

    def watch_admission(self, trainings: TrainingPool, settings: CloudSettings) -> None:
        """Gauges of the budget the operator set (+Inf: none) and of the trainings (summed over the
        live workers in multiprocess mode)."""
        budget = Gauge(
            "edgedrift_recompute_budget_per_minute",
            "Fleet recompute budget per minute (+Inf when unlimited).",
            registry=self.registry,
            multiprocess_mode="max",
        )
        fleet = settings.recompute_budget_per_minute
        budget.set(math.inf if fleet is None else fleet)
        self.in_flight = Gauge(
            "edgedrift_trainings_in_flight",
            "Trainings running in the pool now (one whose client left counts until it has stopped).",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.queued = Gauge(
            "edgedrift_trainings_queued",
            "Admitted trainings waiting for a slot.",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self._trainings = trainings
        trainings.on_change = self.trainings_changed

    def trainings_changed(self) -> None:
        """Publish what runs in the pool and what waits for a slot (a job whose client left counts as
        running until it has stopped)."""
        pool = getattr(self, "_trainings", None)
        if pool is not None:
            self.in_flight.set(pool.running)
            self.queued.set(pool.waiting)

    def exposition(self) -> bytes:
        """The text a scrape returns (every worker's values in multiprocess mode)."""
        return generate_latest(self._scrape)


class RequestLogMiddleware:
    """Times every request, counts it in the HTTP metrics, and logs method, route, status and ms."""

    def __init__(self, app: ASGIApp, metrics: Callable[[], Metrics]) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            elapsed = time.perf_counter() - start
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            metrics = self.metrics()
            metrics.http_requests.labels(scope["method"], template, str(status)).inc()
            metrics.http_seconds.labels(scope["method"], template).observe(elapsed)
            if 400 <= status < 500:
                metrics.rejected.labels(REJECT_REASONS.get(status, str(status))).inc()
            if template != "/metrics":
                log.info(
                    "request",
                    extra={
                        "method": scope["method"],
                        "path": scope["path"],
                        "route": template,
                        "status": status,
                        "ms": round(elapsed * 1000, 3),
                    },
                )
