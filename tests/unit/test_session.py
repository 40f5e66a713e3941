"""Tests of edgedrift_edge.session.DeviceSession driven directly: no broker, no cloud, no threads."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from edgedrift import state
from edgedrift.training.linear import train_linear
from edgedrift_edge.session.device_session import DeviceSession, Output, SessionConfig
from edgedrift_edge.session.trainer import RecomputeFailure, RecomputeRequest, TrainedModel

D = 3
BETA = np.array([1.0, -1.0, 0.5])


def rows(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    y = np.where(X @ BETA + 0.2 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


@dataclass
class FakeCloud:
    """Trains with LIBLINEAR in process; answers at once (sync) or keeps the requests (async)."""

    sync: bool = True
    requests: list[RecomputeRequest] = field(default_factory=list)

    def __call__(self, request: RecomputeRequest) -> TrainedModel | None:
        self.requests.append(request)
        return self.answer(request) if self.sync else None

    def answer(self, request: RecomputeRequest) -> TrainedModel:
        model = train_linear(request.X, request.y, request.loss, 1.0).with_meta(
            created="2024-01-01T00:00:00+00:00", version=len(self.requests)
        )
        return TrainedModel(request.request_id, len(self.requests), model, model.to_document(), 1.0, 10, 20)


@dataclass
class FakeClock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def session(cloud: FakeCloud, clock: FakeClock | None = None, **kw: Any) -> DeviceSession:
    config = SessionConfig(device_id="dev-t", warmup_samples=100, window_labels=20, C=1.0, **kw)
    return DeviceSession(config, cloud, clock or FakeClock())


def sample(i: int, x: np.ndarray, y: float | None = None) -> bytes:
    body: dict[str, Any] = {"id": i, "x": x.tolist()}
    if y is not None:
        body["y"] = y
    return json.dumps(body).encode()


def feed(s: DeviceSession, X: np.ndarray, y: np.ndarray, start: int = 0, every: int = 2) -> list[Output]:
    return [
        s.handle("samples", sample(start + i, X[i], float(y[i]) if i % every == 0 else None))
        for i in range(len(y))
    ]


def events(outputs: list[Output], kind: str) -> list[dict[str, Any]]:
    return [e for o in outputs for e in o.events if e["type"] == kind]


def test_warm_up_then_first_model_then_predictions() -> None:
    cloud = FakeCloud()
    s = session(cloud)
    X, y = rows(300)
    outs = feed(s, X, y)
    preds = [p for o in outs for p in o.predictions]
    assert [p["id"] for p in preds] == list(range(300))
    assert all(p["y_hat"] is None and p["source"] == "warmup" for p in preds[:100])
    assert all(p["y_hat"] in (-1.0, 1.0) and p["model_version"] == 1 for p in preds[100:])
    (first,) = cloud.requests
    assert first.initial and first.X.shape == (50, D) and first.reason == "initial"
    assert s.phase == "running" and s.counters.predictions == 300 and s.counters.rejected == 0


def test_the_width_comes_from_the_warm_up_majority_not_the_first_message() -> None:
    s = session(FakeCloud())
    X, y = rows(200)
    first = s.handle("samples", sample(-1, np.array([0.0])))
    assert first.predictions[0]["y_hat"] is None  # a warm-up prediction, not a rejection
    outs = feed(s, X, y)
    assert s.n_features == D
    assert events(outs, "width_locked")[0]["n_features"] == D
    assert events(outs, "width_discarded")[0]["discarded"] == 1
    assert s.counters.rejected == 0 and s.counters.predictions == 201


def test_a_configured_width_rejects_other_widths_with_the_reason() -> None:
    s = session(FakeCloud(), n_features=D)
    out = s.handle("samples", sample(0, np.array([0.0])))
    assert out.predictions == [] and s.counters.rejected == 1
    (event,) = out.events
    assert event["type"] == "rejected" and event["count"] == 1
    assert event["reasons"] == [{"id": 0, "reason": "x has 1 values, expected 3"}]


def test_one_summary_event_per_message_and_a_cap_on_items() -> None:
    s = session(FakeCloud(), n_features=D, max_items=1000)
    bad = json.dumps({"samples": [{"id": i, "x": [1.0]} for i in range(900)]}).encode()
    out = s.handle("samples", bad)
    assert len(out.events) == 1 and out.events[0]["count"] == 900 and len(out.events[0]["reasons"]) == 5
    huge = json.dumps({"samples": [{"id": i, "x": [1.0, 2.0, 3.0]} for i in range(1001)]}).encode()
    out = s.handle("samples", huge)
    assert out.predictions == [] and s.counters.rejected == 1901
    assert (
        out.events[0]["count"] == 1001 and "exceeds the cap of 1000" in out.events[0]["reasons"][0]["reason"]
    )


def test_a_reused_id_is_processed_and_an_exact_redelivery_is_not_learned_twice() -> None:
    s = session(FakeCloud())
    X, y = rows(200)
    feed(s, X, y)
    assert s.loop is not None
    labeled = s.loop.counters.labeled
    again = s.handle("samples", sample(150, X[150], float(y[150]) if 150 % 2 == 0 else None))
    assert again.predictions[0]["id"] == 150 and s.counters.duplicates == 1
    assert s.loop.counters.labeled == labeled, "a redelivery must not be learned again"
    reused = s.handle("samples", sample(150, X[7] + 1.0, 1.0))
    assert events([reused], "id_reused")[0]["id"] == 150
    assert s.counters.id_reused == 1 and s.loop.counters.labeled == labeled + 1
    assert s.counters.predictions == 201


def test_an_outlier_is_predicted_but_kept_out_of_learning() -> None:
    s = session(FakeCloud())
    X, y = rows(200)
    feed(s, X, y)
    assert s.loop is not None and s.loop.learner is not None
    before = (s.loop.counters.labeled, len(s.loop.window), s.loop.learner.n_learned)
    for value in (1e6, 1e308, -1e308):
        out = s.handle("samples", sample(1000 + int(value > 0), np.full(D, value), 1.0))
        (pred,) = out.predictions
        assert pred["outlier"] is True and pred["y_hat"] in (-1.0, 1.0)
        assert events([out], "outlier")[0]["count"] == 1
    assert (s.loop.counters.labeled, len(s.loop.window), s.loop.learner.n_learned) == before
    assert s.counters.outliers == 3
    assert np.isfinite(s.loop.learner.predict_many(X[:10])).all()


def test_async_recompute_arrives_later_and_is_installed() -> None:
    cloud = FakeCloud(sync=False)
    s = session(cloud, strategy="periodic", strategy_param=20)
    X, y = rows(200)
    outs = feed(s, X[:100], y[:100])
    assert s.phase == "awaiting_model" and all(p["y_hat"] is None for o in outs for p in o.predictions)
    late = feed(s, X[100:140], y[100:140], start=100)
    assert all(p["source"] == "warmup" for o in late for p in o.predictions)
    s.install(cloud.answer(cloud.requests[0]))
    assert str(s.phase) == "running" and s.loop is not None  # str(): mypy keeps the narrowing above
    assert s.loop.counters.labeled == 20, "what arrived while the first model was awaited is learned"
    feed(s, X[140:200], y[140:200], start=140, every=1)
    assert len(cloud.requests) == 2 and s.pending is cloud.requests[1]
    events_ = s.install(cloud.answer(cloud.requests[1]))
    assert events_[0]["type"] == "recompute_finished" and s.model_version == 2 and s.pending is None


def test_a_refused_recompute_cools_down_instead_of_asking_on_every_sample() -> None:
    cloud, clock = FakeCloud(sync=False), FakeClock()
    s = session(cloud, clock, strategy="periodic", strategy_param=5, retry_cooldown_s=30.0)
    X, y = rows(400)
    feed(s, X[:100], y[:100])
    s.install(cloud.answer(cloud.requests[0]))
    feed(s, X[100:110], y[100:110], start=100, every=1)
    assert len(cloud.requests) == 2
    refused = RecomputeFailure(cloud.requests[1].request_id, 0, "HTTP 422: bad window", final=True)
    assert s.recompute_failed(refused)[0]["retrying"] is False
    feed(s, X[110:200], y[110:200], start=110, every=1)
    assert len(cloud.requests) == 2, "no request during the cool-down"
    clock.now = 31.0
    feed(s, X[200:210], y[200:210], start=200, every=1)
    assert len(cloud.requests) == 3


def test_unauthorized_is_reported_once_and_cleared_by_a_success() -> None:
    cloud = FakeCloud(sync=False)
    s = session(cloud)
    X, y = rows(100)
    feed(s, X, y)
    request = cloud.requests[0]
    for attempt in range(3):
        got = s.recompute_failed(RecomputeFailure(request.request_id, attempt, "HTTP 401", unauthorized=True))
        assert [e["type"] for e in got].count("unauthorized") == (1 if attempt == 0 else 0)
    assert s.recomputes.unauthorized and s.status()["unauthorized"] is True
    installed = s.install(cloud.answer(request))
    assert "authorized" in [e["type"] for e in installed] and not s.recomputes.unauthorized


def test_snapshot_round_trip_continues_identically() -> None:
    X, y = rows(600, seed=3)
    cloud_a, cloud_b = FakeCloud(), FakeCloud()
    a = session(cloud_a)
    feed(a, X[:300], y[:300])
    blob = state.dumps(a.snapshot())
    b = session(cloud_b)
    tree, _ = state.loads(blob)
    assert isinstance(tree, dict)
    b.restore(tree)
    cloud_b.requests = list(cloud_a.requests)
    out_a = feed(a, X[300:], y[300:], start=300, every=1)
    out_b = feed(b, X[300:], y[300:], start=300, every=1)
    assert [p for o in out_a for p in o.predictions] == [p for o in out_b for p in o.predictions]
    assert a.counters == b.counters


@pytest.mark.parametrize("payload", [b"{", b"[1, 2]", b"\xff\xfe", b"[" * 100_000])
def test_malformed_messages_are_rejected_and_counted(payload: bytes) -> None:
    s = session(FakeCloud())
    out = s.handle("samples", payload)
    assert out.predictions == [] and s.counters.rejected == 1 and out.events[0]["type"] == "rejected"


def test_a_warm_up_survives_a_checkpoint_and_a_refused_first_window_exactly() -> None:
    """The first window's rows (kept packed while warming up, a stray width among them) come back
    bit-exact from a checkpoint, and a first window the cloud refused is collected again in front of
    what arrived meanwhile: the next initial request carries the very same rows."""
    X, y = rows(300, seed=5)
    cloud_a, cloud_b, clock = FakeCloud(sync=False), FakeCloud(sync=False), FakeClock()
    a = session(cloud_a, clock, retry_cooldown_s=30.0)
    a.handle("samples", sample(10_000, np.array([1.0, 2.0])))  # another width: discarded at the lock
    feed(a, X[:60], y[:60])
    b = session(cloud_b, clock, retry_cooldown_s=30.0)
    tree, _ = state.loads(state.dumps(a.snapshot()))
    assert isinstance(tree, dict)
    b.restore(tree)
    for s, cloud in ((a, cloud_a), (b, cloud_b)):
        feed(s, X[60:100], y[60:100], start=60)
        first = cloud.requests[0]
        assert first.X.tobytes() == X[:100:2].tobytes(), "the labeled rows of the window, bit-exact"
        s.recompute_failed(RecomputeFailure(first.request_id, 0, "HTTP 422: bad window", final=True))
        assert s.phase == "warmup" and len(s.warm.rows) == 50 + 1, "the window's rows, then X[99]"
        clock.now = 31.0  # past the cool-down: 49 more samples complete the window again
        feed(s, X[100:149], y[100:149], start=100)
        clock.now = 0.0
        again = cloud.requests[1]
        assert again.initial and again.X[:50].tobytes() == first.X.tobytes()
        assert again.X[50:].tobytes() == X[100:149:2].tobytes()


def test_a_session_keeps_no_reference_to_the_messages_it_handled() -> None:
    """A gateway holds a thousand sessions: each keeping its last payload (10 kB for a batch of 100)
    cost 10 MB of the 1,000-device gateway's memory."""
    import sys

    s = session(FakeCloud())
    X, y = rows(300)
    feed(s, X[:200], y[:200])
    payload = json.dumps({"samples": [{"id": 1000 + i, "x": X[i].tolist()} for i in range(50)]}).encode()
    before = sys.getrefcount(payload)
    s.handle("samples", payload)
    assert sys.getrefcount(payload) == before


def batch(start: int, X: np.ndarray, y: np.ndarray, every: int) -> bytes:
    items: list[dict[str, Any]] = []
    for i in range(len(y)):
        item: dict[str, Any] = {"id": start + i, "x": X[i].tolist()}
        if i % every == 0:
            item["y"] = float(y[i])
        items.append(item)
    return json.dumps({"samples": items}).encode()


def test_a_batch_scores_its_labeled_samples_and_keeps_the_others_for_late_labels() -> None:
    """The batch path: each labeled sample's hit goes into the recent accuracy, each unlabeled one waits
    in the recent samples, and its late label is learned and scored then."""
    s = session(FakeCloud(), accuracy_window=1000)
    X, y = rows(500)
    feed(s, X[:200], y[:200])
    assert s.phase == "running"
    scored = len(s.quality.scores)
    out = s.handle("samples", batch(200, X[200:300], y[200:300], every=4))
    predicted = np.array([p["y_hat"] for p in out.predictions])
    labeled = np.arange(100) % 4 == 0
    assert len(s.quality.scores) == scored + 25
    assert (
        s.quality.scores.values()[-25:].tolist()
        == (predicted[labeled] == y[200:300][labeled]).astype(float).tolist()
    )
    assert all(s.recent_samples.awaits(200 + i) for i in np.flatnonzero(~labeled).tolist())
    assert not any(s.recent_samples.awaits(200 + i) for i in np.flatnonzero(labeled).tolist())
    labels = {"labels": [{"id": 201, "y": float(y[201])}, {"id": 202, "y": float(y[202])}]}
    s.handle("labels", json.dumps(labels).encode())
    assert len(s.quality.scores) == scored + 27
    assert s.quality.scores.values()[-2:].tolist() == (predicted[1:3] == y[201:203]).astype(float).tolist()
    assert not s.recent_samples.awaits(201) and s.recent_samples.awaits(203)
