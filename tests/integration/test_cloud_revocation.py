"""Issue 28, rows 6 and 7, against ``edgedrift-cloud serve`` with two uvicorn workers and real HTTP clients:
a revocation holds until an operator lifts it (a gateway's sync never re-issues the secret), a revoked or
rotated secret stops working at once in every worker, and pin, prune, rollback and aliases of one device
are serialised (a pinned or aliased version is never pruned, whatever the interleaving)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest
from support.cloud import DEVICES, OPERATOR, UNLIMITED, CloudServer

from edgedrift.wire import WINDOW_CONTENT_TYPE, WindowHeader, encode_window
from edgedrift_cloud.auth import hash_secret
from edgedrift_harness.cloud import CloudProcess

GATEWAY_SECRET = "gateway-secret-0123456789abcdef"
BINARY = {"Content-Type": WINDOW_CONTENT_TYPE}
NO_BUDGET = {
    "EDGEDRIFT_CLOUD_TRAINING_PROCESSES": "false",
    "EDGEDRIFT_CLOUD_RECOMPUTE_BUDGET_PER_DEVICE_PER_MINUTE": "unlimited",
}
ENV = {"EDGEDRIFT_CLOUD_AUTH_FAILURES_PER_10S": "1000000", **UNLIMITED}
X = np.random.default_rng(0).normal(size=(30, 3))
Y = np.where(X[:, 0] > 0, 1.0, -1.0)


def window(request_id: str) -> bytes:
    header = WindowHeader(task="classification", learner="logistic", request_id=request_id)
    return encode_window(header, X, Y, dtype="float64")


def fresh(url: str, token: str) -> httpx.Client:
    """A client whose every request opens a new connection, so the two workers share the requests."""
    return httpx.Client(
        base_url=url,
        headers={"Authorization": f"Bearer {token}", "Connection": "close"},
        limits=httpx.Limits(max_keepalive_connections=0),
        timeout=30,
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def two_workers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CloudProcess]:
    """Two workers with the credential settings at their defaults (on PostgreSQL: the credential cache
    on, voided by the database's notifications; on SQLite: the registry asked on every request)."""
    url = (
        f"sqlite:///{tmp_path / 'registry.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url_fresh")
    )
    server = CloudProcess(
        url,
        tmp_path,
        operator_token=OPERATOR,
        devices=DEVICES,
        workers=2,
        env={
            "EDGEDRIFT_CLOUD_AUTH_FAILURES_PER_10S": "1000000",
            "EDGEDRIFT_CLOUD_TRAINING_PROCESSES": "false",
        },
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def sync(url: str, known: list[str]) -> dict[str, str | None]:
    with fresh(url, GATEWAY_SECRET) as gw:
        reply = gw.post("/v1/gateways/gw-1/sync", json={"known": known})
    assert reply.status_code == 200, reply.text
    return {d["device_id"]: d["secret"] for d in reply.json()["devices"]}


def statuses(url: str, token: str, path: str, n: int) -> list[int]:
    with fresh(url, token) as c:
        return [c.get(path).status_code for _ in range(n)]


def test_a_revoked_or_rotated_secret_stops_working_at_once_in_every_worker(two_workers: CloudProcess) -> None:
    url, path = two_workers.url, "/v1/devices/dev-a/counters"
    old = DEVICES["dev-a"]
    assert set(statuses(url, old, path, 30)) == {200}, "both workers know (and may cache) the secret"
    new = "rotated-secret-of-device-a-0123"
    with fresh(url, OPERATOR) as op:
        assert op.put("/v1/devices/dev-a", json={"secret": new}).status_code == 200
    assert set(statuses(url, old, path, 30)) == {401}, "the old secret must stop working at once"
    assert set(statuses(url, new, path, 30)) == {200}
    with fresh(url, OPERATOR) as op:
        assert op.delete("/v1/devices/dev-a").status_code == 200
    assert set(statuses(url, new, path, 30)) == {401}, "a revoked secret must stop working at once"
    with fresh(url, new) as c:
        assert c.post("/v1/devices/dev-a/stats", json={"samples": 1}).status_code == 401


def test_a_restart_keeps_the_rotations_and_revocations_of_provisioned_devices(
    two_workers: CloudProcess,
) -> None:
    """The settings provision dev-a and dev-b at every start; a worker that starts after an operator
    rotated dev-a's secret and revoked dev-b must not restore their configured secrets."""
    url, path = two_workers.url, "/v1/devices/{}/counters"
    rotated = "rotated-secret-of-device-a-4567"
    with fresh(url, OPERATOR) as op:
        assert op.put("/v1/devices/dev-a", json={"secret": rotated}).status_code == 200
        assert op.delete("/v1/devices/dev-b").status_code == 200
    two_workers.stop()
    two_workers.start()
    url = two_workers.url
    assert set(statuses(url, rotated, path.format("dev-a"), 10)) == {200}
    assert set(statuses(url, DEVICES["dev-a"], path.format("dev-a"), 10)) == {401}
    assert set(statuses(url, DEVICES["dev-b"], path.format("dev-b"), 10)) == {401}


def test_a_revocation_holds_until_an_operator_lifts_it(two_workers: CloudProcess) -> None:
    url = two_workers.url
    with fresh(url, OPERATOR) as op:
        assert op.put("/v1/gateways/gw-1", json={"secret": GATEWAY_SECRET}).status_code == 200
        assert op.post("/v1/gateways/gw-1/devices", json={"devices": ["d-1", "d-2"]}).status_code == 200
    first = sync(url, [])
    assert set(first) == {"d-1", "d-2"} and all(first.values())
    with fresh(url, OPERATOR) as op:
        assert op.delete("/v1/devices/d-1").status_code == 200
        assert op.get("/v1/gateways/gw-1/devices").json() == ["d-2"], "revoking unassigns"
        # Even assigned again by mistake, no sync re-issues a revoked device's secret.
        assert op.post("/v1/gateways/gw-1/devices", json={"devices": ["d-1"]}).status_code == 200
    for known in ([], ["d-2"]):
        assert "d-1" not in sync(url, known), "a sync never re-issues a revoked device's secret"
    with fresh(url, GATEWAY_SECRET) as gw:
        beats = {"heartbeats": [{"device_id": "d-1", "heartbeat": {"samples": 1}}]}
        assert gw.post("/v1/gateways/gw-1/heartbeats", json=beats).status_code == 403
    with fresh(url, str(first["d-1"])) as device:
        assert device.post("/v1/devices/d-1/models", content=window("w-1"), headers=BINARY).status_code == 401
    with fresh(url, OPERATOR) as op:
        view = op.get("/v1/devices/d-1/models/registry").json()
        assert view["revoked_at"] is not None
        rows = op.get("/v1/fleet", params={"q": "d-1"}).json()["devices"]
        assert [r["status"] for r in rows] == ["unauthorized"]
        # The operator lifts it: the device is registered again, and its gateway may sync it.
        assert op.put("/v1/devices/d-1", json={"secret": "lifted-secret-of-d-1-0123456"}).status_code == 200
    assert sync(url, ["d-2"]).get("d-1"), "after the operator lifted it, the gateway serves it again"


def credential_checks(url: str) -> dict[str, float]:
    """``edgedrift_credential_checks_total`` by source, summed over the workers."""
    with fresh(url, OPERATOR) as op:
        text = op.get("/metrics").text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("edgedrift_credential_checks_total{"):
            source = line.split('source="', 1)[1].split('"', 1)[0]
            out[source] = out.get(source, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def test_with_the_cache_on_a_secret_changed_by_anyone_is_refused_at_once_by_every_worker(
    postgres_url_fresh: str, tmp_path: Path
) -> None:
    """Two workers on PostgreSQL caching credentials for 10 minutes: a rotation made by neither worker
    (the CLI, then a plain SQL statement, as an operator's psql session) voids the cached secret in both
    when it commits; a device registered meanwhile is known at once although its secret was a cached miss."""
    server = CloudProcess(
        postgres_url_fresh,
        tmp_path,
        operator_token=OPERATOR,
        devices=DEVICES,
        workers=2,
        env={**ENV, **{f"EDGEDRIFT_CLOUD_AUTH_{k}_SECONDS": "600" for k in ("CACHE", "MISS_CACHE")}},
    )
    server.start()
    try:
        url, path = server.url, "/v1/devices/dev-a/counters"
        old = DEVICES["dev-a"]
        assert set(statuses(url, old, path, 40)) == {200}
        assert credential_checks(url).get("cache", 0) >= 30, "the workers answered from their caches"
        rotated = "rotated-by-the-cli-0123456789abcd"
        env = {**os.environ, "EDGEDRIFT_CLOUD_DATABASE_URL": postgres_url_fresh}
        done = subprocess.run(
            [sys.executable, "-m", "edgedrift_cloud.cli", "add-device", "dev-a", "--secret-file", "-"],
            input=rotated + "\n", capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert set(statuses(url, old, path, 40)) == {401}, "the CLI's rotation must void every worker's cache"
        assert set(statuses(url, rotated, path, 40)) == {200}
        by_sql = "rotated-by-sql-0123456789abcdefgh"
        with psycopg.connect(postgres_url_fresh, autocommit=True) as conn:
            conn.execute("UPDATE devices SET token_hash = %s WHERE id = 'dev-a'", (hash_secret(by_sql),))
        assert set(statuses(url, rotated, path, 40)) == {401}, "a psql session's rotation too"
        assert set(statuses(url, by_sql, path, 40)) == {200}
        newcomer, secret = "dev-new", "secret-of-the-newcomer-0123456789"
        newcomer_path = f"/v1/devices/{newcomer}/counters"
        assert set(statuses(url, secret, newcomer_path, 10)) == {401}, "unknown: remembered as a miss"
        with psycopg.connect(postgres_url_fresh, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO devices (id, token_hash, model_count, created_at) VALUES (%s, %s, 0, now())",
                (newcomer, hash_secret(secret)),
            )
        assert set(statuses(url, secret, newcomer_path, 20)) == {200}, "a registration voids the misses"
    finally:
        server.stop()


# --- row 7: pin, prune, rollback, alias and new versions serialised per device -----------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def registry_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CloudServer]:
    url = (
        f"sqlite:///{tmp_path / 'registry.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url_fresh")
    )
    server = CloudServer(url, tmp_path, **UNLIMITED, **NO_BUDGET)
    server.workers = 2
    server.start()
    try:
        yield server
    finally:
        server.stop()


def together(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls at the same moment, each on its own thread and connection."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_a_pinned_or_aliased_version_is_never_pruned(registry_server: CloudServer) -> None:
    """Rounds of a pin (or an alias, or a rollback) racing ``prune?keep=1`` and a new version: afterwards the
    pinned and aliased versions are stored, and a recompute answers (it answered 500 for ever)."""
    url, device = registry_server.url, "dev-b"
    base = f"/v1/devices/{device}/models"
    with fresh(url, DEVICES[device]) as c:
        for k in range(3):
            assert c.post(base, content=window(f"seed-{k}"), headers=BINARY).status_code == 201
    for round_ in range(24):
        race(url, base, DEVICES[device], round_, ("pin", "alias", "rollback")[round_ % 3])


def race(url: str, base: str, secret: str, round_: int, kind: str) -> None:
    """One round: a new version, then the change, a prune and another new version at once."""
    with fresh(url, secret) as c:
        older = c.post(base, content=window(f"r{round_}"), headers=BINARY).json()["version"] - 1

    def change() -> int:
        with fresh(url, OPERATOR) as op:
            if kind == "pin":
                return op.put(f"{base}/pin", json={"version": older}).status_code
            if kind == "alias":
                return op.put(f"{base}/aliases/production", json={"version": older}).status_code
            return op.post(f"{base}/rollback").status_code

    def prune() -> int:
        with fresh(url, OPERATOR) as op:
            return op.post(f"{base}/prune", params={"keep": 1}).status_code

    def train() -> int:
        with fresh(url, secret) as c:
            return c.post(base, content=window(f"race-{round_}"), headers=BINARY).status_code

    changed, pruned, trained = together(change, prune, train)
    assert pruned == 200 and changed in (200, 404, 410), (changed, pruned)
    assert trained in (200, 201), trained
    with fresh(url, OPERATOR) as op:
        view = op.get(f"{base}/registry").json()
        protected = set(view["aliases"].values()) | ({view["pinned"]} - {None})
        assert not protected & set(view["pruned"]), (round_, kind, view)
        for version in protected:
            assert op.get(f"{base}/{version}").status_code == 200
    with fresh(url, secret) as c:
        again = c.post(base, content=window(f"after-{round_}"), headers=BINARY)
        assert again.status_code in (200, 201), again.text[:300]
    with fresh(url, OPERATOR) as op:
        op.delete(f"{base}/pin")
        op.delete(f"{base}/aliases/production")
