"""Engine and session factory, and running the Alembic migrations programmatically."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).parent / "migrations"


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
    return create_engine(
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
