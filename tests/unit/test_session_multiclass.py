"""A device configured with ``classes``: labels and predictions by class name on the wire, codes inside,
one-vs-rest recomputes, unknown classes rejected and counted, macro-F1 in the heartbeat; and a sync
session fed the replayed messages makes the offline evaluator's predictions sample for sample."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from edgedrift import state
from edgedrift.data import sine_mc
from edgedrift.models.document import model_from_document
from edgedrift.protocol import Protocol
from edgedrift.training.window import train_window
from edgedrift_edge.replay import ReplayPlan, messages
from edgedrift_edge.session.device_session import DeviceSession, Output, SessionConfig
from edgedrift_edge.session.ledger import Counters
from edgedrift_edge.session.messages import parse_labels, parse_samples
from edgedrift_edge.session.trainer import RecomputeRequest, TrainedModel
from edgedrift_edge.settings import AgentSettings
from edgedrift_eval.runner import RunSpec, run_one

NAMES = ("ash", "elm", "oak")
CENTRES = np.array([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])


def rows(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Three separable blobs, codes 0..2."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, size=n).astype(np.float64)
    X = CENTRES[y.astype(int)] + 0.4 * rng.normal(size=(n, 2))
    return X, y


@dataclass
class WindowCloud:
    """The cloud's training entry point in process: the agent's wire header, :func:`train_window`."""

    requests: list[RecomputeRequest] = field(default_factory=list)

    def __call__(self, request: RecomputeRequest) -> TrainedModel:
        self.requests.append(request)
        outcome = train_window(request.header(), request.X, request.y)
        doc = {**outcome.document, "version": len(self.requests)}
        return TrainedModel(request.request_id, len(self.requests), model_from_document(doc), doc, 1.0, 0, 0)


def session(cloud: WindowCloud, classes: tuple[Any, ...] = NAMES, **kw: Any) -> DeviceSession:
    base: dict[str, Any] = {"warmup_samples": 100, "window_labels": 30, "C": 1.0, "strategy": "druid"}
    config = SessionConfig(device_id="dev-mc", classes=classes, **(base | kw))
    return DeviceSession(config, cloud, lambda: 0.0)


def named(i: int, x: np.ndarray, y: float | None, names: tuple[Any, ...] = NAMES) -> bytes:
    body: dict[str, Any] = {"id": i, "x": x.tolist()}
    if y is not None:
        body["y"] = names[int(y)]
    return json.dumps(body).encode()


def events(outputs: list[Output], kind: str) -> list[dict[str, Any]]:
    return [e for o in outputs for e in o.events if e["type"] == kind]


def test_labels_and_predictions_travel_by_class_name_and_recomputes_are_one_vs_rest() -> None:
    cloud = WindowCloud()
    s = session(cloud)
    X, y = rows(400)
    outs = [s.handle("samples", named(i, X[i], y[i] if i % 2 == 0 else None)) for i in range(400)]
    preds = [p for o in outs for p in o.predictions]
    served = [p for p in preds if p["y_hat"] is not None]
    assert len(preds) == 400 and len(served) == 300
    assert {p["y_hat"] for p in served} == set(NAMES), "predictions are class names, every class occurs"
    hits = [p["y_hat"] == NAMES[int(y[p["id"]])] for p in served]
    assert np.mean(hits) > 0.95, "three separable blobs: one-vs-rest gets them right"
    first = cloud.requests[0]
    assert first.n_classes == 3 and set(np.unique(first.y)) == {0.0, 1.0, 2.0}
    assert first.header().n_classes == 3
    assert s.loop is not None and getattr(s.loop.model, "n_classes", None) == 3


def test_an_unknown_class_is_a_counted_rejection_and_the_ledger_adds_up() -> None:
    s = session(WindowCloud())
    X, y = rows(200)
    for i in range(150):
        s.handle("samples", named(i, X[i], y[i]))
    single = s.handle("samples", json.dumps({"id": 150, "x": X[150].tolist(), "y": "pine"}).encode())
    batch = {
        "samples": [{"id": 151, "x": X[151].tolist(), "y": "oak"}, {"id": 152, "x": X[152].tolist(), "y": 7}]
    }
    mixed = s.handle("samples", json.dumps(batch).encode())
    (one,) = events([single], "rejected")
    assert one["count"] == 1 and "unknown class 'pine'" in one["reasons"][0]["reason"]
    assert one["reasons"][0]["reason"].startswith("y: ") and "ash" in one["reasons"][0]["reason"]
    (two,) = events([mixed], "rejected")
    assert (
        two["count"] == 1
        and two["reasons"][0]["id"] == 152
        and "unknown class 7" in two["reasons"][0]["reason"]
    )
    assert [p["id"] for p in mixed.predictions] == [151] and mixed.predictions[0]["y_hat"] in NAMES
    late = s.handle(
        "labels", json.dumps({"labels": [{"id": 3, "y": "ash"}, {"id": 4, "y": "birch"}]}).encode()
    )
    (three,) = events([late], "rejected")
    assert three["topic"] == "labels" and "unknown class 'birch'" in three["reasons"][0]["reason"]
    c = s.counters
    assert c.predictions + c.rejected - 1 == 153, (
        "published = predicted + rejected (+ the refused late label)"
    )


def test_numeric_class_names_are_names_not_codes() -> None:
    """Classes 1, 2, 3: the wire label 3 is the third class (code 2), and 0 is no class at all."""
    from edgedrift.labels import ClassLabels

    classes = ClassLabels((1, 2, 3))
    x = [0.5, 0.5]
    one = parse_samples(json.dumps({"id": 1, "x": x, "y": 3}).encode(), 2, "classification", 0, None, classes)
    assert one.y.tolist() == [2.0] and not one.rejected
    items = [{"id": k, "x": x, "y": v} for k, v in enumerate([1, "2", 3.0, 0])]
    many = parse_samples(json.dumps({"samples": items}).encode(), 2, "classification", 0, None, classes)
    assert many.y.tolist() == [0.0, 1.0, 2.0] and [r.id for r in many.rejected] == [3]
    good, bad = parse_labels(
        b'{"labels": [{"id": 1, "y": 2}, {"id": 2, "y": true}]}', "classification", None, classes
    )
    assert good == [(1, 1.0)] and len(bad) == 1


def test_two_named_classes_keep_the_codes_plus_minus_one() -> None:
    cloud = WindowCloud()
    s = session(cloud, classes=("no", "yes"))
    X, y3 = rows(300)
    y = np.where(y3 == 0, 1.0, 0.0)  # "yes" for the first blob
    outs = [s.handle("samples", named(i, X[i], y[i], ("no", "yes"))) for i in range(300)]
    assert set(np.unique(cloud.requests[0].y)) == {-1.0, 1.0} and cloud.requests[0].n_classes is None
    served = [p["y_hat"] for o in outs for p in o.predictions if p["y_hat"] is not None]
    assert set(served) == {"no", "yes"}
    beat = s.heartbeat()
    f1 = beat.extra["macro_f1"]
    assert beat.extra["n_classes"] == 2 and f1 is not None and 0.9 < f1 <= 1.0


def test_the_heartbeat_reports_accuracy_and_macro_f1_and_they_survive_a_checkpoint() -> None:
    cloud = WindowCloud()
    s = session(cloud)
    X, y = rows(400, seed=3)
    for i in range(400):
        s.handle("samples", named(i, X[i], y[i]))
    beat = s.heartbeat()
    assert beat.accuracy is not None and beat.accuracy > 0.95
    f1 = beat.extra["macro_f1"]
    assert beat.extra["n_classes"] == 3 and f1 is not None and 0.9 < f1 <= 1.0
    status = s.status()
    assert status["classes"] == list(NAMES) and status["macro_f1"] == beat.extra["macro_f1"]
    restored = session(cloud)
    tree, _ = state.loads(state.dumps(s.snapshot()))
    assert isinstance(tree, dict)
    restored.restore(tree)
    assert restored.quality.macro_f1() == s.quality.macro_f1()
    assert restored.quality.accuracy() == s.quality.accuracy()
    x = json.dumps({"id": 999, "x": X[0].tolist()}).encode()
    assert (
        restored.handle("samples", x).predictions[0]["y_hat"]
        == s.handle("samples", x).predictions[0]["y_hat"]
    )


def test_a_device_without_classes_still_refuses_class_names() -> None:
    s = DeviceSession(SessionConfig(device_id="dev-b", warmup_samples=50), WindowCloud(), lambda: 0.0)
    out = s.handle("samples", json.dumps({"id": 1, "x": [0.0, 1.0], "y": "oak"}).encode())
    (rejected,) = events([out], "rejected")
    assert "y must be a number" in rejected["reasons"][0]["reason"]
    assert s.heartbeat().extra.get("macro_f1") is None and "n_classes" not in s.heartbeat().extra


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"classes": "oak"}, "at least 2 classes"),
        ({"classes": '["oak", "oak"]'}, "distinct"),
        ({"classes": "1,2,3", "task": "regression"}, "classification only"),
        ({"classes": "a,b,c", "strategy": "periodic-tune"}, "two classes only.*druid"),
        ({"classes": "a,b,c", "strategy": "druid-tune"}, "two classes only"),
    ],
)
def test_settings_refuse_classes_that_cannot_work(values: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        AgentSettings.model_validate({"device_id": "dev-s", "strategy": "druid", **values})


def test_settings_read_classes_as_json_or_comma_separated() -> None:
    one = AgentSettings.model_validate({"device_id": "d", "classes": '["oak", 3, "elm"]'})
    two = AgentSettings.model_validate({"device_id": "d", "classes": "oak, ash ,elm"})
    assert one.classes == ["oak", 3, "elm"] and two.classes == ["oak", "ash", "elm"]
    assert AgentSettings.model_validate({"device_id": "d"}).classes is None


def test_a_sync_session_fed_the_replayed_messages_equals_the_offline_evaluation() -> None:
    """What the integration test checks over Mosquitto and the real cloud, without them: the replay's
    messages (labels by name) into a sync session that trains as the cloud does."""
    stream = sine_mc(n_classes=3, d=2, n_concepts=2, concept_length=600, seed=2)
    protocol = Protocol(every=5, window=300)
    offline = run_one(stream, protocol, RunSpec("druid", 0.99, 0), curves=True)
    assert offline.recomputes >= 1
    cloud = WindowCloud()
    names = stream.labels.names
    s = session(cloud, classes=names, warmup_samples=300, window_labels=protocol.window_labels, C="auto")
    preds = []
    for suffix, payload, _ in messages(ReplayPlan(stream, ("dev-mc",), protocol)):
        preds.extend(s.handle(suffix, payload.encode()).predictions)
    deployed = [p["y_hat"] for p in sorted(preds, key=lambda p: p["id"])[300:]]
    assert deployed == stream.labels.decode(offline.scored_predictions())
    assert s.loop is not None and s.loop.counters.recomputes == offline.recomputes
    assert all(r.n_classes == 3 for r in cloud.requests) and len(cloud.requests) == offline.recomputes + 1
    assert isinstance(s.counters, Counters) and s.counters.rejected == 0
