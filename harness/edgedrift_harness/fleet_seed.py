"""A synthetic fleet written straight into a migrated registry database (SQLite or PostgreSQL), for the
fleet-view benchmark and the dashboard test: 10,000 devices in seconds, where the API would take minutes.

Devices ``fleet-00000`` ... cycle through the statuses the dashboard shows: online, drifting, degraded
(rejections growing), stale, offline, never seen, revoked; every fifth device is a regression device
(RMSE in its heartbeats). The first ``history_devices`` get ``beats_each`` heartbeats and a few model
versions each; the others one or two heartbeats. The harness may not import the cloud, so this writes
plain SQL against the migrated schema (a schema change that breaks it fails the tests that use it).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

__all__ = ["KINDS", "SeededFleet", "device_id", "seed_fleet"]

#: The cycle of device kinds, by index modulo its length.
KINDS = ("online", "drifting", "online", "degraded", "stale", "online", "offline", "never", "revoked")
BEAT_COLUMNS = (
    "device_id", "received_at", "samples", "labeled", "accuracy", "accuracy_window", "warnings",
    "drift_events", "recomputes_requested", "model_version", "dropped", "rejected", "extra",
)  # fmt: skip
MODEL_COLUMNS = (
    "device_id", "version", "request_id", "sha256", "kind", "learner", "task", "rebalance", "chosen",
    "scores", "n", "d", "train_ms", "bytes_in", "bytes_out", "encoding", "reason", "requested_by",
    "monitor", "document", "created_at",
)  # fmt: skip
REASONS = ("druid", "ddm", "periodic", "manual")


@dataclass(frozen=True)
class SeededFleet:
    devices: int
    heartbeats: int
    models: int
    kinds: dict[str, int]


def device_id(i: int) -> str:
    return f"fleet-{i:05d}"


def _kind(i: int) -> str:
    return KINDS[i % len(KINDS)]


def _last_seen(i: int, now: datetime, stale_age: timedelta) -> datetime:
    return now - {"stale": stale_age, "offline": timedelta(hours=2)}.get(_kind(i), timedelta(0))


def _beats(i: int, n: int, now: datetime, stale_age: timedelta, issued: int) -> Iterator[tuple[Any, ...]]:
    """Heartbeats of device i, oldest first, 10 s apart, the last one placed by the device's kind."""
    kind = _kind(i)
    if kind == "never":
        return
    last = _last_seen(i, now, stale_age)
    regression = i % 5 == 0
    for k in range(n):
        newest = k == n - 1
        acc = 0.55 + 0.4 * ((i * 7 + k) % 10) / 10
        rejected = k * (3 if kind == "degraded" and newest else 0)
        yield (
            device_id(i),
            last - timedelta(seconds=10 * (n - 1 - k)),
            100 * (k + 1),
            100 * (k + 1),
            None if regression else acc,
            min(k + 1, 200),
            int(kind == "drifting" and newest),
            k // 50,
            k // 50,
            min(k // 50 + 1, issued) or None,  # the version it runs, never past those issued
            0,
            rejected,
            {"phase": "running", "rmse": round(1.5 - acc, 3) if regression else None},
        )


def _models(i: int, n: int, now: datetime, stale_age: timedelta) -> Iterator[tuple[Any, ...]]:
    task = "regression" if i % 5 == 0 else "classification"
    for v in range(1, n + 1):
        doc = {"kind": "linear", "version": v}
        yield (
            device_id(i), v, f"seed-{i}-{v}", hashlib.sha256(f"{i}/{v}".encode()).hexdigest(), "linear",
            "ridge" if task == "regression" else "logistic", task, "none", None, None, 200, 5, 12.5,
            4000, 300, "binary", REASONS[(i + v) % len(REASONS)], device_id(i),
            {"statistic": 0.1 * v, "threshold": 0.5}, json.dumps(doc),
            _last_seen(i, now, stale_age) - timedelta(minutes=5 * (n - v)),
        )  # fmt: skip


def seed_fleet(
    database_url: str,
    devices: int,
    *,
    history_devices: int = 500,
    beats_each: int = 500,
    versions: int = 3,
    stale_age_s: float = 60.0,
) -> SeededFleet:
    """Insert the fleet into an empty, migrated registry (the cloud's ``upgrade`` ran first); the stale
    kind was last heard ``stale_age_s`` ago, the offline kind two hours ago."""
    now = datetime.now(UTC)
    stale_age = timedelta(seconds=stale_age_s)
    device_rows = [
        (
            device_id(i),
            hashlib.sha256(f"seeded-secret-{i}".encode()).hexdigest(),
            versions if i < history_devices and _kind(i) != "never" else 0,
            now - timedelta(days=1),
            now - timedelta(hours=1) if _kind(i) == "revoked" else None,
        )
        for i in range(devices)
    ]
    beats = [
        b
        for i, row in enumerate(device_rows)
        for b in _beats(i, beats_each if i < history_devices else 2, now, stale_age, row[2])
    ]
    models = [m for i, row in enumerate(device_rows) for m in _models(i, row[2], now, stale_age)]
    if database_url.startswith("sqlite"):
        _sqlite(database_url.split("///", 1)[1], device_rows, beats, models)
    else:
        _postgres(database_url, device_rows, beats, models)
    kinds: dict[str, int] = {}
    for i in range(devices):
        kinds[_kind(i)] = kinds.get(_kind(i), 0) + 1
    return SeededFleet(devices=devices, heartbeats=len(beats), models=len(models), kinds=kinds)


#: The per-device counters (maintained on write by the cloud, migration 0006) of what was seeded; the
#: same statements as that migration's backfill, since the harness may not import the cloud.
COUNTERS_SQL = (
    """
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
""",
    """
INSERT INTO device_recompute_counters (device_id, learner, reason, recomputes, train_ms, bytes_in, bytes_out)
SELECT device_id, learner, reason, COUNT(*), SUM(train_ms), SUM(bytes_in), SUM(bytes_out)
FROM models GROUP BY device_id, learner, reason
""",
)

_DEVICE_SQL = "INSERT INTO devices (id, token_hash, model_count, created_at, revoked_at) VALUES "


def _sqlite(path: str, device_rows: list[Any], beats: list[Any], models: list[Any]) -> None:
    def text(row: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(
            v.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
            if isinstance(v, datetime)
            else json.dumps(v)
            if isinstance(v, dict)
            else v
            for v in row
        )

    conn = sqlite3.connect(path, timeout=30)
    try:
        with conn:
            conn.executemany(_DEVICE_SQL + "(?, ?, ?, ?, ?)", map(text, device_rows))
            conn.executemany(_insert("heartbeats", BEAT_COLUMNS, "?"), map(text, beats))
            conn.executemany(_insert("models", MODEL_COLUMNS, "?"), map(text, models))
            for statement in COUNTERS_SQL:
                conn.execute(statement)
    finally:
        conn.close()


def _insert(table: str, columns: Sequence[str], mark: str) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join([mark] * len(columns))})"


def _postgres(url: str, device_rows: list[Any], beats: list[Any], models: list[Any]) -> None:
    def plain(row: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(json.dumps(v) if isinstance(v, dict) else v for v in row)

    url = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        for table, columns, rows in (
            ("devices", ("id", "token_hash", "model_count", "created_at", "revoked_at"), device_rows),
            ("heartbeats", BEAT_COLUMNS, beats),
            ("models", MODEL_COLUMNS, models),
        ):
            with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(plain(row))
        for statement in COUNTERS_SQL:
            cur.execute(statement)
        cur.execute("ANALYZE")
