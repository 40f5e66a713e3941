"""Credentials and bad input against the real server: each refusal has its documented status and a
JSON body naming the field, and the registry (read straight from the SQLite file) is unchanged."""

from __future__ import annotations

import json
import math
import re
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from support.cloud import DEVICES, OPERATOR, CloudServer, field_error

from edgedrift.wire import WINDOW_CONTENT_TYPE, WindowHeader, encode_window

A, B = DEVICES["dev-a"], DEVICES["dev-b"]
rng = np.random.default_rng(0)
X = rng.normal(size=(50, 3))
Y = np.where(X[:, 0] > 0, 1.0, -1.0)
GOOD: dict[str, Any] = {"task": "classification", "learner": "logistic", "X": X.tolist(), "y": Y.tolist()}


def snapshot(server: CloudServer) -> list[Any]:
    """Every row of every table: what 'nothing is written' compares."""
    path = server.database_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        return [
            db.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall()
            for t in ("devices", "models", "heartbeats")
        ]


@pytest.fixture
def server(sqlite_cloud: CloudServer) -> Iterator[CloudServer]:
    """The shared server, with one stored model so that 'untouched' means something."""
    with sqlite_cloud.client(A) as c:
        if c.get("/v1/devices/dev-a/models").json() == []:
            assert c.post("/v1/devices/dev-a/models", json=GOOD).status_code == 201
    before = snapshot(sqlite_cloud)
    yield sqlite_cloud
    assert snapshot(sqlite_cloud) == before, "a refused request changed the registry"


def post(server: CloudServer, token: str | None, device: str = "dev-a", **kw: Any) -> httpx.Response:
    with server.client(token) as c:
        return c.post(f"/v1/devices/{device}/models", **kw)


@pytest.mark.parametrize(
    ("token", "status"),
    [(None, 401), ("forged-token-that-is-long-enough", 401), (A + "x", 401), (B, 403)],
)
def test_credentials_on_every_device_route(server: CloudServer, token: str | None, status: int) -> None:
    with server.client(token) as c:
        calls = [
            c.post("/v1/devices/dev-a/models", json=GOOD),
            c.get("/v1/devices/dev-a/models"),
            c.get("/v1/devices/dev-a/models/latest"),
            c.get("/v1/devices/dev-a/models/1"),
            c.get("/v1/devices/dev-a/counters"),
            c.post("/v1/devices/dev-a/stats", json={"samples": 1}),
            c.get("/v1/devices/dev-a/stats"),
        ]
    for r in calls:
        assert r.status_code == status, (r.request.url, r.text)
        assert isinstance(r.json()["detail"], str)
    if status == 401:
        assert calls[0].headers["WWW-Authenticate"] == "Bearer"


def test_operator_only_routes(server: CloudServer) -> None:
    with server.client(A) as c:
        assert c.get("/v1/devices").status_code == 403
        assert c.get("/v1/fleet").status_code == 403
        assert c.put("/v1/devices/dev-z", json={}).status_code == 403
    with server.client(None) as c:
        assert c.get("/v1/fleet").status_code == 401
    with server.client(OPERATOR) as c:
        assert {d["device_id"] for d in c.get("/v1/devices").json()} >= {"dev-a", "dev-b"}
        assert c.get("/v1/devices/dev-a/models").status_code == 200
        assert c.get("/v1/devices/nobody/models").status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "/v1/devices/dev-a%2F..%2Fdev-b/models",
        "/v1/devices/%2e%2e/models",
        "/v1/devices/dev.a/models",
        "/v1/devices/dev-a%00/models",
        "/v1/devices/" + "a" * 65 + "/models",
    ],
)
def test_path_tricks_in_device_ids(server: CloudServer, path: str) -> None:
    with server.client(A) as c:
        r = c.post(path, json=GOOD)
    # Refused by the id pattern (422) or not routed at all (404); raw dot segments are tested below.
    assert r.status_code in (404, 422), (path, r.status_code, r.text)


def raw_post(server: CloudServer, path: bytes, token: str, body: bytes) -> int:
    """POST with the path bytes exactly as given (clients normalise dot segments away)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        head = (
            b"POST "
            + path
            + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n".encode()
            + b"Connection: close\r\n\r\n"
        )
        sock.sendall(head + body)
        status_line = sock.makefile("rb").readline()
    return int(status_line.split()[1])


@pytest.mark.parametrize(
    "path",
    [
        b"/v1/devices/dev-a/../dev-b/models",
        b"/v1/devices/dev-a/%2e%2e/dev-b/models",
        b"/v1/devices/./dev-b/models",
    ],
)
def test_dot_segments_sent_raw_do_not_reach_another_device(server: CloudServer, path: bytes) -> None:
    status = raw_post(server, path, A, json.dumps(GOOD).encode())
    assert status in (403, 404, 422), (path, status)


def test_oversized_body_is_413(server: CloudServer) -> None:
    big = b"[" + b"0," * 9_000_000 + b"0]"
    r = post(server, A, content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and "exceeds" in r.json()["detail"]


def test_row_cap(tmp_path: Path) -> None:
    server = CloudServer(f"sqlite:///{tmp_path / 'r.db'}", tmp_path, EDGEDRIFT_CLOUD_MAX_ROWS="40").start()
    try:
        field_error(post(server, A, json=GOOD), 422, "X")
        assert "exceed the limit of 40" in post(server, A, json=GOOD).text
    finally:
        server.stop()


def _json(**changes: Any) -> dict[str, Any]:
    return {**GOOD, **changes}


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        (_json(X=[[*row[:2], math.nan] for row in X.tolist()]), ("X",)),
        (_json(X=[[math.inf, *row[1:]] for row in X.tolist()]), ("X",)),
        (_json(y=[math.nan, *Y.tolist()[1:]]), ("y",)),
        (_json(X=[row[:2] if i == 7 else row for i, row in enumerate(X.tolist())]), ("X",)),
        (_json(y=Y.tolist()[:-1]), ("y",)),
        (_json(y=[0.0 if v < 0 else 1.0 for v in Y]), ("y",)),
        (_json(learner="xgboost"), ("learner",)),
        (_json(task="ranking"), ("task",)),
        (_json(task="regression"), ("body",)),
        (_json(X=[]), ("X",)),
        (_json(X=[[] for _ in Y]), ("X",)),
        (_json(X=[["a", 1, 2] for _ in Y]), ("X",)),
        (_json(params={"C": -1}), ("params", "C")),
        (_json(params={"depth": 3}), ("params", "depth")),
        (_json(colour="blue"), ("colour",)),
        (_json(rebalance="smote", task="regression", learner="ridge"), ("body",)),
        ({k: v for k, v in GOOD.items() if k != "y"}, ("y",)),
    ],
    ids=[
        "nan-x",
        "inf-x",
        "nan-y",
        "ragged",
        "short-y",
        "labels-0-1",
        "learner",
        "task",
        "learner-task",
        "empty",
        "no-features",
        "strings",
        "negative-C",
        "unknown-param",
        "unknown-field",
        "smote-regression",
        "missing-y",
    ],
)
def test_bad_json_windows_are_422_naming_the_field(
    server: CloudServer, body: dict[str, Any], fields: tuple[str, ...]
) -> None:
    r = post(server, A, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    field_error(r, 422, *fields)


@pytest.mark.parametrize("raw", [b"{", b"not json", b"[]", b"null", b'{"X": [[1e999]]}'])
def test_malformed_json_is_422(server: CloudServer, raw: bytes) -> None:
    r = post(server, A, content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text


def test_bad_binary_windows(server: CloudServer) -> None:
    header = WindowHeader(task="classification", learner="logistic")
    good = encode_window(header, X, Y)
    cases = {
        "truncated": good[:-3],
        "magic": b"XXXX" + good[4:],
        "nan": encode_window(header, np.where(X > 1.5, np.nan, X), Y),
        "header-length": good[:4] + (10**6).to_bytes(4, "little") + good[8:],
    }
    for name, body in cases.items():
        r = post(server, A, content=body, headers={"Content-Type": WINDOW_CONTENT_TYPE})
        assert r.status_code == 422, (name, r.text)
        assert r.json()["detail"][0]["msg"], name
    r = post(server, A, content=good, headers={"Content-Type": "text/csv"})
    assert r.status_code == 415


def test_bad_heartbeats(server: CloudServer) -> None:
    with server.client(A) as c:
        for beat in (
            {"samples": -1},
            {"samples": 1, "accuracy": 1.5},
            {"samples": 1, "accuracy": "NaN"},
            {"samples": 1, "mood": "happy"},
            {},
        ):
            r = c.post("/v1/devices/dev-a/stats", json=beat)
            assert r.status_code == 422, (beat, r.text)


def test_secrets_never_reach_the_log(server: CloudServer) -> None:
    post(server, A, json=GOOD | {"X": []})
    post(server, "forged-token-that-is-long-enough", json=GOOD)
    with server.client(OPERATOR) as c:
        c.get("/v1/devices")
    logs = server.logs()
    assert '"route": "/v1/devices/{device_id}/models"' in logs
    for secret in (A, B, OPERATOR, "forged-token-that-is-long-enough"):
        assert secret not in logs


def test_refused_requests_are_counted(server: CloudServer) -> None:
    with server.client(None) as c:
        c.get("/v1/devices/dev-a/models")
        text = c.get("/metrics").text
    assert 'edgedrift_rejected_requests_total{reason="unauthenticated"}' in text


@pytest.mark.parametrize("token", ["change-me", "s3cr3t-9"])
def test_refuses_to_start_with_a_placeholder_secret(tmp_path: Path, token: str) -> None:
    env = {"EDGEDRIFT_CLOUD_OPERATOR_TOKEN": token, "EDGEDRIFT_CLOUD_MODE": "production", "PATH": ""}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgedrift_cloud.cli",
            "serve",
            "--database-url",
            f"sqlite:///{tmp_path}/x.db",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "refusing to start" in proc.stderr and "EDGEDRIFT_CLOUD_OPERATOR_TOKEN" in proc.stderr
    assert token not in proc.stderr
    dev = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgedrift_cloud.cli",
            "migrate",
            "--database-url",
            f"sqlite:///{tmp_path}/x.db",
            "--mode",
            "development",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dev.returncode == 0, dev.stderr


def test_an_invalid_configuration_never_prints_a_secret(tmp_path: Path) -> None:
    """`serve` with a malformed database URL holding a password, a short operator token and a weak device
    secret: one line per problem naming the variable, none of the values (pydantic would print them)."""
    password = "Pg-passw0rd-" + "7" * 12
    token = "tok-" + "5" * 8
    device_secret = "dev-1-insecure-but-long-enough"
    env = {
        "PATH": "",
        "EDGEDRIFT_CLOUD_MODE": "production",
        "EDGEDRIFT_CLOUD_OPERATOR_TOKEN": token,
        "EDGEDRIFT_CLOUD_DEVICES": f"dev-1={device_secret}",
    }
    for database_url in (
        f"postgresql+psycopg://edgedrift:{password}@db:not-a-port/edgedrift",  # malformed
        f"postgresql+psycopg://edgedrift:{password[:10]}@db:5432/edgedrift",  # a short password
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "edgedrift_cloud.cli", "serve", "--database-url", database_url],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode != 0
        output = proc.stdout + proc.stderr
        for secret in (password, password[:10], token, device_secret, "input_value"):
            assert secret not in output, f"{secret!r} printed:\n{output}"
        (line,) = [
            line for line in proc.stderr.splitlines() if line.startswith("edgedrift-cloud serve: error:")
        ]
        named = re.findall(r"(EDGEDRIFT_CLOUD_[A-Z_]+): ", line)
        assert proc.returncode == 2 and named == [
            "EDGEDRIFT_CLOUD_DATABASE_URL",
            "EDGEDRIFT_CLOUD_OPERATOR_TOKEN",
            "EDGEDRIFT_CLOUD_DEVICES",
        ], proc.stderr
        assert "Traceback" not in proc.stderr


def test_add_device_reads_the_secret_from_a_file_or_stdin(tmp_path: Path) -> None:
    """`add-device --secret-file` keeps the secret off the command line; a weak one is refused unprinted."""
    from edgedrift_cloud import registry
    from edgedrift_cloud.auth import hash_secret
    from edgedrift_cloud.db.engine import make_engine, make_sessionmaker

    url = f"sqlite:///{tmp_path / 'registry.db'}"
    env = {"PATH": "", "EDGEDRIFT_CLOUD_MODE": "production", "EDGEDRIFT_CLOUD_OPERATOR_TOKEN": OPERATOR}
    secret_file = tmp_path / "dev-9.secret"
    secret_file.write_text("file-secret-of-dev-9-0123456789\n")

    def add(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "edgedrift_cloud.cli", "add-device", *args, "--database-url", url]
        return subprocess.run(
            command, env=env, cwd=tmp_path, input=stdin, capture_output=True, text=True, timeout=60
        )

    by_file = add("dev-9", "--secret-file", str(secret_file))
    assert by_file.returncode == 0 and "registered device dev-9" in by_file.stdout, by_file.stderr
    assert "0123456789" not in by_file.stdout, "a given secret is never echoed"
    by_stdin = add("dev-10", "--secret-file", "-", stdin="stdin-secret-of-dev-10-0123456789\n")
    assert by_stdin.returncode == 0, by_stdin.stderr
    weak = add("dev-11", "--secret-file", "-", stdin="dev-11-insecure\n")
    assert weak.returncode != 0 and "placeholder" in weak.stderr and "dev-11-insecure" not in weak.stderr
    engine = make_engine(url)
    with make_sessionmaker(engine)() as session:
        assert (
            registry.device_for_token_hash(session, hash_secret("file-secret-of-dev-9-0123456789")) == "dev-9"
        )
        assert (
            registry.device_for_token_hash(session, hash_secret("stdin-secret-of-dev-10-0123456789"))
            == "dev-10"
        )
        assert not registry.device_exists(session, "dev-11")
    engine.dispose()
