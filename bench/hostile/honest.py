"""The honest side of ``bench/hostile_device.py``: N devices as agents use the cloud, each from the
fleet's address with its own credential: a heartbeat every ``heartbeat_s``, a recompute on average every
``recompute_s`` (Poisson; a 200 x 5 binary window, reason ``drift``), half of the devices re-tuning
(``druid-tune``: the recompute carries ``retune``, and a 200-label history batch goes up every
``history_s``, as the agent forwards what it learned), plus the operator's fleet page every 5 s. Every
request is counted: 2xx, 429, other 4xx, 5xx, transport errors, and its latency."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from edgedrift.wire import WINDOW_CONTENT_TYPE, LearnerParams, RetuneRequest, WindowHeader, encode_window

#: The honest fleet's address (a NAT or a gateway host the unauthenticated client shares, row 10).
FLEET_ADDRESS = "127.0.0.1"
BINARY = {"Content-Type": WINDOW_CONTENT_TYPE}


def device_ids(n: int) -> list[str]:
    return [f"honest-{i:05d}" for i in range(n)]


def secret_of(device_id: str) -> str:
    return f"secret-of-{device_id}-0123456789abcdef"


def labeled(n: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    X = rng.normal(size=(n, d))
    return X, np.where(X @ np.linspace(1.0, -1.0, d) + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)


def recompute_bodies(count: int, retune: bool, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    header = WindowHeader(
        task="classification",
        learner="logistic",
        params=LearnerParams(C=1.0),
        reason="drift",
        monitor={"evidence": 1.0, "warning": True},
        retune=RetuneRequest(learner="newton", window_labels=200) if retune else None,
    )
    return [encode_window(header, *labeled(200, 5, rng)) for _ in range(count)]


def history_body(batch_id: str, labels: int, seed: int) -> bytes:
    header = WindowHeader(task="classification", learner="logistic", request_id=batch_id)
    return encode_window(header, *labeled(labels, 5, np.random.default_rng(seed)), dtype="float64")


@dataclass
class Tally:
    """What one side's requests got."""

    requests: int = 0
    completed: int = 0
    rejected_429: int = 0
    refused_4xx: int = 0
    errors_5xx: int = 0
    transport_errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)

    def count(self, kind: str, status: int | None, elapsed_ms: float) -> None:
        self.requests += 1
        outcome = "transport" if status is None else str(status)
        kinds = self.by_kind.setdefault(kind, {})
        kinds[outcome] = kinds.get(outcome, 0) + 1
        if status is None:
            self.transport_errors += 1
            return
        self.latencies_ms.append(elapsed_ms)
        if 200 <= status < 300:
            self.completed += 1
        elif status == 429:
            self.rejected_429 += 1
        elif status >= 500:
            self.errors_5xx += 1
        else:
            self.refused_4xx += 1


async def register(client: httpx.AsyncClient, ids: list[str], operator: str) -> None:
    auth = {"Authorization": f"Bearer {operator}"}
    for start in range(0, len(ids), 5000):
        body = {"devices": [{"device_id": d, "secret": secret_of(d)} for d in ids[start : start + 5000]]}
        (await client.post("/v1/bulk/devices", json=body, headers=auth, timeout=300)).raise_for_status()


async def seed_histories(client: httpx.AsyncClient, ids: list[str], labels: int) -> None:
    """Each re-tuning device's history before the run (``labels`` labels in batches of 1,000 or fewer)."""
    gate = asyncio.Semaphore(32)

    async def one(i: int, device_id: str) -> None:
        headers = {"Authorization": f"Bearer {secret_of(device_id)}", **BINARY}
        for start in range(0, labels, 1000):
            body = history_body(f"seed-{start}", min(1000, labels - start), seed=i * 100 + start)
            async with gate:
                r = await client.post(f"/v1/devices/{device_id}/history", content=body, headers=headers)
            r.raise_for_status()

    await asyncio.gather(*(one(i, d) for i, d in enumerate(ids)))


@dataclass
class HonestFleet:
    """The honest devices' load for one phase (see the module's docstring)."""

    url: str
    ids: list[str]
    operator: str
    heartbeat_s: float
    recompute_s: float
    history_s: float
    connections: int = 64
    seed: int = 0
    tally: Tally = field(default_factory=Tally)

    async def run(self, seconds: float) -> Tally:
        self.tally = Tally()
        limits = httpx.Limits(max_connections=self.connections, max_keepalive_connections=self.connections)
        transport = httpx.AsyncHTTPTransport(local_address=FLEET_ADDRESS, limits=limits)
        plain, tuned = recompute_bodies(16, False, self.seed), recompute_bodies(16, True, self.seed + 1)
        end = time.monotonic() + seconds
        async with httpx.AsyncClient(base_url=self.url, transport=transport, timeout=30) as client:
            gate = asyncio.Semaphore(self.connections)
            tasks = [
                asyncio.create_task(self._device(client, gate, i, d, end, plain, tuned))
                for i, d in enumerate(self.ids)
            ]
            tasks.append(asyncio.create_task(self._operator(client, gate, end)))
            await asyncio.gather(*tasks)
        return self.tally

    async def _send(
        self, client: httpx.AsyncClient, gate: asyncio.Semaphore, kind: str, method: str, path: str, **kw: Any
    ) -> None:
        async with gate:
            start = time.perf_counter()
            try:
                status: int | None = (await client.request(method, path, **kw)).status_code
            except httpx.TransportError:
                status = None
            self.tally.count(kind, status, (time.perf_counter() - start) * 1000.0)

    async def _device(
        self,
        client: httpx.AsyncClient,
        gate: asyncio.Semaphore,
        i: int,
        device_id: str,
        end: float,
        plain: list[bytes],
        tuned: list[bytes],
    ) -> None:
        rng = random.Random(self.seed * 100_003 + i)
        retunes = i % 2 == 1
        auth = {"Authorization": f"Bearer {secret_of(device_id)}"}
        now = time.monotonic()
        next_beat = now + rng.uniform(0, self.heartbeat_s)
        next_recompute = now + rng.expovariate(1.0 / self.recompute_s)
        next_history = now + rng.uniform(0, self.history_s) if retunes else float("inf")
        samples, batches = 0, 0
        while True:
            due = min(next_beat, next_recompute, next_history)
            if due >= end:
                return
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            path = f"/v1/devices/{device_id}"
            if due == next_beat:
                samples += 50
                beat = {"samples": samples, "labeled": samples // 2, "accuracy": 0.85, "warnings": 0}
                await self._send(client, gate, "heartbeat", "POST", f"{path}/stats", json=beat, headers=auth)
                next_beat += self.heartbeat_s
            elif due == next_recompute:
                body = rng.choice(tuned if retunes else plain)
                headers = {**auth, **BINARY}
                await self._send(
                    client, gate, "recompute", "POST", f"{path}/models", content=body, headers=headers
                )
                next_recompute += rng.expovariate(1.0 / self.recompute_s)
            else:
                batches += 1
                body = history_body(f"run-{self.seed}-{batches}", 200, seed=i * 1000 + batches)
                headers = {**auth, **BINARY}
                await self._send(
                    client, gate, "history", "POST", f"{path}/history", content=body, headers=headers
                )
                next_history += self.history_s

    async def _operator(self, client: httpx.AsyncClient, gate: asyncio.Semaphore, end: float) -> None:
        """The operator's dashboard: the fleet's first page, sorted by accuracy, every 5 s."""
        auth = {"Authorization": f"Bearer {self.operator}"}
        while time.monotonic() + 5.0 < end:
            await asyncio.sleep(5.0)
            await self._send(
                client, gate, "fleet_page", "GET", "/v1/fleet?limit=50&sort=accuracy", headers=auth
            )
