"""admission: a fingerprint of each request's body (idempotency keys), the fleet recompute budget

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.add_column(sa.Column("request_sha256", sa.String(length=64), nullable=True))
    op.create_table(
        "recompute_budget",
        sa.Column("scope", sa.String(length=80), nullable=False),
        sa.Column("minute", sa.BigInteger(), nullable=False),
        sa.Column("admitted", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("scope", "minute"),
    )


def downgrade() -> None:
    op.drop_table("recompute_budget")
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_column("request_sha256")
