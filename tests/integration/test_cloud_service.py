"""The cloud trainer under a real uvicorn server, on SQLite and on the local PostgreSQL server."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from support.cloud import DEVICES, OPERATOR, CloudServer

from edgedrift.models.document import predict_document
from edgedrift.wire import WINDOW_CONTENT_TYPE, WindowHeader, encode_window

A = DEVICES["dev-a"]


def window(n: int = 200, d: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(X @ np.linspace(1, -1, d) + 0.1 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def train_json(cloud: CloudServer, token: str = A, device: str = "dev-a", **extra: Any) -> Any:
    X, y = window(seed=extra.pop("seed", 0))
    body = {"task": "classification", "learner": "logistic", "X": X.tolist(), "y": y.tolist(), **extra}
    with cloud.client(token) as c:
        return c.post(f"/v1/devices/{device}/models", json=body)


def test_train_json_and_binary_store_versions_with_etags(cloud: CloudServer) -> None:
    X, y = window()
    r1 = train_json(cloud, reason="druid", monitor={"exceed": 3, "chi2": 17.5})
    assert r1.status_code == 201, r1.text
    doc = r1.json()
    assert doc["version"] == 1 and doc["model"]["version"] == 1
    assert np.mean(predict_document(doc["model"], X) == y) > 0.95
    assert r1.headers["ETag"] == f'"{doc["sha256"]}"'

    body = encode_window(WindowHeader(task="classification", learner="logistic", reason="periodic"), X, y)
    with cloud.client(A) as c:
        r2 = c.post("/v1/devices/dev-a/models", content=body, headers={"Content-Type": WINDOW_CONTENT_TYPE})
        assert r2.status_code == 201, r2.text
        b = r2.json()
        assert b["version"] == 2 and b["encoding"] == "binary"
        # float32 on the wire: 4 bytes per value plus a small header, ~5x less than JSON text.
        assert b["bytes_in"] < doc["bytes_in"] / 4
        assert b["bytes_in"] <= 4 * X.size + 4 * y.size + 200
        assert np.allclose(b["model"]["coef"], doc["model"]["coef"], atol=1e-3)

        listing = c.get("/v1/devices/dev-a/models").json()
        assert [m["version"] for m in listing] == [2, 1]
        assert listing[1]["reason"] == "druid" and listing[1]["monitor"] == {"exceed": 3, "chi2": 17.5}
        assert listing[1]["requested_by"] == "device:dev-a"
        latest = c.get("/v1/devices/dev-a/models/latest")
        assert latest.json()["version"] == 2 and latest.headers["ETag"] == f'"{b["sha256"]}"'
        assert (
            c.get(
                "/v1/devices/dev-a/models/latest", headers={"If-None-Match": latest.headers["ETag"]}
            ).status_code
            == 304
        )
        first = c.get("/v1/devices/dev-a/models/1").json()
        assert first["model"] == doc["model"] and first["sha256"] == doc["sha256"]
        assert c.get("/v1/devices/dev-a/models/3").status_code == 404


def test_versions_and_counters_survive_a_restart(cloud: CloudServer) -> None:
    assert train_json(cloud, reason="druid").status_code == 201
    assert train_json(cloud, reason="druid", seed=1).status_code == 201
    with cloud.client(A) as c:
        assert c.post("/v1/devices/dev-a/stats", json={"samples": 500, "accuracy": 0.8}).status_code == 201
        before = c.get("/v1/devices/dev-a/counters").json()
        models_before = c.get("/v1/devices/dev-a/models").json()
    cloud.restart()
    with cloud.client(A) as c:
        after = c.get("/v1/devices/dev-a/counters").json()
        assert after == before
        assert after["recomputes"] == 2 and after["reasons"] == {"druid": 2} and after["heartbeats"] == 1
        assert c.get("/v1/devices/dev-a/models").json() == models_before
    r = train_json(cloud, reason="ddm", seed=2)
    assert r.json()["version"] == 3
    with cloud.client(A) as c:
        assert c.get("/v1/devices/dev-a/counters").json()["reasons"] == {"druid": 2, "ddm": 1}


def test_request_id_makes_retries_idempotent(cloud: CloudServer) -> None:
    first = train_json(cloud, request_id="req-17")
    again = train_json(cloud, request_id="req-17")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["replayed"] and again.json()["version"] == first.json()["version"]
    with cloud.client(A) as c:
        assert c.get("/v1/devices/dev-a/counters").json()["recomputes"] == 1


def test_concurrent_retrains_get_distinct_versions(database_url: str, tmp_path: Path) -> None:
    """16 retrains of one device at once: above the default per-device rate, which this server lifts."""
    cloud = CloudServer(
        database_url, tmp_path, EDGEDRIFT_CLOUD_RECOMPUTE_BUDGET_PER_DEVICE_PER_MINUTE="unlimited"
    ).start()
    try:
        with ThreadPoolExecutor(8) as pool:
            responses = list(pool.map(lambda s: train_json(cloud, seed=s), range(16)))
    finally:
        cloud.stop()
    assert all(r.status_code == 201 for r in responses), [r.text for r in responses if r.status_code != 201]
    assert sorted(r.json()["version"] for r in responses) == list(range(1, 17))


def test_counters_heartbeats_fleet_and_metrics(cloud: CloudServer) -> None:
    for seed in range(3):
        assert train_json(cloud, seed=seed, reason="druid").status_code == 201
    assert train_json(cloud, token=DEVICES["dev-b"], device="dev-b", reason="periodic").status_code == 201
    with cloud.client(A) as c:
        for i, acc in enumerate([0.7, 0.8, 0.9]):
            beat = {"samples": 100 * (i + 1), "accuracy": acc, "warnings": i, "model_version": 3}
            assert c.post("/v1/devices/dev-a/stats", json=beat).status_code == 201
        series = c.get("/v1/devices/dev-a/stats").json()
        assert [s["accuracy"] for s in series] == [0.7, 0.8, 0.9]
        counters = c.get("/v1/devices/dev-a/counters").json()
    assert counters["recomputes"] == 3 and counters["latest_version"] == 3
    assert counters["bytes_in"] > 3 * 200 * 5 * 4 and counters["train_ms_total"] > 0
    with cloud.client(OPERATOR) as op:
        devices = {d["device_id"]: d for d in op.get("/v1/devices").json()}
        assert devices["dev-a"]["recomputes"] == 3 and devices["dev-b"]["recomputes"] == 1
        fleet = op.get("/v1/fleet").json()
        assert fleet["total"] == 2 and op.get("/v1/fleet/summary").json()["recomputes_total"] == 4
        a = next(d for d in fleet["devices"] if d["device_id"] == "dev-a")
        assert a["recomputes"] == 3 and a["accuracy"] == 0.9 and a["running_version"] == 3
        page = op.get("/v1/fleet/devices/dev-a").json()
        assert [v["version"] for v in page["versions"]] == [1, 2, 3]
        assert [p["accuracy"] for p in page["heartbeats"]] == [0.7, 0.8, 0.9]
        text = op.get("/metrics").text
    assert re.search(
        r'edgedrift_recomputes_total\{device="dev-a",learner="logistic",reason="druid"\} 3\.0', text
    )
    assert re.search(
        r'edgedrift_recomputes_total\{device="dev-b",learner="logistic",reason="periodic"\} 1\.0', text
    )
    assert re.search(r'edgedrift_training_seconds_count\{learner="logistic"\} 4\.0', text)
    assert (
        'edgedrift_http_requests_total{method="POST",route="/v1/devices/{device_id}/models",status="201"} 4.0'
        in text
    )


def test_health_readiness_and_openapi(cloud: CloudServer) -> None:
    with cloud.client(None) as c:
        assert c.get("/healthz").json() == {"status": "ok", "detail": None}
        assert c.get("/readyz").status_code == 200
        schema = c.get("/openapi.json").json()
    paths = schema["paths"]
    for path in (
        "/v1/devices/{device_id}/models",
        "/v1/devices/{device_id}/models/latest",
        "/v1/fleet",
        "/v1/devices/{device_id}/stats",
        "/metrics",
        "/readyz",
    ):
        assert path in paths
    body = paths["/v1/devices/{device_id}/models"]["post"]["requestBody"]["content"]
    assert set(body) == {"application/json", WINDOW_CONTENT_TYPE}


def test_learners_shrub_ridge_and_select(cloud: CloudServer) -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 4))
    classes = (X[:, 0] > 0.8).astype(float) + (X[:, 1] > 1.2).astype(float)
    with cloud.client(A) as c:
        shrub = c.post(
            "/v1/devices/dev-a/models",
            json={
                "task": "classification",
                "learner": "shrub",
                "params": {"max_depth": 3},
                "X": X.tolist(),
                "y": classes.tolist(),
            },
        )
        assert shrub.status_code == 201, shrub.text
        assert shrub.json()["model"]["kind"] == "shrub"
        assert np.mean(predict_document(shrub.json()["model"], X) == classes) > 0.9
        ridge = c.post(
            "/v1/devices/dev-a/models",
            json={
                "task": "regression",
                "learner": "ridge",
                "params": {"C": 100},
                "X": X.tolist(),
                "y": (X @ [1.0, 2.0, 0.0, -1.0]).tolist(),
            },
        )
        assert ridge.status_code == 201, ridge.text
        assert np.abs(predict_document(ridge.json()["model"], X) - X @ [1.0, 2.0, 0.0, -1.0]).max() < 0.1
        y = np.where(X[:, 0] > 1.3, 1.0, -1.0)  # ~10% minority
        sel = c.post(
            "/v1/devices/dev-a/models",
            json={
                "task": "classification",
                "learner": "logistic",
                "rebalance": "select",
                "X": X.tolist(),
                "y": y.tolist(),
            },
        ).json()
        assert set(sel["scores"]) == {"batch", "batch+smote"} and sel["chosen"] in sel["scores"]
        assert sel["scores"][sel["chosen"]] == max(sel["scores"].values())
        assert sel["model"]["training"]["chosen"] == sel["chosen"]


def test_select_with_a_reset_batch_and_its_refusals(cloud: CloudServer) -> None:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 3))
    y = np.where(X[:, 0] > 1.2, 1.0, -1.0)  # ~12% minority
    header = WindowHeader(
        task="classification", learner="shrub", rebalance="select", reset_rows=120, return_base=True
    )
    with cloud.client(A) as c:
        r = c.post(
            "/v1/devices/dev-a/models",
            content=encode_window(header, X, y),
            headers={"Content-Type": WINDOW_CONTENT_TYPE},
        )
        assert r.status_code == 201, r.text
        sel = r.json()
        assert list(sel["scores"]) == ["batch", "batch+smote", "reset", "reset+smote"]
        assert sel["scores"][sel["chosen"]] == max(sel["scores"].values())
        training = sel["model"]["training"]
        assert training["base"]["kind"] == "shrub" and "training" not in training["base"]
        assert np.mean(predict_document(training["base"], X) == y) > 0.9
        stored = c.get(f"/v1/devices/dev-a/models/{sel['version']}").json()
        assert stored["model"]["training"] == training
        body = {"task": "classification", "learner": "shrub", "X": X.tolist(), "y": y.tolist()}
        too_many = c.post("/v1/devices/dev-a/models", json={**body, "rebalance": "select", "reset_rows": 301})
        assert too_many.status_code == 422, too_many.text
        (err,) = too_many.json()["detail"]
        assert err["loc"] == ["body", "reset_rows"] and err["msg"] == "301 exceeds the 300 rows of the window"
        plain = c.post("/v1/devices/dev-a/models", json={**body, "reset_rows": 10})
        assert plain.status_code == 422 and "reset_rows needs rebalance='select'" in plain.text
