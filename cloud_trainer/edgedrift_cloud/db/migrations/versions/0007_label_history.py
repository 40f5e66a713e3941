"""per-device labeled history in chunks (one row per forwarded batch); edge parameters of a version

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "history_chunks",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("device_id", sa.String(length=64), nullable=False),
        sa.Column("batch_id", sa.String(length=64), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("d", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("device_id", "batch_id", name="uq_history_device_batch"),
    )
    with op.batch_alter_table("history_chunks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_history_chunks_device_id"), ["device_id"], unique=False)
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.add_column(sa.Column("edge", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_column("edge")
    with op.batch_alter_table("history_chunks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_history_chunks_device_id"))
    op.drop_table("history_chunks")
