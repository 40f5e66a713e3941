"""The FastAPI application: ``create_app(settings)`` wires settings, database, routers and middleware.

Run it with ``edgedrift-cloud serve`` (see :mod:`edgedrift_cloud.cli`) or any ASGI server:
``uvicorn edgedrift_cloud.main:app``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import anyio
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from edgedrift import __version__
from edgedrift.wire import DEVICE_ID_PATTERN
from edgedrift_cloud import gateway_registry, openapi, registry, retention, tracing
from edgedrift_cloud.admission import TrainingPool
from edgedrift_cloud.auth import TokenCache, same_secret
from edgedrift_cloud.credential_watch import CredentialWatch
from edgedrift_cloud.db.engine import make_engine, make_sessionmaker, upgrade
from edgedrift_cloud.dependencies import AppState, known_credential
from edgedrift_cloud.errors import BodyLimitMiddleware, install_handlers
from edgedrift_cloud.gate import AuthGate, FailureLimiter, LargeBodies, MissCache, Subject
from edgedrift_cloud.job_queue import JobQueue
from edgedrift_cloud.observability import Metrics, RequestLogMiddleware, configure_logging
from edgedrift_cloud.quality_metrics import QualityConfig
from edgedrift_cloud.rate_limit import DeviceLimits, RateLimiter
from edgedrift_cloud.routers import (
    bulk,
    dashboard,
    devices,
    fleet,
    gateways,
    health,
    history,
    models,
    stats,
    training,
)
from edgedrift_cloud.settings import CloudSettings, get_settings
from edgedrift_cloud.view_cache import ViewCache

log = logging.getLogger("edgedrift_cloud")
#: A request body above this is "large": bounded in number per credential and worker (agents' windows and
#: label batches are a few to a hundred kB).
LARGE_BODY_BYTES = 256 * 1024


def create_app(settings: CloudSettings | None = None, *, configure_logs: bool = True) -> FastAPI:
    """Build the service. Refuses insecure settings outside development mode (see CloudSettings)."""
    settings = settings or get_settings()
    if configure_logs:
        configure_logging(settings.log_level, settings.log_json)
    engine = make_engine(
        settings.database_url,
        connect_timeout_s=settings.database_connect_timeout_s,
        statement_timeout_s=settings.database_statement_timeout_s,
    )
    sessions = make_sessionmaker(engine)
    tracer_provider = tracing.configure("edgedrift-cloud")
    trainings = TrainingPool(
        settings.training_slots,
        settings.training_queue,
        processes=settings.training_processes,
        nice=settings.training_nice,
    )
    state = AppState(
        settings=settings,
        engine=engine,
        sessions=sessions,
        metrics=Metrics(sessions, settings.metrics_per_device, QualityConfig.of(settings)),
        tokens=TokenCache(settings.auth_cache_seconds),
        trainings=trainings,
        misses=MissCache(settings.auth_miss_cache_seconds),
        credentials=CredentialWatch(engine),
        summary=ViewCache(settings.fleet_summary_max_age_s),
        limits=DeviceLimits(
            RateLimiter(settings.heartbeats_per_minute),
            RateLimiter(settings.heartbeat_bytes_per_minute),
            RateLimiter(settings.history_uploads_per_minute),
            RateLimiter(settings.history_bytes_per_minute),
        ),
    )
    state.metrics.watch_admission(trainings, settings)
    if settings.training == "queue":
        state.jobs = JobQueue(
            settings.jobs_redis_url,
            settings.jobs_namespace,
            settings.jobs_poll_deadline_s,
            settings.jobs_heartbeat_timeout_s,
        )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.request_threads
        if settings.auto_migrate:
            upgrade(engine)
        if settings.devices:
            _provision(sessions, settings)
        log.info(
            "started",
            extra={
                "version": __version__,
                "database": engine.url.render_as_string(hide_password=True),
                "mode": settings.mode,
                "provisioned_devices": len(settings.devices),
            },
        )
        if state.jobs is None:
            trainings.start_in_background()
        credentials = state.credentials
        listener = None
        if credentials is not None and credentials.enabled and settings.auth_cache_seconds > 0:
            listener = asyncio.create_task(credentials.keep_listening(), name="credential-watch")
        keeper = None
        if settings.heartbeat_retention_hours > 0:
            keeper = asyncio.create_task(retention.keep_heartbeats(state), name="heartbeat-retention")
        yield
        if keeper is not None:
            keeper.cancel()
        if listener is not None:
            listener.cancel()
        if credentials is not None:
            credentials.close()
        trainings.shutdown()
        if state.jobs is not None:
            await state.jobs.close()
        engine.dispose()
        if tracer_provider is not None:
            tracer_provider.shutdown()

    app = FastAPI(
        title="EdgeDrift cloud trainer",
        version=__version__,
        description="Batch retrains for edge devices, a versioned model registry, recompute counters.",
        lifespan=lifespan,
        docs_url=None,  # served by routers/dashboard.py with vendored Swagger UI assets (no CDN)
        redoc_url=None,
    )
    app.state.edgedrift = state
    install_handlers(app, state.note_database_error)
    for module in (training, history, models, devices, bulk, gateways, stats, fleet, health, dashboard):
        app.include_router(module.router)
    app.include_router(training.jobs_router)
    app.mount("/dashboard/static", StaticFiles(directory=dashboard.STATIC), name="dashboard-static")
    openapi.install(app)
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body_bytes)
    app.add_middleware(
        AuthGate,
        verify=lambda: partial(credential_admits, state),
        limiter=FailureLimiter(settings.auth_failures_per_10s, 10.0),
        bodies=LargeBodies(LARGE_BODY_BYTES, settings.large_bodies_per_client, settings.large_bodies),
    )
    app.add_middleware(RequestLogMiddleware, metrics=lambda: state.metrics)
    return app


def _provision(sessions: sessionmaker[Session], settings: CloudSettings) -> None:
    """Register the devices of the settings that the registry does not hold yet. A device it holds keeps
    the secret and the revocation an operator gave it through the API: a worker that starts (or
    restarts) later must not undo a rotation or lift a revocation. Workers starting together may race,
    so a conflict is retried once (the other worker's rows are then seen and kept)."""
    for attempt in range(2):
        with sessions() as session:
            try:
                for device_id, secret in settings.devices.items():
                    if not registry.device_exists(session, device_id):
                        registry.upsert_device(session, device_id, secret.get_secret_value())
                session.commit()
                return
            except IntegrityError:
                session.rollback()
                if attempt == 1:
                    raise


async def credential_admits(state: AppState, subject: Subject, token: str) -> int:
    """The gate's check of ``token`` for a path's subject: 0 when it may act on it (the operator token,
    the subject device's own secret, the subject gateway's secret), 403 for another known device's
    secret, 401 otherwise (as the routes' own dependencies answer)."""
    if same_secret(token, state.settings.operator_token.get_secret_value()):
        return 0
    if subject.kind == "gateway":
        return 0 if await anyio.to_thread.run_sync(_gateway_accepts, state, subject.id, token) else 401
    principal = await known_credential(state, token)
    if principal is None:
        return 401
    if subject.kind == "device" and not re.fullmatch(DEVICE_ID_PATTERN, subject.id):
        return 0  # no device's route: the route refuses the id (422) before it reads a body
    return 0 if subject.kind == "device" and principal.device_id == subject.id else 403


def _gateway_accepts(state: AppState, gateway_id: str, token: str) -> bool:
    with state.sessions() as session:
        return gateway_registry.gateway_accepts(session, gateway_id, token)


def __getattr__(name: str) -> FastAPI:
    """``edgedrift_cloud.main:app`` for ASGI servers, built on first access from the environment."""
    if name == "app":
        return create_app()
    raise AttributeError(name)
