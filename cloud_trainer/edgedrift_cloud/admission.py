"""Admission control for trainings: a process pool off the event loop and off the GIL, a bounded number
of trainings in flight per worker and a bounded queue; beyond them a request is refused at once (429
with ``Retry-After``), so a recompute storm cannot starve health checks or pile up unbounded work.

A queued training whose client has gone is cancelled before it starts.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import TypeVar

import anyio

T = TypeVar("T")

#: How often a waiting request checks whether its client is still there.
DISCONNECT_POLL_S = 0.25


class ClientGoneError(Exception):
    """The client disconnected before its training finished (not an error: nothing to answer)."""


#: How often a pool process checks that the service process that owns it is still alive.
OWNER_POLL_S = 1.0


def _warm() -> None:
    """Import the trainers in a pool process before the first request needs them."""
    import edgedrift.training.window  # noqa: F401


def _adopt(owner: int, nice: int) -> None:
    """Pool-process initializer: lower the process's priority by ``nice``, import the trainers and
    exit when ``owner`` (the service process) is gone. A pool process waits on its call queue forever
    otherwise, and keeps the fork server alive with it, when its service is killed (SIGKILL, OOM)
    without a shutdown."""
    if nice > 0:
        os.nice(nice)
    _warm()
    threading.Thread(target=_exit_without, args=(owner,), name="owner-watch", daemon=True).start()


def _exit_without(owner: int) -> None:
    while True:
        time.sleep(OWNER_POLL_S)
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            os._exit(0)
        except PermissionError:
            continue


class TrainingPool:
    """``slots`` trainings run at once (processes, or threads when ``processes`` is False) and at most
    ``queue`` more wait; :meth:`try_enter` refuses the rest. Pool processes run ``nice`` steps below
    the service, so trainings never delay what the event loop answers."""

    def __init__(self, slots: int, queue: int, *, processes: bool = True, nice: int = 0) -> None:
        self.slots = slots
        self.queue = queue
        self.processes = processes
        self.nice = nice
        self.pending = 0
        #: Moving average of a pool job's time from submission to result in seconds (Retry-After).
        self.mean_s = 0.01
        self._executor: Executor | None = None
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self.slots + self.queue

    @property
    def started(self) -> bool:
        """Whether the pool is up (``/readyz`` is 503 until it is, so no first training waits for it)."""
        return self._executor is not None

    @property
    def in_flight(self) -> int:
        return min(self.pending, self.slots)

    @property
    def queued(self) -> int:
        """Admitted requests beyond the running slots (the queue's length, this request included)."""
        return max(0, self.pending - self.slots)

    def start(self) -> None:
        """Create the pool: a fork server that imports the trainers once, whose children run the
        trainings (cheaper than a fresh interpreter per slot); threads when ``processes`` is False."""
        with self._lock:
            if self._executor is not None:
                return
            if self.processes:
                context = multiprocessing.get_context("forkserver")
                context.set_forkserver_preload(["edgedrift.training.window"])
                pool = ProcessPoolExecutor(
                    self.slots, mp_context=context, initializer=_adopt, initargs=(os.getpid(), self.nice)
                )
                for _ in range(self.slots):
                    pool.submit(_warm).result()
                self._executor = pool
            else:
                self._executor = ThreadPoolExecutor(self.slots, thread_name_prefix="training")

    def start_in_background(self) -> None:
        """:meth:`start` on a thread, so the service answers (``/healthz``, ``/readyz``) while the
        pool comes up; the first trainings wait for it."""
        threading.Thread(target=self.start, name="training-pool-start", daemon=True).start()

    def shutdown(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def try_enter(self) -> bool:
        """Take a place (running or queued); False when every place is taken."""
        if self.pending >= self.capacity:
            return False
        self.pending += 1
        return True

    def leave(self) -> None:
        self.pending -= 1

    def retry_after(self) -> int:
        """Seconds a refused client should wait: about the time the queue takes to turn over, which is
        the time a job spends from submission to its result (:attr:`mean_s`, waiting included, and
        the queue is full when a client is refused), at least 1."""
        return max(1, math.ceil(self.mean_s))

    async def run(
        self, disconnected: Callable[[], Awaitable[bool]], fn: Callable[..., T], *args: object
    ) -> T:
        """Run ``fn(*args)`` in the pool; :class:`ClientGoneError` (and the job cancelled if it has not
        started) when ``disconnected()`` turns true while waiting."""
        if self._executor is None:
            await anyio.to_thread.run_sync(self.start)
        assert self._executor is not None
        start = time.perf_counter()
        future: Future[T] = self._executor.submit(fn, *args)
        waiting = asyncio.wrap_future(future)
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=DISCONNECT_POLL_S)
            if done:
                self.mean_s += 0.1 * (time.perf_counter() - start - self.mean_s)
                return waiting.result()
            if await disconnected():
                future.cancel()
                waiting.cancel()
                raise ClientGoneError
