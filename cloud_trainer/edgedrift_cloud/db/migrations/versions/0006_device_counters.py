"""counters maintained on write: per device, per device and reason, fleet-wide (sharded); backfilled

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import zlib
from collections import defaultdict

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

#: Shards of the fleet counters: registry.FLEET_SHARDS (a copy: a migration never imports the app).
FLEET_SHARDS = 16


def _measures() -> list[sa.Column[float]]:
    """Recomputes, training time and bytes of a group of stored versions (new columns per table)."""
    return [
        sa.Column("recomputes", sa.BigInteger(), nullable=False),
        sa.Column("train_ms", sa.Float(), nullable=False),
        sa.Column("bytes_in", sa.BigInteger(), nullable=False),
        sa.Column("bytes_out", sa.BigInteger(), nullable=False),
    ]


_BACKFILL_DEVICES = """
INSERT INTO device_counters (device_id, recomputes, bytes_in, bytes_out, train_ms_total, latest_version,
                             last_recompute_at, last_reason, heartbeats, last_seen)
SELECT d.id, COALESCE(m.n, 0), COALESCE(m.b_in, 0), COALESCE(m.b_out, 0), COALESCE(m.ms, 0.0), m.latest,
       l.created_at, l.reason, COALESCE(h.n, 0),
       CASE WHEN h.at IS NULL THEN l.created_at
            WHEN l.created_at IS NULL OR h.at > l.created_at THEN h.at
            ELSE l.created_at END
FROM devices d
LEFT JOIN (SELECT device_id, COUNT(*) AS n, SUM(bytes_in) AS b_in, SUM(bytes_out) AS b_out,
                  SUM(train_ms) AS ms, MAX(version) AS latest
           FROM models GROUP BY device_id) m ON m.device_id = d.id
LEFT JOIN models l ON l.device_id = d.id AND l.version = m.latest
LEFT JOIN (SELECT device_id, COUNT(*) AS n, MAX(received_at) AS at
           FROM heartbeats GROUP BY device_id) h ON h.device_id = d.id
"""

_BACKFILL_REASONS = """
INSERT INTO device_recompute_counters (device_id, learner, reason, recomputes, train_ms, bytes_in, bytes_out)
SELECT device_id, learner, reason, COUNT(*), SUM(train_ms), SUM(bytes_in), SUM(bytes_out)
FROM models GROUP BY device_id, learner, reason
"""


def upgrade() -> None:
    op.create_table(
        "device_counters",
        sa.Column("device_id", sa.String(length=64), nullable=False),
        sa.Column("recomputes", sa.BigInteger(), nullable=False),
        sa.Column("bytes_in", sa.BigInteger(), nullable=False),
        sa.Column("bytes_out", sa.BigInteger(), nullable=False),
        sa.Column("train_ms_total", sa.Float(), nullable=False),
        sa.Column("latest_version", sa.Integer(), nullable=True),
        sa.Column("last_recompute_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_reason", sa.String(length=64), nullable=True),
        sa.Column("heartbeats", sa.BigInteger(), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("device_id"),
    )
    op.create_table(
        "device_recompute_counters",
        sa.Column("device_id", sa.String(length=64), nullable=False),
        sa.Column("learner", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        *_measures(),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("device_id", "learner", "reason"),
    )
    fleet = op.create_table(
        "fleet_recompute_counters",
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("learner", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        *_measures(),
        sa.PrimaryKeyConstraint("shard", "learner", "reason"),
    )
    op.execute(_BACKFILL_DEVICES)
    op.execute(_BACKFILL_REASONS)
    _backfill_fleet(fleet)


def _backfill_fleet(fleet: sa.Table | None) -> None:
    """Sum the per-device rows into the shards (the shard is a crc32 of the device id: Python's)."""
    assert fleet is not None
    totals: dict[tuple[int, str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0, 0])
    rows = op.get_bind().execute(
        sa.text(
            "SELECT device_id, learner, reason, recomputes, train_ms, bytes_in, bytes_out "
            "FROM device_recompute_counters"
        )
    )
    for device_id, learner, reason, n, ms, b_in, b_out in rows:
        key = (zlib.crc32(str(device_id).encode()) % FLEET_SHARDS, str(learner), str(reason))
        for i, value in enumerate((n, ms, b_in, b_out)):
            totals[key][i] += value
    if totals:
        op.bulk_insert(
            fleet,
            [
                {"shard": s, "learner": le, "reason": r, "recomputes": int(v[0]), "train_ms": float(v[1])}
                | {"bytes_in": int(v[2]), "bytes_out": int(v[3])}
                for (s, le, r), v in totals.items()
            ],
        )


def downgrade() -> None:
    op.drop_table("fleet_recompute_counters")
    op.drop_table("device_recompute_counters")
    op.drop_table("device_counters")
