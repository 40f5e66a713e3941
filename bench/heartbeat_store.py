"""Storing a gateway's batch of heartbeats: CPU per batch of the cloud's statements against plain
SQLAlchemy Core (the peer, which the cloud used before: a multi-row ``VALUES`` upsert for the counters
and an ``executemany`` insert).

Registers ``--devices`` devices in a fresh PostgreSQL database (the server at ``$EDGEDRIFT_TEST_PG`` or a
throwaway one), then stores ``--rounds`` batches of one heartbeat per device each way, alternating, and
reports the process CPU per batch (median; a worker spends it holding its GIL), the wall time, and
the ratio. Both ways must leave the same counters.

    python bench/heartbeat_store.py [--devices 1000] [--rounds 20] [--json out/heartbeat-store.json]
    python bench/heartbeat_store.py --quick          # 200 devices, 4 rounds (the smoke run)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, Table, case, insert, or_, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from edgedrift.wire import Heartbeat
from edgedrift_cloud import bulk
from edgedrift_cloud.db.engine import make_engine, make_sessionmaker, upgrade
from edgedrift_cloud.db.tables import Device, DeviceCounter, HeartbeatRecord, utcnow
from edgedrift_harness.postgres import fresh_database, postgres_server
from edgedrift_harness.results import write_json

Beats = Sequence[tuple[str, Heartbeat]]


def core_store(session: Session, beats: Beats) -> None:
    """The peer: the known-device check with ``IN``, an ``executemany`` insert and a multi-row
    ``VALUES ... ON CONFLICT`` counter upsert, as SQLAlchemy Core writes them."""
    ids = sorted({d for d, _ in beats})
    known = set(session.scalars(select(Device.id).where(Device.id.in_(ids))))
    assert known == set(ids)
    now = utcnow()
    session.execute(
        insert(HeartbeatRecord), [{"device_id": d, "received_at": now, **b.model_dump()} for d, b in beats]
    )
    rows = [
        {"device_id": d, "recomputes": 0, "bytes_in": 0, "bytes_out": 0, "train_ms_total": 0.0,
         "heartbeats": n, "last_seen": now}
        for d, n in sorted(Counter(d for d, _ in beats).items())
    ]  # fmt: skip
    table = DeviceCounter.__table__
    assert isinstance(table, Table)
    statement = postgresql.insert(table).values(rows)
    old, new = table.c.last_seen, statement.excluded.last_seen
    update_set: dict[str, ColumnElement[object]] = {
        "heartbeats": table.c.heartbeats + statement.excluded.heartbeats,
        "last_seen": case((or_(old.is_(None), new > old), new), else_=old),
    }
    session.execute(statement.on_conflict_do_update(index_elements=["device_id"], set_=update_set))


def edgedrift_store(session: Session, beats: Beats) -> None:
    bulk.add_heartbeats(session, beats)


def timed(store: Callable[[Session, Beats], None], session: Session, beats: Beats) -> tuple[float, float]:
    """(CPU ms, wall ms) of storing and committing one batch."""
    cpu, wall = time.process_time(), time.perf_counter()
    store(session, beats)
    session.commit()
    return (time.process_time() - cpu) * 1000.0, (time.perf_counter() - wall) * 1000.0


def run(database_url: str, devices: int, rounds: int) -> dict[str, Any]:
    engine = make_engine(database_url)
    upgrade(engine)
    sessions = make_sessionmaker(engine)
    ids = [f"gw-device-{i:05d}" for i in range(devices)]
    with sessions() as session:
        bulk.register_devices(session, {d: f"secret-of-{d}-0123456789" for d in ids})
        session.commit()
    beats = [(d, Heartbeat(samples=100 * i, labeled=i, accuracy=0.8, warnings=1)) for i, d in enumerate(ids)]
    cpu: dict[str, list[float]] = {"edgedrift": [], "sqlalchemy_core": []}
    wall: dict[str, list[float]] = {"edgedrift": [], "sqlalchemy_core": []}
    ways = {"edgedrift": edgedrift_store, "sqlalchemy_core": core_store}
    with sessions() as session:
        for r in range(rounds + 1):
            for name, store in ways.items():
                c, w = timed(store, session, beats)
                if r > 0:  # the first round warms the statement caches
                    cpu[name].append(c)
                    wall[name].append(w)
        stored = session.scalar(select(DeviceCounter.heartbeats).where(DeviceCounter.device_id == ids[0]))
    engine.dispose()
    if stored != 2 * (rounds + 1):
        raise SystemExit(f"the counters disagree: {stored} heartbeats counted, {2 * (rounds + 1)} stored")
    median = {k: statistics.median(v) for k, v in cpu.items()}
    return {
        "devices": devices,
        "rounds": rounds,
        "cpu_ms_per_batch": {k: round(v, 2) for k, v in median.items()},
        "wall_ms_per_batch": {k: round(statistics.median(v), 2) for k, v in wall.items()},
        "cpu_us_per_heartbeat": {k: round(1000.0 * v / devices, 1) for k, v in median.items()},
        "cpu_ratio_peer_over_edgedrift": round(median["sqlalchemy_core"] / median["edgedrift"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, default=1000, help="heartbeats per batch (one per device)")
    parser.add_argument("--rounds", type=int, default=20, help="batches stored each way")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 200 devices, 4 rounds")
    args = parser.parse_args()
    devices, rounds = (200, 4) if args.quick else (args.devices, args.rounds)
    with postgres_server() as admin, fresh_database(admin) as url:
        figures = run(url, devices, rounds)
    print(json.dumps(figures, indent=2))
    print(
        f"\n{devices} heartbeats per batch: CPU {figures['cpu_ms_per_batch']['edgedrift']} ms (edgedrift) vs "
        f"{figures['cpu_ms_per_batch']['sqlalchemy_core']} ms (SQLAlchemy Core): "
        f"{figures['cpu_ratio_peer_over_edgedrift']}x less"
    )
    if args.json:
        write_json(args.json, figures)


if __name__ == "__main__":
    main()
