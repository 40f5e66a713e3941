"""The recompute budget's priority cannot be bought (issue 28, row 12), on a real server on PostgreSQL:
a device reporting ``monitor.evidence = 2`` with reason "manual" under a fleet budget of 10 a minute
gets its first recompute and a quarter of the budget, not all of it, and a genuinely drifting device is
still admitted."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from support.cloud import DEVICES, CloudServer

from edgedrift_harness.postgres import fresh_database

A, B = DEVICES["dev-a"], DEVICES["dev-b"]


def window(seed: int, **header: object) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(60, 3))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    return {"task": "classification", "learner": "logistic", "X": X.tolist(), "y": y.tolist(), **header}


def test_self_reported_evidence_cannot_take_the_fleet_budget(postgres_admin_url: str, tmp_path: Path) -> None:
    budget = 10
    with fresh_database(postgres_admin_url) as url:
        server = CloudServer(
            url,
            tmp_path,
            EDGEDRIFT_CLOUD_TRAINING_PROCESSES="false",
            EDGEDRIFT_CLOUD_RECOMPUTE_BUDGET_PER_MINUTE=str(budget),
        ).start()
        try:
            if 60.0 - time.time() % 60.0 < 20.0:  # within one minute's budget
                time.sleep(60.0 - time.time() % 60.0 + 0.2)
            loud = {"reason": "manual", "monitor": {"evidence": 2}}
            with server.client(A) as a:
                codes = [
                    a.post("/v1/devices/dev-a/models", json=window(i, **loud)).status_code for i in range(12)
                ]
            assert codes.count(201) == 2, codes  # its first, then repeats up to a quarter (2.5)
            with server.client(B) as b:
                drifting = b.post("/v1/devices/dev-b/models", json=window(99, reason="drift"))
            assert drifting.status_code == 201, drifting.text
        finally:
            server.stop()
