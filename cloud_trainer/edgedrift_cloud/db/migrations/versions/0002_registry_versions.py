"""registry versions: pinned version and revocation per device, aliases per device, pruned documents

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pinned_version", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pruned_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "model_aliases",
        sa.Column("device_id", sa.String(length=64), nullable=False),
        sa.Column("alias", sa.String(length=32), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("device_id", "alias"),
    )


def downgrade() -> None:
    op.drop_table("model_aliases")
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_column("pruned_at")
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.drop_column("revoked_at")
        batch_op.drop_column("pinned_version")
