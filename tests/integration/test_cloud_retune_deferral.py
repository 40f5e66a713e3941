"""A re-tuning recompute under load (issue 15 with issue 12's admission control): while trainings wait in
the worker's queue, the cloud answers a plain recompute at once (``edge`` null, counted) instead of
running a search of seconds, and re-tunes again once the queue is empty."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from edgedrift.wire import WINDOW_CONTENT_TYPE, LearnerParams, RetuneRequest, WindowHeader, encode_window
from edgedrift_cloud.main import create_app
from edgedrift_cloud.settings import CloudSettings

pytestmark = pytest.mark.kernel_agnostic

OPERATOR = "deferral-operator-token-0123456789"
SECRET = "deferral-device-secret-0123456789"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = CloudSettings(
        database_url=f"sqlite:///{tmp_path / 'registry.db'}",
        operator_token=SecretStr(OPERATOR),
        mode="development",
        training_processes=False,
        training_slots=1,
        retune_max_queued=0,
    )
    with TestClient(create_app(settings, configure_logs=False)) as c:
        op = {"Authorization": f"Bearer {OPERATOR}"}
        assert c.put("/v1/devices/dev-r", json={"secret": SECRET}, headers=op).status_code in (200, 201)
        yield c


def window(request_id: str) -> bytes:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 3))
    y = np.where(X[:, 0] - X[:, 1] > 0, 1.0, -1.0)
    header = WindowHeader(
        task="classification",
        learner="logistic",
        params=LearnerParams(C=2.0),
        reason="drift",
        request_id=request_id,
        retune=RetuneRequest(learner="newton", window_labels=100),
    )
    return encode_window(header, X, y)


def train(c: TestClient, request_id: str) -> dict[str, object]:
    r = c.post(
        "/v1/devices/dev-r/models",
        content=window(request_id),
        headers={"Authorization": f"Bearer {SECRET}", "Content-Type": WINDOW_CONTENT_TYPE},
    )
    assert r.status_code == 201, r.text
    body: dict[str, object] = r.json()
    return body


def deferred_total(c: TestClient) -> float:
    for line in c.get("/metrics").text.splitlines():
        if line.startswith("edgedrift_retune_deferred_total"):
            return float(line.split()[-1])
    raise AssertionError("edgedrift_retune_deferred_total is not exported")


def test_a_queue_defers_the_search_and_an_empty_queue_runs_it(client: TestClient) -> None:
    pool = client.app.state.edgedrift.trainings  # type: ignore[attr-defined]
    assert train(client, "calm-1")["edge"] is not None and deferred_total(client) == 0.0

    pool.pending += 2  # two other requests hold the slot and the head of the queue
    try:
        busy = train(client, "busy-1")
    finally:
        pool.pending -= 2
    assert busy["edge"] is None and busy["version"] == 2 and deferred_total(client) == 1.0

    again = train(client, "calm-2")
    assert again["edge"] is not None and again["version"] == 3 and deferred_total(client) == 1.0
