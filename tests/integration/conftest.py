"""Real servers for the integration tests: the cloud trainer under uvicorn (a subprocess started with
the documented ``edgedrift-cloud serve`` command) on SQLite or on the local PostgreSQL server."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cloud import PG_ADMIN_URL, CloudServer


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Each test gets an empty registry: a new SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry.db'}"
    else:
        yield request.getfixturevalue("postgres_url_fresh")


@pytest.fixture
def postgres_url_fresh() -> Iterator[str]:
    import psycopg

    name = "edgedrift_t_" + secrets.token_hex(4)
    try:
        admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL at {PG_ADMIN_URL} is needed for the registry tests: {exc}")
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def cloud(database_url: str, tmp_path: Path) -> Iterator[CloudServer]:
    server = CloudServer(database_url, tmp_path).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def sqlite_cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudServer]:
    """One server for a module of tests that each check they leave the registry unchanged."""
    workdir = tmp_path_factory.mktemp("cloud")
    server = CloudServer(f"sqlite:///{workdir / 'registry.db'}", workdir).start()
    try:
        yield server
    finally:
        server.stop()
