"""The simulated fleet of ``bench/fleet_storm.py``: registration, heartbeats every period, the
recompute storm (every device asks once within the burst, retrying as the edge agent does), and the
probes that watch the server meanwhile (/healthz, the fleet views, memory)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import random
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import numpy as np

from edgedrift.wire import WINDOW_CONTENT_TYPE, LearnerParams, RetuneRequest, WindowHeader, encode_window
from edgedrift_harness.proc import process_tree, rss_mb

#: Agent defaults (edgedrift_edge.cloud.client): backoff base and cap for timeouts and 5xx without
#: Retry-After.
RETRY_BASE_S = 0.5
RETRY_MAX_S = 30.0


class EventLike(Protocol):
    """A multiprocessing event as the probe process sees it."""

    def is_set(self) -> bool: ...


def device_ids(n: int) -> list[str]:
    return [f"storm-{i:05d}" for i in range(n)]


def secret_of(device_id: str) -> str:
    return f"secret-of-{device_id}-0123456789"


def windows(count: int, n: int, d: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        X = rng.normal(size=(n, d))
        y = np.where(X @ np.linspace(1.0, -1.0, d) + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
        out.append((X, y))
    return out


def retry_delay(response: httpx.Response | None, attempt: int, rng: random.Random) -> float:
    """The agent's rule: the server's Retry-After plus jitter, else full-jitter exponential backoff."""
    if response is not None and (value := response.headers.get("Retry-After")) is not None:
        wait = float(value)
        return wait + rng.uniform(0.0, max(RETRY_BASE_S, 0.1 * wait))
    return rng.uniform(0.0, min(RETRY_MAX_S, RETRY_BASE_S * 2.0**attempt))


async def register(client: httpx.AsyncClient, ids: list[str], operator: str) -> str:
    """Bulk registration when the server has it (``/v1/bulk/devices``), else one PUT per device."""
    auth = {"Authorization": f"Bearer {operator}"}
    body = {"devices": [{"device_id": d, "secret": secret_of(d)} for d in ids[:1]]}
    probe = await client.post("/v1/bulk/devices", json=body, headers=auth, timeout=120)
    if probe.status_code == 200:
        for start in range(0, len(ids), 5000):
            chunk = ids[start : start + 5000]
            body = {"devices": [{"device_id": d, "secret": secret_of(d)} for d in chunk]}
            (await client.post("/v1/bulk/devices", json=body, headers=auth, timeout=300)).raise_for_status()
        return "bulk"
    gate = asyncio.Semaphore(32)

    async def put(device_id: str) -> None:
        async with gate:
            r = await client.put(
                f"/v1/devices/{device_id}", json={"secret": secret_of(device_id)}, headers=auth, timeout=120
            )
            r.raise_for_status()

    await asyncio.gather(*(put(d) for d in ids))
    return "per-device"


@dataclass
class Heartbeats:
    """Every device's heartbeat each ``period_s``: in batches (a gateway's request) when the server
    takes them, else one request per device; counts what was sent and refused."""

    sent: int = 0
    failed: int = 0
    mode: str = "batch"
    #: Milliseconds per heartbeat request (a batch of 1,000, or one device's) that was stored.
    latencies_ms: list[float] = field(default_factory=list)
    stopped: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, client: httpx.AsyncClient, ids: list[str], operator: str, period_s: float) -> None:
        auth = {"Authorization": f"Bearer {operator}"}
        probe = await client.post(
            "/v1/bulk/heartbeats",
            json={"heartbeats": [{"device_id": ids[0], "heartbeat": {"samples": 0}}]},
            headers=auth,
        )
        self.mode = "batch" if probe.status_code == 201 else "per-device"
        batch = 1000 if self.mode == "batch" else 1
        groups = [ids[i : i + batch] for i in range(0, len(ids), batch)]
        gate = asyncio.Semaphore(64)
        samples = 0
        while not self.stopped.is_set():
            start = time.monotonic()
            samples += 100
            tasks = []
            for k, group in enumerate(groups):
                due = start + period_s * k / len(groups)
                tasks.append(asyncio.create_task(self._send(client, group, samples, due, auth, gate)))
                if len(tasks) >= 256:
                    await asyncio.gather(*tasks)
                    tasks = []
            await asyncio.gather(*tasks)
            await _sleep_until(start + period_s, self.stopped)

    async def _send(
        self,
        client: httpx.AsyncClient,
        group: list[str],
        samples: int,
        due: float,
        auth: dict[str, str],
        gate: asyncio.Semaphore,
    ) -> None:
        await _sleep_until(due, self.stopped)
        beat = {"samples": samples, "accuracy": 0.8, "warnings": 1}
        async with gate:
            start = time.perf_counter()
            try:
                if self.mode == "batch":
                    body = {"heartbeats": [{"device_id": d, "heartbeat": beat} for d in group]}
                    r = await client.post("/v1/bulk/heartbeats", json=body, headers=auth, timeout=30)
                else:
                    headers = {"Authorization": f"Bearer {secret_of(group[0])}"}
                    r = await client.post(
                        f"/v1/devices/{group[0]}/stats", json=beat, headers=headers, timeout=30
                    )
                ok = r.status_code == 201
            except httpx.TransportError:
                ok = False
        if ok:
            self.latencies_ms.append((time.perf_counter() - start) * 1000.0)
            self.sent += len(group)
        else:
            self.failed += len(group)


@dataclass
class RemoteHeartbeats:
    """:class:`Heartbeats` sent from a process of their own with their own connections, as a fleet's
    gateways are other machines: on the storm client's connection pool and CPU they waited seconds
    behind its recomputes. The figures arrive when :attr:`stopped` is set."""

    sent: int = 0
    failed: int = 0
    mode: str = "batch"
    latencies_ms: list[float] = field(default_factory=list)
    stopped: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, url: str, ids: list[str], operator: str, period_s: float) -> None:
        context = multiprocessing.get_context("spawn")
        stop = context.Event()
        figures: multiprocessing.Queue[dict[str, Any]] = context.Queue()
        child = context.Process(
            target=heartbeat_process, args=(url, ids, operator, period_s, stop, figures), daemon=True
        )
        child.start()
        await self.stopped.wait()
        stop.set()
        got: dict[str, Any] = await asyncio.to_thread(figures.get, True, 60)
        await asyncio.to_thread(child.join, 10)
        self.sent, self.failed, self.mode = got["sent"], got["failed"], got["mode"]
        self.latencies_ms = got["latencies_ms"]


def heartbeat_process(
    url: str,
    ids: list[str],
    operator: str,
    period_s: float,
    stop: EventLike,
    out: multiprocessing.Queue[dict[str, Any]],
) -> None:
    """In a child process: :class:`Heartbeats` until ``stop`` is set; the figures go to ``out``."""
    beats = Heartbeats()

    async def until_stopped() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.1)
        beats.stopped.set()

    async def both() -> None:
        limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
            await asyncio.gather(beats.run(client, ids, operator, period_s), until_stopped())

    asyncio.run(both())
    out.put(
        {"sent": beats.sent, "failed": beats.failed, "mode": beats.mode, "latencies_ms": beats.latencies_ms}
    )


async def _sleep_until(deadline: float, stop: asyncio.Event) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)


@dataclass
class Storm:
    """Outcome of the recompute storm: one request per device, retried until it is stored."""

    completed: int = 0
    rejected_429: int = 0
    errors_5xx: int = 0
    timeouts: int = 0
    final_4xx: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    done_at: list[float] = field(default_factory=list)
    time_to_model_s: list[float] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)
    #: Re-tuning requests answered with edge parameters (the rest were deferred to plain recomputes).
    retuned: int = 0
    #: Answers 202 (the training queue: the job is polled until it is done) and the polls that followed.
    accepted_202: int = 0
    polls: int = 0
    #: Polls answered 404/410 (the job expired or was cancelled): the device sent its request again.
    jobs_gone: int = 0


async def storm(
    client: httpx.AsyncClient,
    ids: list[str],
    bodies: list[bytes],
    burst_s: float,
    deadline_s: float,
    timeout_s: float,
    seed: int,
    connections: int,
) -> Storm:
    """Every device posts its window at a uniform time within ``burst_s``; 429 waits Retry-After +
    jitter, a timeout or 5xx backs off and retries with the same request_id, as the agent does.

    At most ``connections`` requests are in flight (each device is its own client in a real fleet):
    the rest wait on a semaphore, not in httpx's connection pool, whose queue costs O(waiters) per
    request and would make the client, not the server, the bottleneck at N = 10,000. An attempt's
    latency is timed from when it gets a connection; ``time_to_model_s`` from the device's first try."""
    result = Storm()
    t0 = time.monotonic()
    rng = random.Random(seed)
    gate = asyncio.Semaphore(connections)

    async def device(i: int, device_id: str) -> None:
        await asyncio.sleep(rng.uniform(0.0, burst_s))
        headers = {"Authorization": f"Bearer {secret_of(device_id)}", "Content-Type": WINDOW_CONTENT_TYPE}
        body = bodies[i % len(bodies)]
        attempt = 0
        first = time.monotonic()
        while time.monotonic() - t0 < deadline_s:
            response: httpx.Response | None = None
            async with gate:
                start = time.perf_counter()
                try:
                    response = await client.post(
                        f"/v1/devices/{device_id}/models", content=body, headers=headers, timeout=timeout_s
                    )
                    result.accepted_202 += response.status_code == 202
                    while response.status_code == 202:  # queued: follow the job, as the agent does
                        result.polls += 1
                        location = response.headers["Location"]
                        response = await client.get(location, headers=headers, timeout=timeout_s)
                except httpx.TransportError:
                    result.timeouts += 1
                elapsed_ms = (time.perf_counter() - start) * 1000.0
            if response is not None:
                code = response.status_code
                if code in (200, 201):
                    result.completed += 1
                    result.retuned += response.json().get("edge") is not None
                    result.latencies_ms.append(elapsed_ms)
                    result.done_at.append(time.monotonic() - t0)
                    result.time_to_model_s.append(time.monotonic() - first)
                    return
                if code == 429:
                    result.rejected_429 += 1
                    reason = str(response.json().get("reason", "429"))
                    result.reasons[reason] = result.reasons.get(reason, 0) + 1
                elif code >= 500:
                    result.errors_5xx += 1
                elif code in (404, 410):  # a job that expired or was cancelled: ask again
                    result.jobs_gone += 1
                elif code != 408:
                    result.final_4xx += 1
                    return
            attempt += 1
            await asyncio.sleep(
                retry_delay(response if response and response.status_code != 500 else None, attempt, rng)
            )

    await asyncio.gather(*(device(i, d) for i, d in enumerate(ids)))
    return result


def binary_bodies(
    count: int, n: int, d: int, seed: int, request_id: str, retune: bool = False
) -> list[bytes]:
    """The storm's windows; with ``retune``, re-tuning requests (``druid-tune``'s, a fixed C)."""
    header = WindowHeader(
        task="classification",
        learner="logistic",
        params=LearnerParams(C=1.0),
        reason="drift",
        monitor={"evidence": 1.5, "warning": True},
        request_id=request_id,
        retune=RetuneRequest(learner="newton", window_labels=n) if retune else None,
    )
    return [encode_window(header, X, y) for X, y in windows(count, n, d, seed)]


async def post_histories(
    client: httpx.AsyncClient, ids: list[str], labels: int, d: int, seed: int, concurrency: int = 64
) -> int:
    """Each device's labeled history (``labels`` samples, one batch) before the storm, as an agent of a
    re-tuning strategy forwards it; the devices share a few histories. Returns the batches stored."""
    header = WindowHeader(task="classification", learner="logistic", request_id="history-1")
    batches = [encode_window(header, X, y, dtype="float64") for X, y in windows(8, labels, d, seed)]
    gate = asyncio.Semaphore(concurrency)
    stored = 0

    async def one(i: int, device_id: str) -> None:
        nonlocal stored
        headers = {"Authorization": f"Bearer {secret_of(device_id)}", "Content-Type": WINDOW_CONTENT_TYPE}
        url = f"/v1/devices/{device_id}/history"
        body = batches[i % len(batches)]
        for attempt in range(5):  # a kept-alive connection the server just closed: again, as agents do
            try:
                async with gate:
                    r = await client.post(url, content=body, headers=headers, timeout=120)
                break
            except httpx.TransportError:
                if attempt == 4:
                    raise
                await asyncio.sleep(0.5 * (attempt + 1))
        r.raise_for_status()
        stored += 1

    await asyncio.gather(*(one(i, d_id) for i, d_id in enumerate(ids)))
    return stored


@dataclass
class Probes:
    """What the operator sees while the storm runs: /healthz latency and the fleet views, probed from a
    process of their own (so the client's 10,000 coroutines do not inflate them), and server memory."""

    healthz_ms: list[float] = field(default_factory=list)
    healthz_failures: int = 0
    summary_ms: list[float] = field(default_factory=list)
    page_ms: list[float] = field(default_factory=list)
    rss_mb: float = 0.0
    stopped: asyncio.Event = field(default_factory=asyncio.Event)

    async def watch(self, url: str, operator: str, every_s: float) -> None:
        """Run :func:`probe_process` until :attr:`stopped`, then take its figures."""
        context = multiprocessing.get_context("spawn")
        stop = context.Event()
        figures: multiprocessing.Queue[dict[str, Any]] = context.Queue()
        child = context.Process(
            target=probe_process, args=(url, operator, every_s, stop, figures), daemon=True
        )
        child.start()
        await self.stopped.wait()
        stop.set()
        got: dict[str, Any] = await asyncio.to_thread(figures.get, True, 60)
        await asyncio.to_thread(child.join, 10)
        self.healthz_ms = got["healthz_ms"]
        self.healthz_failures = got["healthz_failures"]
        self.summary_ms = got["summary_ms"]
        self.page_ms = got["page_ms"]

    async def memory(self, pid: int) -> None:
        while not self.stopped.is_set():
            total = 0.0
            for p in process_tree(pid):
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    total += rss_mb(p)
            self.rss_mb = max(self.rss_mb, total)
            await _sleep_until(time.monotonic() + 1.0, self.stopped)


def probe_process(
    url: str, operator: str, every_s: float, stop: EventLike, out: multiprocessing.Queue[dict[str, Any]]
) -> None:
    """In a child process: /healthz every 100 ms and the fleet summary and one fleet page every
    ``every_s`` until ``stop`` is set; the latencies go to ``out``."""
    figures: dict[str, Any] = {"healthz_ms": [], "healthz_failures": 0, "summary_ms": [], "page_ms": []}

    async def healthz() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            while not stop.is_set():
                start = time.perf_counter()
                try:
                    ok = (await client.get("/healthz")).status_code == 200
                except httpx.TransportError:
                    ok = False
                if ok:
                    figures["healthz_ms"].append((time.perf_counter() - start) * 1000.0)
                else:
                    figures["healthz_failures"] += 1
                await asyncio.sleep(0.1)

    async def fleet_views() -> None:
        headers = {"Authorization": f"Bearer {operator}"}
        async with httpx.AsyncClient(base_url=url, timeout=120, headers=headers) as client:
            while not stop.is_set():
                for path, sink in (("/v1/fleet/summary", "summary_ms"), ("/v1/fleet?limit=50", "page_ms")):
                    start = time.perf_counter()
                    try:
                        ok = (await client.get(path)).status_code == 200
                    except httpx.TransportError:
                        ok = False
                    if ok:
                        figures[sink].append((time.perf_counter() - start) * 1000.0)
                deadline = time.monotonic() + every_s
                while not stop.is_set() and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)

    async def both() -> None:
        await asyncio.gather(healthz(), fleet_views())

    asyncio.run(both())
    out.put(figures)
