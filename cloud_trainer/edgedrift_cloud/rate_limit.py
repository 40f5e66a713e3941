"""Per-device rate limits of one worker: heartbeats, history uploads and their bytes, as token buckets.

A device may post at most ``per_minute`` of a kind in any minute, with bursts up to a minute's worth
(a bucket of ``per_minute`` tokens refilled at ``per_minute / 60`` a second). Past it the request is
answered 429 with ``Retry-After`` (when enough tokens will be there) before its body is stored, so one
credential cannot make the cloud store or parse more than its share. The buckets live in the worker's
memory (no database round trip per heartbeat); with W workers a device that spreads its requests over
several connections gets at most W times the limit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import status
from fastapi.responses import JSONResponse

__all__ = ["DeviceLimits", "RateLimiter", "too_fast"]


class RateLimiter:
    """Token buckets by key (a device id): ``per_minute`` tokens a minute, at most a minute's worth
    saved up; ``size`` keys at most (full buckets are forgotten first, then all)."""

    def __init__(
        self, per_minute: float, *, size: int = 200_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.per_minute = per_minute
        self.size = size
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    @property
    def rate(self) -> float:
        """Tokens per second."""
        return self.per_minute / 60.0

    def take(self, key: str, cost: float = 1.0) -> float:
        """Take ``cost`` tokens of ``key``'s bucket: 0.0 when taken, else the seconds until they will be
        there (nothing is taken). A cost above the bucket's size waits for a full bucket and takes it."""
        now = self.clock()
        cost = min(cost, self.per_minute)
        tokens, at = self._buckets.get(key, (self.per_minute, now))
        tokens = min(self.per_minute, tokens + (now - at) * self.rate)
        if tokens >= cost:
            if key not in self._buckets and len(self._buckets) >= self.size:
                self._forget_full(now)
            self._buckets[key] = (tokens - cost, now)
            return 0.0
        return (cost - tokens) / self.rate

    def _forget_full(self, now: float) -> None:
        """Drop the buckets that have refilled (they behave as new ones), or all when none has."""
        full_after = 60.0
        self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < full_after}
        if len(self._buckets) >= self.size:
            self._buckets.clear()


@dataclass(frozen=True)
class DeviceLimits:
    """The per-device limits of one worker (``EDGEDRIFT_CLOUD_HEARTBEATS_PER_MINUTE``,
    ``..._HEARTBEAT_BYTES_PER_MINUTE``, ``..._HISTORY_UPLOADS_PER_MINUTE``, ``..._HISTORY_BYTES_PER_MINUTE``);
    a heartbeat's bytes are those it stores (its JSON), whatever padding its body had."""

    heartbeats: RateLimiter = field(default_factory=lambda: RateLimiter(120))
    heartbeat_bytes: RateLimiter = field(default_factory=lambda: RateLimiter(64 * 2**10))
    history_uploads: RateLimiter = field(default_factory=lambda: RateLimiter(120))
    history_bytes: RateLimiter = field(default_factory=lambda: RateLimiter(16 * 2**20))


def too_fast(reason: str, detail: str, wait_s: float) -> JSONResponse:
    """429 ``{"detail", "reason"}`` with ``Retry-After`` in whole seconds (at least 1)."""
    return JSONResponse(
        {"detail": detail, "reason": reason},
        status_code=status.HTTP_429_TOO_MANY_REQUESTS,
        headers={"Retry-After": str(max(1, math.ceil(wait_s)))},
    )
