"""A gateway device's session past its warm-up, in process (no broker, the cloud's training at once),
for the unit tests of what a session does with its messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from edgedrift.training.linear import train_linear
from edgedrift_edge.device import session_config
from edgedrift_edge.session.device_session import DeviceSession
from edgedrift_edge.session.trainer import RecomputeRequest, TrainedModel
from edgedrift_edge.settings import AgentSettings

D = 3
RATE, DELAY = 2.0, 50.0  # samples per second per device, longest label delay in seconds


def gateway(tmp_path: Path, **kw: Any) -> AgentSettings:
    values = {"gateway_id": "gw-t", "checkpoint_dir": str(tmp_path / "state"), "n_features": D}
    values |= {"label_delay_s": DELAY, "device_rate_per_s": RATE, "warmup_samples": 100, "window_labels": 20}
    return AgentSettings.model_validate(values | kw)


def train(request: RecomputeRequest) -> TrainedModel:
    """The cloud, in process and at once (sync)."""
    model = train_linear(request.X, request.y, request.loss, 1.0).with_meta(
        created="2024-01-01T00:00:00+00:00", version=1
    )
    return TrainedModel(request.request_id, 1, model, model.to_document(), 1.0, 10, 20)


def running(settings: AgentSettings) -> tuple[DeviceSession, np.ndarray]:
    """A gateway device's session past its warm-up (every other warm-up sample labeled), and a stream."""
    s = DeviceSession(session_config(settings, "dev-1"), train, lambda: 0.0)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, D))
    for i in range(100):
        y = 1.0 if X[i] @ np.array([1.0, -1.0, 0.5]) > 0 else -1.0
        s.handle("samples", sample(i, X[i], y if i % 2 == 0 else None))
    assert s.phase == "running" and s.loop is not None
    return s, X


def sample(i: int, x: np.ndarray, y: float | None = None) -> bytes:
    body: dict[str, Any] = {"id": i, "x": x.tolist()}
    if y is not None:
        body["y"] = y
    return json.dumps(body).encode()
