"""Many-row inserts and counter upserts (``edgedrift_cloud.db.rows``) agree on SQLite and PostgreSQL:
JSON objects, NULLs, aware timestamps, added and replaced columns, the newer ``last_seen`` kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from edgedrift_cloud.db.engine import make_engine, make_sessionmaker, upgrade
from edgedrift_cloud.db.rows import insert_rows, upsert
from edgedrift_cloud.db.tables import Device, DeviceCounter, HeartbeatRecord

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def _beat(
    device_id: str, samples: int, accuracy: float | None, extra: dict[str, object]
) -> dict[str, object]:
    return {"device_id": device_id, "received_at": T0, "samples": samples, "labeled": 2**40,
            "accuracy": accuracy, "accuracy_window": 0, "warnings": 1, "drift_events": 0,
            "recomputes_requested": 0, "model_version": None, "dropped": 0, "rejected": 0,
            "extra": extra}  # fmt: skip


def _counter(device_id: str, heartbeats: int, last_seen: datetime, reason: str | None) -> dict[str, object]:
    return {"device_id": device_id, "recomputes": 1, "bytes_in": 10, "bytes_out": 0,
            "train_ms_total": 0.25, "heartbeats": heartbeats, "last_seen": last_seen,
            "last_reason": reason}  # fmt: skip


def test_rows_and_upserts_round_trip(database_url: str) -> None:
    engine = make_engine(database_url)
    upgrade(engine)
    sessions = make_sessionmaker(engine)
    with sessions() as session:
        devices = [{"id": d, "token_hash": d * 16, "model_count": 0, "created_at": T0} for d in ("a", "b")]
        with pytest.raises(ValueError, match="created_at"):
            insert_rows(session, Device, [{"id": "c", "token_hash": "c" * 16, "model_count": 0}])
        insert_rows(session, Device, devices)
        insert_rows(
            session,
            HeartbeatRecord,
            [_beat("a", 1, 0.125, {"note": "x", "n": 3, "ok": True}), _beat("b", 2, None, {})],
        )
        insert_rows(session, HeartbeatRecord, [])
        upsert(session, DeviceCounter, [_counter("a", 3, T0, "drift")], add=("heartbeats",))
        session.commit()
    with sessions() as session:
        upsert(
            session,
            DeviceCounter,
            [_counter("a", 2, T0 - timedelta(hours=1), "periodic"), _counter("b", 5, T0, None)],
            add=("heartbeats", "recomputes", "train_ms_total"),
            replace=("last_reason",),
        )
        session.commit()
    with sessions() as session:
        beats = {b.device_id: b for b in session.scalars(select(HeartbeatRecord))}
        counters = {c.device_id: c for c in session.scalars(select(DeviceCounter))}
    assert beats["a"].extra == {"note": "x", "n": 3, "ok": True} and beats["b"].extra == {}
    assert (beats["a"].accuracy, beats["b"].accuracy, beats["a"].model_version) == (0.125, None, None)
    assert beats["a"].labeled == 2**40 and beats["a"].received_at == T0
    a, b = counters["a"], counters["b"]
    assert (a.heartbeats, a.recomputes, a.train_ms_total, a.bytes_in) == (5, 2, 0.5, 10)
    assert a.last_reason == "periodic" and a.last_seen == T0, "an older last_seen replaced a newer one"
    assert (b.heartbeats, b.recomputes, b.last_reason, b.last_seen) == (5, 1, None, T0)
    engine.dispose()
