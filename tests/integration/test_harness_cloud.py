"""The harness's cloud process at a niceness (``CloudProcess(nice=N)``): the fairness bench runs its cloud
trainer so, as another host's would be, on the cores of the gateway it measures. Every thread of the
server runs N above the harness's own niceness, and the server answers as at 0."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from edgedrift_harness.cloud import CloudProcess

OPERATOR = "harness-operator-token-" + "x" * 24


def test_a_cloud_started_at_a_niceness_runs_every_thread_there_and_answers(tmp_path: Path) -> None:
    own = os.getpriority(os.PRIO_PROCESS, 0)
    server = CloudProcess(f"sqlite:///{tmp_path / 'r.db'}", tmp_path, operator_token=OPERATOR, nice=7).start()
    try:
        tasks = [int(t) for t in os.listdir(f"/proc/{server.pid}/task")]
        assert len(tasks) > 1  # the server's threads, not only its main one
        assert {os.getpriority(os.PRIO_PROCESS, t) for t in tasks} == {min(own + 7, 19)}
        assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
    finally:
        server.stop()
