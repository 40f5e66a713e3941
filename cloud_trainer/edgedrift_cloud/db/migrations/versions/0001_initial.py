"""initial registry: devices, models, heartbeats

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "devices",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("model_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_table(
        "heartbeats",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("device_id", sa.String(length=64), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.Column("labeled", sa.BigInteger(), nullable=False),
        sa.Column("accuracy", sa.Float(), nullable=True),
        sa.Column("accuracy_window", sa.Integer(), nullable=False),
        sa.Column("warnings", sa.Integer(), nullable=False),
        sa.Column("drift_events", sa.Integer(), nullable=False),
        sa.Column("recomputes_requested", sa.Integer(), nullable=False),
        sa.Column("model_version", sa.Integer(), nullable=True),
        sa.Column("dropped", sa.BigInteger(), nullable=False),
        sa.Column("rejected", sa.BigInteger(), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("heartbeats", schema=None) as batch_op:
        batch_op.create_index("ix_heartbeats_device_time", ["device_id", "received_at"], unique=False)

    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("device_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("learner", sa.String(length=32), nullable=False),
        sa.Column("task", sa.String(length=16), nullable=False),
        sa.Column("rebalance", sa.String(length=16), nullable=False),
        sa.Column("chosen", sa.String(length=32), nullable=True),
        sa.Column("scores", sa.JSON(), nullable=True),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("d", sa.Integer(), nullable=False),
        sa.Column("train_ms", sa.Float(), nullable=False),
        sa.Column("bytes_in", sa.BigInteger(), nullable=False),
        sa.Column("bytes_out", sa.BigInteger(), nullable=False),
        sa.Column("encoding", sa.String(length=8), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column("requested_by", sa.String(length=64), nullable=False),
        sa.Column("monitor", sa.JSON(), nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("device_id", "request_id", name="uq_models_device_request"),
        sa.UniqueConstraint("device_id", "version", name="uq_models_device_version"),
    )
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_models_device_id"), ["device_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_models_device_id"))

    op.drop_table("models")
    with op.batch_alter_table("heartbeats", schema=None) as batch_op:
        batch_op.drop_index("ix_heartbeats_device_time")

    op.drop_table("heartbeats")
    op.drop_table("devices")
