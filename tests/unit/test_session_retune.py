"""A re-tuning strategy's session driven directly (no broker, no cloud): labels leave in batches with
unique ids, a recompute carries the rest and asks for re-tuning, the answer's parameters reach the edge
learner (sync and async), and a pending re-tuning request survives a checkpoint."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from edgedrift import state
from edgedrift.strategies.channel import EdgeTune
from edgedrift.strategies.retuned import RetunedLearner
from edgedrift.training.linear import train_linear
from edgedrift_edge.session.device_session import DeviceSession, SessionConfig
from edgedrift_edge.session.trainer import LabelBatch, RecomputeRequest, TrainedModel

TUNE = EdgeTune({"scale_alpha": 0.1, "forgetting": 0.98, "prior": 1.0}, 0.9, 300, anchor=False)


@dataclass
class RetuningCloud:
    """Answers every recompute; a re-tuning one with :data:`TUNE` (at once, or kept when async)."""

    sync: bool = True
    requests: list[RecomputeRequest] = field(default_factory=list)

    def __call__(self, request: RecomputeRequest) -> TrainedModel | None:
        self.requests.append(request)
        return self.answer(request) if self.sync else None

    def answer(self, request: RecomputeRequest) -> TrainedModel:
        model = train_linear(request.X, request.y, request.loss, 1.0).with_meta(
            created="2024-01-01T00:00:00+00:00", version=len(self.requests)
        )
        edge = None if request.retune is None else TUNE.as_document()
        n = len(self.requests)
        return TrainedModel(request.request_id, n, model, model.to_document(), 1.0, 10, 20, edge=edge)


def drifting(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    sign = np.where(np.arange(n) < n // 3, 1.0, -1.0)
    return X, np.where(X[:, 0] + sign * X[:, 1] > 0, 1.0, -1.0)


def new_session(cloud: RetuningCloud) -> DeviceSession:
    config = SessionConfig(
        device_id="dev-r",
        warmup_samples=100,
        window_labels=20,
        C=1.0,
        strategy="periodic-tune",
        strategy_param=100.0,
        history_batch=30,
    )
    return DeviceSession(config, cloud, lambda: 0.0)


def feed(s: DeviceSession, n: int, start: int = 0, seed: int = 0) -> list[LabelBatch]:
    """Every sample labeled; the label batches the session hands out for forwarding."""
    X, y = drifting(n, seed)
    batches = []
    for i in range(n):
        body = {"id": start + i, "x": X[i].tolist(), "y": float(y[i])}
        batches.extend(s.handle("samples", json.dumps(body).encode()).history)
    return batches


def retuning_pending(cloud: RetuningCloud) -> DeviceSession:
    """An async session whose first model is installed and whose re-tuning recompute is pending."""
    s = new_session(cloud)
    feed(s, 100)
    assert s.pending is not None and s.pending.initial
    s.install(cloud.answer(s.pending))
    feed(s, 300, start=100, seed=1)
    assert s.pending is not None and s.pending.retune is not None
    return s


def test_labels_leave_in_batches_and_a_recompute_carries_the_rest_and_asks_for_retuning() -> None:
    cloud = RetuningCloud()
    s = new_session(cloud)
    forwarded = feed(s, 1200)
    assert s.loop is not None and isinstance(s.loop.learner, RetunedLearner)
    learner = s.loop.learner
    retunes = [r for r in cloud.requests if r.retune is not None]
    assert len(retunes) == s.loop.counters.recomputes >= 5
    assert all(
        r.retune is not None and (r.retune.learner, r.retune.window_labels) == ("newton", 20) for r in retunes
    )
    carried = [b for r in retunes for b in r.history]
    ids = [b.batch_id for b in forwarded + carried]
    assert len(ids) == len(set(ids)), "every batch has its own id"
    assert forwarded and all(1 <= len(b.y) <= 30 for b in forwarded)
    labels = sum(len(b.y) for b in forwarded + carried)
    assert labels == s.counters.history_labels == learner.n_learned - learner.channel.pending
    # Each request names the learner's parameters then; the cloud answers TUNE every time, so only the first
    # answer changes them (the learner is rebuilt once, later answers keep it).
    assert [r.retune.current for r in retunes if r.retune is not None][1:] == [TUNE.params] * (
        len(retunes) - 1
    )
    assert retunes[0].retune is not None and retunes[0].retune.current != TUNE.params
    assert learner.retunes == 1 and learner.params == TUNE.params


def test_an_async_answer_applies_its_parameters_when_installed() -> None:
    cloud = RetuningCloud(sync=False)
    s = retuning_pending(cloud)
    assert s.loop is not None and isinstance(s.loop.learner, RetunedLearner)
    before = dict(s.loop.learner.params)
    assert s.pending is not None
    s.install(cloud.answer(s.pending))
    assert s.loop.learner.params == TUNE.params != before and s.loop.learner.retunes == 1


def test_a_pending_retuning_request_survives_a_checkpoint() -> None:
    cloud = RetuningCloud(sync=False)
    s = retuning_pending(cloud)
    request = s.pending
    assert request is not None and request.history
    restored = new_session(cloud)
    tree, _ = state.loads(state.dumps(s.snapshot()))
    assert isinstance(tree, dict)
    restored.restore(tree)
    again = restored.resubmit()
    assert again is not None and again.retune == request.retune
    assert [b.batch_id for b in again.history] == [b.batch_id for b in request.history]
    pairs = zip(again.history, request.history, strict=True)
    assert all(np.array_equal(a.X, b.X) and np.array_equal(a.y, b.y) for a, b in pairs)


def test_the_cloud_clients_label_outbox_is_bounded_per_device() -> None:
    """With the cloud unreachable, batches wait (retrying) up to the outbox; the next one is dropped at
    once, another device's batches are not affected."""
    from edgedrift_edge.cloud.client import CloudClient

    client = CloudClient("http://127.0.0.1:9", retry_base_s=0.05, retry_max_s=0.1)
    X, y = np.zeros((3, 2)), np.ones(3)
    try:
        waiting = [
            client.post_history("d1", None, LabelBatch(f"b{i}", X, y), "classification", 2) for i in range(2)
        ]
        dropped = client.post_history("d1", None, LabelBatch("b2", X, y), "classification", 2)
        other = client.post_history("d2", None, LabelBatch("c0", X, y), "classification", 2)
        assert dropped.result(timeout=1) == ("dropped", 0)
        assert not any(f.done() for f in [*waiting, other]), "the others keep retrying"
    finally:
        client.close()
    assert all(f.cancelled() or f.result() == ("closed", 0) for f in [*waiting, other])
