"""deploy/smoke.sh and deploy/smoke.py checked without a Docker engine (the engine run itself is recorded in
docs/benchmarks.md): the script parses, the smoke test's devices, services, images, credentials and
data set are the compose stack's, and the memory figures of ``docker stats`` are read right."""

from __future__ import annotations

import subprocess
from types import ModuleType

import pytest
from support.compose import SERVICES, WITH_POSTGRES, effective_command, environment
from support.dockerfiles import ROOT
from support.scripts import load_script

from edgedrift.data import load_dataset


def smoke_module() -> ModuleType:
    return load_script(ROOT / "deploy" / "smoke.py", "edgedrift_deploy_smoke")


def test_the_script_parses() -> None:
    out = subprocess.run(["bash", "-n", str(ROOT / "deploy" / "smoke.sh")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_smoke_test_matches_the_stack() -> None:
    smoke = smoke_module()
    replay = effective_command(SERVICES["replay"])
    assert tuple(replay[replay.index("--devices") + 1].split(",")) == smoke.DEVICES
    assert {f"edge-{i}" for i in range(1, 4)} == set(smoke.AGENTS) and set(smoke.AGENTS) <= set(SERVICES)
    images = {s["image"] for s in SERVICES.values() if s.get("image")}
    assert set(smoke.IMAGES) - {"python:3.11-slim"} <= images
    assert environment(SERVICES["mosquitto"])["MQTT_OPERATOR_PASSWORD"] == smoke.OPERATOR_MQTT_PASSWORD
    assert environment(SERVICES["cloud"])["EDGEDRIFT_CLOUD_OPERATOR_TOKEN"] == smoke.OPERATOR_TOKEN
    assert "postgres" in WITH_POSTGRES["services"]
    stream = load_dataset(smoke.DATASET)
    assert stream.drift_points and stream.drift_points[0] < 3000, "each phase must hold a drift"


@pytest.mark.parametrize(
    ("text", "mib"), [("104.2MiB", 104.2), ("1.5GiB", 1536.0), ("512KiB", 0.5), ("0B", 0.0)]
)
def test_memory_figures_of_docker_stats(text: str, mib: float) -> None:
    assert smoke_module()._mib(text) == mib


def test_unknown_memory_unit_is_an_error() -> None:
    smoke = smoke_module()
    with pytest.raises(smoke.SmokeError):
        smoke._mib("12 parsecs")
