"""The fleet views' cache: computed at most once per max age, served stale while one refresh runs,
computed while the caller waits only when missing or very old, once for any number of waiting callers."""

from __future__ import annotations

import asyncio
import threading

import anyio

from edgedrift_cloud.view_cache import STALE_FACTOR, ViewCache


class CountingView:
    """A blocking view that returns how many times it ran; it can be held until released."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()
        self.release.set()

    def __call__(self) -> int:
        self.release.wait(5)
        self.calls += 1
        return self.calls


def test_fresh_values_come_from_memory_and_stale_ones_refresh_in_the_background() -> None:
    async def scenario() -> None:
        view, cache, limiter = CountingView(), ViewCache[int](0.2), anyio.CapacityLimiter(2)
        assert await cache.get(view, limiter) == 1
        assert await cache.get(view, limiter) == 1 and view.calls == 1
        await asyncio.sleep(0.25)
        view.release.clear()
        assert await cache.get(view, limiter) == 1  # stale, served at once; a refresh is running
        assert await cache.get(view, limiter) == 1 and view.calls == 1  # one refresh, not two
        view.release.set()
        await asyncio.sleep(0.1)
        assert await cache.get(view, limiter) == 2 and view.calls == 2

    asyncio.run(scenario())


def test_a_very_old_value_is_recomputed_while_the_callers_wait_once() -> None:
    async def scenario() -> None:
        view, cache, limiter = CountingView(), ViewCache[int](0.05), anyio.CapacityLimiter(4)
        assert await cache.get(view, limiter) == 1
        await asyncio.sleep(0.05 * STALE_FACTOR + 0.05)
        answers = await asyncio.gather(*(cache.get(view, limiter) for _ in range(5)))
        assert answers == [2] * 5 and view.calls == 2

    asyncio.run(scenario())


def test_max_age_zero_computes_every_time() -> None:
    async def scenario() -> None:
        view, cache, limiter = CountingView(), ViewCache[int](0.0), anyio.CapacityLimiter(1)
        assert [await cache.get(view, limiter) for _ in range(3)] == [1, 2, 3]

    asyncio.run(scenario())
