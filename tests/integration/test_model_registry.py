"""The model-version registry on a real server, on SQLite and on PostgreSQL: pin, rollback, aliases,
per-version metrics, retention and deregistration."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
from support.cloud import DEVICES, OPERATOR, CloudServer

A = DEVICES["dev-a"]
B = DEVICES["dev-b"]


def train(c: httpx.Client, device: str = "dev-a", seed: int = 0) -> httpx.Response:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(120, 3))
    y = np.where(X @ rng.normal(size=3) > 0, 1.0, -1.0)
    body = {"task": "classification", "learner": "logistic", "X": X.tolist(), "y": y.tolist()}
    return c.post(f"/v1/devices/{device}/models", json=body)


def versions_of(cloud: CloudServer, n: int, device: str = "dev-a") -> list[dict[str, Any]]:
    """Train ``n`` new versions of ``device`` with its own credential; their replies."""
    with cloud.client(DEVICES[device]) as dev:
        replies = [train(dev, device, seed=i) for i in range(n)]
    assert all(r.status_code == 201 for r in replies), [r.text for r in replies]
    return [r.json() for r in replies]


def test_pin_answers_recomputes_with_the_pinned_version_and_rollback_moves_it(cloud: CloudServer) -> None:
    v1, _, v3 = versions_of(cloud, 3)
    with cloud.client(OPERATOR) as op, cloud.client(A) as dev:
        assert dev.put("/v1/devices/dev-a/models/pin", json={"version": 1}).status_code == 403
        assert op.put("/v1/devices/dev-a/models/pin", json={"version": 9}).status_code == 404
        assert op.put("/v1/devices/dev-a/models/pin", json={}).status_code == 422
        view = op.put("/v1/devices/dev-a/models/pin", json={"version": 1}).json()
        assert view["pinned"] == 1 and view["serving"] == 1 and view["latest"] == 3

        answer = train(dev, seed=7)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["pinned"] is True and body["version"] == 1 and body["model"] == v1["model"]
        counters = dev.get("/v1/devices/dev-a/counters").json()
        assert counters["recomputes"] == 3 and counters["latest_version"] == 3, (
            "a pinned device trains nothing"
        )

        assert op.post("/v1/devices/dev-a/models/rollback").status_code == 404, "nothing before version 1"
        assert op.delete("/v1/devices/dev-a/models/pin").json()["serving"] == 3
        view = op.post("/v1/devices/dev-a/models/rollback").json()
        assert view["pinned"] == 2 and view["serving"] == 2
        assert op.post("/v1/devices/dev-a/models/rollback", json={"version": 3}).json()["pinned"] == 3
        assert train(dev, seed=8).json()["model"] == v3["model"]
        assert dev.get("/v1/devices/dev-a/models/registry").json()["pinned"] == 3

        op.delete("/v1/devices/dev-a/models/pin")
        fresh = train(dev, seed=9)
        assert fresh.status_code == 201 and fresh.json()["version"] == 4 and fresh.json()["pinned"] is False


def test_aliases_point_at_versions(cloud: CloudServer) -> None:
    versions_of(cloud, 3)
    with cloud.client(OPERATOR) as op, cloud.client(A) as dev:
        op.put("/v1/devices/dev-a/models/aliases/production", json={"version": 2}).raise_for_status()
        view = op.put("/v1/devices/dev-a/models/aliases/candidate", json={"version": 3}).json()
        assert view["aliases"] == {"candidate": 3, "production": 2}
        prod = dev.get("/v1/devices/dev-a/models/aliases/production")
        assert prod.status_code == 200 and prod.json()["version"] == 2
        assert prod.headers["ETag"] == dev.get("/v1/devices/dev-a/models/2").headers["ETag"]
        # promote: production moves to the candidate
        op.put("/v1/devices/dev-a/models/aliases/production", json={"version": 3}).raise_for_status()
        assert dev.get("/v1/devices/dev-a/models/aliases/production").json()["version"] == 3

        assert dev.put("/v1/devices/dev-a/models/aliases/x", json={"version": 1}).status_code == 403
        bad = op.put("/v1/devices/dev-a/models/aliases/Prod!", json={"version": 1})
        assert bad.status_code == 422 and "alias" in bad.text
        assert op.put("/v1/devices/dev-a/models/aliases/x", json={"version": 99}).status_code == 404
        assert op.put("/v1/devices/dev-a/models/aliases/x", json={"version": 0}).status_code == 422
        assert dev.get("/v1/devices/dev-a/models/aliases/nope").status_code == 404
        assert op.delete("/v1/devices/dev-a/models/aliases/candidate").json()["aliases"] == {"production": 3}
        assert op.delete("/v1/devices/dev-a/models/aliases/candidate").status_code == 404
        with cloud.client(B) as other:
            assert other.get("/v1/devices/dev-a/models/aliases/production").status_code == 403


def test_per_version_metrics_come_from_heartbeats(cloud: CloudServer) -> None:
    versions_of(cloud, 2)
    beats = [
        {"samples": 100, "accuracy": 0.8, "model_version": 1},
        {"samples": 300, "accuracy": 0.9, "model_version": 1},
        {"samples": 400, "accuracy": 0.6, "model_version": 2, "extra": {"rmse": 0.5}},
        {"samples": 700, "accuracy": 0.7, "model_version": 2, "extra": {"rmse": 0.25}},
        {"samples": 800},
    ]
    with cloud.client(A) as dev:
        for beat in beats:
            assert dev.post("/v1/devices/dev-a/stats", json=beat).status_code == 201
        metrics = dev.get("/v1/devices/dev-a/models/metrics").json()
    assert [m["version"] for m in metrics] == [2, 1]
    two, one = metrics
    assert one["heartbeats"] == 2 and one["samples"] == 200 and abs(one["accuracy_mean"] - 0.85) < 1e-12
    assert one["accuracy_last"] == 0.9 and one["rmse_mean"] is None
    assert two["samples"] == 300 and abs(two["rmse_mean"] - 0.375) < 1e-12


def test_retention_keeps_the_newest_the_pinned_and_the_aliased(cloud: CloudServer) -> None:
    versions_of(cloud, 6)
    with cloud.client(OPERATOR) as op:
        before = op.get("/v1/devices/dev-a/counters").json()
        op.put("/v1/devices/dev-a/models/pin", json={"version": 2}).raise_for_status()
        op.put("/v1/devices/dev-a/models/aliases/production", json={"version": 3}).raise_for_status()
        assert op.post("/v1/devices/dev-a/models/prune", params={"keep": 0}).status_code == 422
        result = op.post("/v1/devices/dev-a/models/prune", params={"keep": 2}).json()
        assert result["pruned"] == [1, 4] and result["kept"] == [2, 3, 5, 6]
        assert op.post("/v1/devices/dev-a/models/prune", params={"keep": 2}).json()["pruned"] == []
        gone = op.get("/v1/devices/dev-a/models/1")
        assert gone.status_code == 410 and "pruned" in gone.json()["detail"]
        assert op.get("/v1/devices/dev-a/models/2").json()["model"]["coef"]
        assert op.get("/v1/devices/dev-a/models/registry").json()["pruned"] == [1, 4]
        assert op.get("/v1/devices/dev-a/counters").json() == before, "retention must not change counters"
        assert len(op.get("/v1/devices/dev-a/models").json()) == 6
        assert op.put("/v1/devices/dev-a/models/pin", json={"version": 4}).status_code == 410
        assert op.post("/v1/devices/nobody/models/prune", params={"keep": 1}).status_code == 404


def test_deregistration_revokes_and_keeps_or_purges_history(cloud: CloudServer) -> None:
    versions_of(cloud, 2)
    versions_of(cloud, 1, device="dev-b")
    with cloud.client(A) as dev:
        assert (
            dev.post("/v1/devices/dev-a/stats", json={"samples": 10, "model_version": 2}).status_code == 201
        )
    with cloud.client(OPERATOR) as op:
        with cloud.client(A) as dev:
            assert dev.delete("/v1/devices/dev-a").status_code == 403
        kept = op.delete("/v1/devices/dev-a")
        assert kept.status_code == 200 and kept.json() == {
            "device_id": "dev-a",
            "purged": False,
            "models_deleted": 0,
            "heartbeats_deleted": 0,
        }
        with cloud.client(A) as dev:
            assert dev.get("/v1/devices/dev-a/counters").status_code == 401, "credential revoked"
        assert op.get("/v1/devices/dev-a/counters").json()["recomputes"] == 2, "history kept"
        assert op.get("/v1/devices/dev-a/models/registry").json()["revoked_at"] is not None
        op.put("/v1/devices/dev-a", json={"secret": A}).raise_for_status()
        with cloud.client(A) as dev:
            assert dev.get("/v1/devices/dev-a/counters").status_code == 200, "re-registered"
        assert op.get("/v1/devices/dev-a/models/registry").json()["revoked_at"] is None

        purged = op.delete("/v1/devices/dev-b", params={"purge": "true"}).json()
        assert purged["purged"] is True and purged["models_deleted"] == 1
        assert op.get("/v1/devices/dev-b/counters").status_code == 404
        assert [d["device_id"] for d in op.get("/v1/devices").json()] == ["dev-a"]
        assert op.delete("/v1/devices/dev-b").status_code == 404
        assert op.delete("/v1/devices/bad%20id").status_code == 422
        with cloud.client(B) as gone:
            assert gone.get("/v1/devices/dev-b/counters").status_code == 401


def test_a_version_downloads_as_onnx_and_predicts_like_the_document(cloud: CloudServer) -> None:
    import onnxruntime

    from edgedrift.models.document import model_from_document

    (v1,) = versions_of(cloud, 1)
    with cloud.client(A) as dev:
        answer = dev.get("/v1/devices/dev-a/models/1/onnx")
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "application/onnx"
        etag = answer.headers["ETag"]
        again = dev.get("/v1/devices/dev-a/models/1/onnx", headers={"If-None-Match": etag})
        assert again.status_code == 304
        assert dev.get("/v1/devices/dev-a/models/7/onnx").status_code == 404
    with cloud.client(B) as other:
        assert other.get("/v1/devices/dev-a/models/1/onnx").status_code == 403
    model = model_from_document(v1["model"])
    X = np.random.default_rng(5).normal(size=(300, 3))
    session = onnxruntime.InferenceSession(answer.content, providers=["CPUExecutionProvider"])
    label, proba = session.run(None, {"X": X})
    assert np.array_equal(label, model.predict(X))
    assert np.abs(proba - model.predict_proba(X)).max() <= 1e-9
