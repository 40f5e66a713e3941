"""Issue 12, row 9: one device posting 4000x1000 windows with ``C="auto"`` (tens of CPU seconds each)
is refused before any training by the per-request cost cap (rows x d x grid, 422 ``cost_cap``), and a
device over its per-device rate (on by default) gets 429 ``budget_device`` with Retry-After while
another device is unaffected; against a real server on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from support.cloud import DEVICES, CloudServer

from edgedrift.wire import WINDOW_CONTENT_TYPE, WindowHeader, encode_window
from edgedrift_cloud import budget, pricing
from edgedrift_cloud.settings import CloudSettings, load_settings
from edgedrift_harness.postgres import fresh_database

A = DEVICES["dev-a"]
DEFAULTS = CloudSettings.model_fields


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudServer]:
    """One server per backend with the default cost cap and per-device rate."""
    workdir = tmp_path_factory.mktemp("quota")
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{workdir / 'registry.db'}"
        else:
            url = stack.enter_context(fresh_database(request.getfixturevalue("postgres_admin_url")))
        cloud = CloudServer(url, workdir, EDGEDRIFT_CLOUD_TRAINING_PROCESSES="false").start()
        stack.callback(cloud.stop)
        yield cloud


def binary_window(n: int, d: int, seed: int = 0, **header: Any) -> bytes:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    meta = WindowHeader.model_validate({"task": "classification", "learner": "logistic", **header})
    return encode_window(meta, X, y)


def post(server: CloudServer, device: str, secret: str, body: bytes) -> httpx.Response:
    with server.client(secret) as c:
        return c.post(
            f"/v1/devices/{device}/models", content=body, headers={"Content-Type": WINDOW_CONTENT_TYPE}
        )


def rejected(server: CloudServer, reason: str) -> float:
    text = httpx.get(server.url + "/metrics", timeout=30).text
    pattern = rf'^edgedrift_recompute_rejected_total\{{reason="{reason}"\}} (\S+)$'
    return sum(float(v) for v in re.findall(pattern, text, re.M))


def test_the_4000x1000_c_auto_window_is_refused_fast_and_nothing_is_stored(server: CloudServer) -> None:
    before = server.counters("dev-a")
    counted = rejected(server, "cost_cap")
    body = binary_window(4000, 1000, params={"C": "auto"})
    start = time.monotonic()
    r = post(server, "dev-a", A, body)
    elapsed = time.monotonic() - start
    assert r.status_code == 422, r.text
    assert r.json()["reason"] == "cost_cap"
    cost = pricing.train_cost(WindowHeader.model_validate({"task": "classification", "learner": "logistic",
                                                          "params": {"C": "auto"}}), 4000, 1000)  # fmt: skip
    assert cost.grid == 45 and cost.cost == 180_000_000
    cap = DEFAULTS["max_train_cost"].default
    assert f"cost {cost.cost} above the cap {cap}" in r.json()["detail"]
    assert elapsed < 5.0, f"refused after {elapsed:.1f} s: it trained first"
    after = server.counters("dev-a")
    assert (after["recomputes"], after["latest_version"]) == (before["recomputes"], before["latest_version"])
    assert rejected(server, "cost_cap") == counted + 1


def test_windows_under_the_cap_train(server: CloudServer) -> None:
    """A C="auto" window under the cap, and a single fit far larger than a C="auto" one may be."""
    before = server.counters("dev-a")["recomputes"]
    tuned = post(server, "dev-a", A, binary_window(1000, 20, params={"C": "auto"}))
    assert tuned.status_code == 201, tuned.text
    single = post(server, "dev-a", A, binary_window(20_000, 100, params={"C": 1.0}))
    assert single.status_code == 201, single.text
    assert server.counters("dev-a")["recomputes"] == before + 2


def wait_for_a_fresh_minute(needed_s: float = 20.0) -> None:
    """Start a rate test early in a minute, so that it does not straddle two per-minute budgets."""
    if 60.0 - time.time() % 60.0 < needed_s:
        time.sleep(60.0 - time.time() % 60.0 + 0.2)


def test_a_device_over_its_default_rate_gets_429_and_another_is_unaffected(server: CloudServer) -> None:
    per_minute = DEFAULTS["recompute_budget_per_device_per_minute"].default
    assert per_minute is not None, "a per-device rate limit is on by default"
    allowed = budget.allowed(per_minute, 0.0)  # "manual": no drift evidence
    noisy, quiet = (
        ("quota-noisy", "secret-of-quota-noisy-0123456"),
        ("quota-quiet", "secret-of-quota-quiet-012345"),
    )
    for device, secret in (noisy, quiet):
        server.register(device, secret)
    small = binary_window(200, 5)
    wait_for_a_fresh_minute()
    codes = [post(server, *noisy, small).status_code for _ in range(allowed)]
    assert codes == [201] * allowed
    refused = post(server, *noisy, small)
    assert refused.status_code == 429, refused.text
    assert refused.json()["reason"] == "budget_device"
    assert 1 <= int(refused.headers["Retry-After"]) <= 120
    assert server.counters(noisy[0])["recomputes"] == allowed
    assert post(server, *quiet, small).status_code == 201, "another device is unaffected"
    assert server.counters(quiet[0])["recomputes"] == 1


def test_the_per_device_rate_can_be_lifted() -> None:
    unlimited = load_settings(mode="development", recompute_budget_per_device_per_minute="unlimited")
    assert unlimited.recompute_budget_per_device_per_minute is None
    assert load_settings(mode="development").recompute_budget_per_device_per_minute == 30
