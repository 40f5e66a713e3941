"""``druid-tune`` and ``periodic-tune`` deployed (issue 15, item 3): a real agent, a real Mosquitto and
the real cloud trainer give the predictions of the evaluator's offline run sample for sample, with the
same re-tuning recomputes shipping the same edge parameters, and every label the edge learned forwarded
once."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from support.cloud import CloudServer

from edgedrift.data import Stream
from edgedrift.data.generators import sine1plus
from edgedrift.loop import EdgeLoop
from edgedrift.protocol import Protocol
from edgedrift.strategies.channel import EdgeTune
from edgedrift.strategies.retuned import RetunedLearner
from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.replay import ReplayPlan, replay
from edgedrift_edge.settings import AgentSettings
from edgedrift_eval.runner import RunSpec, build_runner, run_one
from edgedrift_harness.mosquitto import MosquittoProcess, local_mosquitto
from edgedrift_harness.mqtt import DeviceWatcher, publish


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoProcess]:
    with local_mosquitto(tmp_path / "broker") as server:
        yield server


def offline_tunes(stream: Stream, protocol: Protocol, spec: RunSpec) -> tuple[list[EdgeTune], RetunedLearner]:
    """The evaluator's loop driven as :func:`run_one` drives it (no label delay), keeping what each
    re-tuning recompute posted to the edge."""
    labeled = protocol.labeled_mask(len(stream), spec.offset)
    loop, _info, _clock = build_runner(stream, protocol, spec, labeled)
    assert isinstance(loop, EdgeLoop) and isinstance(loop.learner, RetunedLearner)
    learner, posted = loop.learner, []
    post = learner.channel.post

    def record(tune: EdgeTune) -> None:
        posted.append(tune)
        post(tune)

    learner.channel.post = record  # type: ignore[method-assign]
    for i in range(protocol.window, len(stream)):
        loop.process_one(stream.X[i], float(stream.y[i]) if labeled[i] else None)
    return posted, learner


def wait_for_outbox(agent: EdgeAgent, timeout: float = 60.0) -> None:
    """Until every label batch handed to the cloud client has an outcome."""
    c, deadline = agent.session.counters, time.monotonic() + timeout
    while c.history_stored + c.history_refused + c.history_dropped < c.history_batches:
        assert time.monotonic() < deadline, f"outbox not drained: {c}"
        time.sleep(0.1)


def stored_edges(cloud: CloudServer, device: str) -> list[EdgeTune]:
    engine = sa.create_engine(cloud.database_url)
    try:
        with engine.connect() as conn:
            query = sa.text(
                "SELECT edge FROM models WHERE device_id = :d AND edge IS NOT NULL ORDER BY version"
            )
            rows = conn.execute(query, {"d": device}).scalars().all()
    finally:
        engine.dispose()
    return [EdgeTune.from_document(json.loads(r) if isinstance(r, str) else r) for r in rows]


@pytest.mark.parametrize(("strategy", "param"), [("druid-tune", 0.99), ("periodic-tune", 100.0)])
def test_retuning_deployed_equals_the_offline_evaluation(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path, strategy: str, param: float
) -> None:
    # a stream on which a recompute clearly beats the edge's parameters (the cloud's no-harm rule), so
    # the check sees new parameters shipped and applied
    s = sine1plus(d=2, n_concepts=4, concept_length=1500, seed=0)
    protocol = Protocol(every=10, window=500)
    spec = RunSpec(strategy, param, 0)
    offline = run_one(s, protocol, spec, curves=True)
    tunes, offline_learner = offline_tunes(s, protocol, spec)
    assert offline.recomputes >= 2 and len(tunes) == offline.recomputes, (
        "the check needs re-tuning recomputes"
    )

    device, secret = f"edge-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
    sqlite_cloud.register(device, secret)
    cfg = AgentSettings.model_validate(
        {
            "device_id": device,
            "device_secret": secret,
            "broker_url": broker.url,
            "cloud_url": sqlite_cloud.url,
            "warmup_samples": 500,
            "window_labels": 50,
            "strategy": strategy,
            "strategy_param": param,
            "recompute_mode": "sync",
            "C": "auto",
            "history_batch": 64,
            "checkpoint_dir": str(tmp_path / "state"),
            "heartbeat_every_s": 0.5,
            "retry_base_s": 0.05,
            "retry_max_s": 0.5,
        }
    )
    agent = EdgeAgent(cfg).start()
    watch = DeviceWatcher(broker.url, device)
    try:
        replay(ReplayPlan(s, (device,), protocol), broker.url, progress=False)
        preds = watch.wait_predictions(len(s.y), timeout=180)
        wait_for_outbox(agent)
    finally:
        watch.close()
        agent.stop()
    deployed = np.array([p["y_hat"] for p in sorted(preds, key=lambda p: p["id"])[500:]])
    assert np.array_equal(deployed, offline.scored_predictions())

    session = agent.session
    assert session.loop is not None and session.loop.counters.recomputes == offline.recomputes
    learner = session.loop.learner
    assert isinstance(learner, RetunedLearner)
    assert learner.retunes == offline_learner.retunes >= 1  # rebuilt where new parameters came, as offline
    assert learner.params == offline_learner.params
    shipped = stored_edges(sqlite_cloud, device)
    assert [t.params for t in shipped] == [t.params for t in tunes]
    assert [(t.window, t.anchor) for t in shipped] == [(t.window, t.anchor) for t in tunes]

    c = session.counters
    # every label learned was handed to the cloud client once (the newest may wait for a full batch)
    assert learner.n_learned == offline_learner.n_learned
    assert c.history_labels + learner.channel.pending == learner.n_learned
    assert c.history_dropped == 0 and c.history_refused == 0 and c.checkpoint_failures == 0
    counters = sqlite_cloud.counters(device)
    assert counters["recomputes"] == offline.recomputes + 1  # + the initial model
    assert counters["bytes_in"] == c.http_bytes_up, "windows and label batches, counted on both sides"


def history_rows(cloud: CloudServer, device: str) -> tuple[int, int]:
    """(chunks, labels) of the device's history in the registry."""
    engine = sa.create_engine(cloud.database_url)
    try:
        with engine.connect() as conn:
            query = sa.text("SELECT COUNT(*), COALESCE(SUM(n), 0) FROM history_chunks WHERE device_id = :d")
            chunks, labels = conn.execute(query, {"d": device}).one()
    finally:
        engine.dispose()
    return int(chunks), int(labels)


def test_label_batches_survive_a_cloud_outage_and_are_stored_once(
    broker: MosquittoProcess, tmp_path: Path
) -> None:
    """The cloud goes away mid-stream (async mode): the agent keeps predicting, its batches wait in the
    outbox with backoff and reach the history once it is back, each stored once."""
    cloud = CloudServer(f"sqlite:///{tmp_path / 'registry.db'}", tmp_path).start()
    device, secret = f"edge-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
    cloud.register(device, secret)
    s = sine1plus(d=2, n_concepts=2, concept_length=1500, seed=5)
    cfg = AgentSettings.model_validate(
        {
            "device_id": device,
            "device_secret": secret,
            "broker_url": broker.url,
            "cloud_url": cloud.url,
            "warmup_samples": 300,
            "window_labels": 30,
            "strategy": "periodic-tune",
            "strategy_param": 100,
            "history_batch": 20,
            "history_outbox": 500,
            "checkpoint_dir": str(tmp_path / "state"),
            "heartbeat_every_s": 0.5,
            "retry_base_s": 0.05,
            "retry_max_s": 0.5,
        }
    )
    agent = EdgeAgent(cfg).start()
    watch = DeviceWatcher(broker.url, device)
    topic = f"edgedrift/{device}/samples"
    try:
        replay(ReplayPlan(s, (device,), Protocol(every=5), limit=1500), broker.url, progress=False)
        watch.wait_predictions(1500, timeout=120)
        cloud.stop()
        messages = []
        for start in range(1500, 3000, 50):
            rows = [{"id": i, "x": s.X[i].tolist(), "y": float(s.y[i])} for i in range(start, start + 50)]
            messages.append(json.dumps({"samples": rows}))
        publish(broker.url, topic, messages)
        preds = watch.wait_predictions(3000, timeout=120)
        assert all(p["y_hat"] is not None for p in preds[1500:]), "the edge predicts while the cloud is away"
        c = agent.session.counters
        assert c.history_batches > c.history_stored, "batches were waiting for the cloud"
        cloud.start()
        wait_for_outbox(agent)
    finally:
        watch.close()
        agent.stop()
        cloud.stop()
    assert c.history_refused == 0 and c.history_dropped == 0
    assert history_rows(cloud, device) == (c.history_stored, c.history_labels)
