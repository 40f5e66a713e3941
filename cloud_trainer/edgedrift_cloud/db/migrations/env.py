"""Alembic environment: migrates the connection or engine handed over in ``config.attributes``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from edgedrift_cloud.db.tables import Base

config = context.config


def run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run(connection)
else:
    engine = config.attributes.get("engine") or create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.begin() as conn:
        run(conn)
