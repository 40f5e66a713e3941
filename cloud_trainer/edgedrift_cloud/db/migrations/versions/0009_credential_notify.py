"""PostgreSQL: a notification on every change of a device credential, so workers may cache credentials

Any statement that inserts, deletes or changes the secret or the revocation of a device (the API, the
CLI, bulk calls, a gateway's sync, a psql session) sends ``NOTIFY edgedrift_credentials`` when it commits;
every worker listens and forgets the credentials it cached (``edgedrift_cloud.credential_watch``).
SQLite has no notifications: there the service asks the registry on every request.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

FUNCTION = """
CREATE OR REPLACE FUNCTION edgedrift_credentials_changed() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('edgedrift_credentials', TG_TABLE_NAME);
    RETURN NULL;
END
$$ LANGUAGE plpgsql
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(FUNCTION)
    op.execute(
        "CREATE TRIGGER devices_credentials_changed"
        " AFTER INSERT OR DELETE OR UPDATE OF token_hash, revoked_at ON devices"
        " FOR EACH STATEMENT EXECUTE FUNCTION edgedrift_credentials_changed()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER IF EXISTS devices_credentials_changed ON devices")
    op.execute("DROP FUNCTION IF EXISTS edgedrift_credentials_changed()")
