"""Counters of one device with a deep history: ``GET .../counters`` before and after they were kept on write.

Seeds one device with ``--versions`` model versions (and ``--beats`` heartbeats) into a registry at
migration 0005, times the counters the old way (aggregates over the device's rows, four statements:
the peer, kept here verbatim), migrates to the newest schema (0006 backfills the counter tables, timed
too), then times :func:`edgedrift_cloud.registry.counters` (two indexed reads) and checks that both agree.
On SQLite and on PostgreSQL (the server at ``$EDGEDRIFT_TEST_PG`` or a throwaway one).

    python bench/counters_latency.py [--versions 100000] [--repeat 20] [--json out/counters.json]
    python bench/counters_latency.py --quick          # 2,000 versions (the smoke run)
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from alembic import command
from sqlalchemy import Engine, func, insert, select
from sqlalchemy.orm import Session

from edgedrift.wire import DeviceCounters
from edgedrift_cloud import registry
from edgedrift_cloud.db.engine import alembic_config, make_engine, make_sessionmaker, upgrade
from edgedrift_cloud.db.tables import Device, HeartbeatRecord, ModelRecord
from edgedrift_harness.postgres import fresh_database, postgres_server
from edgedrift_harness.results import write_json

DEVICE = "deep-device"


def aggregate_counters(session: Session, device_id: str) -> DeviceCounters:
    """The peer: counters as aggregates over the device's versions and heartbeats (before 0006)."""
    m, h = ModelRecord, HeartbeatRecord
    agg = session.execute(
        select(
            func.count(m.id), func.coalesce(func.sum(m.bytes_in), 0), func.coalesce(func.sum(m.bytes_out), 0),
            func.coalesce(func.sum(m.train_ms), 0.0), func.max(m.version),
        ).where(m.device_id == device_id)
    ).one()  # fmt: skip
    reasons = session.execute(
        select(m.reason, func.count(m.id)).where(m.device_id == device_id).group_by(m.reason)
    ).all()
    last = session.execute(
        select(m.created_at, m.reason).where(m.device_id == device_id).order_by(m.version.desc()).limit(1)
    ).first()
    beats = session.execute(
        select(func.count(h.id), func.max(h.received_at)).where(h.device_id == device_id)
    ).one()
    seen = [t for t in (beats[1], None if last is None else last.created_at) if t is not None]
    return DeviceCounters(
        device_id=device_id, recomputes=int(agg[0]), bytes_in=int(agg[1]), bytes_out=int(agg[2]),
        train_ms_total=float(agg[3]), reasons={str(k): int(v) for k, v in reasons},
        latest_version=agg[4], last_recompute_at=None if last is None else last.created_at,
        last_reason=None if last is None else last.reason, heartbeats=int(beats[0]),
        last_seen=max(seen) if seen else None,
    )  # fmt: skip


def seed(engine: Engine, versions: int, beats: int) -> None:
    """One device with ``versions`` versions and ``beats`` heartbeats, at migration 0005."""
    config = alembic_config(engine)
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0005")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    with engine.begin() as conn:
        conn.execute(insert(Device).values(id=DEVICE, token_hash="f" * 64, model_count=versions))
        rows: list[dict[str, Any]] = [
            {"device_id": DEVICE, "version": v, "sha256": "0" * 64, "kind": "linear", "learner": "logistic",
             "task": "classification", "rebalance": "none", "n": 200, "d": 5, "train_ms": 1.0 + v % 7,
             "bytes_in": 4000 + v % 13, "bytes_out": 300, "encoding": "binary",
             "reason": ("drift", "periodic", "manual")[v % 3], "requested_by": DEVICE, "monitor": {},
             "document": "{}", "created_at": t0 + timedelta(seconds=v)}
            for v in range(1, versions + 1)
        ]  # fmt: skip
        for start in range(0, len(rows), 5000):
            conn.execute(insert(ModelRecord), rows[start : start + 5000])
        conn.execute(
            insert(HeartbeatRecord),
            [
                {"device_id": DEVICE, "samples": i, "labeled": 0, "accuracy_window": 0, "warnings": 0,
                 "drift_events": 0, "recomputes_requested": 0, "dropped": 0, "rejected": 0, "extra": {},
                 "received_at": t0 + timedelta(seconds=3 * i)}
                for i in range(beats)
            ],
        )  # fmt: skip


def p50_ms(session: Session, read: Callable[[Session, str], DeviceCounters], repeat: int) -> float:
    read(session, DEVICE)  # warm-up
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        read(session, DEVICE)
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 3)


def run(url: str, versions: int, beats: int, repeat: int) -> dict[str, Any]:
    engine = make_engine(url)
    try:
        seed(engine, versions, beats)
        sessions = make_sessionmaker(engine)
        with sessions() as session:
            before_ms = p50_ms(session, aggregate_counters, repeat)
            expected = aggregate_counters(session, DEVICE)
        started = time.perf_counter()
        upgrade(engine)
        migrate_s = time.perf_counter() - started
        with sessions() as session:
            after_ms = p50_ms(session, registry.counters, repeat)
            got = registry.counters(session, DEVICE)
        assert got == expected, (got, expected)
        return {"before_ms": before_ms, "after_ms": after_ms, "migration_s": round(migrate_s, 2)}
    finally:
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--versions", type=int, default=100_000)
    parser.add_argument("--beats", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quick", action="store_true", help="2,000 versions, 3 repeats")
    args = parser.parse_args()
    if args.quick:
        args.versions, args.beats, args.repeat = 2000, 100, 3
    result: dict[str, Any] = {"versions": args.versions, "heartbeats": args.beats}
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="edgedrift-counters-")))
        result["sqlite"] = run(f"sqlite:///{tmp / 'registry.db'}", args.versions, args.beats, args.repeat)
        url = stack.enter_context(fresh_database(stack.enter_context(postgres_server()), "edgedrift_bench_"))
        result["postgresql"] = run(url, args.versions, args.beats, args.repeat)
    print(json.dumps(result, indent=2))
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
