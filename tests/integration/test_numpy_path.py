"""The edge agent on the numpy path, as an install without a C compiler runs it (``EDGEDRIFT_NO_KERNELS=1``
stands in for the missing extension): a real agent process serves ELEC2 end to end through a real
Mosquitto and the real cloud trainer, and says which path it runs."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cloud import CloudServer

from edgedrift.data import load_elec2
from edgedrift.protocol import Protocol
from edgedrift_edge.replay import ReplayPlan, replay
from edgedrift_harness.agent import AgentProcess
from edgedrift_harness.mosquitto import MosquittoProcess, local_mosquitto
from edgedrift_harness.mqtt import DeviceWatcher

N = 3000


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoProcess]:
    with local_mosquitto(tmp_path / "broker") as server:
        yield server


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[CloudServer]:
    """The cloud trainer (its training pool starts in ~10 s idle, over a minute on a busy machine)."""
    server = CloudServer(f"sqlite:///{tmp_path / 'registry.db'}", tmp_path).start(timeout=240)
    try:
        yield server
    finally:
        server.stop()


def test_the_agent_serves_elec2_on_the_numpy_path_and_says_so(
    broker: MosquittoProcess, cloud: CloudServer, tmp_path: Path
) -> None:
    if not os.environ.get("EDGEDRIFT_DATA_DIR"):
        pytest.skip("EDGEDRIFT_DATA_DIR not set (ELEC2 is not downloaded by the tests)")
    stream = load_elec2()
    device, secret = f"numpy-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
    cloud.register(device, secret)
    agent = AgentProcess(
        tmp_path / "agent.log",
        {
            "device_id": device,
            "device_secret": secret,
            "broker_url": broker.url,
            "cloud_url": cloud.url,
            "warmup_samples": 500,
            "window_labels": 50,
            "recompute_mode": "sync",  # every sample after the warm-up is served by a model
            "checkpoint_dir": tmp_path / "state",
            "heartbeat_every_s": 0.5,
        },
        env={"EDGEDRIFT_NO_KERNELS": "1"},
    )
    watch = DeviceWatcher(broker.url, device)
    agent.start()
    try:
        replay(ReplayPlan(stream, (device,), Protocol(every=1), limit=N), broker.url, progress=False)
        preds = watch.wait_predictions(N, timeout=120)
        status = watch.wait_status("online")
    finally:
        code = agent.stop()
        watch.close()
    assert code == 0
    assert "(kernels: numpy)" in agent.log.read_text(), "the ready line names the path"
    assert status["kernels"] == "numpy"
    assert sorted(p["id"] for p in preds) == list(range(N)), "every sample answered once"
    served = {p["id"]: p["y_hat"] for p in preds if p["y_hat"] is not None}
    assert sorted(served) == list(range(500, N)), "the model serves every sample after the warm-up"
    correct = sum(served[i] == stream.y[i] for i in served)
    assert correct / len(served) > 0.8, f"ELEC2 accuracy on the numpy path: {correct / len(served):.3f}"
