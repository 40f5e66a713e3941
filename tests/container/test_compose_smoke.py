"""The compose stack for real, through testcontainers' ``DockerCompose`` (deploy/smoke.py): healthy, a
replayed stream predicted and recomputed, an edge container killed and resumed from its checkpoint
volume, the cloud and the broker restarted with nothing lost, torn down.

It needs a Docker engine holding the images (``bash deploy/smoke.sh`` builds them and runs this test) and
is skipped, in about a second, when no engine answers or an image is missing; with
``EDGEDRIFT_TEST_CONTAINERS=1`` (as deploy/smoke.sh sets it) that is a failure instead. The figures go to
``$EDGEDRIFT_SMOKE_JSON`` when it is set (docs/benchmarks.md, "Container smoke test")."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import ModuleType

import pytest
from support.dockerfiles import ROOT
from support.scripts import load_script

from edgedrift_harness import containers

SAMPLES = 3000


def smoke_module() -> ModuleType:
    return load_script(ROOT / "deploy" / "smoke.py", "edgedrift_deploy_smoke")


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("registry", ["sqlite", "postgresql"])
def test_the_stack_loses_nothing_across_kills_and_restarts(registry: str) -> None:
    smoke = smoke_module()
    postgres = registry == "postgresql"
    problem = containers.engine_problem(smoke.images_needed(postgres))
    if problem is not None:
        if containers.requested():
            pytest.fail(f"{containers.ENV}=1 but {problem}")
        pytest.skip(f"{problem} (bash deploy/smoke.sh builds the images and runs this test)")
    figures = smoke.run(postgres, samples=SAMPLES)
    if path := os.environ.get("EDGEDRIFT_SMOKE_JSON"):
        Path(path).write_text(json.dumps(figures, indent=2) + "\n")
    assert all(n >= 2 * SAMPLES for n in figures["predictions"].values()), "a sample was not predicted"
    every = dict.fromkeys(smoke.DEVICES, 2 * SAMPLES)
    assert figures["heartbeat_samples"] == every, "an agent lost samples across the kill or the restarts"
    assert all(n >= 1 for n in figures["recomputes_after_phase1"].values())
    assert figures["recomputes_final"] == figures["recomputes_requested"], "a recompute was lost"
