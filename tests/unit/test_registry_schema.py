"""The Alembic migrations and the ORM tables describe the same schema, and upgrading is idempotent."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from edgedrift_cloud.db.engine import make_engine, schema_is_current, upgrade
from edgedrift_cloud.db.tables import Base


def test_migrations_match_the_tables(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'r.db'}")
    assert not schema_is_current(engine)
    upgrade(engine)
    upgrade(engine)
    assert schema_is_current(engine)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
