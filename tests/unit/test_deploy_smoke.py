"""deploy/smoke.sh and deploy/smoke.py checked without a Docker engine (the engine run itself is
tests/container/test_compose_smoke.py, recorded in docs/benchmarks.md): the script parses, the smoke
test's devices, services, images, stand-ins, credentials and data set are the compose stack's, and a
container's memory is read from the engine's stats as ``docker stats`` reads it."""

from __future__ import annotations

import subprocess
from types import ModuleType

import pytest
from support.compose import SERVICES, WITH_POSTGRES, effective_command, environment, long_running
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
    assert set(smoke.IMAGES) <= images
    assert WITH_POSTGRES["services"]["postgres"]["image"] == smoke.POSTGRES_IMAGE
    assert environment(SERVICES["mosquitto"])["MQTT_OPERATOR_PASSWORD"] == smoke.OPERATOR_MQTT_PASSWORD
    assert environment(SERVICES["cloud"])["EDGEDRIFT_CLOUD_OPERATOR_TOKEN"] == smoke.OPERATOR_TOKEN
    stream = load_dataset(smoke.DATASET)
    assert stream.drift_points and stream.drift_points[0] < 3000, "each phase must hold a drift"


def test_smoke_test_runs_every_long_running_service() -> None:
    """A service added to the stack (outside a profile) is brought up and checked by the smoke test."""
    smoke = smoke_module()
    expected = {name for name, s in SERVICES.items() if long_running(s) and not s.get("profiles")}
    assert set(smoke.SERVICES) == expected


def test_each_stand_in_is_built_under_the_stacks_image_name() -> None:
    smoke = smoke_module()
    images = {s["image"] for s in WITH_POSTGRES["services"].values() if s.get("image")}
    script = (ROOT / "deploy" / "smoke.sh").read_text()
    for image, folder in smoke.STAND_INS.items():
        assert image in images
        assert (ROOT / folder / "Dockerfile").is_file()
        assert f"stand_in {image} {folder}" in script


MIB = 2**20


@pytest.mark.parametrize(
    ("memory", "mib"),
    [
        # cgroup v2, then v1
        ({"usage": 100 * MIB, "stats": {"inactive_file": 10 * MIB, "active_file": 5 * MIB}}, 90.0),
        ({"usage": 100 * MIB, "stats": {"total_inactive_file": 30 * MIB, "cache": 40 * MIB}}, 70.0),
        ({"usage": 3 * MIB // 2, "stats": {}}, 1.5),
        ({"usage": 10 * MIB, "stats": {"inactive_file": 20 * MIB}}, 10.0),  # more cache than usage: usage
    ],
)
def test_memory_is_usage_less_the_inactive_page_cache(memory: dict[str, object], mib: float) -> None:
    assert smoke_module().memory_mib({"memory_stats": memory}) == mib
