"""Real servers for the integration tests: the cloud trainer under uvicorn (a subprocess started with
the documented ``edgedrift-cloud serve`` command) on SQLite or on PostgreSQL: the server at
``$EDGEDRIFT_TEST_PG`` when one answers, otherwise a throwaway server the harness starts for the session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cloud import CloudServer, sqlite_cloud_in

from edgedrift_harness.postgres import PostgresError, fresh_database, postgres_server


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Each test gets an empty registry: a new SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry.db'}"
    else:
        yield request.getfixturevalue("postgres_url_fresh")


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    """A PostgreSQL server for the session (the local one, or a throwaway one)."""
    try:
        with postgres_server() as url:
            yield url
    except PostgresError as exc:
        pytest.fail(f"PostgreSQL is needed for the registry tests: {exc}")


@pytest.fixture
def postgres_url_fresh(postgres_admin_url: str) -> Iterator[str]:
    """A new, empty database, dropped after the test."""
    with fresh_database(postgres_admin_url) as url:
        yield url


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
    with sqlite_cloud_in(tmp_path_factory.mktemp("cloud")) as server:
        yield server
