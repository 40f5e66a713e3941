"""One stream through a real edge agent: the agent, a real Mosquitto and the real cloud trainer, in sync
recompute mode, so its predictions can be compared with the offline evaluator's sample for sample."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from edgedrift.data import Stream
from edgedrift.protocol import Protocol
from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.replay import ReplayPlan, replay
from edgedrift_edge.settings import AgentSettings
from edgedrift_harness.mosquitto import MosquittoProcess
from edgedrift_harness.mqtt import DeviceWatcher
from support.cloud import OPERATOR, CloudServer


def deploy(
    broker: MosquittoProcess,
    cloud: CloudServer,
    tmp: Path,
    s: Stream,
    protocol: Protocol,
    strategy: str,
    param: float,
    warmup: int,
) -> tuple[EdgeAgent, list[dict[str, Any]], str]:
    """Run ``s`` through a new device's agent: the stopped agent, its predictions by id, the device."""
    device, secret = f"edge-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
    cloud.register(device, secret)
    cfg = AgentSettings.model_validate(
        {
            "device_id": device,
            "device_secret": secret,
            "broker_url": broker.url,
            "cloud_url": cloud.url,
            "warmup_samples": warmup,
            "window_labels": protocol.window_labels,
            "checkpoint_dir": str(tmp / "state"),
            "strategy": strategy,
            "strategy_param": param,
            "recompute_mode": "sync",
            "C": "auto",
        }
    )
    agent = EdgeAgent(cfg).start()
    watch = DeviceWatcher(broker.url, device)
    try:
        replay(ReplayPlan(s, (device,), protocol), broker.url, progress=False)
        preds = watch.wait_predictions(len(s.y), timeout=180)
    finally:
        watch.close()
        agent.stop()
    return agent, sorted(preds, key=lambda p: p["id"]), device


def registry(cloud: CloudServer, device: str) -> list[dict[str, Any]]:
    """Every model version the cloud holds for ``device``, with its document."""
    with cloud.client(OPERATOR) as op:
        versions = op.get(f"/v1/devices/{device}/models").json()
        return [op.get(f"/v1/devices/{device}/models/{v['version']}").json() for v in versions]
