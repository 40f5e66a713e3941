"""The per-device labeled history and re-tuning recomputes (issue 15, items 1 and 2) against a real
uvicorn server on SQLite and PostgreSQL, with the real training pool: batches are stored once per batch
id, bounded in chunks, counted in ``bytes_in``; a re-tuning recompute answers what the evaluator's
in-process search answers on the same labels."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import sqlalchemy as sa
from support.cloud import DEVICES, CloudServer

from edgedrift.models.document import model_from_document
from edgedrift.strategies.channel import EdgeTune, TuneChannel
from edgedrift.strategies.retuned import EDGE_GRIDS
from edgedrift.training.linear import LinearTrainer
from edgedrift.training.retune import HistoryRetuner
from edgedrift.wire import WINDOW_CONTENT_TYPE, LearnerParams, RetuneRequest, WindowHeader, encode_window
from edgedrift_harness.postgres import fresh_database

pytestmark = pytest.mark.kernel_agnostic

A, B = DEVICES["dev-a"], DEVICES["dev-b"]
CAPACITY = 1500
C = 2.0


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudServer]:
    workdir = tmp_path_factory.mktemp("history")
    if request.param == "sqlite":
        with _started(f"sqlite:///{workdir / 'registry.db'}", workdir) as server:
            yield server
        return
    admin = request.getfixturevalue("postgres_admin_url")
    with fresh_database(admin) as url, _started(url, workdir) as server:
        yield server


@contextlib.contextmanager
def _started(url: str, workdir: Path) -> Iterator[CloudServer]:
    server = CloudServer(url, workdir, EDGEDRIFT_CLOUD_HISTORY_LABELS=str(CAPACITY)).start()
    try:
        yield server
    finally:
        server.stop()


def labeled(n: int, seed: int, d: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    flip = np.arange(n) >= n // 2  # the concept turns half-way: the search has something to find
    y = np.where((X[:, 0] + np.where(flip, -1.0, 1.0) * X[:, 1]) > 0, 1.0, -1.0)
    return X, y


def batch(batch_id: str | None, X: np.ndarray, y: np.ndarray) -> bytes:
    header = WindowHeader(task="classification", learner="logistic", request_id=batch_id)
    return encode_window(header, X, y, dtype="float64")


def post(server: CloudServer, device: str, token: str | None, body: bytes) -> httpx.Response:
    with server.client(token) as c:
        return c.post(
            f"/v1/devices/{device}/history", content=body, headers={"Content-Type": WINDOW_CONTENT_TYPE}
        )


def chunk_rows(server: CloudServer, device: str) -> int:
    engine = sa.create_engine(server.database_url)
    try:
        with engine.connect() as conn:
            query = sa.text("SELECT COUNT(*) FROM history_chunks WHERE device_id = :d")
            return int(conn.execute(query, {"d": device}).scalar_one())
    finally:
        engine.dispose()


def test_a_batch_is_stored_once_per_batch_id_and_counted_in_bytes_in(server: CloudServer) -> None:
    X, y = labeled(100, 1)
    body = batch("t1-0", X, y)
    before = int(server.counters("dev-a")["bytes_in"])
    first = post(server, "dev-a", A, body)
    again = post(server, "dev-a", A, body)
    assert first.status_code == 201 and first.json()["n"] == 100 and not first.json()["replayed"]
    assert again.status_code == 200 and again.json()["replayed"]
    assert again.json()["labels"] == first.json()["labels"], "a retried batch must not add labels"
    assert int(server.counters("dev-a")["bytes_in"]) == before + len(body)


def test_refusals_name_their_reason(server: CloudServer) -> None:
    X, y = labeled(20, 2)
    assert post(server, "dev-a", A, batch("t2-0", X, y)).status_code == 201
    reused = post(server, "dev-a", A, batch("t2-0", X, -y))
    assert reused.status_code == 409 and reused.json()["reason"] == "batch_id_reused"
    missing = post(server, "dev-a", A, batch(None, X, y))
    assert missing.status_code == 422 and missing.json()["reason"] == "batch_id_missing"
    assert post(server, "dev-a", None, batch("t2-1", X, y)).status_code == 401
    assert post(server, "dev-a", B, batch("t2-1", X, y)).status_code == 403, "another device's history"
    with server.client(A) as c:
        wrong = c.post("/v1/devices/dev-a/history", content=b"{}", headers={"Content-Type": "text/plain"})
    assert wrong.status_code == 415


def test_the_history_is_bounded_in_chunks(server: CloudServer) -> None:
    for k in range(30):
        X, y = labeled(100, 100 + k)
        reply = post(server, "dev-b", B, batch(f"t3-{k}", X, y))
        assert reply.status_code == 201, reply.text
    assert reply.json()["labels"] == CAPACITY
    assert chunk_rows(server, "dev-b") == CAPACITY // 100, "one row per batch, the oldest deleted"


def test_a_retuning_recompute_equals_the_evaluators_search(server: CloudServer) -> None:
    """Same labels in the history, same window, same C: the same model, window length and parameters."""
    Xh, yh = labeled(1400, 7)
    device, secret = "dev-retune", "secret-of-the-retune-device-01"
    server.register(device, secret)  # a device of its own: its history holds exactly these labels
    for k in range(0, 1400, 200):
        assert (
            post(server, device, secret, batch(f"r-{k}", Xh[k : k + 200], yh[k : k + 200])).status_code == 201
        )
    Xw, yw = Xh[-200:], yh[-200:]
    header = WindowHeader(
        task="classification",
        learner="logistic",
        params=LearnerParams(C=C),
        reason="drift",
        request_id="retune-1",
        retune=RetuneRequest(learner="newton", window_labels=200),
    )
    with server.client(secret) as c:
        body = encode_window(header, Xw, yw, dtype="float64")
        reply = c.post(
            f"/v1/devices/{device}/models", content=body, headers={"Content-Type": WINDOW_CONTENT_TYPE}
        )
        replay = c.post(
            f"/v1/devices/{device}/models", content=body, headers={"Content-Type": WINDOW_CONTENT_TYPE}
        )
    assert reply.status_code == 201, reply.text
    edge = EdgeTune.from_document(reply.json()["edge"])

    channel = TuneChannel(3)
    channel.record_many(Xh, yh)
    offline = HistoryRetuner(
        channel, "newton", LinearTrainer("logistic").with_C(C), "logistic", "classification"
    )
    model = offline(Xw, yw)
    expected = channel.take()
    assert expected is not None
    assert (
        edge.params == expected.params and edge.window == expected.window and edge.anchor == expected.anchor
    )
    assert set(edge.params) == set(EDGE_GRIDS["newton"])
    deployed = model_from_document(reply.json()["model"])
    assert np.array_equal(deployed.predict(Xh), model.predict(Xh))
    assert replay.status_code == 200 and replay.json()["edge"] == reply.json()["edge"], (
        "stored with the version"
    )

    # The edge names its parameters now: the search keeps them unless the best is clearly better, as offline.
    current = {"scale_alpha": 0.01, "forgetting": 0.95, "prior": 0.1}
    assert current != expected.params
    header = header.model_copy(
        update={"request_id": "retune-2", "retune": RetuneRequest(learner="newton", current=current)}
    )
    with server.client(secret) as c:
        body = encode_window(header, Xw, yw, dtype="float64")
        kept = c.post(
            f"/v1/devices/{device}/models", content=body, headers={"Content-Type": WINDOW_CONTENT_TYPE}
        )
    assert kept.status_code == 201, kept.text
    channel.current = current
    offline(Xw, yw)
    assert EdgeTune.from_document(kept.json()["edge"]).params == current == channel.take().params  # type: ignore[union-attr]


def test_retune_current_parameters_must_be_finite_numbers(server: CloudServer) -> None:
    X, y = labeled(50, 3)
    for current in ({"prior": "0.1"}, {"prior": True}, {f"p{i}": 0.1 for i in range(9)}, {"bad name!": 0.1}):
        header = {
            "task": "classification",
            "learner": "logistic",
            "params": {"C": 1.0},
            "retune": {"learner": "newton", "current": current},
            "X": X.tolist(),
            "y": y.tolist(),
        }
        with server.client(A) as c:
            reply = c.post("/v1/devices/dev-a/models", json=header)
        assert reply.status_code == 422, reply.text
        assert "current" in reply.text


def test_retune_needs_a_fixed_C_and_a_linear_learner(server: CloudServer) -> None:
    X, y = labeled(50, 3)
    for params, learner in ((LearnerParams(C="auto"), "logistic"), (LearnerParams(), "shrub")):
        header = {
            "task": "classification",
            "learner": learner,
            "params": params.model_dump(mode="json"),
            "retune": {"learner": "newton"},
            "X": X.tolist(),
            "y": y.tolist(),
        }
        with server.client(A) as c:
            reply = c.post("/v1/devices/dev-a/models", json=header)
        assert reply.status_code == 422, reply.text
