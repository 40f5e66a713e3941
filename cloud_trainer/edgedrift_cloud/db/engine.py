"""Engine and session factory, and running the Alembic migrations programmatically."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from psycopg.abc import PQGen
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).parent / "migrations"
RV = TypeVar("RV")


def make_engine(url: str, *, connect_timeout_s: float = 5.0, statement_timeout_s: float = 15.0) -> Engine:
    """An engine for SQLite (WAL, foreign keys on, busy timeout) or PostgreSQL (pre-ping, pool); every
    wait is bounded: connecting, taking a pooled connection, and each statement (a hung database makes
    calls fail with a timeout, answered 503, instead of holding threads for ever)."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": statement_timeout_s})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: object, _record: object) -> None:
            cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    engine = create_engine(
        url,
        pool_pre_ping=True,
        pool_size=10,
        max_overflow=10,
        pool_timeout=connect_timeout_s,
        connect_args={
            "connect_timeout": max(1, round(connect_timeout_s)),
            "options": f"-c statement_timeout={round(statement_timeout_s * 1000)}",
        },
    )
    if engine.dialect.driver == "psycopg":
        answer_timeout_s = statement_timeout_s + ANSWER_MARGIN_S

        @event.listens_for(engine, "do_connect")
        def _bounded(_dialect: object, _record: object, cargs: Any, cparams: Any) -> BoundedConnection:
            conn = BoundedConnection.connect(*cargs, **cparams)
            conn.answer_timeout_s = answer_timeout_s
            return conn

    return engine


#: How much longer than the server's statement timeout the client waits for any answer.
ANSWER_MARGIN_S = 2.0


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection that waits at most ``answer_timeout_s`` for the server's answer to anything
    (a statement, a ping, a commit). PostgreSQL's ``statement_timeout`` bounds a slow statement, but
    not a server or proxy that stops answering (the statement never arrives); without this a request
    thread would wait for ever. Past the deadline the connection is closed (its reply is half read)
    and an OperationalError is raised, which the API answers with 503 + Retry-After."""

    answer_timeout_s: float = 17.0

    def wait(self, gen: PQGen[RV], interval: float = 0.1, timeout: float | None = None) -> RV:
        if timeout is not None:
            return super().wait(gen, interval, timeout)
        start = time.monotonic()
        try:
            return super().wait(gen, interval, self.answer_timeout_s)
        except psycopg.OperationalError as exc:
            if time.monotonic() - start < self.answer_timeout_s:
                raise
            self.close()
            raise psycopg.OperationalError(
                f"the database did not answer within {self.answer_timeout_s:g} s"
            ) from exc


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def alembic_config(engine: Engine) -> Config:
    """An Alembic config that migrates ``engine`` (no alembic.ini needed)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest migration (idempotent)."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Serialise concurrent upgrades (several workers or replicas starting at once).
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7405541)")
        cfg = alembic_config(engine)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def schema_is_current(engine: Engine) -> bool:
    """True when the database is at the newest migration (``/readyz`` checks this)."""
    head = ScriptDirectory.from_config(alembic_config(engine)).get_current_head()
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision() == head
