"""A pinned version is what the edge runs: a real agent, a real Mosquitto and the real cloud."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import numpy as np
import pytest
from support.cloud import OPERATOR, CloudServer

from edgedrift.data.generators import sine1plus
from edgedrift.protocol import Protocol
from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.replay import ReplayPlan, replay
from edgedrift_edge.settings import AgentSettings
from edgedrift_harness.mosquitto import local_mosquitto
from edgedrift_harness.mqtt import DeviceWatcher

pytestmark = pytest.mark.kernel_agnostic


def test_the_agent_installs_the_pinned_version_and_keeps_it(
    sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    stream = sine1plus(d=2, n_concepts=2, concept_length=1500, seed=3)
    device, secret = f"pin-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
    sqlite_cloud.register(device, secret)
    X, y = stream.X[:600], stream.y[:600]
    with sqlite_cloud.client(secret) as dev:
        for labels in (y, -y):  # version 1 fits the first concept; version 2 is its mirror image
            body = {"task": "classification", "learner": "logistic", "X": X.tolist(), "y": labels.tolist()}
            dev.post(f"/v1/devices/{device}/models", json=body).raise_for_status()
    with sqlite_cloud.client(OPERATOR) as op:
        op.put(f"/v1/devices/{device}/models/pin", json={"version": 1}).raise_for_status()

    with local_mosquitto(tmp_path / "broker") as broker:
        settings = AgentSettings.model_validate(
            {
                "device_id": device,
                "device_secret": secret,
                "broker_url": broker.url,
                "cloud_url": sqlite_cloud.url,
                "warmup_samples": 300,
                "window_labels": 30,
                "checkpoint_dir": str(tmp_path / "state"),
                "heartbeat_every_s": 0.2,
                "strategy_param": 0.99,
            }
        )
        agent = EdgeAgent(settings).start()
        watch = DeviceWatcher(broker.url, device)
        try:
            replay(ReplayPlan(stream, (device,), Protocol(every=5)), broker.url, progress=False)
            preds = watch.wait_predictions(len(stream.y), timeout=90)
            assert agent.wait_idle(30)
            time.sleep(0.5)
        finally:
            watch.close()
            agent.stop()

    served = [p for p in preds if p["y_hat"] is not None]
    assert served and {p["model_version"] for p in served} == {1}, "only the pinned version may serve"
    first = sorted(served, key=lambda p: p["id"])[:500]
    hits = [p["y_hat"] == stream.y[p["id"]] for p in first]
    assert np.mean(hits) > 0.8, "the mirror-image newest version would score near 0"
    assert watch.events("recompute_requested"), "the drift must make the edge ask (and get the pin back)"
    with sqlite_cloud.client(OPERATOR) as op:
        counters = op.get(f"/v1/devices/{device}/counters").json()
        metrics = op.get(f"/v1/devices/{device}/models/metrics").json()
    assert counters["latest_version"] == 2 and counters["recomputes"] == 2, "a pinned device trains nothing"
    assert [m["version"] for m in metrics] == [1] and metrics[0]["heartbeats"] >= 1
    assert metrics[0]["accuracy_last"] is not None
