"""Issue 12, row 16: counters maintained on write. They stay exact with concurrent stores and heartbeats
from two ``serve`` processes on one PostgreSQL; retention does not lower them (they count every
recompute ever made), purging a device drops its own but never the fleet's Prometheus totals; the
migration backfills them from an existing registry (SQLite and PostgreSQL)."""

from __future__ import annotations

import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from alembic import command
from sqlalchemy import event, insert
from support.cloud import DEVICES, OPERATOR, CloudServer, seeded_registry

from edgedrift_cloud import counters_query, registry
from edgedrift_cloud.db.engine import alembic_config, make_engine, make_sessionmaker, upgrade
from edgedrift_cloud.db.tables import Device, HeartbeatRecord, ModelRecord
from edgedrift_harness.postgres import fresh_database

UNLIMITED = {"EDGEDRIFT_CLOUD_RECOMPUTE_BUDGET_PER_DEVICE_PER_MINUTE": "unlimited"}


def window(seed: int, **extra: Any) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(60 + seed % 7, 3))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    return {"task": "classification", "learner": "logistic", "X": X.tolist(), "y": y.tolist(), **extra}


def fleet_totals(server: CloudServer) -> dict[tuple[str, str], float]:
    """``edgedrift_recomputes_total`` by (learner, reason) from a server without per-device series."""
    text = httpx.get(server.url + "/metrics", timeout=30).text
    found = re.findall(r'^edgedrift_recomputes_total\{learner="(\w+)",reason="(\w+)"\} (\S+)$', text, re.M)
    return {(learner, reason): float(v) for learner, reason, v in found}


def test_counters_stay_exact_with_two_serve_processes_writing_at_once(
    postgres_admin_url: str, tmp_path: Path
) -> None:
    with fresh_database(postgres_admin_url) as url:
        first = CloudServer(url, tmp_path, **UNLIMITED).start()
        second = CloudServer(url, tmp_path, EDGEDRIFT_CLOUD_METRICS_PER_DEVICE="false", **UNLIMITED).start()
        try:
            servers = (first, second)

            def train(i: int) -> tuple[str, str, httpx.Response]:
                device = ("dev-a", "dev-b")[i % 2]
                reason = ("drift", "periodic", "manual")[i % 3]
                with servers[(i // 2) % 2].client(DEVICES[device]) as c:
                    return (
                        device,
                        reason,
                        c.post(f"/v1/devices/{device}/models", json=window(i, reason=reason)),
                    )

            def beat(i: int) -> int:
                with servers[i % 2].client(OPERATOR) as op:
                    if i % 3 == 0:
                        batch = [{"device_id": d, "heartbeat": {"samples": i}} for d in DEVICES]
                        assert op.post("/v1/bulk/heartbeats", json={"heartbeats": batch}).status_code == 201
                        return 2
                with servers[i % 2].client(DEVICES["dev-a"]) as dev:
                    assert dev.post("/v1/devices/dev-a/stats", json={"samples": i}).status_code == 201
                return 1

            with ThreadPoolExecutor(12) as pool:
                beats = pool.map(beat, range(60))
                trained = list(pool.map(train, range(48)))
                sent = sum(beats)
            assert all(r.status_code == 201 for _, _, r in trained), [r.text for *_, r in trained][:3]
            for device in DEVICES:
                mine = [(reason, r.json()) for d, reason, r in trained if d == device]
                counters = second.counters(device)
                assert counters["recomputes"] == len(mine) == 24
                assert counters["latest_version"] == 24
                assert sorted(m["version"] for _, m in mine) == list(range(1, 25))
                assert counters["reasons"] == dict(Counter(reason for reason, _ in mine))
                assert counters["bytes_in"] == sum(m["bytes_in"] for _, m in mine)
                assert counters["bytes_out"] == sum(m["bytes_out"] for _, m in mine)
                assert counters["train_ms_total"] == pytest.approx(sum(m["train_ms"] for _, m in mine))
                assert counters == first.counters(device)
            beats_a = first.counters("dev-a")["heartbeats"]
            beats_b = first.counters("dev-b")["heartbeats"]
            assert beats_a + beats_b == sent and beats_b == 20
            expected = Counter(("logistic", reason) for _, reason, _ in trained)
            assert fleet_totals(second) == {key: float(n) for key, n in expected.items()}
        finally:
            first.stop()
            second.stop()


def test_retention_keeps_counters_and_a_purge_drops_only_the_device_s_own(tmp_path: Path) -> None:
    server = CloudServer(
        f"sqlite:///{tmp_path / 'registry.db'}", tmp_path, EDGEDRIFT_CLOUD_METRICS_PER_DEVICE="false"
    ).start()
    try:
        with server.client(DEVICES["dev-b"]) as dev:
            for i in range(5):
                assert dev.post("/v1/devices/dev-b/models", json=window(i, reason="drift")).status_code == 201
            assert dev.post("/v1/devices/dev-b/stats", json={"samples": 1}).status_code == 201
        before = server.counters("dev-b")
        with server.client(OPERATOR) as op:
            pruned = op.post("/v1/devices/dev-b/models/prune", params={"keep": 1})
            assert pruned.status_code == 200 and pruned.json()["pruned"] == [1, 2, 3, 4]
            assert server.counters("dev-b") == before, "retention lowered the counters"
            assert before["recomputes"] == 5 and before["heartbeats"] == 1
            assert fleet_totals(server) == {("logistic", "drift"): 5.0}
            assert op.delete("/v1/devices/dev-b", params={"purge": "true"}).json()["models_deleted"] == 5
            assert op.get("/v1/devices/dev-b/counters").status_code == 404
            assert fleet_totals(server) == {("logistic", "drift"): 5.0}, "a Prometheus counter went down"
        server.register("dev-b", DEVICES["dev-b"])
        fresh = server.counters("dev-b")
        assert (fresh["recomputes"], fresh["latest_version"], fresh["heartbeats"]) == (0, None, 0)
        with server.client(DEVICES["dev-b"]) as dev:
            assert dev.post("/v1/devices/dev-b/models", json=window(9, reason="drift")).json()["version"] == 1
        again = server.counters("dev-b")
        assert (again["recomputes"], again["latest_version"], again["reasons"]) == (1, 1, {"drift": 1})
        assert fleet_totals(server) == {("logistic", "drift"): 6.0}
    finally:
        server.stop()


def test_the_migration_backfills_the_counters(database_url: str) -> None:
    engine = make_engine(database_url)
    config = alembic_config(engine)
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0005")
    t0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    models = [
        {"device_id": device, "version": v, "sha256": "0" * 64, "kind": "linear", "learner": learner,
         "task": "classification", "rebalance": "none", "n": 10, "d": 2, "train_ms": 1.5 * v,
         "bytes_in": 100 + v, "bytes_out": 50 + v, "encoding": "json", "reason": reason,
         "requested_by": device, "monitor": {}, "document": "{}", "created_at": t0 + timedelta(minutes=v)}
        for device, learner, reasons in (("d1", "logistic", "ddpd"), ("d2", "ridge", "pp"))
        for v, reason in enumerate(({"d": "drift", "p": "periodic"}[r] for r in reasons), start=1)
    ]  # fmt: skip
    with engine.begin() as conn:
        conn.execute(
            insert(Device), [{"id": d, "token_hash": d * 32, "model_count": 0} for d in ("d1", "d2", "d3")]
        )
        conn.execute(insert(ModelRecord), models)
        beats = [{"device_id": "d1", "samples": i, "labeled": 0, "accuracy_window": 0, "warnings": 0,
                  "drift_events": 0, "recomputes_requested": 0, "dropped": 0, "rejected": 0, "extra": {},
                  "received_at": t0 + timedelta(minutes=10 * i)} for i in range(3)]  # fmt: skip
        conn.execute(insert(HeartbeatRecord), beats)
    upgrade(engine)
    with make_sessionmaker(engine)() as session:
        d1, d2, d3 = (registry.counters(session, d) for d in ("d1", "d2", "d3"))
        totals = sorted(registry.recompute_totals(session, per_device=False))
    assert (d1.recomputes, d1.latest_version, d1.last_reason, d1.heartbeats) == (4, 4, "drift", 3)
    assert d1.reasons == {"drift": 3, "periodic": 1}
    assert (d1.bytes_in, d1.bytes_out, d1.train_ms_total) == (410, 210, 15.0)
    assert d1.last_recompute_at == t0 + timedelta(minutes=4) and d1.last_seen == t0 + timedelta(minutes=20)
    assert (d2.recomputes, d2.last_seen, d2.reasons) == (2, t0 + timedelta(minutes=2), {"periodic": 2})
    assert (d3.recomputes, d3.heartbeats, d3.latest_version, d3.last_seen) == (0, 0, None, None)
    assert totals == [
        ("", "logistic", "drift", 3, 10.5, 307, 157),
        ("", "logistic", "periodic", 1, 4.5, 103, 53),
        ("", "ridge", "periodic", 2, 4.5, 203, 103),
    ]
    engine.dispose()


def test_a_device_page_read_while_a_first_version_is_stored(database_url: str) -> None:
    """``GET /v1/devices`` reads the versions in more than one statement; a device's first version stored
    between them (PostgreSQL reads each at its own snapshot) must not break the page (it was a KeyError,
    a 500, under the 10,000-device fleet simulation)."""
    engine, sessions = seeded_registry(database_url, ("d1", "d2"))
    writer = make_engine(database_url)
    stored: list[int] = []

    @event.listens_for(engine, "before_cursor_execute")
    def store_between(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not stored and "reason" in statement and "GROUP BY" in statement:
            with make_sessionmaker(writer)() as session:
                new = registry.NewModel(
                    device_id="d2", document={"kind": "linear"}, kind="linear", learner="logistic",
                    task="classification", rebalance="none", chosen=None, scores=None, n=10, d=2,
                    train_ms=1.0, bytes_in=100, encoding="json", reason="drift", requested_by="d2",
                    monitor={}, request_id=None,
                )  # fmt: skip
                stored.append(registry.store_model(session, new).version)
                session.commit()

    try:
        with sessions() as session:
            total, page = counters_query.counters_page(session, 10, 0)
    finally:
        engine.dispose()
        writer.dispose()
    assert stored == [1], "the version was not stored between the page's statements"
    assert total == 2 and [c.device_id for c in page] == ["d1", "d2"]
