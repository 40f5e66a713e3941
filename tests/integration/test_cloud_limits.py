"""Issue 28, rows 1, 8, 9, 11, 13 and 14: what one device sends is typed, bounded and rate-limited, and
nothing stored can break a read for anyone else; against a real uvicorn server on SQLite and PostgreSQL.

Stored values that today's input checks refuse are written straight into the registry (as a registry
written before the checks holds them), to show the read paths survive them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import numpy as np
import pytest
import sqlalchemy as sa
from support.cloud import DEVICES, OPERATOR, UNLIMITED, CloudServer, backend_url, field_error

from edgedrift.wire import (
    HISTORY_BODY_BYTES,
    WINDOW_CONTENT_TYPE,
    LearnerParams,
    RetuneRequest,
    WindowHeader,
    encode_window,
    history_rows,
)
from edgedrift_cloud.history import pack
from edgedrift_edge.cloud.client import CloudClient
from edgedrift_edge.session.trainer import LabelBatch

pytestmark = pytest.mark.kernel_agnostic

A = DEVICES["dev-a"]
BINARY = {"Content-Type": WINDOW_CONTENT_TYPE}
JSON = {"Content-Type": "application/json"}
FIXED_C = LearnerParams(C=1.0).model_dump()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudServer]:
    """One server per backend, with the per-device limits at their defaults (rows 9 and 11 test them)."""
    workdir = tmp_path_factory.mktemp("limits")
    with backend_url(request, workdir) as url:
        server = CloudServer(url, workdir, EDGEDRIFT_CLOUD_TRAINING_PROCESSES="false")
        for name in UNLIMITED:
            server.env.pop(name, None)
        server.start()
        try:
            yield server
        finally:
            server.stop()


def device(server: CloudServer, name: str) -> str:
    """A device of the test's own (the limits keep state per device); its secret."""
    secret = f"secret-of-{name}-0123456789"
    server.register(name, secret)
    return secret


def execute(server: CloudServer, statement: str, **params: Any) -> None:
    """Write into the registry behind the service's back (values its checks would refuse today)."""
    engine = sa.create_engine(server.database_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(statement), params)
    finally:
        engine.dispose()


def as_json(server: CloudServer, name: str) -> str:
    """A JSON text parameter in SQL (PostgreSQL casts it)."""
    return f"CAST(:{name} AS json)" if server.database_url.startswith("postgresql") else f":{name}"


def raw_heartbeat(server: CloudServer, device_id: str, extra_json: str) -> None:
    """A heartbeat whose ``extra`` is the given JSON text, stored as the newest of the device."""
    cast = as_json(server, "extra")
    execute(
        server,
        "INSERT INTO heartbeats (device_id, received_at, samples, labeled, accuracy, accuracy_window, "
        "warnings, drift_events, recomputes_requested, model_version, dropped, rejected, extra) VALUES "
        f"(:d, :t, 10, 1, NULL, 0, 0, 0, 0, NULL, 0, 0, {cast})",
        d=device_id,
        t=datetime.now(UTC),
        extra=extra_json,
    )


def window(n: int = 40, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, np.where(X[:, 0] > 0, 1.0, -1.0)


def train(c: httpx.Client, device_id: str, **header: Any) -> httpx.Response:
    X, y = window(d=header.pop("d", 3))
    head = WindowHeader.model_validate({"task": "classification", "learner": "logistic", **header})
    body = encode_window(head, X, y, dtype="float64")
    return c.post(
        f"/v1/devices/{device_id}/models", content=body, headers={"Content-Type": WINDOW_CONTENT_TYPE}
    )


def history_body(batch_id: str, X: np.ndarray, y: np.ndarray, task: str = "classification") -> bytes:
    learner = "logistic" if task == "classification" else "ridge"
    header = WindowHeader.model_validate({"task": task, "learner": learner, "request_id": batch_id})
    return encode_window(header, X, y, dtype="float64")


def post_history(c: httpx.Client, device_id: str, body: bytes) -> httpx.Response:
    return c.post(
        f"/v1/devices/{device_id}/history", content=body, headers={"Content-Type": WINDOW_CONTENT_TYPE}
    )


# --- row 1: heartbeat metrics typed and range-checked; no stored value breaks a fleet read -----------------

BAD_EXTRAS = {  # the value as JSON text, and the field a 422 must name
    "rmse as text": ('{"rmse": "0.5"}', "rmse"),
    "rmse as a bool": ('{"rmse": true}', "rmse"),
    "rmse of 400 digits": ('{"rmse": ' + "9" * 400 + "}", "rmse"),
    "rmse negative": ('{"rmse": -1.0}', "rmse"),
    "a NUL in a free-form text": ('{"note": "a\\u0000b"}', "note"),
    "a free-form integer of 400 digits": ('{"big": ' + "7" * 400 + "}", "big"),
    "a free-form float of 1e400": ('{"huge": 1e400}', "huge"),
    "a free-form text of 10 kB": ('{"note": "' + "x" * 10_000 + '"}', "note"),
    "a known counter as text": ('{"outliers": "3"}', "outliers"),
    "33 entries": (json.dumps({f"k{i}": i for i in range(33)}), "extra"),
}


@pytest.mark.parametrize("case", list(BAD_EXTRAS))
def test_heartbeat_metrics_are_typed_and_bounded(server: CloudServer, case: str) -> None:
    extra, field = BAD_EXTRAS[case]
    body = '{"samples": 5, "extra": ' + extra + "}"
    with server.client(A) as c:
        reply = c.post("/v1/devices/dev-a/stats", content=body, headers=JSON)
    field_error(reply, 422, "extra", field)


def test_an_agents_heartbeat_is_accepted(server: CloudServer) -> None:
    beat = {"samples": 9, "accuracy": 0.75, "extra": {"phase": "running", "label_misses": 0, "duplicates": 1,
            "outliers": 2, "id_reused": 0, "rmse": None, "custom": "free text", "ratio": 0.5}}  # fmt: skip
    with server.client(A) as c:
        reply = c.post("/v1/devices/dev-a/stats", json=beat)
    assert reply.status_code == 201, reply.text
    assert reply.json()["extra"] == beat["extra"]


VIEWS: list[dict[str, str]] = [
    {}, {"sort": "rmse"}, {"sort": "rmse", "desc": "true"}, {"sort": "accuracy"}, {"sort": "status"},
    {"task": "regression"}, {"task": "classification"}, {"status": "online"}, {"drifting": "false"},
    {"q": "limits-"},
]  # fmt: skip
STORED = [  # extras a registry may hold from before the checks
    '{"rmse": "abc"}',
    '{"rmse": true}',
    '{"rmse": ' + "9" * 400 + "}",
    '{"rmse": 1e400}',
    '{"rmse": 0.5, "note": "\\u0000"}',
    '{"note": "\\u0000", "rmse": "\\u0000"}',
    '{"rmse": ' + json.dumps("x" * 5000) + "}",
]


def test_no_stored_heartbeat_breaks_a_fleet_read(server: CloudServer) -> None:
    """Each stored value, as a device's newest heartbeat, leaves every fleet view answering (PostgreSQL
    answered 500 for the whole fleet), shown as no RMSE (SQLite showed "RMSE 0.0")."""
    honest, hostile = "limits-honest", "limits-hostile"
    secret = device(server, honest)
    device(server, hostile)
    with server.client(secret) as c:
        assert (
            c.post(f"/v1/devices/{honest}/stats", json={"samples": 1, "extra": {"rmse": 0.25}}).status_code
            == 201
        )
    with server.client(OPERATOR) as op:
        for stored in STORED:
            raw_heartbeat(server, hostile, stored)
            for params in VIEWS:
                reply = op.get("/v1/fleet", params={**params, "limit": 500})
                assert reply.status_code == 200, (stored[:60], params, reply.text[:300])
                rows = {r["device_id"]: r for r in reply.json()["devices"]}
                if hostile in rows:
                    assert rows[hostile]["rmse"] is None, stored[:60]
                if honest in rows:
                    assert rows[honest]["rmse"] == 0.25
            assert op.get("/v1/fleet/summary", params={"stale_after": 29}).status_code == 200
            page = op.get(f"/v1/fleet/devices/{hostile}")
            assert page.status_code == 200, (stored[:60], page.text[:300])
            beats = op.get(f"/v1/devices/{hostile}/stats", params={"limit": 5})
            assert beats.status_code == 200, (stored[:60], beats.text[:300])
            assert op.get(f"/v1/devices/{hostile}/models/metrics").status_code == 200


# --- row 8: every stored string and map bounded; list endpoints paged and small -----------------------------


def test_monitor_statistics_are_bounded(server: CloudServer) -> None:
    def with_monitor(monitor_json: str) -> httpx.Response:
        head = '{"task": "classification", "learner": "logistic", "X": [[1.0], [2.0]], "y": [1, -1], '
        body = head + f'"monitor": {monitor_json}}}'
        with server.client(A) as c:
            return c.post("/v1/devices/dev-a/models", content=body, headers=JSON)

    field_error(with_monitor(json.dumps({"note": "x" * 129})), 422, "monitor", "note")
    field_error(with_monitor('{"note": "a\\u0000"}'), 422, "monitor", "note")
    field_error(with_monitor('{"n": ' + "9" * 400 + "}"), 422, "monitor", "n")
    field_error(with_monitor('{"n": 1e400}'), 422, "monitor", "n")
    field_error(with_monitor(json.dumps({f"s{i}": i for i in range(33)})), 422, "monitor")
    assert with_monitor(json.dumps({"note": "x" * 128, "stat": 31.4})).status_code == 201


def test_version_lists_are_paged_small_and_survive_stored_maps(server: CloudServer) -> None:
    secret = device(server, "limits-lists")
    with server.client(secret) as c:
        for k in range(3):
            assert train(c, "limits-lists", request_id=f"list-{k}").status_code == 201
    big = json.dumps({"note": "x" * 1_000_000, "nul": "\u0000", "stat": 1.5, "huge": 10**400})
    execute(
        server,
        f"UPDATE models SET monitor = {as_json(server, 'm')} WHERE device_id = :d",
        m=big,
        d="limits-lists",
    )
    with server.client(OPERATOR) as op:
        assert op.get("/v1/devices/limits-lists/models", params={"limit": 201}).status_code == 422
        assert op.get("/v1/devices/limits-lists/stats", params={"limit": 1001}).status_code == 422
        assert op.get("/v1/fleet/devices/limits-lists", params={"versions": 201}).status_code == 422
        listed = op.get("/v1/devices/limits-lists/models", params={"limit": 200})
        assert listed.status_code == 200, listed.text[:300]
        assert [v["monitor"] for v in listed.json()] == [{"stat": 1.5}] * 3
        assert len(listed.content) < 10_000, "a stored megabyte never reaches a list again"
        page = op.get("/v1/fleet/devices/limits-lists")
        assert page.status_code == 200 and page.json()["versions"][0]["monitor"] == {"stat": 1.5}


# --- row 9: per-device rate and size limits on heartbeats and history uploads -------------------------------


def until_refused(post: Callable[[int], httpx.Response], attempts: int) -> tuple[int, httpx.Response, float]:
    """Post until the first refusal (at most ``attempts``): the accepted count, the refusal and the
    seconds it took (the buckets refill meanwhile)."""
    start = time.monotonic()
    for k in range(attempts):
        reply = post(k)
        if reply.status_code != 201:
            return k, reply, time.monotonic() - start
    raise AssertionError(f"{attempts} requests accepted: no limit")


def test_heartbeats_past_the_rate_are_429_with_retry_after(server: CloudServer) -> None:
    secret = device(server, "limits-beats")
    with server.client(secret) as c:
        accepted, refused, seconds = until_refused(
            lambda _: c.post("/v1/devices/limits-beats/stats", json={"samples": 1}), 1000
        )
    assert 120 <= accepted <= 121 + seconds * 120 / 60, (accepted, seconds)
    assert refused.status_code == 429 and refused.json()["reason"] == "heartbeat_rate"
    assert int(refused.headers["Retry-After"]) >= 1
    with server.client(OPERATOR) as op:
        assert op.get("/v1/devices/limits-beats/counters").json()["heartbeats"] == accepted
    with server.client(A) as c:  # another device is not affected
        assert c.post("/v1/devices/dev-a/stats", json={"samples": 1}).status_code == 201


def test_heartbeat_bytes_past_the_limit_are_429(server: CloudServer) -> None:
    """Large (valid) heartbeats: the bytes limit stops them long before the count does."""
    secret = device(server, "limits-fat")
    fat = {"samples": 1, "extra": {f"text{i}": "y" * 128 for i in range(32)}}
    with server.client(secret) as c:
        accepted, refused, _ = until_refused(lambda _: c.post("/v1/devices/limits-fat/stats", json=fat), 100)
    assert 10 <= accepted <= 20, accepted
    assert refused.status_code == 429 and refused.json()["reason"] == "heartbeat_bytes"


def test_history_uploads_past_the_rate_or_bytes_are_429(server: CloudServer) -> None:
    secret = device(server, "limits-history")
    X, y = window(n=2, d=2)
    with server.client(secret) as c:
        accepted, refused, seconds = until_refused(
            lambda k: post_history(c, "limits-history", history_body(f"b-{k}", X, y)), 1000
        )
    assert 120 <= accepted <= 121 + seconds * 120 / 60, (accepted, seconds)
    assert refused.status_code == 429 and refused.json()["reason"] == "history_rate"
    secret = device(server, "limits-bytes")
    Xb, yb = window(n=history_rows(50), d=50)
    per_body = len(history_body("m-0", Xb, yb))
    with server.client(secret) as c:
        accepted, refused, seconds = until_refused(
            lambda k: post_history(c, "limits-bytes", history_body(f"m-{k}", Xb, yb)), 100
        )
    budget = 16 * 2**20 * (1 + seconds / 60)
    assert 16 * 2**20 // per_body <= accepted <= budget // per_body + 1, (accepted, seconds)
    assert refused.status_code == 429 and refused.json()["reason"] == "history_bytes"
    assert int(refused.headers["Retry-After"]) >= 1


# --- row 11: one documented history upload limit; the agent splits batches to fit ---------------------------


def test_a_200_label_batch_at_54_features_is_stored(server: CloudServer) -> None:
    secret = device(server, "limits-54")
    X, y = window(n=200, d=54)
    body = history_body("wide-0", X, y)
    assert 64 * 1024 < len(body) < HISTORY_BODY_BYTES
    with server.client(secret) as c:
        reply = post_history(c, "limits-54", body)
        assert reply.status_code == 201, reply.text
        X2, y2 = window(n=history_rows(54) + 50, d=54)
        assert post_history(c, "limits-54", history_body("too-big", X2, y2)).status_code == 413


def test_the_agent_splits_a_batch_into_parts_that_fit(server: CloudServer) -> None:
    secret = device(server, "limits-split")
    X, y = window(n=200, d=1000, seed=3)  # 1.6 MB as one body
    client = CloudClient(server.url, timeout_s=30, deadline_s=60)
    try:
        outcome, sent = client.post_history(
            "limits-split", secret, LabelBatch("h1-1", X, y), "classification"
        ).result(60)
    finally:
        client.close()
    assert outcome == "stored" and sent > HISTORY_BODY_BYTES
    engine = sa.create_engine(server.database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT batch_id, n FROM history_chunks WHERE device_id = 'limits-split' ORDER BY id")
            ).all()
    finally:
        engine.dispose()
    assert [b for b, _ in rows] == ["h1-1.0", "h1-1.1"] and sum(n for _, n in rows) == 200


# --- row 13: a history that does not fit the device's model is refused, and never breaks a job --------------


def test_a_history_of_another_task_or_width_is_refused_and_never_breaks_a_retune(server: CloudServer) -> None:
    name = "limits-task"
    secret = device(server, name)
    X, y = window(n=200, d=3, seed=5)
    with server.client(secret) as c:
        assert train(c, name, params=FIXED_C, request_id="first").status_code == 201
        regression = post_history(c, name, history_body("reg-0", X, X[:, 1] * 3.0, task="regression"))
        assert regression.status_code == 409 and regression.json()["reason"] == "history_mismatch"
        wider = post_history(c, name, history_body("wide-0", np.hstack([X, X]), y))
        assert wider.status_code == 409 and wider.json()["reason"] == "history_mismatch"
        assert post_history(c, name, history_body("ok-0", X, y)).status_code == 201
    # A registry from before the check: regression labels stored as the newest chunk.
    execute(
        server,
        "INSERT INTO history_chunks (device_id, batch_id, n, d, data, created_at) "
        "VALUES (:d, 'legacy', 200, 3, :b, :t)",
        d=name, b=pack(X, X[:, 1] * 3.0), t=datetime.now(UTC),
    )  # fmt: skip
    retune = RetuneRequest(learner="newton", window_labels=200).model_dump()
    with server.client(secret) as c:
        for k in range(2):
            reply = train(
                c, name, params=LearnerParams(C=1.0).model_dump(), request_id=f"tune-{k}", retune=retune
            )
            assert reply.status_code == 201, reply.text[:500]
            assert reply.json()["edge"] is not None


# --- row 14: the same secret-strength rules on every path that sets a secret -------------------------------


@pytest.mark.parametrize("weak", ["change-me-change-me-insecure", "aaaaaaaaaaaaaaaa", "passwordpassword"])
def test_weak_secrets_are_refused_on_every_api_path(server: CloudServer, weak: str) -> None:
    with server.client(OPERATOR) as op:
        field_error(op.put("/v1/devices/limits-weak", json={"secret": weak}), 422, "secret")
        field_error(op.put("/v1/gateways/limits-gw", json={"secret": weak}), 422, "secret")
        bulk = {"devices": [{"device_id": "limits-w1", "secret": "a-good-secret-0123456789"},
                            {"device_id": "limits-w2", "secret": weak}]}  # fmt: skip
        field_error(op.post("/v1/bulk/devices", json=bulk), 422, "devices", "1", "secret")
        assert op.get("/v1/devices/limits-w1/counters").status_code == 404, "nothing of the batch is stored"
        assert op.put("/v1/devices/limits-weak", json={"secret": "9f86d081884c7d65"}).status_code == 200
