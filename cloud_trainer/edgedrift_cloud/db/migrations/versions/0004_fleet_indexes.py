"""fleet views: indexes for a device's recent recomputes and the fleet's recomputes per minute

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_models_device_created", "models", ["device_id", "created_at"])
    op.create_index("ix_models_created", "models", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_models_created", table_name="models")
    op.drop_index("ix_models_device_created", table_name="models")
