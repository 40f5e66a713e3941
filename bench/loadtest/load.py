"""The load: K simulated devices (one ``httpx.AsyncClient`` each, one asyncio loop) posting windows back
to back to ``POST /v1/devices/{id}/models``, the CPU each party spent, and the registry's counters checked
against the 2xx responses."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import numpy as np

from edgedrift_harness.cloud import CloudProcess
from edgedrift_harness.proc import (
    cpu_seconds,
    machine_busy_seconds,
    named_cpu_seconds,
    process_tree,
    self_cpu_seconds,
)
from loadtest.data import CONTENT_TYPES, InProcess, Window


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (NaN for no values)."""
    return float(np.percentile(values, q)) if values else float("nan")


def service_cpu_seconds(server: CloudProcess) -> float:
    """CPU seconds of the service: the uvicorn supervisor and its workers."""
    return sum(cpu_seconds(p, 0.0) for p in process_tree(server.pid))


@dataclass
class Tally:
    """What the clients saw during one timed setting."""

    latencies_ms: list[float] = field(default_factory=list)
    train_ms: list[float] = field(default_factory=list)
    bytes_in: list[int] = field(default_factory=list)
    bytes_out: list[int] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    issued: int = 0


async def device_client(
    client: httpx.AsyncClient,
    device: str,
    windows: list[Window],
    encoding: str,
    offset: int,
    deadline: float,
    limit: int | None,
    tally: Tally | None,
    ok: Counter[str],
) -> None:
    """One device posting windows back to back until the deadline (or the shared request budget)."""
    headers = {"Content-Type": CONTENT_TYPES[encoding]}
    url = f"/v1/devices/{device}/models"
    i = offset
    while time.perf_counter() < deadline:
        if tally is not None and limit is not None:
            if tally.issued >= limit:
                break
            tally.issued += 1
        body = windows[i % len(windows)].body
        i += 1
        t = time.perf_counter()
        try:
            response = await client.post(url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            if tally is not None:
                tally.statuses[-1] += 1
                tally.errors.append(f"{device}: {type(exc).__name__}: {exc}")
            continue
        elapsed = time.perf_counter() - t
        if response.is_success:
            ok[device] += 1
        if tally is None:
            continue
        tally.statuses[response.status_code] += 1
        if response.is_success:
            reply = response.json()
            tally.latencies_ms.append(1e3 * elapsed)
            tally.train_ms.append(float(reply["train_ms"]))
            tally.bytes_in.append(int(reply["bytes_in"]))
            tally.bytes_out.append(int(reply["bytes_out"]))
        elif len(tally.errors) < 20:
            tally.errors.append(f"{device}: HTTP {response.status_code}: {response.text[:300]}")


@dataclass(frozen=True)
class Cpu:
    """CPU seconds during a timed phase: the service's processes, this client, PostgreSQL, the rest."""

    service: float
    client: float
    postgres: float
    rest: float


@dataclass
class LoadResult:
    d: int
    encoding: str
    clients: int
    workers: int
    seconds: float
    tally: Tally
    cpu: Cpu
    inproc: InProcess
    load: str
    profile: dict[str, float] | None

    @property
    def ok(self) -> int:
        return len(self.tally.latencies_ms)

    @property
    def rate(self) -> float:
        return self.ok / self.seconds

    def per_request_ms(self, cpu_s: float) -> float:
        return 1e3 * cpu_s / max(self.ok, 1)


async def run_load(
    server: CloudProcess,
    devices: dict[str, str],
    windows: list[Window],
    encoding: str,
    seconds: float,
    warmup: float,
    limit: int | None,
    ok: Counter[str],
    profiler: Callable[[], Callable[[], None]] | None = None,
) -> tuple[Tally, float, Cpu]:
    """Warm up, then one timed phase; returns the tally, wall seconds and the CPU seconds spent."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    clients = {
        device: httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {secret}"}, timeout=60, limits=limits
        )
        for device, secret in devices.items()
    }
    try:
        start = time.perf_counter()
        await asyncio.gather(
            *(
                device_client(c, dev, windows, encoding, 7 * k, start + warmup, None, None, ok)
                for k, (dev, c) in enumerate(clients.items())
            )
        )
        tally = Tally()
        stop_profiler = profiler() if profiler is not None else None
        cpu0 = (
            service_cpu_seconds(server),
            self_cpu_seconds(),
            named_cpu_seconds("postgres"),
            machine_busy_seconds(),
        )
        start = time.perf_counter()
        deadline = start + (seconds if limit is None else 3600.0)
        await asyncio.gather(
            *(
                device_client(c, dev, windows, encoding, 7 * k + 3, deadline, limit, tally, ok)
                for k, (dev, c) in enumerate(clients.items())
            )
        )
        wall = time.perf_counter() - start
        cpu1 = (
            service_cpu_seconds(server),
            self_cpu_seconds(),
            named_cpu_seconds("postgres"),
            machine_busy_seconds(),
        )
        if stop_profiler is not None:
            stop_profiler()
    finally:
        for c in clients.values():
            await c.aclose()
    service, client, postgres, machine = (b - a for a, b in zip(cpu0, cpu1, strict=True))
    return tally, wall, Cpu(service, client, postgres, machine - service - client - postgres)


def verify_counters(server: CloudProcess, devices: dict[str, str], ok: Counter[str]) -> list[str]:
    """Every device's registry counter against its 2xx responses; the mismatches."""
    problems = []
    for device, secret in devices.items():
        r = httpx.get(
            f"{server.url}/v1/devices/{device}/counters",
            headers={"Authorization": f"Bearer {secret}"},
            timeout=30,
        )
        if r.status_code != 200:
            problems.append(f"{device}: counters answered HTTP {r.status_code}")
            continue
        stored = int(r.json()["recomputes"])
        if stored != ok[device]:
            problems.append(f"{device}: registry counts {stored} recomputes, clients saw {ok[device]} 2xx")
    return problems
