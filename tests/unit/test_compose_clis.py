"""Both compose command lines accept the stack: the v2 plugin (``docker compose``) and the v1
``docker-compose`` 1.29 that Debian ships (the smoke test drives the v2 one through testcontainers), for
the base file, with the PostgreSQL override and with the monitoring profile. ``config`` validates without a
Docker engine."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from support.compose import COMPOSE, POSTGRES_OVERRIDE
from support.dockerfiles import ROOT


def v1() -> list[str] | None:
    found = shutil.which("docker-compose")
    return None if found is None else [found]


def v2() -> list[str] | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30, check=False)
    return [docker, "compose"] if probe.returncode == 0 else None


CLIS = {"v1": v1(), "v2": v2()}
STACKS = {
    "base": ["-f", str(COMPOSE)],
    "postgres": ["-f", str(COMPOSE), "-f", str(POSTGRES_OVERRIDE)],
    "monitoring": ["-f", str(COMPOSE), "--profile", "monitoring"],
}


def test_no_top_level_key_v1_rejects() -> None:
    """v1 accepts only version, services, networks, volumes, secrets, configs and x- extensions."""
    for path in (COMPOSE, POSTGRES_OVERRIDE):
        keys = set(yaml.safe_load(path.read_text()))
        allowed = {"version", "services", "networks", "volumes", "secrets", "configs"}
        assert {k for k in keys if not k.startswith("x-")} <= allowed, f"{path.name}: {keys - allowed}"


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("cli", CLIS)
def test_compose_cli_accepts_the_stack(cli: str, stack: str) -> None:
    command = CLIS[cli]
    if command is None:
        pytest.skip(f"the compose {cli} CLI is not installed (bash ../shared/tools/container-engine.sh)")
    out = subprocess.run(
        [*command, "--project-directory", str(ROOT), *STACKS[stack], "config", "--services"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 0, f"{cli} rejects {stack}:\n{out.stderr}"
    services = set(out.stdout.split())
    assert {"mosquitto", "cloud", "edge-1", "replay"} <= services
    assert ("postgres" in services) == (stack == "postgres")
    if cli == "v2" or stack == "monitoring":  # v1's `config --services` lists every profile's services
        assert ({"prometheus", "grafana"} <= services) == (stack == "monitoring")
