"""The model registry's database: ORM tables, engine and Alembic migrations."""
