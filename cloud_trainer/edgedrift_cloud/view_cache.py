"""A fleet-wide view computed at most once per ``max_age_s`` in a worker, whatever the number of open
dashboards and scrapers: fresh answers come from memory, a stale one is served while one refresh runs in
the background, and only a missing or very old value is computed while the caller waits (once, however
many callers wait). The value carries its own ``generated_at``, so a reader sees how old it is.

The fleet summary scans every device; under a recompute storm that scan competes with the storm for the
database, so a dashboard polling every 5 s would wait on it each time without this.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Generic, TypeVar

import anyio

T = TypeVar("T")

log = logging.getLogger("edgedrift_cloud")

#: A value older than this many ``max_age_s`` is not served stale: the caller waits for a fresh one.
STALE_FACTOR = 6.0


class ViewCache(Generic[T]):
    """``await cache.get(compute, limiter)``: ``compute`` (blocking, run in a worker thread under
    ``limiter``) at most once per ``max_age_s``; 0 computes on every call."""

    def __init__(self, max_age_s: float) -> None:
        self.max_age_s = max_age_s
        self._value: T | None = None
        self._at = 0.0
        self._refresh: asyncio.Task[T] | None = None

    async def get(self, compute: Callable[[], T], limiter: anyio.CapacityLimiter) -> T:
        age = time.monotonic() - self._at
        if self._value is not None and age < self.max_age_s:
            return self._value
        running = self._refresh is not None and not self._refresh.done()
        if not running:
            self._refresh = asyncio.create_task(self._compute(compute, limiter))
            self._refresh.add_done_callback(_quiet)
        assert self._refresh is not None
        if self._value is not None and age < self.max_age_s * STALE_FACTOR:
            return self._value
        return await asyncio.shield(self._refresh)

    async def _compute(self, compute: Callable[[], T], limiter: anyio.CapacityLimiter) -> T:
        value = await anyio.to_thread.run_sync(compute, limiter=limiter)
        if self.max_age_s > 0:
            self._value, self._at = value, time.monotonic()
        return value


def _quiet(task: asyncio.Task[object]) -> None:
    """A background refresh that failed is logged (a waiting caller gets the error itself)."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("fleet view refresh failed", extra={"error": type(task.exception()).__name__})
