"""Heartbeat retention (issue 12, item 3) on SQLite and PostgreSQL: heartbeats older than the retention
go, each device's newest two stay (the fleet views read a silent device's last state from them), the
counters still count every heartbeat ever received; a running server applies it on its own schedule."""

from __future__ import annotations

import sqlite3
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, select, update
from support.cloud import DEVICES, CloudServer

from edgedrift.wire import Heartbeat
from edgedrift_cloud import registry
from edgedrift_cloud.db.engine import make_engine, make_sessionmaker, upgrade
from edgedrift_cloud.db.tables import HeartbeatRecord, utcnow
from edgedrift_cloud.retention import prune_heartbeats


def test_old_heartbeats_go_and_each_devices_newest_two_stay(database_url: str) -> None:
    engine = make_engine(database_url)
    upgrade(engine)
    sessions = make_sessionmaker(engine)
    now = utcnow()
    ages_h = {"busy": [240, 200, 150, 120, 100, 1], "silent": [300, 250, 200], "new": [2, 1]}
    with sessions() as s:
        for device, ages in ages_h.items():
            registry.upsert_device(s, device, f"secret-of-{device}-0123456789")
            for age in ages:
                record = registry.add_heartbeat(s, device, Heartbeat(samples=1000 - age))
                s.execute(
                    update(HeartbeatRecord)
                    .where(HeartbeatRecord.id == record.id)
                    .values(received_at=now - timedelta(hours=age))
                )
        s.commit()
        assert prune_heartbeats(s, now - timedelta(hours=72), batch=2) == 2  # a bounded batch
        assert prune_heartbeats(s, now - timedelta(hours=72)) == 3  # busy: 4 in all, silent: 1
        assert prune_heartbeats(s, now - timedelta(hours=72)) == 0
        kept = {
            device: sorted(
                s.scalars(select(HeartbeatRecord.samples).where(HeartbeatRecord.device_id == device))
            )
            for device in ages_h
        }
        assert kept == {"busy": [900, 999], "silent": [750, 800], "new": [998, 999]}
        assert {d: registry.counters(s, d).heartbeats for d in ages_h} == {"busy": 6, "silent": 3, "new": 2}
        assert s.scalar(select(func.count(HeartbeatRecord.id))) == 6  # of 11
    engine.dispose()


def test_a_running_server_applies_the_retention(tmp_path: Path) -> None:
    db = tmp_path / "registry.db"
    server = CloudServer(
        f"sqlite:///{db}",
        tmp_path,
        EDGEDRIFT_CLOUD_HEARTBEAT_RETENTION_HOURS=str(1.0 / 3600),  # one second
        EDGEDRIFT_CLOUD_HEARTBEAT_RETENTION_EVERY_S="0.5",
    ).start()
    try:
        with server.client(DEVICES["dev-a"]) as c:
            for i in range(6):
                assert c.post("/v1/devices/dev-a/stats", json={"samples": i}).status_code == 201
        deadline = time.monotonic() + 20
        left = 6
        while time.monotonic() < deadline and left > 2:
            time.sleep(0.25)
            with sqlite3.connect(db) as conn:
                left = conn.execute("SELECT COUNT(*) FROM heartbeats").fetchone()[0]
        assert left == 2
        assert server.counters("dev-a")["heartbeats"] == 6
    finally:
        server.stop()
