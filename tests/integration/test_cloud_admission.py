"""Admission control and the fleet recompute budget on real servers (issue 12, items 1, 2 and 4): a full
training queue answers 429 + Retry-After while /healthz stays up, a client that leaves is no error and
its queued training never runs, the per-minute budget is honoured with priority to drift evidence, and
two ``serve`` processes sharing one PostgreSQL behave as one service."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from support.cloud import DEVICES, OPERATOR, CloudServer

from edgedrift.wire import WINDOW_CONTENT_TYPE, LearnerParams, WindowHeader, encode_window
from edgedrift_cloud.budget import REPEAT_SHARE
from edgedrift_harness.postgres import fresh_database
from edgedrift_harness.proc import process_tree

A, B = DEVICES["dev-a"], DEVICES["dev-b"]


def window(n: int, d: int, seed: int, **extra: Any) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    return {"task": "classification", "learner": "logistic", "X": X.tolist(), "y": y.tolist(), **extra}


#: A window that keeps a training slot busy for a while (C tuned by 5-fold cross-validation).
SLOW = window(3000, 60, 0, params={"C": "auto"}, rebalance="select")


def metric(server: CloudServer, name: str) -> float:
    text = httpx.get(server.url + "/metrics", timeout=30).text
    values = [float(v) for v in re.findall(rf"^{re.escape(name)} (\S+)$", text, re.M)]
    return sum(values)


@pytest.fixture
def one_slot(tmp_path: Path) -> Iterator[CloudServer]:
    """A server with one training process and a queue of one."""
    server = CloudServer(
        f"sqlite:///{tmp_path / 'registry.db'}",
        tmp_path,
        EDGEDRIFT_CLOUD_TRAINING_SLOTS="1",
        EDGEDRIFT_CLOUD_TRAINING_QUEUE="1",
        EDGEDRIFT_CLOUD_MAX_TRAIN_COST=str(10**12),  # the long training below is above the default cap
        # Six large bodies of one device at once: the queue, not the per-credential body limit, refuses.
        EDGEDRIFT_CLOUD_LARGE_BODIES_PER_CLIENT="8",
    ).start()
    try:
        yield server
    finally:
        server.stop()


def test_a_full_queue_answers_429_with_retry_after_and_health_stays_up(one_slot: CloudServer) -> None:
    def post(i: int) -> httpx.Response:
        with one_slot.client(A) as c:
            return c.post("/v1/devices/dev-a/models", json=SLOW | {"request_id": f"slow-{i}"})

    with ThreadPoolExecutor(6) as pool:
        replies = list(pool.map(post, range(6)))
        health = httpx.get(one_slot.url + "/healthz", timeout=10)
    codes = sorted(r.status_code for r in replies)
    assert health.status_code == 200
    assert codes.count(201) >= 1 and codes.count(429) >= 1 and set(codes) <= {201, 429}, codes
    refused = next(r for r in replies if r.status_code == 429)
    assert int(refused.headers["Retry-After"]) >= 1 and refused.json()["reason"] == "queue_full"
    assert metric(one_slot, 'edgedrift_recompute_rejected_total{reason="queue_full"}') == codes.count(429)
    assert one_slot.counters("dev-a")["recomputes"] == codes.count(201)


def long_training() -> bytes:
    """A binary window whose training holds a slot for seconds even on an idle machine (C tuned by
    cross-validation with the rebalancing selection on 20,000 x 60), far longer than the leaving
    client's wait plus the server's disconnect poll."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(20_000, 60))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=len(X)) > 0, 1.0, -1.0)
    header = WindowHeader(
        task="classification",
        learner="logistic",
        params=LearnerParams(C="auto"),
        rebalance="select",
        request_id="stays",
    )
    return encode_window(header, X, y)


def test_a_client_that_leaves_is_no_error_and_its_queued_training_never_runs(one_slot: CloudServer) -> None:
    body = long_training()
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(
            lambda: one_slot.client(A).post(
                "/v1/devices/dev-a/models", content=body, headers={"Content-Type": WINDOW_CONTENT_TYPE}
            )
        )
        # the first holds the one slot (admitted: it is handed to the pool next); the second queues
        # behind it and leaves after 0.5 s
        deadline = time.monotonic() + 60
        while metric(one_slot, "edgedrift_recompute_admitted_total") < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert metric(one_slot, "edgedrift_recompute_admitted_total") >= 1, first.result().text
        time.sleep(0.1)
        with pytest.raises(httpx.TimeoutException), httpx.Client(base_url=one_slot.url, timeout=0.5) as c:
            c.post(
                "/v1/devices/dev-a/models",
                json=window(200, 5, 2, request_id="leaves"),
                headers={"Authorization": f"Bearer {A}"},
            )
        assert first.result().status_code == 201
    time.sleep(1.0)
    with one_slot.client(A) as c:
        stored = [m["version"] for m in c.get("/v1/devices/dev-a/models").json()]
    assert stored == [1], "the abandoned request was trained and stored"
    logs = one_slot.logs()
    assert "Traceback" not in logs and "ClientDisconnect" not in logs
    assert '"status": 499' in logs


def budget_server(url: str, workdir: Path, fleet: int, per_device: int | None = None) -> CloudServer:
    env = {"EDGEDRIFT_CLOUD_RECOMPUTE_BUDGET_PER_MINUTE": str(fleet)}
    if per_device is not None:
        env["EDGEDRIFT_CLOUD_RECOMPUTE_BUDGET_PER_DEVICE_PER_MINUTE"] = str(per_device)
    return CloudServer(url, workdir, EDGEDRIFT_CLOUD_TRAINING_PROCESSES="false", **env)


def wait_for_a_fresh_minute(needed_s: float = 25.0) -> None:
    """Start a budget test early in a minute, so it does not straddle two budgets."""
    if 60.0 - time.time() % 60.0 < needed_s:
        time.sleep(60.0 - time.time() % 60.0 + 0.2)


def drift(seed: int, evidence: float) -> dict[str, Any]:
    return window(100, 4, seed, reason="drift", monitor={"evidence": evidence})


def test_the_budget_per_minute_with_priority_to_drift_evidence(tmp_path: Path) -> None:
    server = budget_server(f"sqlite:///{tmp_path / 'r.db'}", tmp_path, fleet=4, per_device=3).start()
    try:
        wait_for_a_fresh_minute()
        with server.client(A) as a, server.client(B) as b:

            def codes(client: httpx.Client, device: str, *bodies: dict[str, Any]) -> list[str]:
                replies = [client.post(f"/v1/devices/{device}/models", json=body) for body in bodies]
                return [str(r.status_code) if r.is_success else r.json()["reason"] for r in replies]

            def periodic(seed: int) -> dict[str, Any]:
                return window(100, 4, seed, reason="periodic")

            # Without drift evidence a request may fill half of each budget: 2 of 4, 1 of 3 per device.
            assert codes(a, "dev-a", periodic(0), periodic(1)) == ["201", "budget_device"]
            assert codes(b, "dev-b", periodic(2), periodic(3)) == ["201", "budget_device"]
            # A device's second recompute of the minute cannot buy the rest with its evidence...
            assert codes(a, "dev-a", drift(4, 3.0)) == ["budget_fleet"]
            # ...while a strong drift's first recompute may use all of it.
            others = {f"dev-{c}": f"secret-of-device-{c}-0123456789" for c in "cde"}
            for device, secret in others.items():
                server.register(device, secret)
            firsts = [server.client(secret) for secret in others.values()]
            replies = [
                c.post(f"/v1/devices/{device}/models", json=drift(5 + i, 3.0))
                for i, (c, device) in enumerate(zip(firsts, others, strict=True))
            ]
            assert [r.status_code for r in replies] == [201, 201, 429]
            over = replies[-1]
            assert over.json()["reason"] == "budget_fleet" and 1 <= int(over.headers["Retry-After"]) <= 120
            for c in firsts:
                c.close()
        assert metric(server, "edgedrift_recompute_budget_per_minute") == 4
        assert metric(server, 'edgedrift_recompute_rejected_total{reason="budget_fleet"}') == 2
        assert metric(server, 'edgedrift_recompute_rejected_total{reason="budget_device"}') == 2
        assert metric(server, "edgedrift_recompute_admitted_total") == 4
    finally:
        server.stop()


def test_a_failed_training_gives_its_budget_back(tmp_path: Path) -> None:
    """A window refused by the trainer itself (422) spends no recompute: the next one is admitted."""
    server = budget_server(f"sqlite:///{tmp_path / 'r.db'}", tmp_path, fleet=1, per_device=1).start()
    try:
        wait_for_a_fresh_minute()
        with server.client(A) as a:
            one_row = window(1, 4, 0, reason="drift", monitor={"evidence": 3.0}, params={"C": "auto"})
            failed = a.post("/v1/devices/dev-a/models", json=one_row)
            assert failed.status_code == 422 and "at least 2 rows" in failed.text, failed.text
            assert a.post("/v1/devices/dev-a/models", json=drift(1, 3.0)).status_code == 201
            over = a.post("/v1/devices/dev-a/models", json=drift(2, 3.0))
            assert over.status_code == 429 and over.json()["reason"] == "budget_device"
        assert metric(server, "edgedrift_recompute_admitted_total") == 2
    finally:
        server.stop()


def test_two_serve_processes_on_one_postgres_behave_as_one(postgres_admin_url: str, tmp_path: Path) -> None:
    """Item 4: versions contiguous, counters exact and the fleet budget honoured across both."""
    budget = 12
    with fresh_database(postgres_admin_url) as url:
        first = budget_server(url, tmp_path, fleet=budget).start()
        second = budget_server(url, tmp_path, fleet=budget).start()
        try:
            wait_for_a_fresh_minute(40.0)

            def post(i: int, device: str = "dev-a", secret: str = A) -> httpx.Response:
                server = (first, second)[i % 2]
                body = drift(i, 5.0) | {"request_id": f"r{i}"}
                with server.client(secret) as c:
                    return c.post(f"/v1/devices/{device}/models", json=body)

            # One device alone: its first and its repeats up to REPEAT_SHARE of the budget (3 of 12),
            # numbered contiguously across both servers.
            with ThreadPoolExecutor(8) as pool:
                replies = list(pool.map(post, range(10)))
            codes = [r.status_code for r in replies]
            own = round(budget * REPEAT_SHARE)
            assert codes.count(201) == own and codes.count(429) == 10 - own, codes
            versions = sorted(r.json()["version"] for r in replies if r.status_code == 201)
            assert versions == list(range(1, own + 1))
            # Then 30 devices' first recomputes fill the rest of the budget, and no more.
            fleet = {f"fair-{i:02d}": f"secret-of-fair-{i:02d}-0123456789" for i in range(30)}
            for device, secret in fleet.items():
                first.register(device, secret)
            with ThreadPoolExecutor(8) as pool:
                firsts = list(pool.map(post, range(10, 40), fleet, fleet.values()))
            codes = [r.status_code for r in firsts]
            assert codes.count(201) == budget - own and codes.count(429) == 30 - (budget - own), codes
            for server in (first, second):
                counters = server.counters("dev-a")
                assert counters["recomputes"] == own and counters["latest_version"] == own
                assert sum(server.counters(device)["recomputes"] for device in fleet) == budget - own
            with httpx.Client(base_url=first.url, headers={"Authorization": f"Bearer {OPERATOR}"}) as op:
                assert op.get("/v1/devices/dev-a/counters").json()["recomputes"] == own
        finally:
            first.stop()
            second.stop()


def test_the_training_pool_goes_when_its_server_is_killed(tmp_path: Path) -> None:
    """A server killed without a shutdown (SIGKILL, the OOM killer) leaves no training process behind:
    each exits once it sees its owner gone, and the fork server with them."""
    server = CloudServer(f"sqlite:///{tmp_path / 'r.db'}", tmp_path).start()
    try:
        with server.client(A) as c:
            assert c.post("/v1/devices/dev-a/models", json=window(100, 4, 0)).status_code == 201
        pool = [p for p in process_tree(server.pid) if p != server.pid]
        assert len(pool) >= 2, "no training processes under the server"  # the fork server and its workers
        os.kill(server.pid, signal.SIGKILL)
        assert server.proc is not None
        server.proc.wait(10)  # reaped, as an init system would
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pool):
            time.sleep(0.1)
        alive = [p for p in pool if Path(f"/proc/{p}").exists() and "Z" not in _state(p)]
        assert not alive, f"training processes outlived their server: {alive}"
    finally:
        server.stop()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return "Z"
