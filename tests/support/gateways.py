"""A gateway as a real ``edgedrift-edge run`` subprocess for the integration tests: its devices registered
at the test's cloud with fresh secrets, written to a devices file, and the settings a test names over the
few every gateway needs."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from edgedrift_harness.agent import AgentProcess
from edgedrift_harness.cloud import CloudProcess


def gateway_process(
    tmp_path: Path, cloud: CloudProcess, devices: Iterable[str], broker_url: str, **settings: Any
) -> AgentProcess:
    """A gateway (not started) serving ``devices`` through ``broker_url``, its log and state in
    ``tmp_path``; ``settings`` (agent settings by name) add to or replace the defaults."""
    table = {device: secrets.token_urlsafe(24) for device in devices}
    for device, secret in table.items():
        cloud.register(device, secret)
    (tmp_path / "devices.json").write_text(json.dumps(table))
    defaults = {
        "gateway_id": f"gw-{secrets.token_hex(3)}",
        "devices_file": tmp_path / "devices.json",
        "broker_url": broker_url,
        "cloud_url": cloud.url,
        "checkpoint_dir": tmp_path / "state",
    }
    return AgentProcess(tmp_path / "gateway.log", defaults | settings)
