"""Training on a job queue (``EDGEDRIFT_CLOUD_TRAINING=queue``, the ``jobs`` extra): the API admits a
recompute and hands it to a Dramatiq queue in Redis that ``edgedrift-cloud trainer-worker`` processes
consume (:mod:`edgedrift_cloud.trainer_worker`).

A job is a Redis hash per (device, request id): the window, what the API decided (the budget minute it
took, whether the re-tuning search was deferred) and the job's state, ``queued``, ``running``, ``done``
(with the stored version), ``failed`` or ``cancelled``. A request without a request id gets one, so every
job has an idempotency key: a repeat of a request finds the job (or the version it stored) and waits
for it, and neither trains nor counts twice. A job is *watched* while a key with a time to live exists:
a waiting request renews it, a poll renews it, the last waiter whose client hangs up deletes it; a
worker cancels a job that nobody watches before it starts and at the training's next checkpoint.

The Dramatiq message carries the job's key only. The Redis broker acknowledges a message when its actor
returns: a worker killed mid-job stops sending its heartbeat and another worker puts its unacknowledged
message back on the queue after ``jobs_heartbeat_timeout_s`` (docs/architecture.md says why Dramatiq).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

if TYPE_CHECKING:
    from dramatiq.brokers.redis import RedisBroker

#: The Dramatiq queue and actor of the trainings.
QUEUE = "training"
ACTOR = "edgedrift_train"
#: One in this many broker calls runs Dramatiq's maintenance (a dead worker's messages back on the
#: queue); Dramatiq's scale is a million, and its default of 1,000 left a dead worker's job for minutes.
MAINTENANCE_CHANCE = 100_000
#: A job's hash lives this long after its last change (the registry keeps the version for good).
JOB_TTL_S = 24 * 3600

State = Literal["queued", "running", "done", "failed", "cancelled"]
FINAL: frozenset[str] = frozenset({"done", "failed", "cancelled"})


class JobsUnavailableError(RuntimeError):
    """``training=queue`` without the ``jobs`` extra installed."""


class QueueUnavailableError(RuntimeError):
    """The training queue's Redis did not answer (the API answers 503 with ``Retry-After``)."""


@contextmanager
def _redis_errors() -> Iterator[None]:
    """redis-py's errors as :class:`QueueUnavailableError` (the routers never import redis-py)."""
    from redis.exceptions import RedisError

    try:
        yield
    except RedisError as exc:
        raise QueueUnavailableError(f"the training queue is unavailable: {type(exc).__name__}") from None


def job_id(request_id: str) -> str:
    """The URL-safe id of a device's job: a digest of its request id (any short text)."""
    return hashlib.sha256(request_id.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Keys:
    """The Redis keys of one deployment's queue (``namespace``) and of its jobs."""

    namespace: str

    @property
    def queue(self) -> str:
        """Dramatiq's list of the waiting messages' ids (what KEDA's Redis scaler reads)."""
        return f"{self.namespace}:{QUEUE}"

    def job(self, device_id: str, job: str) -> str:
        return f"{self.namespace}:job:{device_id}:{job}"

    def watch(self, device_id: str, job: str) -> str:
        return f"{self.namespace}:job:{device_id}:{job}:watch"


@dataclass(frozen=True)
class Job:
    """A job's hash as read back."""

    state: str
    fingerprint: str
    version: int | None
    error: str
    attempts: int

    @classmethod
    def of(cls, fields: dict[bytes, bytes]) -> Job | None:
        if not fields:
            return None
        text = {k.decode(): v.decode(errors="replace") for k, v in fields.items() if k != b"window"}
        version = text.get("version", "")
        return cls(
            state=text.get("state", "queued"),
            fingerprint=text.get("fingerprint", ""),
            version=int(version) if version else None,
            error=text.get("error", ""),
            attempts=int(text.get("attempts", "0") or 0),
        )


def make_broker(url: str, namespace: str, heartbeat_timeout_s: float) -> RedisBroker:
    """Dramatiq's Redis broker for this deployment, with none of Dramatiq's default middleware (its
    retries and time limit: a failed training fails the same way again, and a job's time is bounded by
    its price before it is queued) and the trainings' queue declared."""
    try:
        from dramatiq.brokers.redis import RedisBroker
    except ImportError as exc:
        raise JobsUnavailableError(
            "EDGEDRIFT_CLOUD_TRAINING=queue needs the jobs extra: pip install 'edgedrift-cloud[jobs]'"
        ) from exc
    broker = RedisBroker(  # type: ignore[no-untyped-call]
        url=url,
        middleware=[],
        namespace=namespace,
        heartbeat_timeout=int(heartbeat_timeout_s * 1000),
        maintenance_chance=MAINTENANCE_CHANCE,
    )
    broker.declare_queue(QUEUE)
    return broker


def message(job_key: str) -> object:
    """The Dramatiq message of a job."""
    from dramatiq import Message

    return Message(queue_name=QUEUE, actor_name=ACTOR, args=(job_key,), kwargs={}, options={})


class JobQueue:
    """The API's side: create a job once per request id, enqueue it, wait for it while its client is
    there, hand it over to polls, count what waits."""

    def __init__(self, url: str, namespace: str, poll_deadline_s: float, heartbeat_timeout_s: float) -> None:
        self.broker = make_broker(url, namespace, heartbeat_timeout_s)  # first: it names the missing extra
        import redis.asyncio

        self.keys = Keys(namespace)
        self.poll_deadline_ms = int(poll_deadline_s * 1000)
        #: redis-py's asyncio client (typed Any: its stubs type each command as sync-or-async).
        self.client: Any = redis.asyncio.Redis.from_url(url)

    async def close(self) -> None:
        await self.client.aclose()
        self.broker.close()

    async def ping(self) -> bool:
        return bool(await self.client.ping())

    async def queued(self) -> int:
        """Jobs waiting for a worker (not those running)."""
        with _redis_errors():
            return int(await self.client.llen(self.keys.queue))

    async def get(self, device_id: str, job: str) -> Job | None:
        with _redis_errors():
            fields = await self.client.hgetall(self.keys.job(device_id, job))
        return Job.of(cast("dict[bytes, bytes]", fields))

    async def create(
        self, device_id: str, job: str, fingerprint: str, fields: dict[str, str | bytes]
    ) -> bool:
        """Create and enqueue the job; False when one with this id exists already and is not over (a
        concurrent repeat created it). A job that failed or was cancelled is replaced."""
        with _redis_errors():
            return await self._create(device_id, job, fingerprint, fields)

    async def _create(
        self, device_id: str, job: str, fingerprint: str, fields: dict[str, str | bytes]
    ) -> bool:
        key = self.keys.job(device_id, job)
        earlier = await self.get(device_id, job)
        if earlier is not None and earlier.state in ("failed", "cancelled"):
            await self.client.delete(key)
        if not await self.client.hsetnx(key, "fingerprint", fingerprint):
            return False
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(key, mapping={**fields, "state": "queued", "attempts": "0", "waiters": "0"})
        pipe.expire(key, JOB_TTL_S)
        pipe.set(self.keys.watch(device_id, job), b"1", px=self.poll_deadline_ms)
        await pipe.execute()
        await asyncio.to_thread(self.broker.enqueue, message(key))  # type: ignore[arg-type]
        return True

    async def wait(
        self, device_id: str, job: str, wait_s: float, disconnected: Callable[[], Awaitable[bool]]
    ) -> Job | None:
        """The job once it is over, or as it stands after ``wait_s`` (then polls keep it alive for
        ``jobs_poll_deadline_s``); :class:`ClientGoneError` when the client hangs up meanwhile (the
        job is cancelled unless another request still waits for it). None: no such job."""
        with _redis_errors():
            return await self._wait(device_id, job, wait_s, disconnected)

    async def _wait(
        self, device_id: str, job: str, wait_s: float, disconnected: Callable[[], Awaitable[bool]]
    ) -> Job | None:
        from edgedrift_cloud.admission import DISCONNECT_POLL_S, ClientGoneError

        key, watch = self.keys.job(device_id, job), self.keys.watch(device_id, job)
        if not await self.client.exists(key):
            return None
        await self.client.hincrby(key, "waiters", 1)
        deadline = time.monotonic() + wait_s
        interval = 0.02
        handed_over = True
        try:
            while True:
                current = await self.get(device_id, job)
                if current is None or current.state in FINAL or time.monotonic() >= deadline:
                    return current
                await self.client.set(watch, b"1", px=self.poll_deadline_ms)
                await asyncio.sleep(min(interval, max(0.0, deadline - time.monotonic())))
                interval = min(interval * 1.5, DISCONNECT_POLL_S)
                if await disconnected():
                    handed_over = False
                    raise ClientGoneError
        finally:
            left = await self.client.hincrby(key, "waiters", -1)
            if not handed_over and left <= 0:
                await self.client.delete(watch)
