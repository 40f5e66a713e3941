"""Test tiers: every test is marked by its folder (unit, contract, property, integration, container), plus
``e2e`` for the whole-system tests and ``deploy`` for the deployment files, and ``quick`` for the tier that
runs in about a minute. ``pytest -m quick`` before a commit, the whole suite (``bash scripts/test.sh``) in
CI, where no Docker engine runs and the container tier skips in a second."""

from __future__ import annotations

from pathlib import Path

import pytest

#: CI's numpy pass re-runs the modules whose processes used a compiled kernel (scripts/test.sh).
pytest_plugins = ["support.kernel_trace"]

#: Folder under tests/ -> its tier.
FOLDER_TIERS = {
    "unit": "unit",
    "contract": "contract",
    "property": "property",
    "integration": "integration",
    "container": "container",
}
QUICK_TIERS = {"unit", "contract", "property"}
#: Test modules (file stems) that exercise the whole system or the deployment files.
E2E_MODULES = {"test_demo", "test_dashboard"}
DEPLOY_PREFIXES = ("test_compose", "test_broker_durability", "test_deploy")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path))
        parts = path.parts
        tier = next((FOLDER_TIERS[p] for p in reversed(parts) if p in FOLDER_TIERS), None)
        if tier is not None:
            item.add_marker(tier)
        if path.stem in E2E_MODULES:
            item.add_marker("e2e")
        if path.stem.startswith(DEPLOY_PREFIXES):
            item.add_marker("deploy")
        if tier in QUICK_TIERS and not path.stem.startswith(DEPLOY_PREFIXES):
            item.add_marker("quick")
