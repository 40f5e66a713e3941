"""FastAPI dependencies as annotated aliases: settings, database session, caller, device access."""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Annotated, TypeVar

import anyio
from fastapi import Depends, HTTPException, Path, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from edgedrift.wire import DEVICE_ID_PATTERN
from edgedrift_cloud import registry
from edgedrift_cloud.admission import TrainingPool
from edgedrift_cloud.auth import Principal, TokenCache, hash_secret
from edgedrift_cloud.credential_watch import CredentialWatch
from edgedrift_cloud.fleet_query import FleetSummary
from edgedrift_cloud.gate import MissCache
from edgedrift_cloud.history import FleetHistoryBytes, HistoryLimits
from edgedrift_cloud.job_queue import JobQueue
from edgedrift_cloud.observability import Metrics
from edgedrift_cloud.rate_limit import DeviceLimits
from edgedrift_cloud.settings import CloudSettings
from edgedrift_cloud.view_cache import ViewCache

T = TypeVar("T")


@dataclass
class AppState:
    """What one app instance owns (stored on ``app.state.edgedrift``)."""

    settings: CloudSettings
    engine: Engine
    sessions: sessionmaker[Session]
    metrics: Metrics
    tokens: TokenCache
    #: Trainings in flight and queued in this worker (admission control).
    trainings: TrainingPool = field(default_factory=lambda: TrainingPool(2, 32, processes=False))
    #: The last database failure answered with a 503 and when (monotonic s): ``/readyz`` reports it.
    database_error: tuple[float, str] | None = None
    #: Credentials the registry did not know, remembered for ``auth_miss_cache_seconds``.
    misses: MissCache = field(default_factory=lambda: MissCache(0.0))
    #: Whether :attr:`tokens` may be trusted (PostgreSQL's credential notifications); None: never.
    credentials: CredentialWatch | None = None
    #: Per-device rate limits of this worker: heartbeats, history uploads and their bytes.
    limits: DeviceLimits = field(default_factory=DeviceLimits)
    #: The fleet summary at default thresholds, computed at most every ``fleet_summary_max_age_s``.
    summary: ViewCache[FleetSummary] = field(default_factory=lambda: ViewCache(0.0))
    #: The fleet's stored history bytes (``history_bytes_total``), recounted every minute.
    fleet_history: FleetHistoryBytes = field(default_factory=FleetHistoryBytes)
    #: The training queue (``training=queue``); None: trainings run in :attr:`trainings`.
    jobs: JobQueue | None = None

    @property
    def history_limits(self) -> HistoryLimits:
        return HistoryLimits(self.settings.history_labels, self.settings.history_bytes_per_device)

    @cached_property
    def operator_hash(self) -> str:
        """The operator token's sha256, compared with a presented token's in constant time."""
        return hash_secret(self.settings.operator_token.get_secret_value())

    @property
    def credential_generation(self) -> int:
        """The credential generation this worker heard last (see :meth:`wait_heard`)."""
        return self.credentials.generation if self.credentials is not None else 0

    def wait_heard(self, before: int, timeout_s: float = 2.0) -> None:
        """Called in a request thread after it committed a credential change: return once this worker
        heard the database's notification of it (a generation after ``before``) or after ``timeout_s``.
        The commit signals every worker's listening connection at the same moment, so the operator's
        call answers only once the change is heard, not while a notification may still be on its way."""
        watch = self.credentials
        deadline = time.monotonic() + timeout_s
        while watch is not None and watch.listening and time.monotonic() < deadline:
            anyio.from_thread.run_sync(watch.check)
            if watch.generation != before:
                return
            time.sleep(0.002)

    def note_database_error(self, reason: str) -> None:
        self.database_error = (time.monotonic(), reason)

    @cached_property
    def view_threads(self) -> anyio.CapacityLimiter:
        """The operator's fleet views' own threads (created on first use: a limiter needs the loop)."""
        return anyio.CapacityLimiter(self.settings.fleet_view_threads)

    @cached_property
    def heartbeat_threads(self) -> anyio.CapacityLimiter:
        """The gateways' heartbeat batches' own threads (created on first use)."""
        return anyio.CapacityLimiter(self.settings.heartbeat_threads)

    def with_session(self, read: Callable[[Session], T]) -> T:
        """``read`` with a session of its own (blocking)."""
        with self.sessions() as session:
            return read(session)

    async def read_view(self, read: Callable[[Session], T]) -> T:
        """A blocking fleet view with a session of its own, in :attr:`view_threads`, not in the pool
        the devices share."""
        return await anyio.to_thread.run_sync(partial(self.with_session, read), limiter=self.view_threads)

    async def store_heartbeats(self, write: Callable[[Session], T]) -> T:
        """A gateway's heartbeat batch written (and committed by ``write``) with a session of its own,
        in :attr:`heartbeat_threads`, not in the pool the devices' recomputes share."""
        return await anyio.to_thread.run_sync(
            partial(self.with_session, write), limiter=self.heartbeat_threads
        )


async def get_state(request: Request) -> AppState:
    state: AppState = request.app.state.edgedrift
    return state


def get_session(state: Annotated[AppState, Depends(get_state)]) -> Iterator[Session]:
    with state.sessions() as session:
        yield session


StateDep = Annotated[AppState, Depends(get_state)]
SessionDep = Annotated[Session, Depends(get_session)]

_bearer = HTTPBearer(auto_error=False, description="A device secret or the operator token.")


def _unauthenticated(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"})


async def get_principal(
    state: StateDep, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    """The caller, from ``Authorization: Bearer <secret>``; 401 when missing or unknown.

    Async, so a cached credential costs no thread-pool hop; only a cache miss asks the database."""
    if credentials is None or not credentials.credentials:
        raise _unauthenticated("missing bearer credential")
    principal = await known_credential(state, credentials.credentials)
    if principal is None:
        raise _unauthenticated("unknown credential")
    return principal


#: The credential this request verified already (the gate checks it before the body is read, the route's
#: dependency again): a context variable, so it lives as long as the request's task and no longer.
_verified: ContextVar[tuple[str, Principal] | None] = ContextVar("edgedrift_verified", default=None)


async def known_credential(state: AppState, token: str) -> Principal | None:
    """The principal of a bearer token, or None (checked once per request, on the event loop).

    A device secret found in the registry is cached per worker for ``auth_cache_seconds``, but only used
    while the worker hears the database's credential notifications (PostgreSQL): any rotation,
    revocation or registration, made by any worker, replica or the CLI, voids every cached entry when it
    commits, so a revoked or rotated secret stops working at once everywhere. Without them (SQLite, or
    the listening connection lost) the registry is asked on every request. Unknown tokens are remembered
    for ``auth_miss_cache_seconds`` (voided by the same notifications)."""
    token_hash = hash_secret(token)
    if hmac.compare_digest(token_hash, state.operator_hash):
        return Principal("operator")
    verified = _verified.get()
    if verified is not None and verified[0] == token:
        return verified[1]
    watch = state.credentials
    trusted = watch is not None and watch.check()
    generation = watch.generation if watch is not None else 0
    device_id = state.tokens.get(token_hash, generation) if trusted else None
    if device_id is None:
        if state.misses.known_miss(token_hash, generation):
            return None
        state.metrics.credential_checks.labels("registry").inc()
        device_id = await anyio.to_thread.run_sync(_lookup_token, state, token_hash)
        if device_id is None:
            state.misses.add(token_hash, generation)
            return None
        if trusted:
            state.tokens.put(token_hash, device_id, generation)
    else:
        state.metrics.credential_checks.labels("cache").inc()
    principal = Principal("device", device_id)
    _verified.set((token, principal))
    return principal


def _lookup_token(state: AppState, token_hash: str) -> str | None:
    with state.sessions() as session:
        return registry.device_for_token_hash(session, token_hash)


def _device_exists(state: AppState, device_id: str) -> bool:
    with state.sessions() as session:
        return registry.device_exists(session, device_id)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def require_operator(principal: PrincipalDep) -> Principal:
    if principal.kind != "operator":
        raise HTTPException(status.HTTP_403_FORBIDDEN, "operator credential required")
    return principal


OperatorDep = Annotated[Principal, Depends(require_operator)]
DevicePath = Annotated[
    str,
    Path(pattern=DEVICE_ID_PATTERN, description="Device id: letters, digits, '_' and '-' (1-64 characters)."),
]


async def device_access(device_id: DevicePath, principal: PrincipalDep, state: StateDep) -> Principal:
    """A device may touch only itself (403 otherwise); the operator may touch any known device."""
    if not principal.may_access(device_id):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"credential is not valid for device {device_id!r}")
    if principal.kind == "operator" and not await anyio.to_thread.run_sync(_device_exists, state, device_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"unknown device {device_id!r}")
    return principal


DeviceAccessDep = Annotated[Principal, Depends(device_access)]
