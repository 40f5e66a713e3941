"""/metrics with ``--workers 2`` (issue 12, rows 11 and 16): counters summed over every worker, so
successive scrapes never go backwards whichever worker answers, and no per-device series by default."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from support.cloud import DEVICES, OPERATOR

from edgedrift_harness.cloud import CloudProcess


def healthz_count(text: str) -> float:
    pattern = r'^edgedrift_http_requests_total\{[^}]*route="/healthz"[^}]*\} (\S+)$'
    return sum(float(v) for v in re.findall(pattern, text, re.M))


def test_metrics_are_summed_over_workers(tmp_path: Path) -> None:
    server = CloudProcess(
        f"sqlite:///{tmp_path / 'r.db'}",
        tmp_path,
        operator_token=OPERATOR,
        devices=DEVICES,
        workers=2,
        env={
            "EDGEDRIFT_CLOUD_TRAINING_PROCESSES": "false",
            "EDGEDRIFT_CLOUD_RECOMPUTE_BUDGET_PER_MINUTE": "7",
        },
    ).start()
    try:
        window = {"task": "regression", "learner": "ridge", "X": [[1.0], [2.0], [3.0]], "y": [1.0, 2.0, 3.0]}
        headers = {"Authorization": f"Bearer {DEVICES['dev-a']}"}
        assert (
            httpx.post(f"{server.url}/v1/devices/dev-a/models", json=window, headers=headers).status_code
            == 201
        )
        seen = []
        for _ in range(6):
            with httpx.Client(base_url=server.url, timeout=10) as c:  # a new connection: any worker
                for _ in range(20):
                    assert c.get("/healthz").status_code == 200
            with httpx.Client(base_url=server.url, timeout=10) as c:
                text = c.get("/metrics").text
            seen.append(healthz_count(text))
        assert seen == sorted(seen), seen
        assert seen[-1] >= 120, seen
        assert "edgedrift_recompute_budget_per_minute 7.0" in text
        assert 'edgedrift_recomputes_total{learner="ridge",reason="manual"} 1.0' in text
        assert 'device="' not in text, "per-device series are opt-in (a bounded scrape)"
        assert "edgedrift_recompute_admitted_total 1.0" in text
    finally:
        server.stop()
