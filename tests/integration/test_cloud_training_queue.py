"""Training on the job queue (issue 32 item 1), on real processes: a Redis of its own, the cloud
(``EDGEDRIFT_CLOUD_TRAINING=queue``) on PostgreSQL and ``edgedrift-cloud trainer-worker`` processes. A
job completes through the queue (at once, or after a 202 the edge client follows); a request id trains
and counts once however often it comes; a worker killed mid-job (SIGKILL) leaves its job to another and
the device gets exactly one version; a job whose client has gone, or that nobody polls, is cancelled
and frees its worker."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from support.cloud import DEVICES, CloudServer

from edgedrift.strategies.train_spec import TrainSpec
from edgedrift.wire import WINDOW_CONTENT_TYPE, LearnerParams, RetuneRequest, WindowHeader, encode_window
from edgedrift_cloud.job_queue import Keys, job_id
from edgedrift_edge.cloud.client import CloudClient
from edgedrift_edge.session.trainer import RecomputeFailure, RecomputeRequest
from edgedrift_harness.cloud import TrainerWorkerProcess
from edgedrift_harness.postgres import fresh_database
from edgedrift_harness.redis_server import RedisServer, redis_available

pytestmark = [
    pytest.mark.kernel_agnostic,
    pytest.mark.skipif(not redis_available(), reason="needs redis-server (apt-get install redis-server)"),
]

A, B = DEVICES["dev-a"], DEVICES["dev-b"]
BINARY = {"Content-Type": WINDOW_CONTENT_TYPE}
#: How long a training request waits for its job, and how long a job lives without a poll.
WAIT_S, POLL_DEADLINE_S = 1.5, 4.0
#: Worker settings shared by every worker of the module: a dead worker is noticed after 2 s.
WORKER_ENV = {"EDGEDRIFT_CLOUD_JOBS_HEARTBEAT_TIMEOUT_S": "2", "EDGEDRIFT_CLOUD_TRAINING_NICE": "0"}


class Queue:
    """The module's Redis, cloud and first worker."""

    def __init__(self, redis: RedisServer, server: CloudServer, workdir: Path) -> None:
        self.redis, self.server, self.workdir = redis, server, workdir
        self.workers = [self.worker()]

    def worker(self) -> TrainerWorkerProcess:
        worker = TrainerWorkerProcess(self.server.database_url, self.redis.url, self.workdir, WORKER_ENV)
        return worker.start(timeout=180)

    def job(self, device: str, request_id: str) -> dict[str, str]:
        import redis

        client: Any = redis.Redis.from_url(self.redis.url)
        try:
            fields: dict[bytes, bytes] = client.hgetall(Keys("edgedrift").job(device, job_id(request_id)))
        finally:
            client.close()
        return {k.decode(): v.decode(errors="replace") for k, v in fields.items() if k != b"window"}

    def wait_state(self, device: str, request_id: str, states: set[str], timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.job(device, request_id).get("state", "")
            if state in states:
                return state
            time.sleep(0.1)
        raise AssertionError(
            f"job {request_id} not in {states} within {timeout} s: {self.job(device, request_id)}"
        )


@pytest.fixture(scope="module")
def queue(postgres_admin_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Queue]:
    workdir = tmp_path_factory.mktemp("training-queue")
    redis = RedisServer(workdir).start(timeout=60)
    env = {
        "EDGEDRIFT_CLOUD_TRAINING": "queue",
        "EDGEDRIFT_CLOUD_JOBS_REDIS_URL": redis.url,
        "EDGEDRIFT_CLOUD_JOBS_WAIT_S": str(WAIT_S),
        "EDGEDRIFT_CLOUD_JOBS_POLL_DEADLINE_S": str(POLL_DEADLINE_S),
        "EDGEDRIFT_CLOUD_MAX_TRAIN_COST": str(10**12),
        "EDGEDRIFT_CLOUD_RETUNE_MAX_QUEUED": "100",
        **WORKER_ENV,
    }
    try:
        with fresh_database(postgres_admin_url) as url:
            server = CloudServer(url, workdir, **env).start(timeout=180)
            queue = Queue(redis, server, workdir)
            try:
                yield queue
            finally:
                for worker in queue.workers:
                    worker.stop()
                server.stop()
    finally:
        redis.stop()


def labeled(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)


def header(request_id: str | None, retune: bool) -> WindowHeader:
    return WindowHeader(
        task="classification",
        learner="logistic",
        params=LearnerParams(C=1.0),
        reason="drift",
        request_id=request_id,
        retune=RetuneRequest(learner="newton", window_labels=200) if retune else None,
    )


def quick(request_id: str | None, seed: int = 0) -> bytes:
    """A plain recompute of milliseconds."""
    return encode_window(header(request_id, False), *labeled(200, 4, seed))


def slow(request_id: str, d: int = 128, seed: int = 1, n: int = 2000) -> bytes:
    """A re-tuning recompute of seconds of CPU (the search's replays are O(d^2) per step)."""
    return encode_window(header(request_id, True), *labeled(n, d, seed))


def versions(server: CloudServer, device: str) -> list[dict[str, Any]]:
    with server.client(server.operator_token) as op:
        r = op.get(f"/v1/devices/{device}/models")
        assert r.status_code == 200, r.text
        items = r.json()
        return list(items["items"] if isinstance(items, dict) else items)


def metric(server: CloudServer, name: str) -> float:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def poll(client: httpx.Client, first: httpx.Response) -> httpx.Response:
    """Follow a 202 to the job's answer."""
    r = first
    while r.status_code == 202:
        r = client.get(r.headers["Location"], timeout=30)
    return r


def test_a_quick_job_answers_with_its_model_and_a_repeat_trains_once(queue: Queue) -> None:
    """A job of milliseconds answers 201 within the request; the same request id again (after, and
    several at once) answers the same version, trains nothing and counts nothing more."""
    server = queue.server
    before = server.counters("dev-a")["recomputes"]
    admitted = metric(server, "edgedrift_recompute_admitted_total")
    with server.client(A) as a:
        first = a.post("/v1/devices/dev-a/models", content=quick("q-1"), headers=BINARY)
        assert first.status_code == 201, first.text
        assert first.json()["model"]["kind"] and first.json()["replayed"] is False
        again = a.post("/v1/devices/dev-a/models", content=quick("q-1"), headers=BINARY)
        assert again.status_code == 200 and again.json()["replayed"] is True, again.text
        assert again.json()["version"] == first.json()["version"]
        other = a.post("/v1/devices/dev-a/models", content=quick("q-1", seed=5), headers=BINARY)
        assert other.status_code == 409, "a request id reused with another window"

        def send(_: int) -> httpx.Response:
            with server.client(A) as c:
                return poll(
                    c, c.post("/v1/devices/dev-a/models", content=slow("q-2", 48, n=1000), headers=BINARY)
                )

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(send, range(4)))
    assert sorted(r.status_code for r in answers) in ([200, 200, 200, 201], [200, 200, 200, 200]), [
        r.text for r in answers
    ]
    assert len({r.json()["version"] for r in answers}) == 1
    assert queue.job("dev-a", "q-2")["attempts"] == "1", "one training for four requests"
    assert server.counters("dev-a")["recomputes"] == before + 2
    assert metric(server, "edgedrift_recompute_admitted_total") == admitted + 2


def test_the_edge_client_follows_a_202_to_its_model(queue: Queue) -> None:
    """A job longer than the request's wait answers 202 with the job to poll; the agent's cloud client
    follows it to the version (with a re-tuning search's edge parameters), counted once. A job queued
    behind the running one is the queue's depth in ``/metrics``."""
    server = queue.server
    before = server.counters("dev-b")["recomputes"]
    behind: list[httpx.Response] = []

    def queue_behind() -> None:
        with server.client(A) as a:
            behind.append(poll(a, a.post("/v1/devices/dev-a/models", content=quick("w-1"), headers=BINARY)))

    with server.client(B) as b:
        r = b.post("/v1/devices/dev-b/models", content=slow("s-1"), headers=BINARY)
        assert r.status_code == 202, r.text
        assert r.headers["Location"] == f"/v1/devices/dev-b/jobs/{job_id('s-1')}"
        assert r.json()["state"] in ("queued", "running")
        thread = threading.Thread(target=queue_behind)
        thread.start()
        queue.wait_state("dev-a", "w-1", {"queued"})
        waiting = metric(server, "edgedrift_training_jobs_waiting")
        done = poll(b, r)
        thread.join()
    assert waiting == 1, "the job behind the running one is the queue's depth"
    assert behind[0].status_code in (200, 201), behind[0].text
    assert done.status_code == 200 and done.json()["edge"] is not None, done.text
    X, y = labeled(2000, 128, 2)
    request = RecomputeRequest(
        request_id="s-2", X=X, y=y, task="classification", loss="logistic", C=1.0, reason="drift",
        spec=TrainSpec(), retune=RetuneRequest(learner="newton", window_labels=200),
    )  # fmt: skip
    failures: list[RecomputeFailure] = []
    client = CloudClient(server.url, timeout_s=10.0, deadline_s=120.0)
    try:
        model = client.submit("dev-b", B, request, failures.append).result(timeout=120)
    finally:
        client.close()
    assert model is not None and not failures, failures
    assert model.version == done.json()["version"] + 1 and model.edge is not None
    assert server.counters("dev-b")["recomputes"] == before + 2
    assert queue.job("dev-b", "s-2")["state"] == "done"
    assert metric(server, "edgedrift_training_jobs_waiting") == 0


def test_a_worker_killed_mid_job_leaves_it_to_another_and_one_version_is_stored(queue: Queue) -> None:
    """SIGKILL of the worker running a job: its message goes back on the queue once its heartbeat is
    2 s old, another worker runs it, the device gets exactly one version, counted once."""
    server = queue.server
    queue.workers.append(queue.worker())
    before = len(versions(server, "dev-a"))
    recomputes = server.counters("dev-a")["recomputes"]
    with server.client(A) as a:
        r = a.post("/v1/devices/dev-a/models", content=slow("k-1", d=160), headers=BINARY)
        assert r.status_code == 202, r.text
        queue.wait_state("dev-a", "k-1", {"running"})
        victim = int(queue.job("dev-a", "k-1")["worker"])
        dead = next(w for w in queue.workers if w.proc is not None and w.pid == victim)
        dead.kill()
        queue.workers.remove(dead)
        done = poll(a, a.get(r.headers["Location"], timeout=30))
    assert done.status_code == 200, done.text
    job = queue.job("dev-a", "k-1")
    assert job["attempts"] == "2" and int(job["worker"]) != victim, job
    assert len(versions(server, "dev-a")) == before + 1
    assert server.counters("dev-a")["recomputes"] == recomputes + 1
    with server.client(A) as a:
        again = a.post("/v1/devices/dev-a/models", content=slow("k-1", d=160), headers=BINARY)
    assert again.status_code == 200 and again.json()["version"] == done.json()["version"]


def test_a_job_whose_client_has_gone_is_cancelled_and_frees_its_worker(queue: Queue) -> None:
    """A client that hangs up while its job runs: the job stops at its next checkpoint, stores
    nothing and counts nothing; a job answered with 202 that nobody polls is cancelled after the poll
    deadline (a late poll gets 410). Either way the worker is free for the next job at once."""
    server = queue.server
    before = len(versions(server, "dev-b"))
    recomputes = server.counters("dev-b")["recomputes"]

    def hang_up() -> None:
        with server.client(B) as b, pytest.raises(httpx.TimeoutException):
            b.post("/v1/devices/dev-b/models", content=slow("c-1", d=256), headers=BINARY, timeout=1.0)

    thread = threading.Thread(target=hang_up)
    thread.start()
    thread.join()
    assert queue.wait_state("dev-b", "c-1", {"cancelled", "done"}, timeout=30) == "cancelled"
    with server.client(B) as b:
        r = b.post("/v1/devices/dev-b/models", content=slow("c-2", d=256), headers=BINARY)
        assert r.status_code == 202, r.text
        queue.wait_state("dev-b", "c-2", {"running"})
        started = time.monotonic()
        assert queue.wait_state("dev-b", "c-2", {"cancelled", "done"}, timeout=60) == "cancelled"
        assert time.monotonic() - started < POLL_DEADLINE_S + 10
        late = b.get(r.headers["Location"], timeout=30)
        assert late.status_code == 410 and late.json()["reason"] == "job_cancelled", late.text
        start = time.monotonic()
        r = b.post("/v1/devices/dev-b/models", content=quick("c-3"), headers=BINARY)
        assert r.status_code == 201, r.text
        assert time.monotonic() - start < WAIT_S, "the worker was free"
    assert len(versions(server, "dev-b")) == before + 1
    assert server.counters("dev-b")["recomputes"] == recomputes + 1


def test_without_its_redis_a_recompute_is_a_503_that_takes_no_budget(queue: Queue) -> None:
    """The queue's Redis down: a recompute is refused with 503 ``queue_unavailable`` and Retry-After
    (nothing queued, no budget taken, no version), ``/readyz`` says why; once Redis is back the same
    request trains (last in the module: it restarts the module's Redis)."""
    server = queue.server
    recomputes = server.counters("dev-a")["recomputes"]
    queue.redis.stop()
    try:
        with server.client(A) as a:
            r = a.post("/v1/devices/dev-a/models", content=quick("u-1"), headers=BINARY)
        assert r.status_code == 503 and r.json()["reason"] == "queue_unavailable", r.text
        assert int(r.headers["Retry-After"]) > 0
        ready = httpx.get(server.url + "/readyz", timeout=10)
        assert ready.status_code == 503 and "Redis" in ready.json()["detail"], ready.text
    finally:
        queue.redis.start(timeout=60)
    assert server.counters("dev-a")["recomputes"] == recomputes
    with server.client(A) as a:
        deadline = time.monotonic() + 60
        r = poll(a, a.post("/v1/devices/dev-a/models", content=quick("u-1"), headers=BINARY))
        while r.status_code == 503 and time.monotonic() < deadline:  # the worker reconnects
            time.sleep(1)
            r = poll(a, a.post("/v1/devices/dev-a/models", content=quick("u-1"), headers=BINARY))
    assert r.status_code in (200, 201), r.text
    assert server.counters("dev-a")["recomputes"] == recomputes + 1
