"""Inputs and faults that used to answer 500 (issue 12, table rows 1-5 and 8), against a real uvicorn
server on SQLite and on PostgreSQL: each is now a 4xx naming the field, a 409, or a 503 with a reason,
and nothing is stored (a model with a non-finite number never is)."""

from __future__ import annotations

import contextlib
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from support.cloud import DEVICES, OPERATOR, CloudServer, field_error

from edgedrift.wire import WINDOW_CONTENT_TYPE, WINDOW_MAGIC, WindowHeader, encode_window
from edgedrift_harness.postgres import fresh_database

A, B = DEVICES["dev-a"], DEVICES["dev-b"]
rng = np.random.default_rng(1)
X = rng.normal(size=(40, 3))
Y = np.where(X[:, 0] > 0, 1.0, -1.0)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudServer]:
    """One server per backend for the module (every test checks it stored nothing it should not)."""
    workdir = tmp_path_factory.mktemp("hostile")
    if request.param == "sqlite":
        with _started(f"sqlite:///{workdir / 'registry.db'}", workdir) as server:
            yield server
        return
    admin = request.getfixturevalue("postgres_admin_url")
    with fresh_database(admin) as url, _started(url, workdir) as server:
        yield server


@contextlib.contextmanager
def _started(url: str, workdir: Path) -> Iterator[CloudServer]:
    server = CloudServer(url, workdir, EDGEDRIFT_CLOUD_TRAINING_PROCESSES="false").start()
    try:
        yield server
    finally:
        server.stop()


def post_window(server: CloudServer, content: bytes | None = None, **kw: Any) -> httpx.Response:
    with server.client(A) as c:
        if content is not None:
            kw["headers"] = {"Content-Type": WINDOW_CONTENT_TYPE}
            kw["content"] = content
        return c.post("/v1/devices/dev-a/models", **kw)


def recomputes(server: CloudServer) -> int:
    return int(server.counters("dev-a")["recomputes"])


def raw_window(header: bytes, payload: bytes = b"\0" * 16) -> bytes:
    return WINDOW_MAGIC + struct.pack("<I", len(header)) + header + payload


@pytest.mark.parametrize(
    ("header", "field"),
    [
        (b'{"task":"classification","learner":"logistic","n":Infinity,"d":1}', "header"),
        (b'{"task":"classification","learner":"logistic","n":1e400,"d":1}', "header.n"),
        (b'{"task":"classification","learner":"logistic","n":2,"d":1.5}', "header.d"),
        (b'{"task":"classification","learner":"logistic","n":true,"d":1}', "header.n"),
        (b'{"task":"classification","learner":"logistic","n":99999999999999,"d":1}', "header.n"),
        (b"[" * 30_000 + b"]" * 30_000, "header"),
        (b'{"task":"classification","learner":"logistic","n":1,"d":1,"monitor":' + b"[" * 30_000, "header"),
    ],
    ids=["infinity", "1e400", "float-d", "bool-n", "huge-n", "deep-list", "deep-in-object"],
)
def test_hostile_binary_headers_are_422(server: CloudServer, header: bytes, field: str) -> None:
    """Row 1: non-finite or non-integer counts and 30,000-deep nesting name the header field."""
    before = recomputes(server)
    field_error(post_window(server, raw_window(header)), 422, field)
    assert recomputes(server) == before


def _json_window(learner: str, task: str, Xw: np.ndarray, yw: np.ndarray, **params: Any) -> dict[str, Any]:
    return {"task": task, "learner": learner, "params": params, "X": Xw.tolist(), "y": yw.tolist()}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_json_window("logistic", "classification", X[:1], Y[:1], C="auto"), "C"),
        (_json_window("ridge", "regression", X[:1], X[:1, 0], C="auto"), "C"),
        (_json_window("logistic", "classification", X * 1e300, Y, standardize=True), "X"),
        (_json_window("shrub", "regression", X, np.full(len(X), 1e308)), "y"),
        (_json_window("shrub", "classification", np.full_like(X, 1.7e308), (Y > 0).astype(float)), "X"),
    ],
    ids=["auto-C-one-row", "auto-C-one-row-ridge", "standardize-1e300", "shrub-y-1e308", "shrub-X-1.7e308"],
)
def test_untrainable_windows_are_422_and_store_nothing(
    server: CloudServer, body: dict[str, Any], field: str
) -> None:
    """Row 2: each of these used to raise inside a trainer or store a NaN model."""
    before = recomputes(server)
    field_error(post_window(server, json=body), 422, field)
    assert recomputes(server) == before


def test_binary_window_beyond_the_value_bound_is_422(server: CloudServer) -> None:
    body = encode_window(WindowHeader(task="classification", learner="logistic"), X * 1e35, Y)
    field_error(post_window(server, body), 422, "X")


@pytest.mark.parametrize(
    "beat",
    [
        {"samples": 2**63},
        {"samples": 1, "warnings": 2**31},
        {"samples": 1, "model_version": 2**40},
        {"samples": 1, "dropped": 10**30},
    ],
    ids=["samples", "warnings", "model_version", "dropped"],
)
def test_heartbeat_integers_above_the_column_range_are_422(server: CloudServer, beat: dict[str, int]) -> None:
    """Row 3: bounded fields, refused before the database sees them."""
    field = next(k for k in beat if beat[k] != 1)
    with server.client(A) as c:
        before = len(c.get("/v1/devices/dev-a/stats").json())
        field_error(c.post("/v1/devices/dev-a/stats", json=beat), 422, field)
        largest = {"samples": 2**63 - 1, "warnings": 2**31 - 1, "dropped": 2**63 - 1}
        assert c.post("/v1/devices/dev-a/stats", json=largest).status_code == 201
        assert len(c.get("/v1/devices/dev-a/stats").json()) == before + 1


def test_registering_with_another_devices_secret_is_409(server: CloudServer) -> None:
    """Row 4: the secret is unique; the clash is a 409 and both devices keep their credentials."""
    with server.client(OPERATOR) as op:
        r = op.put("/v1/devices/dev-c", json={"secret": A})
        assert r.status_code == 409, r.text
        assert "secret" in r.json()["detail"]
        r = op.put("/v1/devices/dev-b", json={"secret": A})
        assert r.status_code == 409, r.text
        assert op.get("/v1/devices/dev-c/counters").status_code == 404
    for token, device in ((A, "dev-a"), (B, "dev-b")):
        with server.client(token) as c:
            assert c.get(f"/v1/devices/{device}/counters").status_code == 200


def test_a_reused_request_id_with_another_window_is_409(server: CloudServer) -> None:
    """Row 5: the same request_id with the same window replays; with another window it is refused."""
    first = _json_window("logistic", "classification", X, Y) | {"request_id": "storm-0001"}
    r = post_window(server, json=first)
    assert r.status_code == 201, r.text
    version = r.json()["version"]
    again = post_window(server, json=first)
    assert again.status_code == 200 and again.json()["replayed"] and again.json()["version"] == version
    before = recomputes(server)
    for other in (
        first | {"X": X[:, :2].tolist()},
        first | {"learner": "svm"},
        first | {"y": (-Y).tolist()},
    ):
        r = post_window(server, json=other)
        assert r.status_code == 409, r.text
        assert "storm-0001" in r.json()["detail"]
    assert recomputes(server) == before


def test_read_only_sqlite_answers_503_and_readyz_reports_it(tmp_path: Path) -> None:
    """Row 8: a read-only registry (opened read-only, as after a remount) refuses writes with 503 and a
    reason, reads still work, and /readyz says why it is not ready."""
    db = tmp_path / "registry.db"
    writable = CloudServer(f"sqlite:///{db}", tmp_path, EDGEDRIFT_CLOUD_TRAINING_PROCESSES="false").start()
    try:
        with writable.client(A) as c:
            assert c.post(
                "/v1/devices/dev-a/models", json=_json_window("logistic", "classification", X, Y)
            ).is_success
    finally:
        writable.stop()
    server = CloudServer(
        f"sqlite:///file:{db}?mode=ro&uri=true",
        tmp_path,
        EDGEDRIFT_CLOUD_AUTO_MIGRATE="false",
        EDGEDRIFT_CLOUD_TRAINING_PROCESSES="false",
    )
    server.spawn()
    try:
        ready = _wait_for_status(server, "/readyz", 503)
        assert "readonly" in ready.json()["detail"], ready.text
        with server.client(A) as c:
            assert c.get("/v1/devices/dev-a/models/latest").status_code == 200
            for r in (
                c.post("/v1/devices/dev-a/stats", json={"samples": 1}),
                c.post("/v1/devices/dev-a/models", json=_json_window("logistic", "classification", X, Y)),
            ):
                assert r.status_code == 503, r.text
                assert "readonly" in r.json()["detail"] and int(r.headers["Retry-After"]) > 0
        assert "Traceback" not in server.logs()
    finally:
        server.stop()


def _wait_for_status(server: CloudServer, path: str, status: int, timeout: float = 60.0) -> httpx.Response:
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            r = httpx.get(server.url + path, timeout=5)
            if r.status_code == status or time.monotonic() > deadline:
                return r
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def test_no_traceback_in_the_log(server: CloudServer) -> None:
    """None of the refusals above logged a server error."""
    logs = server.logs()
    assert "Traceback" not in logs and '"status": 500' not in logs, logs[-3000:]
    json.loads(logs.splitlines()[-1])
