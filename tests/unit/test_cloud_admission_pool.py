"""Admission control's pieces in-process: the bounded pool of trainings, cancellation of a queued or
running job whose client left, the failed-auth limiter and the miss cache."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from edgedrift_cloud.admission import ClientGoneError, JobCancelledError, TrainingPool, checkpoint
from edgedrift_cloud.gate import FailureLimiter, MissCache


def test_the_pool_admits_slots_plus_queue_then_refuses() -> None:
    pool = TrainingPool(2, 3, processes=False)
    assert [pool.try_enter() for _ in range(6)] == [True] * 5 + [False]
    pool.leave()
    assert pool.try_enter() and pool.queued == 3 and pool.retry_after() >= 1
    assert pool.in_flight == 0, "places taken are not trainings running"


def test_a_queued_job_of_a_client_that_left_never_runs() -> None:
    pool = TrainingPool(1, 1, processes=False)
    release = threading.Event()
    ran: list[str] = []

    def busy() -> str:
        release.wait(5)
        return "done"

    async def gone() -> bool:
        return True

    async def here() -> bool:
        return False

    async def scenario() -> str:
        first = asyncio.create_task(pool.run(here, busy))
        await asyncio.sleep(0.05)
        with pytest.raises(ClientGoneError):
            await pool.run(gone, ran.append, "queued")
        release.set()
        return await first

    try:
        assert asyncio.run(scenario()) == "done"
        time.sleep(0.1)
        assert ran == []
    finally:
        pool.shutdown()


def _stoppable(started: threading.Event, seen: list[str]) -> str:
    """A job that runs until its checkpoint says stop (at most 5 s)."""
    started.set()
    deadline = time.monotonic() + 5
    try:
        while time.monotonic() < deadline:
            checkpoint()
            time.sleep(0.01)
    except JobCancelledError:
        seen.append("cancelled")
        raise
    return "ran out"


@pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
def test_a_running_job_whose_client_left_is_cancelled_and_holds_its_slot_until_it_stops(
    processes: bool,
) -> None:
    """Issue 28 row 4: the job is asked to stop through its slot's flag, counts as running (and keeps
    a place) until it has, and the slot then serves the next job."""
    pool = TrainingPool(1, 1, processes=processes)
    started = threading.Event() if not processes else None
    gone = False
    seen: list[str] = []

    async def disconnected() -> bool:
        return gone

    async def scenario() -> None:
        nonlocal gone
        assert pool.try_enter()
        if processes:
            job = asyncio.create_task(pool.run(disconnected, _process_job))
        else:
            assert started is not None
            job = asyncio.create_task(pool.run(disconnected, _stoppable, started, seen))
        await asyncio.sleep(0.5)
        assert (pool.in_flight, pool.waiting) == (1, 0)
        gone = True
        with pytest.raises(ClientGoneError):
            await job
        pool.leave()
        assert pool.pending == 1, "the cancelled job keeps its place while it stops"
        for _ in range(100):
            if pool.in_flight == 0:
                break
            await asyncio.sleep(0.05)
        assert (pool.in_flight, pool.pending) == (0, 0)
        gone = False
        assert await pool.run(disconnected, int, "7") == 7

    try:
        pool.start()
        start = time.monotonic()
        asyncio.run(scenario())
        assert time.monotonic() - start < 4.0, "the job ran on after its client left"
        if not processes:
            assert seen == ["cancelled"]
    finally:
        pool.shutdown()


def _process_job() -> str:
    return _stoppable(threading.Event(), [])


def test_failed_authentications_are_limited_per_address_and_window() -> None:
    limiter = FailureLimiter(limit=3, window_s=0.2)
    for _ in range(3):
        assert limiter.blocked_for("10.0.0.1") == 0.0
        limiter.fail("10.0.0.1")
    assert 0 < limiter.blocked_for("10.0.0.1") <= 0.2
    assert limiter.blocked_for("10.0.0.2") == 0.0
    time.sleep(0.25)
    assert limiter.blocked_for("10.0.0.1") == 0.0


def test_the_miss_cache_remembers_for_its_ttl_and_forgets_on_registration() -> None:
    misses = MissCache(ttl=60.0)
    misses.add("h1")
    assert misses.known_miss("h1") and not misses.known_miss("h2")
    misses.clear()
    assert not misses.known_miss("h1")
    off = MissCache(ttl=0.0)
    off.add("h1")
    assert not off.known_miss("h1")


def test_pool_processes_run_below_the_service_priority() -> None:
    """Trainings are batch work: the pool's processes run ``nice`` steps below the service process."""
    pool = TrainingPool(1, 0, processes=True, nice=5)

    async def here() -> bool:
        return False

    try:
        pool.start()
        assert asyncio.run(pool.run(here, os.nice, 0)) == min(19, os.nice(0) + 5)
    finally:
        pool.shutdown()
