"""an index on heartbeats by time, for the retention's oldest-first deletes

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_heartbeats_received_at", "heartbeats", ["received_at"])


def downgrade() -> None:
    op.drop_index("ix_heartbeats_received_at", table_name="heartbeats")
