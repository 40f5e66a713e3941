"""PostgreSQL for the tests and the benchmarks: a fresh database on a reachable server, and a throwaway
server when none answers.

:func:`postgres_server` yields the admin URL of the server at ``$EDGEDRIFT_TEST_PG`` (default
``postgresql://postgres@127.0.0.1:5432/test``) when it answers, and otherwise starts a
:class:`ThrowawayPostgres` from Debian's binaries (``/usr/lib/postgresql/*/bin``: ``initdb`` into a
temporary directory, ``pg_ctl start`` on a free port, trust authentication on 127.0.0.1 only, no fsync),
so the registry tests also run on a machine without a PostgreSQL service. With
``EDGEDRIFT_TEST_CONTAINERS=1`` it starts a ``postgres:16-alpine`` container instead
(:func:`edgedrift_harness.containers.postgres_container`).
:func:`fresh_database` creates an empty database there and drops it (``WITH (FORCE)``) afterwards.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Self

import psycopg

from edgedrift_harness import containers
from edgedrift_harness.ports import HOST, free_port

__all__ = [
    "PG_ADMIN_URL",
    "PostgresError",
    "ThrowawayPostgres",
    "find_postgres_bin",
    "fresh_database",
    "postgres_server",
    "server_answers",
]

PG_ADMIN_URL = os.environ.get("EDGEDRIFT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
_DEBIAN_BINARIES = "/usr/lib/postgresql"
#: initdb and postgres refuse to run as root; as root the throwaway server runs as this user.
_SERVICE_USER = "postgres"


class PostgresError(RuntimeError):
    """No PostgreSQL server answers and none could be started."""


def server_answers(admin_url: str, timeout: float = 3.0) -> bool:
    """Whether a connection to ``admin_url`` succeeds within ``timeout`` seconds."""
    try:
        psycopg.connect(admin_url, connect_timeout=max(1, round(timeout))).close()
        return True
    except psycopg.OperationalError:
        return False


@contextlib.contextmanager
def fresh_database(admin_url: str, prefix: str = "edgedrift_t_") -> Iterator[str]:
    """The URL of a new, empty database on the server of ``admin_url``; dropped (WITH FORCE) afterwards."""
    name = prefix + secrets.token_hex(4)
    admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
    try:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield f"{admin_url.rsplit('/', 1)[0]}/{name}"
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()


def find_postgres_bin() -> Path | None:
    """The directory with ``initdb`` and ``pg_ctl``: PATH first, then the newest Debian version."""
    found = shutil.which("initdb")
    if found is not None and shutil.which("pg_ctl") is not None:
        return Path(found).parent
    versions = sorted(
        Path(_DEBIAN_BINARIES).glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    usable = [b for b in versions if (b / "initdb").is_file() and (b / "pg_ctl").is_file()]
    return usable[-1] if usable else None


class ThrowawayPostgres:
    """A PostgreSQL server of its own in a temporary directory, on a free port of 127.0.0.1; a context
    manager (the directory is removed on exit)."""

    def __init__(self, bindir: Path | None = None) -> None:
        found = bindir or find_postgres_bin()
        if found is None:
            raise PostgresError(
                "no PostgreSQL server answers and no initdb/pg_ctl found (apt-get install -y postgresql)"
            )
        self.bindir = found
        self.port = free_port()
        self.workdir = Path(tempfile.mkdtemp(prefix="edgedrift-pg-"))
        self.data_dir = self.workdir / "data"
        self.log_path = self.workdir / "postgres.log"
        self.admin_url = f"postgresql://postgres@{HOST}:{self.port}/postgres"
        self._user = _SERVICE_USER if os.geteuid() == 0 else None
        self._started = False

    def _run(self, *args: str, timeout: float = 60.0) -> None:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=timeout, user=self._user, cwd=self.workdir
        )
        if done.returncode != 0:
            raise PostgresError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")

    def start(self, timeout: float = 60.0) -> Self:
        """initdb, then pg_ctl start (waits until the server accepts connections)."""
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            self.workdir.chmod(0o755)
            os.chown(self.workdir, entry.pw_uid, entry.pw_gid)
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
            "--no-sync", "-E", "UTF8", "--locale=C",
        )  # fmt: skip
        options = f"-p {self.port} -k {self.workdir} -c listen_addresses={HOST} -c fsync=off"
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_path), "-o", options,
            "-w", "-t", str(round(timeout)), "start", timeout=timeout + 10,
        )  # fmt: skip
        self._started = True
        return self

    def stop(self) -> None:
        """pg_ctl stop (immediate: the data is thrown away) and remove the directory; idempotent."""
        if self._started:
            self._started = False
            with contextlib.suppress(PostgresError, subprocess.TimeoutExpired):
                self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "stop")
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@contextlib.contextmanager
def postgres_server(admin_url: str = PG_ADMIN_URL) -> Iterator[str]:
    """The admin URL of a PostgreSQL server: a container's when containers are requested, else ``admin_url``
    when it answers, else a throwaway server's."""
    if containers.requested():
        with contextlib.ExitStack() as stack:
            try:
                url = stack.enter_context(containers.postgres_container())
            except containers.ContainerError as exc:
                raise PostgresError(str(exc)) from exc
            yield url
        return
    if server_answers(admin_url):
        yield admin_url
        return
    with ThrowawayPostgres() as server:
        yield server.admin_url
