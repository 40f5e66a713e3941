"""Re-tuning jobs priced, cancelled and bounded (issue 28, rows 4 and 5), against a real uvicorn server on
PostgreSQL with its process pool: the cost cap prices the whole search over the history the job will
load, a job whose client is gone stops and frees its slot while the metrics show what runs, and the
history is bounded in bytes per device and fleet-wide and is loaded only by the running job."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import httpx
import numpy as np
import pytest
import sqlalchemy as sa
from support.cloud import DEVICES, CloudServer

from edgedrift.wire import WINDOW_CONTENT_TYPE, LearnerParams, RetuneRequest, WindowHeader, encode_window
from edgedrift_harness.postgres import fresh_database
from edgedrift_harness.proc import rss_mb

pytestmark = pytest.mark.kernel_agnostic

A, B = DEVICES["dev-a"], DEVICES["dev-b"]
BINARY = {"Content-Type": WINDOW_CONTENT_TYPE}


@contextlib.contextmanager
def pg_server(admin: str, workdir: Path, **env: str) -> Iterator[CloudServer]:
    with fresh_database(admin) as url:
        server = CloudServer(url, workdir, **env).start()
        try:
            yield server
        finally:
            server.stop()


def labeled(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)


def window(n: int, d: int, seed: int, retune: bool = True) -> bytes:
    header = WindowHeader(
        task="classification",
        learner="logistic",
        params=LearnerParams(C=1.0),
        reason="drift",
        retune=RetuneRequest(learner="newton", window_labels=200) if retune else None,
    )
    return encode_window(header, *labeled(n, d, seed))


def store_history(server: CloudServer, device: str, token: str, labels: int, d: int, per_batch: int) -> None:
    header = WindowHeader(task="classification", learner="logistic")
    with server.client(token) as c:
        for start in range(0, labels, per_batch):
            X, y = labeled(per_batch, d, start)
            body = encode_window(header.model_copy(update={"request_id": f"h{start}"}), X, y, dtype="float64")
            r = c.post(f"/v1/devices/{device}/history", content=body, headers=BINARY)
            assert r.status_code == 201, r.text


def metric(server: CloudServer, name: str) -> float:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)} (\S+)$", text, re.M))


def test_the_cap_prices_the_whole_search_over_the_stored_history(
    postgres_admin_url: str, tmp_path: Path
) -> None:
    """Row 4: a re-tuning request is priced on the search it runs (grid x history x d^2 for the
    second-order learner), on the history stored when it asks: refused before any work past the cap."""
    with (
        pg_server(postgres_admin_url, tmp_path, EDGEDRIFT_CLOUD_MAX_TRAIN_COST="3000000") as server,
        server.client(A) as a,
    ):
        small = a.post("/v1/devices/dev-a/models", content=window(200, 20, 0), headers=BINARY)
        assert small.status_code == 201 and small.json()["edge"] is not None, small.text
        store_history(server, "dev-a", A, 3000, 20, 300)
        start = time.monotonic()
        priced = a.post("/v1/devices/dev-a/models", content=window(200, 20, 1), headers=BINARY)
        assert priced.status_code == 422 and priced.json()["reason"] == "cost_cap", priced.text
        assert "re-tuning search over 3000 history labels" in priced.json()["detail"]
        plain = a.post("/v1/devices/dev-a/models", content=window(200, 20, 1, False), headers=BINARY)
        assert plain.status_code == 201, "the window alone is cheap"
        wide = a.post("/v1/devices/dev-a/models", content=window(2000, 256, 2), headers=BINARY)
        assert wide.status_code == 422 and wide.json()["reason"] == "cost_cap", wide.text
        assert time.monotonic() - start < 5.0, "refused without running the search"


@pytest.fixture(scope="module")
def one_slot(postgres_admin_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudServer]:
    """One training process, no cost cap to speak of, re-tuning searches not deferred under load."""
    workdir = tmp_path_factory.mktemp("one-slot")
    with pg_server(
        postgres_admin_url,
        workdir,
        EDGEDRIFT_CLOUD_TRAINING_SLOTS="1",
        EDGEDRIFT_CLOUD_MAX_TRAIN_COST=str(10**12),
        EDGEDRIFT_CLOUD_RETUNE_MAX_QUEUED="32",
    ) as server:
        yield server


def test_a_job_whose_client_left_stops_and_the_metrics_show_what_runs(one_slot: CloudServer) -> None:
    """Row 4: a fire-and-forget re-tune at 256 features no longer holds the only slot for its whole
    search (another device's tiny training waited 216 s behind two of them), and while it runs the
    metrics count it as running."""
    server = one_slot
    seen: list[float] = []

    def forget() -> None:
        with contextlib.suppress(httpx.TimeoutException), server.client(A) as a:
            a.post("/v1/devices/dev-a/models", content=window(2000, 256, 3), headers=BINARY, timeout=2.0)

    thread = threading.Thread(target=forget)
    thread.start()
    time.sleep(1.2)
    seen.append(metric(server, "edgedrift_trainings_in_flight"))
    thread.join()
    start = time.monotonic()
    with server.client(B) as b:
        r = b.post("/v1/devices/dev-b/models", content=window(100, 4, 4, False), headers=BINARY)
    waited = time.monotonic() - start
    assert r.status_code == 201, r.text
    assert seen == [1.0], "the running re-tune is shown as running"
    assert waited < 4.0, f"another device's training waited {waited:.1f} s behind a cancelled job"
    assert metric(server, "edgedrift_trainings_in_flight") == 0


def stored_bytes(server: CloudServer, device: str) -> int:
    engine = sa.create_engine(server.database_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            query = sa.text(
                "SELECT COALESCE(SUM(n * (d + 1) * 8), 0) FROM history_chunks WHERE device_id = :d"
            )
            return int(conn.execute(query, {"d": device}).scalar_one())
    finally:
        engine.dispose()


def test_history_is_bounded_in_bytes_per_device_and_fleet_wide(
    postgres_admin_url: str, tmp_path: Path
) -> None:
    """Row 5: a device keeps its newest labels within its bytes; a batch above them is a 413, and one
    that would grow the fleet's history past its limit a 429, while a device that replaces its own
    oldest labels is never refused."""
    with pg_server(
        postgres_admin_url,
        tmp_path,
        EDGEDRIFT_CLOUD_HISTORY_BYTES_PER_DEVICE="24000",  # 500 labels at d = 5
        EDGEDRIFT_CLOUD_HISTORY_BYTES_TOTAL="40000",
    ) as server:
        store_history(server, "dev-a", A, 800, 5, 100)
        assert stored_bytes(server, "dev-a") == 24000
        header = WindowHeader(task="classification", learner="logistic", request_id="big")
        with server.client(A) as a:
            big = encode_window(header, *labeled(600, 5, 9), dtype="float64")
            r = a.post("/v1/devices/dev-a/history", content=big, headers=BINARY)
            assert r.status_code == 413 and r.json()["reason"] == "history_too_large", r.text
        store_history(server, "dev-b", B, 300, 5, 100)
        with server.client(B) as b:
            more = encode_window(
                header.model_copy(update={"request_id": "b4"}), *labeled(100, 5, 8), dtype="float64"
            )
            r = b.post("/v1/devices/dev-b/history", content=more, headers=BINARY)
            assert r.status_code == 429 and r.json()["reason"] == "history_fleet_full", r.text
            assert int(r.headers["Retry-After"]) > 0
        store_history(server, "dev-a", A, 200, 5, 100)  # replaces its own oldest: no growth
        assert stored_bytes(server, "dev-a") == 24000 and stored_bytes(server, "dev-b") == 14400


def seed_history(server: CloudServer, device: str, labels: int, d: int, per_chunk: int) -> None:
    """Store a device's history straight into its table (as many uploads would)."""
    engine = sa.create_engine(server.database_url.replace("postgresql://", "postgresql+psycopg://", 1))
    rows = []
    for start in range(0, labels, per_chunk):
        X, y = labeled(per_chunk, d, start)
        data = np.ascontiguousarray(X, "<f8").tobytes() + np.ascontiguousarray(y, "<f8").tobytes()
        rows.append({"device_id": device, "batch_id": f"s{start}", "n": per_chunk, "d": d, "data": data})
    query = sa.text(
        "INSERT INTO history_chunks (device_id, batch_id, n, d, data, created_at) "
        "VALUES (:device_id, :batch_id, :n, :d, :data, now())"
    )
    try:
        with engine.begin() as conn:
            conn.execute(query, rows)
    finally:
        engine.dispose()


def test_waiting_retunes_hold_no_history_in_the_service(one_slot: CloudServer) -> None:
    """Row 5: requests waiting for the training slot hold no copy of the device's history (each loaded
    its 10 MB, and more, before a slot was free); the running job loads it in the pool's process."""
    server = one_slot
    seed_history(server, "dev-b", 12_000, 100, 500)
    baseline = rss_mb(server.pid)
    peak, waiting = [baseline], [0.0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mb(server.pid))
            waiting[0] = max(waiting[0], metric(server, "edgedrift_trainings_queued"))
            time.sleep(0.1)

    def retune(i: int) -> None:
        with contextlib.suppress(httpx.TimeoutException), server.client(B) as b:
            b.post("/v1/devices/dev-b/models", content=window(200, 100, 10 + i), headers=BINARY, timeout=5)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(retune, range(8)))
    finally:
        stop.set()
        watcher.join()
    assert waiting[0] >= 3, "the requests waited for the slot"
    assert peak[0] - baseline < 40, f"the service grew by {peak[0] - baseline:.0f} MB"


@pytest.mark.parametrize(("learner", "d"), [("newton", 5), ("newton", 54), ("rmsprop", 54)])
def test_honest_retunes_fit_the_default_cap(learner: Literal["newton", "rmsprop"], d: int) -> None:
    """The agents' own re-tuning recomputes (a 200-label window, a full 20,000-label history) stay
    well under the default cap."""
    from edgedrift_cloud import pricing
    from edgedrift_cloud.settings import CloudSettings

    header = WindowHeader(
        task="classification", learner="logistic", retune=RetuneRequest(learner=learner, window_labels=200)
    )
    cap = CloudSettings.model_fields["max_train_cost"].default
    assert pricing.train_cost(header, 200, d, 20_000).cost < cap / 2
    if learner == "newton":  # O(d^2): the 256 features are far above it
        assert pricing.train_cost(header, 200, 256, 20_000).cost > 2 * cap
