"""The hostile side of ``bench/hostile_device.py``: every attack of issue 28's table at once, from ONE
device credential (``mallory``, from its own address), one unauthenticated client (from another; its
wrong tokens from the honest fleet's address, a NAT it shares) and, for the rows that need an operator's
hand (6, 7 and 14), a careless integrator with the operator token. Each attack is a loop bounded by the
phase's end; each request's answer is counted per attack: 2xx, 4xx, 5xx or a transport error.

Runs in a process of its own (:func:`attack_process`), so its CPU does not slow the honest fleet's
client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

import httpx
import numpy as np

from edgedrift.models.losses import Task
from edgedrift.wire import WINDOW_CONTENT_TYPE, LearnerParams, RetuneRequest, WindowHeader, encode_window

ATTACKER = "mallory"
ATTACKER_SECRET = "secret-of-mallory-0123456789abcdef"
DEVICE_ADDRESS, UNAUTH_ADDRESS, INTEGRATOR_ADDRESS = "127.0.0.2", "127.0.0.3", "127.0.0.4"
BINARY = {"Content-Type": WINDOW_CONTENT_TYPE}
#: What :func:`trickle` returns for a connection the server still held when the phase ended.
HELD = -1


@dataclass
class AttackTally:
    """One attack's requests and what they got."""

    name: str
    requests: int = 0
    accepted_2xx: int = 0
    refused_4xx: int = 0
    errors_5xx: int = 0
    transport_errors: int = 0
    notes: dict[str, int] = field(default_factory=dict)

    def count(self, status: int | None) -> None:
        """Count an answer's status (None: a transport error; HELD: still held when the phase ended)."""
        self.requests += 1
        if status == HELD:
            self.note("held_to_end")
        elif status is None:
            self.transport_errors += 1
        elif status < 300:
            self.accepted_2xx += 1
        elif status >= 500:
            self.errors_5xx += 1
        elif status >= 400:
            self.refused_4xx += 1

    def note(self, what: str) -> None:
        self.notes[what] = self.notes.get(what, 0) + 1


def window(n: int, d: int, seed: int, **header: Any) -> bytes:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    fields = {"task": "classification", "learner": "logistic", "params": LearnerParams(C=1.0), **header}
    return encode_window(WindowHeader(**fields), X, y)


def history(n: int, d: int, seed: int, batch_id: str, task: Task = "classification") -> bytes:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(X[:, 0] > 0, 1.0, -1.0) if task == "classification" else X[:, 0]
    header = WindowHeader.model_validate(
        {"task": task, "learner": "logistic" if task == "classification" else "ridge", "request_id": batch_id}
    )
    return encode_window(header, X, y, dtype="float64")


@dataclass
class Attacker:
    """Every attack for ``seconds`` (``quick`` scales the sizes down)."""

    url: str
    host: str
    port: int
    operator: str
    seconds: float
    quick: bool = False
    tallies: dict[str, AttackTally] = field(default_factory=dict)

    def tally(self, name: str) -> AttackTally:
        return self.tallies.setdefault(name, AttackTally(name))

    async def run(self) -> list[dict[str, Any]]:
        self.end = time.monotonic() + self.seconds
        self.revoked_at = float("inf")
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        make = httpx.AsyncHTTPTransport
        async with (
            httpx.AsyncClient(
                base_url=self.url,
                transport=make(local_address=DEVICE_ADDRESS, limits=limits),
                headers={"Authorization": f"Bearer {ATTACKER_SECRET}"},
                timeout=30,
            ) as self.device,
            httpx.AsyncClient(
                base_url=self.url,
                transport=make(local_address=INTEGRATOR_ADDRESS),
                headers={"Authorization": f"Bearer {self.operator}"},
                timeout=30,
            ) as self.integrator,
        ):
            attacks: list[Awaitable[None]] = [
                self.row1_heartbeat_metric_types(),
                *(self.row2_unauthenticated_16mib() for _ in range(3)),
                *(self.row3_slow_body() for _ in range(10 if self.quick else 34)),
                self.row3_slowloris(200 if self.quick else 2000),
                *(self.row4_retune_wide() for _ in range(2)),
                self.row5_history_flood(),
                self.row6_revocation(),
                self.row7_pin_prune_race(),
                self.row8_huge_monitor(),
                self.row9_heartbeat_flood(),
                self.row10_wrong_tokens(),
                self.row11_history_86k(),
                self.row12_budget_evidence(),
                self.row13_history_task_mismatch(),
                self.row14_weak_secrets(),
            ]
            await asyncio.gather(*attacks)
        return [asdict(t) for t in sorted(self.tallies.values(), key=lambda t: t.name)]

    def running(self) -> bool:
        return time.monotonic() < self.end

    async def _call(self, name: str, send: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response | None:
        try:
            response = await send()
        except httpx.TransportError:
            self.tally(name).count(None)
            return None
        self.tally(name).count(response.status_code)
        return response

    async def _every(self, seconds: float, step: Callable[[int], Awaitable[None]]) -> None:
        """``step(1)``, ``step(2)``, ... every ``seconds`` until the phase ends."""
        i = 0
        while self.running():
            i += 1
            await step(i)
            await asyncio.sleep(seconds)

    # --- row 1: heartbeat metrics of every type --------------------------------------------------------

    async def row1_heartbeat_metric_types(self) -> None:
        values = ['"a string"', "true", "9" * 400, '"\\u0000"', "-1e308"]

        async def step(i: int) -> None:
            body = '{"samples": 1, "extra": {"rmse": ' + values[i % len(values)] + "}}"
            await self._call(
                "row1_heartbeat_metric_types",
                lambda: self.device.post(
                    f"/v1/devices/{ATTACKER}/stats",
                    content=body,
                    headers={"Content-Type": "application/json"},
                ),
            )

        await self._every(1.0, step)

    # --- row 2: unauthenticated 16 MiB bodies to the gateway routes -----------------------------------

    async def row2_unauthenticated_16mib(self) -> None:
        size = (1 if self.quick else 16) * 1024 * 1024 - 1024
        body = b'{"heartbeats": [' + b" " * (size - 18) + b"]}"
        head = (
            f"POST /v1/gateways/gw-1/heartbeats HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        while self.running():
            status = await raw_request(self.host, self.port, UNAUTH_ADDRESS, head, body)
            self.tally("row2_unauthenticated_16mib_gateway").count(status)
            if status is None:
                await asyncio.sleep(0.1)

    # --- row 3: trickled bodies with a device credential; half-open connections -----------------------

    async def row3_slow_body(self) -> None:
        head = (
            f"POST /v1/devices/{ATTACKER}/models HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Authorization: Bearer {ATTACKER_SECRET}\r\nContent-Type: application/json\r\n"
            "Content-Length: 1000000\r\n\r\n{"
        ).encode()
        while self.running():
            status = await trickle(self.host, self.port, DEVICE_ADDRESS, head, b" ", 5.0, self.end)
            self.tally("row3_slow_body").count(status)
            await asyncio.sleep(0.5)

    async def row3_slowloris(self, connections: int) -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, connections + 1024)), hard))
        head = f"GET /healthz HTTP/1.1\r\nHost: {self.host}\r\n".encode()

        async def hold() -> None:
            while self.running():
                status = await trickle(
                    self.host, self.port, UNAUTH_ADDRESS, head, b"X-a: b\r\n", 5.0, self.end
                )
                self.tally("row3_slowloris").count(status)
                await asyncio.sleep(1.0)

        await asyncio.gather(*(hold() for _ in range(connections)))

    # --- row 4: wide re-tuning requests, fire and forget -----------------------------------------------

    async def row4_retune_wide(self) -> None:
        d = 128 if self.quick else 512
        body = window(1000, d, 4, reason="drift", retune=RetuneRequest(learner="newton"))
        while self.running():
            try:
                r = await self.device.post(
                    f"/v1/devices/{ATTACKER}/models", content=body, headers=BINARY, timeout=2.0
                )
                self.tally("row4_retune_wide").count(r.status_code)
            except httpx.TimeoutException:
                self.tally("row4_retune_wide").count(None)
                self.tally("row4_retune_wide").note("abandoned")
            except httpx.TransportError:
                self.tally("row4_retune_wide").count(None)
                await asyncio.sleep(0.5)

    # --- row 5: history as fast as one connection allows, then a re-tune over it ------------------------

    async def row5_history_flood(self) -> None:
        d = 512
        i = 0
        retune = window(200, d, 5, reason="drift", retune=RetuneRequest(learner="newton"))
        while self.running():
            i += 1
            body = history(15, d, i, f"flood-{i}")
            await self._call(
                "row5_history_flood",
                partial(self.device.post, f"/v1/devices/{ATTACKER}/history", content=body, headers=BINARY),
            )
            if i % 200 == 0:
                await self._call(
                    "row5_history_flood",
                    lambda: self.device.post(
                        f"/v1/devices/{ATTACKER}/models", content=retune, headers=BINARY
                    ),
                )

    # --- row 6: a revoked credential keeps trying --------------------------------------------------------

    async def row6_revocation(self) -> None:
        """The integrator revokes the attacker at 85 % of the phase; its credential must stop at once."""
        revoke_at = time.monotonic() + 0.85 * self.seconds
        name = "row6_revoked_credential"

        async def step(_i: int) -> None:
            if time.monotonic() >= revoke_at and self.revoked_at == float("inf"):
                await self._call(name, lambda: self.integrator.delete(f"/v1/devices/{ATTACKER}"))
                self.revoked_at = time.monotonic()
            r = await self._call(name, lambda: self.device.get(f"/v1/devices/{ATTACKER}/counters"))
            if r is not None and r.is_success and time.monotonic() > self.revoked_at:
                self.tally(name).note("accepted_after_revocation")

        await self._every(0.2, step)

    # --- row 7: pin, prune and train at once --------------------------------------------------------------

    async def row7_pin_prune_race(self) -> None:
        name = "row7_pin_prune_race"
        base = f"/v1/devices/{ATTACKER}/models"

        async def integrator() -> None:
            while self.running():
                r = await self._call(name, lambda: self.integrator.get(f"{base}/registry"))
                latest = r.json().get("latest") if r is not None and r.is_success else None
                if isinstance(latest, int) and latest >= 2:
                    pin = partial(self.integrator.put, f"{base}/pin", json={"version": latest - 1})
                    await self._call(name, pin)
                    await self._call(name, lambda: self.integrator.post(f"{base}/prune?keep=1"))
                    await self._call(name, lambda: self.integrator.delete(f"{base}/pin"))
                await asyncio.sleep(0.5)

        async def trainer() -> None:
            i = 0
            while self.running():
                i += 1
                body = window(50, 5, 7000 + i, reason="manual")
                await self._call(name, partial(self.device.post, base, content=body, headers=BINARY))
                await asyncio.sleep(0.2)

        await asyncio.gather(integrator(), trainer())

    # --- row 8: monitor values of unlimited length, and the version lists -----------------------------

    async def row8_huge_monitor(self) -> None:
        size = (256 if self.quick else 4096) * 1024
        body = json.dumps(
            {
                "task": "classification",
                "learner": "logistic",
                "monitor": {"note": "x" * size},
                "X": [[1.0, 0.0], [-1.0, 0.0], [2.0, 1.0], [-2.0, 1.0]],
                "y": [1, -1, 1, -1],
            }
        )
        name = "row8_huge_monitor"

        async def step(_i: int) -> None:
            await self._call(
                name,
                lambda: self.device.post(
                    f"/v1/devices/{ATTACKER}/models",
                    content=body,
                    headers={"Content-Type": "application/json"},
                ),
            )
            await self._call(name, lambda: self.device.get(f"/v1/devices/{ATTACKER}/models"))

        await self._every(2.0, step)

    # --- row 9: heartbeats as fast as one connection allows ---------------------------------------------

    async def row9_heartbeat_flood(self) -> None:
        beat = {"samples": 1, "extra": {f"k{i:02d}": "x" * 2000 for i in range(31)}}  # 61 KiB stored each
        transport = httpx.AsyncHTTPTransport(
            local_address=DEVICE_ADDRESS, limits=httpx.Limits(max_connections=1)
        )
        auth = {"Authorization": f"Bearer {ATTACKER_SECRET}"}
        async with httpx.AsyncClient(base_url=self.url, transport=transport, headers=auth, timeout=30) as one:
            while self.running():
                r = await self._call(
                    "row9_heartbeat_flood", lambda: one.post(f"/v1/devices/{ATTACKER}/stats", json=beat)
                )
                if r is not None and r.status_code == 429:
                    await asyncio.sleep(0.05)

    # --- row 10: wrong tokens from the fleet's address, with a rotating X-Forwarded-For -------------------

    async def row10_wrong_tokens(self) -> None:
        transport = httpx.AsyncHTTPTransport(local_address="127.0.0.1")
        async with httpx.AsyncClient(base_url=self.url, transport=transport, timeout=30) as nat:

            async def step(i: int) -> None:
                headers = {"Authorization": f"Bearer wrong-{i:030d}"}
                if i % 2:  # every other one poses as another client behind a proxy
                    headers["X-Forwarded-For"] = f"10.{i % 250}.0.{i % 200 + 1}"
                await self._call(
                    "row10_wrong_tokens",
                    lambda: nat.get("/v1/devices/honest-00000/counters", headers=headers),
                )

            await self._every(0.05, step)

    # --- row 11: a history batch of 200 labels at 54 features (86 KiB) ----------------------------------

    async def row11_history_86k(self) -> None:

        async def step(i: int) -> None:
            body = history(200, 54, 11_000 + i, f"wide-{i}")
            await self._call(
                "row11_history_86k",
                lambda: self.device.post(f"/v1/devices/{ATTACKER}/history", content=body, headers=BINARY),
            )

        await self._every(2.0, step)

    # --- row 12: self-reported evidence for the fleet's budget -----------------------------------------

    async def row12_budget_evidence(self) -> None:
        bodies = [window(100, 5, 12_000 + i, reason="manual", monitor={"evidence": 2}) for i in range(8)]
        i = 0
        while self.running():
            i += 1
            r = await self._call(
                "row12_budget_evidence",
                partial(
                    self.device.post, f"/v1/devices/{ATTACKER}/models", content=bodies[i % 8], headers=BINARY
                ),
            )
            if r is None or r.status_code == 429:
                await asyncio.sleep(0.05)

    # --- row 13: a history of another task, then a re-tune ----------------------------------------------

    async def row13_history_task_mismatch(self) -> None:
        retune = window(200, 5, 13, reason="drift", retune=RetuneRequest(learner="newton"))

        async def step(i: int) -> None:
            body = history(200, 5, 13_000 + i, f"regression-{i}", task="regression")
            name = "row13_history_task_mismatch"
            await self._call(
                name,
                lambda: self.device.post(f"/v1/devices/{ATTACKER}/history", content=body, headers=BINARY),
            )
            await self._call(
                name,
                lambda: self.device.post(f"/v1/devices/{ATTACKER}/models", content=retune, headers=BINARY),
            )

        await self._every(3.0, step)

    # --- row 14: weak secrets set through the API --------------------------------------------------------

    async def row14_weak_secrets(self) -> None:

        async def step(i: int) -> None:
            name = "row14_weak_secrets"
            await self._call(
                name, lambda: self.integrator.put(f"/v1/devices/weak-{i}", json={"secret": "a" * 16})
            )
            secret = {"secret": "change-me-change-me-insecure"}
            await self._call(name, lambda: self.integrator.put(f"/v1/gateways/weak-gw-{i}", json=secret))

        await self._every(5.0, step)


@contextlib.asynccontextmanager
async def opened(
    host: str, port: int, source: str
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter] | None]:
    """A connection from the loopback address ``source`` (None when it could not be opened), closed
    afterwards."""
    try:
        reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
    except OSError:
        yield None
        return
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def status_of(line: bytes) -> int | None:
    return int(line.split()[1]) if line.startswith(b"HTTP/1.1") else None


async def raw_request(host: str, port: int, source: str, head: bytes, body: bytes) -> int | None:
    """Send ``head``; the body too unless the server answers from the headers within 0.2 s; the status."""
    async with opened(host, port, source) as connection:
        if connection is None:
            return None
        reader, writer = connection
        try:
            writer.write(head)
            await writer.drain()
            try:
                line = await asyncio.wait_for(reader.readline(), 0.2)
            except TimeoutError:
                writer.write(body)
                await writer.drain()
                line = await asyncio.wait_for(reader.readline(), 60)
            return status_of(line)
        except (OSError, TimeoutError, ValueError, IndexError):
            return None


async def trickle(
    host: str, port: int, source: str, head: bytes, drip: bytes, every_s: float, until: float
) -> int | None:
    """Send ``head``, then ``drip`` every ``every_s`` until the server answers or closes (its status,
    or None for a close without one), or ``until`` (:data:`HELD`)."""
    async with opened(host, port, source) as connection:
        if connection is None:
            return None
        reader, writer = connection
        try:
            writer.write(head)
            while time.monotonic() < until:
                wait = min(every_s, max(0.01, until - time.monotonic()))
                try:
                    return status_of(await asyncio.wait_for(reader.readline(), wait))
                except TimeoutError:
                    writer.write(drip)
                    await writer.drain()
            return HELD
        except (OSError, ValueError, IndexError):
            return None


def attack_process(config: dict[str, Any], out: Any) -> None:
    """In a child process: every attack for the phase; the tallies go to ``out``."""
    attacker = Attacker(**config)
    out.put(asyncio.run(attacker.run()))
