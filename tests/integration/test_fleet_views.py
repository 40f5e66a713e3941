"""The fleet views on SQLite and PostgreSQL with a seeded fleet: ``/v1/fleet`` pages, filters and sorts in
SQL with a bounded number of statements (counted with a SQLAlchemy event listener), the summary counts
each status, a device page shows its series and versions, ``/v1/devices`` pages, bad parameters are 422s.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import event
from support.cloud import OPERATOR

from edgedrift_cloud.main import create_app
from edgedrift_cloud.settings import CloudSettings
from edgedrift_harness.fleet_seed import KINDS, device_id, seed_fleet
from edgedrift_harness.postgres import fresh_database

DEVICES = 900  # 100 of each kind
HISTORY = 45
BUDGET = 50
#: The credential watcher's ping on PostgreSQL (every 2 s, ``credential_watch.py``): no request's statement.
WATCHER_PING = "SELECT pg_notify("


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def client(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TestClient, list[str]]]:
    """One seeded registry per backend for the module (the tests only read)."""
    with ExitStack() as stack:
        if request.param == "sqlite":
            database_url = f"sqlite:///{tmp_path_factory.mktemp('fleet') / 'registry.db'}"
        else:
            database_url = stack.enter_context(fresh_database(request.getfixturevalue("postgres_admin_url")))
        settings = CloudSettings(
            database_url=database_url,
            operator_token=SecretStr(OPERATOR),
            mode="development",
            recompute_budget_per_minute=BUDGET,
        )
        app = create_app(settings, configure_logs=False)
        statements: list[str] = []
        c = stack.enter_context(TestClient(app, headers={"Authorization": f"Bearer {OPERATOR}"}))
        seed_fleet(database_url, DEVICES, history_devices=HISTORY, beats_each=60, versions=3)

        def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            if not statement.startswith(WATCHER_PING):  # its own schedule, on another thread
                statements.append(statement)

        engine = app.state.edgedrift.engine
        event.listen(engine, "before_cursor_execute", count)
        yield c, statements
        event.remove(engine, "before_cursor_execute", count)


def ok(c: TestClient, url: str, statements: list[str], most: int) -> Any:
    statements.clear()
    r = c.get(url)
    assert r.status_code == 200, r.text
    assert len(statements) <= most, f"{url}: {len(statements)} statements:\n" + "\n".join(statements)
    return r.json()


def test_pages_filters_sorts_and_summary_in_bounded_statements(
    client: tuple[TestClient, list[str]],
) -> None:
    c, statements = client
    per_kind = DEVICES // len(KINDS)

    summary = ok(c, "/v1/fleet/summary", statements, 1)
    assert summary["devices"] == DEVICES
    assert summary["unauthorized"] == per_kind and summary["degraded"] == per_kind
    assert summary["drifting"] == per_kind
    # never seen or silent for two hours: offline; silent for a minute: stale.
    assert summary["offline"] == 2 * per_kind and summary["stale"] == per_kind
    fresh = [i for i in range(HISTORY) if KINDS[i % len(KINDS)] not in ("never", "stale", "offline")]
    assert summary["recomputes_last_minute"] == len(fresh)
    assert summary["budget_per_minute"] == BUDGET and summary["budget_use"] == len(fresh) / BUDGET

    first = ok(c, "/v1/fleet?limit=25", statements, 1)
    assert first["total"] == DEVICES and [d["device_id"] for d in first["devices"]] == [
        device_id(i) for i in range(25)
    ]
    row = {d["device_id"]: d for d in first["devices"]}
    assert row[device_id(1)]["drifting"] and row[device_id(1)]["status"] == "online"
    assert row[device_id(3)]["status"] == "degraded" and not row[device_id(3)]["drifting"]
    assert row[device_id(7)]["status"] == "offline" and row[device_id(7)]["last_seen"] is None
    assert row[device_id(8)]["status"] == "unauthorized"
    assert row[device_id(0)]["task"] == "regression" and row[device_id(0)]["rmse"] is not None
    assert row[device_id(0)]["accuracy"] is None and row[device_id(1)]["accuracy"] is not None
    assert row[device_id(1)]["recomputes"] == 3 and row[device_id(1)]["latest_version"] == 3

    # A page past the first, a status filter, a search, drifting only: still one or two statements.
    deep = ok(c, "/v1/fleet?offset=850&limit=100", statements, 1)
    assert len(deep["devices"]) == 50 and deep["devices"][0]["device_id"] == device_id(850)
    past = ok(c, "/v1/fleet?offset=5000", statements, 2)
    assert past["total"] == DEVICES and past["devices"] == []
    degraded = ok(c, "/v1/fleet?status=degraded&status=unauthorized&limit=500", statements, 1)
    assert degraded["total"] == 2 * per_kind
    assert {d["status"] for d in degraded["devices"]} == {"degraded", "unauthorized"}
    drifting = ok(c, "/v1/fleet?drifting=true&limit=500", statements, 1)
    assert drifting["total"] == per_kind and all(d["drifting"] for d in drifting["devices"])
    # Sorted and filtered by id only, a page probes only its own devices: the same rows as the full scan.
    every_status = "&".join(f"status={s}" for s in ("online", "stale", "offline", "unauthorized", "degraded"))
    for order in ("false", "true"):
        quick = ok(c, f"/v1/fleet?limit=120&offset=40&desc={order}", statements, 1)
        scanned = ok(c, f"/v1/fleet?limit=120&offset=40&desc={order}&{every_status}", statements, 1)
        assert quick["devices"] == scanned["devices"] and quick["total"] == scanned["total"] == DEVICES
    found = ok(c, "/v1/fleet?q=-0004", statements, 1)
    assert [d["device_id"] for d in found["devices"]] == [device_id(i) for i in range(40, 50)]
    regression = ok(c, "/v1/fleet?task=regression&limit=500", statements, 1)
    assert all(d["task"] == "regression" for d in regression["devices"]) and regression["total"] >= 1

    by_accuracy = ok(c, "/v1/fleet?sort=accuracy&desc=true&limit=500", statements, 1)["devices"]
    accuracies = [d["accuracy"] for d in by_accuracy if d["accuracy"] is not None]
    assert accuracies == sorted(accuracies, reverse=True) and len(accuracies) > 100
    assert by_accuracy[0]["accuracy"] is not None  # nulls last
    by_status = ok(c, "/v1/fleet?sort=status&limit=500", statements, 1)["devices"]
    assert by_status[0]["status"] == "unauthorized"

    detail = ok(c, f"/v1/fleet/devices/{device_id(1)}?points=40", statements, 4)
    assert detail["device"]["device_id"] == device_id(1) and len(detail["heartbeats"]) == 40
    beats = detail["heartbeats"]
    assert [b["samples"] for b in beats] == sorted(b["samples"] for b in beats)
    assert beats[-1]["throughput"] == pytest.approx(10.0, rel=0.05)  # 100 samples per 10 s
    assert [v["version"] for v in detail["versions"]] == [1, 2, 3]
    assert detail["versions"][0]["monitor"]["threshold"] == 0.5

    devices = c.get("/v1/devices?limit=30&offset=30")
    assert devices.status_code == 200 and devices.headers["X-Total-Count"] == str(DEVICES)
    listed = devices.json()
    assert [d["device_id"] for d in listed] == [device_id(i) for i in range(30, 60)]
    assert listed[1]["recomputes"] == 3 and listed[1]["heartbeats"] == 60  # fleet-00031: history
    statements.clear()
    c.get("/v1/devices?limit=1000")
    assert len(statements) <= 5


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/v1/fleet?status=sleeping", "status"),
        ("/v1/fleet?sort=secret", "sort"),
        ("/v1/fleet?limit=0", "limit"),
        ("/v1/fleet?task=vision", "task"),
        ("/v1/fleet/devices/fleet-00001?points=0", "points"),
        ("/v1/devices?offset=-1", "offset"),
    ],
)
def test_bad_parameters_are_422_naming_the_field(
    client: tuple[TestClient, list[str]], url: str, field: str
) -> None:
    c, _ = client
    r = c.get(url)
    assert r.status_code == 422, r.text
    assert field in [str(p) for e in r.json()["detail"] for p in e["loc"]]


def test_offline_before_stale_leaves_no_stale_device(client: tuple[TestClient, list[str]]) -> None:
    """offline_after below stale_after is a meaningful choice (offline is decided first), not a 422."""
    c, statements = client
    per_kind = DEVICES // len(KINDS)
    summary = ok(c, "/v1/fleet/summary?stale_after=120&offline_after=45", statements, 1)
    assert summary["stale"] == 0 and summary["offline"] == 3 * per_kind  # the 60 s silent ones too
    page = ok(c, "/v1/fleet?status=stale&stale_after=120&offline_after=45", statements, 2)
    assert page["total"] == 0


def test_unknown_device_page_is_404_and_operator_only(client: tuple[TestClient, list[str]]) -> None:
    c, _ = client
    assert c.get("/v1/fleet/devices/nobody").status_code == 404
    assert c.get("/v1/fleet/summary", headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_seeded_counters_agree_with_the_history(client: tuple[TestClient, list[str]]) -> None:
    """The seed fills the counters the cloud keeps on write, so a seeded device's counters (one row)
    equal the aggregates of its stored versions and heartbeats (the /v1/devices page)."""
    c, _ = client
    page = c.get("/v1/devices", params={"limit": 20}).json()
    rows = page["devices"] if isinstance(page, dict) else page
    assert any(r["recomputes"] > 0 for r in rows) and any(r["heartbeats"] > 0 for r in rows)
    for r in rows:
        one = c.get(f"/v1/devices/{r['device_id']}/counters").json()
        for key in ("recomputes", "heartbeats", "latest_version", "last_reason", "bytes_in", "reasons"):
            assert one[key] == r[key], (r["device_id"], key, one[key], r[key])
