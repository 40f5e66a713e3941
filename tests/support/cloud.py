"""The cloud trainer as a real server for the tests: :class:`edgedrift_harness.cloud_process.CloudProcess`
with the tests' operator token and two provisioned devices."""

from __future__ import annotations

import os
from pathlib import Path

from edgedrift_harness.cloud_process import CloudProcess, free_port

__all__ = ["DEVICES", "OPERATOR", "PG_ADMIN_URL", "CloudServer", "free_port"]

PG_ADMIN_URL = os.environ.get("EDGEDRIFT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
OPERATOR = "operator-token-" + "x" * 24
DEVICES = {"dev-a": "secret-of-device-a-0123456789", "dev-b": "secret-of-device-b-0123456789"}


class CloudServer(CloudProcess):
    """``edgedrift-cloud serve`` with OPERATOR and DEVICES; ``env`` adds EDGEDRIFT_CLOUD_* settings."""

    def __init__(self, database_url: str, workdir: Path, **env: str) -> None:
        super().__init__(
            database_url,
            workdir,
            operator_token=OPERATOR,
            devices=DEVICES,
            env={"EDGEDRIFT_CLOUD_AUTH_CACHE_SECONDS": "0", **env},
        )
