"""Online-BLS, Shrub Ensembles and RebalanceStream selected by the edge agent's configuration, through a real
Mosquitto and the real cloud trainer: the deployed run makes the offline evaluator's predictions sample for
sample, and the cloud counts every call it makes."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.cloud import OPERATOR, CloudServer
from support.mqtt import Collector, Mosquitto

from edgedrift.data import Stream
from edgedrift.data.generators import sine1plus
from edgedrift.protocol import Protocol
from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.replay import ReplayPlan, replay
from edgedrift_edge.settings import AgentSettings
from edgedrift_eval.runner import RunSpec, run_one

WARMUP = 500


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Mosquitto]:
    server = Mosquitto(tmp_path).start()
    try:
        yield server
    finally:
        server.stop()


def imbalanced_drift(seed: int = 3) -> Stream:
    """Sine1+ with three concepts, the positive class thinned to about 20% so rebalancing has work to do."""
    s = sine1plus(d=2, n_concepts=3, concept_length=2000, seed=seed)
    rng = np.random.default_rng(seed)
    keep = (s.y < 0) | (rng.random(len(s.y)) < 0.25)
    return Stream(f"{s.name}-imbalanced", s.X[keep], s.y[keep], s.task, s.feature_names)


def deploy(
    broker: Mosquitto,
    cloud: CloudServer,
    tmp: Path,
    s: Stream,
    protocol: Protocol,
    strategy: str,
    param: float,
) -> tuple[EdgeAgent, list[dict[str, Any]], str]:
    device, secret = f"edge-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
    with cloud.client(OPERATOR) as op:
        assert op.put(f"/v1/devices/{device}", json={"secret": secret}).status_code == 200
    cfg = AgentSettings.model_validate(
        {
            "device_id": device,
            "device_secret": secret,
            "broker_url": broker.url,
            "cloud_url": cloud.url,
            "warmup_samples": WARMUP,
            "window_labels": protocol.window_labels,
            "checkpoint_dir": str(tmp / "state"),
            "strategy": strategy,
            "strategy_param": param,
            "recompute_mode": "sync",
            "C": "auto",
        }
    )
    agent = EdgeAgent(cfg).start()
    watch = Collector(broker.url, device)
    try:
        replay(ReplayPlan(s, (device,), protocol), broker.url, progress=False)
        preds = watch.wait_predictions(len(s.y), timeout=180)
    finally:
        watch.close()
        agent.stop()
    return agent, sorted(preds, key=lambda p: p["id"]), device


def registry(cloud: CloudServer, device: str) -> list[dict[str, Any]]:
    with cloud.client(OPERATOR) as op:
        versions = op.get(f"/v1/devices/{device}/models").json()
        return [op.get(f"/v1/devices/{device}/models/{v['version']}").json() for v in versions]


@pytest.mark.parametrize(
    ("strategy", "param", "kind"),
    [
        ("online-bls", 0.0, "linear"),
        ("shrub-ensemble", 100, "shrub"),
        ("rebalance-stream", 0.002, "shrub"),
        ("rebalance-stream-plus", 0.002, "shrub"),
    ],
)
def test_learner_runs_deployed_as_it_does_offline(
    broker: Mosquitto, sqlite_cloud: CloudServer, tmp_path: Path, strategy: str, param: float, kind: str
) -> None:
    s = imbalanced_drift()
    protocol = Protocol(every=2, window=WARMUP)
    offline = run_one(s, protocol, RunSpec(strategy, param, 0), curves=True)
    agent, preds, device = deploy(broker, sqlite_cloud, tmp_path, s, protocol, strategy, param)

    deployed = np.array([p["y_hat"] for p in preds[WARMUP:]])
    assert np.array_equal(deployed, offline["predictions"]), f"{strategy}: deployed predictions differ"
    assert agent.session.loop is not None
    assert agent.session.loop.counters.recomputes == offline["recomputes"]
    models = registry(sqlite_cloud, device)
    assert len(models) == offline["recomputes"] + 1, "every cloud call is one counted recompute (+ the first)"
    assert {m["model"]["kind"] for m in models} == {kind}
    if strategy == "online-bls":
        assert offline["recomputes"] == 0 and offline["accuracy"] > 0.7
    else:
        assert offline["recomputes"] >= 2, "the stream must make the strategy call the cloud"
    if strategy == "shrub-ensemble":
        assert offline["accuracy"] > 0.7
    if strategy.startswith("rebalance-stream"):
        # Each change sent the batch with its reset rows; the cloud scored the four candidates.
        selections = [m for m in models if m["rebalance"] == "select"]
        assert len(selections) == offline["recomputes"]
        for m in selections:
            assert set(m["model"]["training"]["scores"]) == {"batch", "batch+smote", "reset", "reset+smote"}
