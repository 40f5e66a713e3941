"""A gateway's broker identity on the shipped Mosquitto configuration: the entry point gives the gateway user
exactly its devices' topics; a real gateway serves its devices through it and cannot touch another's, with
one broker session or one per device (``MQTT_GW_1_SESSIONS=device``: a device the broker has no session
user for is refused its session alone; the gateway starts and serves the others)."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.compose import run_entrypoint

from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.settings import AgentSettings
from edgedrift_harness.mosquitto import ShippedMosquitto
from edgedrift_harness.mqtt import Subscriber, publish

pytestmark = pytest.mark.kernel_agnostic

PASSWORDS = {
    "operator": "operator-password-0123456789",
    "replay": "replay-password-0123456789",
    "dev-9": "dev-9-password-0123456789",
    "gw-1": "gw-1-password-0123456789",
}
ENV = {
    "EDGEDRIFT_MODE": "production",
    "MQTT_OPERATOR_PASSWORD": PASSWORDS["operator"],
    "MQTT_REPLAY_PASSWORD": PASSWORDS["replay"],
    "MQTT_DEVICES": "dev-9",
    "MQTT_DEV_9_PASSWORD": PASSWORDS["dev-9"],
    "MQTT_GATEWAYS": "gw-1",
    "MQTT_GW_1_PASSWORD": PASSWORDS["gw-1"],
    "MQTT_GW_1_DEVICES": "dev-1,dev-2",
}


@pytest.fixture(params=["gateway", "device"])
def broker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ShippedMosquitto]:
    if not all(shutil.which(t) for t in ("mosquitto", "mosquitto_passwd", "mosquitto_sub")):
        pytest.skip("needs mosquitto and its clients installed locally")
    env = {**ENV, "MQTT_GW_1_SESSIONS": request.param}
    result = run_entrypoint(tmp_path, env, passwd=shutil.which("mosquitto_passwd"))
    assert result.returncode == 0, result.stderr
    with ShippedMosquitto(tmp_path, None) as running:
        yield running


class Predictions(Subscriber):
    """Prediction ids per device, watched as the operator (one login: the user name is the client id)."""

    def __init__(self, url: str) -> None:
        self.ids: dict[str, list[int]] = {}
        super().__init__(url, [("edgedrift/+/predictions", 1)])

    def handle(self, topic: str, payload: bytes) -> None:
        with self.lock:
            self.ids.setdefault(topic.split("/")[1], []).append(json.loads(payload)["id"])

    def of(self, device: str, n: int, timeout: float = 30.0) -> list[int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.ids.get(device, [])) < n:
            time.sleep(0.05)
        with self.lock:
            return list(self.ids.get(device, []))


def url(broker: ShippedMosquitto, user: str) -> str:
    return f"mqtt://{user}:{PASSWORDS[user]}@127.0.0.1:{broker.port}"


def test_entrypoint_refuses_a_gateway_named_like_a_device(tmp_path: Path) -> None:
    result = run_entrypoint(tmp_path, {**ENV, "MQTT_GATEWAYS": "dev-9", "MQTT_DEV_9_DEVICES": "dev-1"})
    assert result.returncode == 1 and "also a device id" in result.stderr


def test_a_gateway_user_reaches_exactly_its_devices(
    broker: ShippedMosquitto, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    acl = (tmp_path / "auth" / "acl").read_text()
    assert "user gw-1\n" in acl and "topic read edgedrift/dev-2/labels" in acl
    sessions = "device" if "user gw-1.dev-1\n" in acl else "gateway"
    settings = AgentSettings.model_validate(
        {
            "gateway_id": "gw-1",
            "devices": "dev-1,dev-2,dev-9",  # dev-9 is not its device: the broker gives it nothing of dev-9's
            "broker_url": url(broker, "gw-1"),
            "cloud_url": "http://127.0.0.1:9",  # no cloud: warm-up predictions need none
            "checkpoint_dir": str(tmp_path / "state"),
            "n_features": 2,
            "broker_sessions": sessions,
        }
    )
    agent = EdgeAgent(settings).start()
    watch = Predictions(url(broker, "operator"))
    try:
        for device in ("dev-1", "dev-2", "dev-9"):
            samples = [json.dumps({"id": i, "x": [0.1 * i, 1.0]}) for i in range(5)]
            publish(url(broker, "replay"), f"edgedrift/{device}/samples", samples)
        for device in ("dev-1", "dev-2"):
            assert watch.of(device, 5) == list(range(5))
        time.sleep(1.0)
        assert watch.of("dev-9", 0) == [], "the gateway read or answered another device's samples"
        assert agent.devices["dev-9"].session.counters.samples == 0
        if sessions == "device":  # dev-9 has no user gw-1.dev-9: its session alone is refused
            assert "device dev-9: the broker refused its session" in caplog.text
    finally:
        watch.close()
        agent.stop()
