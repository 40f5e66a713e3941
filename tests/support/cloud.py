"""The cloud trainer as a real server for the tests: :class:`edgedrift_harness.cloud.CloudProcess` with the
tests' operator token and two provisioned devices."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from edgedrift_cloud import registry
from edgedrift_cloud.db.engine import make_engine, make_sessionmaker, upgrade
from edgedrift_harness.cloud import CloudProcess
from edgedrift_harness.postgres import fresh_database

__all__ = ["DEVICES", "OPERATOR", "UNLIMITED", "CloudServer", "backend_url", "field_error", "sqlite_cloud_in"]

OPERATOR = "operator-token-" + "x" * 24
DEVICES = {"dev-a": "secret-of-device-a-0123456789", "dev-b": "secret-of-device-b-0123456789"}


#: The per-device rate limits lifted (agents in tests send a heartbeat every 0.2 s; the limits have tests
#: of their own, tests/integration/test_cloud_limits.py).
UNLIMITED = {
    "EDGEDRIFT_CLOUD_HEARTBEATS_PER_MINUTE": "1000000",
    "EDGEDRIFT_CLOUD_HEARTBEAT_BYTES_PER_MINUTE": str(2**40),
    "EDGEDRIFT_CLOUD_HISTORY_UPLOADS_PER_MINUTE": "1000000",
    "EDGEDRIFT_CLOUD_HISTORY_BYTES_PER_MINUTE": str(2**40),
}


class CloudServer(CloudProcess):
    """``edgedrift-cloud serve`` with OPERATOR and DEVICES, per-device recompute series, no failed-auth
    limit (tests make many refused calls from one address) and no per-device rate limits; ``env`` adds
    EDGEDRIFT_CLOUD_* settings."""

    def __init__(self, database_url: str, workdir: Path, **env: str) -> None:
        super().__init__(
            database_url,
            workdir,
            operator_token=OPERATOR,
            devices=DEVICES,
            env={
                "EDGEDRIFT_CLOUD_AUTH_CACHE_SECONDS": "0",
                "EDGEDRIFT_CLOUD_AUTH_FAILURES_PER_10S": "1000000",
                "EDGEDRIFT_CLOUD_METRICS_PER_DEVICE": "true",
                **UNLIMITED,
                **env,
            },
        )


def field_error(r: httpx.Response, status: int, *fields: str) -> None:
    """``r`` is a refusal with ``status`` whose FastAPI-shaped detail names every one of ``fields``."""
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, list) and detail, detail
    locs = [".".join(str(p) for p in d["loc"]) for d in detail]
    assert any(all(f in loc for f in fields) for loc in locs), (fields, detail)
    assert all(d["msg"] for d in detail)


@contextlib.contextmanager
def sqlite_cloud_in(workdir: Path, **env: str) -> Iterator[CloudServer]:
    """A started :class:`CloudServer` on a SQLite registry in ``workdir`` (``env``: EDGEDRIFT_CLOUD_*
    settings), stopped on exit."""
    server = CloudServer(f"sqlite:///{workdir / 'registry.db'}", workdir, **env).start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def backend_url(request: pytest.FixtureRequest, workdir: Path) -> Iterator[str]:
    """The registry URL of the backend a fixture's ``request.param`` names: ``sqlite`` (a file in
    ``workdir``) or ``postgresql`` (a fresh database on the session's server, dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{workdir / 'registry.db'}"
        return
    with fresh_database(request.getfixturevalue("postgres_admin_url")) as url:
        yield url


def seeded_registry(url: str, devices: Iterable[str]) -> tuple[Engine, sessionmaker[Session]]:
    """A migrated registry at ``url`` with ``devices`` registered (each with a valid secret)."""
    engine = make_engine(url)
    upgrade(engine)
    sessions = make_sessionmaker(engine)
    with sessions() as session:
        for device in devices:
            registry.upsert_device(session, device, f"secret-of-device-{device}-0123456789")
        session.commit()
    return engine, sessions
