"""Admission control for trainings: a process pool off the event loop and off the GIL, a bounded number
of trainings in flight per worker and a bounded queue; beyond them a request is refused at once (429
with ``Retry-After``), so a recompute storm cannot starve health checks or pile up unbounded work.

A request takes a place only once its whole body is in, and waits for a free slot in this process (the
pool's own queue stays empty), so a job starts, and loads what it needs, only when it runs. A waiting
training whose client has gone never starts; a running one is asked to stop through its slot's flag on
a cancel board shared with the pool's processes, which the training code polls
(:func:`cancel_requested`, :func:`checkpoint`), and keeps its place until it has stopped, so the
metrics count what really runs.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, MutableSequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio

T = TypeVar("T")

#: How often a waiting request checks whether its client is still there.
DISCONNECT_POLL_S = 0.25


class ClientGoneError(Exception):
    """The client disconnected before its training finished (not an error: nothing to answer)."""


class JobCancelledError(Exception):
    """Raised inside a job by :func:`checkpoint` when its client has gone."""


#: The cancel board of this pool process (set by the initializer; threads get theirs per job).
_BOARD: MutableSequence[int] | None = None
_job = threading.local()


def cancel_requested() -> bool:
    """Whether the job running in this process (or thread) was asked to stop."""
    gone: Callable[[], bool] | None = getattr(_job, "gone", None)
    if gone is not None:
        return gone()
    board, slot = getattr(_job, "board", None), getattr(_job, "slot", None)
    return board is not None and slot is not None and board[slot] != 0


@contextmanager
def watching(gone: Callable[[], bool]) -> Iterator[None]:
    """Run a job in this thread that :func:`cancel_requested` stops once ``gone()`` is true (a training
    worker's job that nobody waits for any more)."""
    _job.gone = gone
    try:
        yield
    finally:
        _job.gone = None


def checkpoint() -> None:
    """Raise :class:`JobCancelledError` when the running job was asked to stop (training code calls it
    between steps)."""
    if cancel_requested():
        raise JobCancelledError


def _run_job(board: MutableSequence[int] | None, slot: int, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    """A job in its slot: :func:`cancel_requested` reads the slot's flag meanwhile."""
    _job.board, _job.slot = board if board is not None else _BOARD, slot
    try:
        return fn(*args)
    finally:
        _job.board = _job.slot = None


#: How often a pool process checks that the service process that owns it is still alive.
OWNER_POLL_S = 1.0


def _warm() -> None:
    """Import the trainers in a pool process before the first request needs them."""
    import edgedrift.training.window  # noqa: F401


def _adopt(owner: int, nice: int, board: MutableSequence[int] | None = None) -> None:
    """Pool-process initializer: lower the process's priority by ``nice``, keep the cancel ``board``,
    import the trainers and exit when ``owner`` (the service process) is gone. A pool process waits on
    its call queue forever otherwise, and keeps the fork server alive with it, when its service is
    killed (SIGKILL, OOM) without a shutdown."""
    global _BOARD
    _BOARD = board
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
        #: Places taken: requests admitted, and jobs still running after their client left.
        self.pending = 0
        #: Jobs running in the pool now, and requests waiting for a slot.
        self.running = 0
        self.waiting = 0
        #: Moving average of a pool job's time from submission to result in seconds (Retry-After).
        self.mean_s = 0.01
        #: Called whenever :attr:`running` or :attr:`waiting` changes (the metrics' gauges).
        self.on_change: Callable[[], None] = lambda: None
        self._executor: Executor | None = None
        self._lock = threading.Lock()
        context = multiprocessing.get_context("forkserver")
        self._board: MutableSequence[int] = context.RawArray("b", slots) if processes else [0] * slots
        self._free = list(range(slots))
        self._slots: asyncio.Semaphore | None = None

    @property
    def capacity(self) -> int:
        return self.slots + self.queue

    @property
    def started(self) -> bool:
        """Whether the pool is up (``/readyz`` is 503 until it is, so no first training waits for it)."""
        return self._executor is not None

    @property
    def in_flight(self) -> int:
        """Jobs running in the pool (a cancelled one until it has stopped)."""
        return self.running

    @property
    def queued(self) -> int:
        """Places beyond the slots (the queue's length, a request admitted now included)."""
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
                    self.slots,
                    mp_context=context,
                    initializer=_adopt,
                    initargs=(os.getpid(), self.nice, self._board),
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
        """Run ``fn(*args)`` in a slot of the pool once one is free; :class:`ClientGoneError` when
        ``disconnected()`` turns true meanwhile: a waiting job never starts, a running one is asked to
        stop (:func:`checkpoint`) and keeps its slot and a place until it has."""
        if self._executor is None:
            await anyio.to_thread.run_sync(self.start)
        assert self._executor is not None
        start = time.perf_counter()
        slot = await self._take_slot(disconnected)
        self._board[slot] = 0
        loop = asyncio.get_running_loop()
        board = None if self.processes else self._board
        job = _Job(slot)
        try:
            future: Future[T] = self._executor.submit(_run_job, board, slot, fn, args)
        except BaseException:
            self._job_done(job)
            raise
        future.add_done_callback(lambda _f: loop.call_soon_threadsafe(self._job_done, job))
        waiting = asyncio.wrap_future(future)
        waiting.add_done_callback(_retrieve)
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=DISCONNECT_POLL_S)
            if done:
                self.mean_s += 0.1 * (time.perf_counter() - start - self.mean_s)
                return waiting.result()
            if await disconnected():
                if not job.finished:
                    self._board[slot] = 1
                    job.orphaned = True
                    self.pending += 1  # the job's place until it has stopped; the request's goes now
                raise ClientGoneError

    async def _take_slot(self, disconnected: Callable[[], Awaitable[bool]]) -> int:
        """Wait (in order) for a free slot, watching the client."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.slots)
        slots = self._slots
        acquiring = asyncio.ensure_future(slots.acquire())
        self.waiting += 1
        self.on_change()
        try:
            while True:
                done, _ = await asyncio.wait({acquiring}, timeout=DISCONNECT_POLL_S)
                if done:
                    break
                if await disconnected():
                    raise ClientGoneError
        except BaseException:
            if not acquiring.cancel() and not acquiring.cancelled() and acquiring.exception() is None:
                slots.release()
            raise
        finally:
            self.waiting -= 1
        self.running += 1
        self.on_change()
        return self._free.pop()

    def _job_done(self, job: _Job) -> None:
        job.finished = True
        self._board[job.slot] = 0
        self._free.append(job.slot)
        self.running -= 1
        if job.orphaned:
            self.pending -= 1
        assert self._slots is not None
        self._slots.release()
        self.on_change()


@dataclass
class _Job:
    """A job in a slot: whether it has finished, and whether its client left while it ran."""

    slot: int
    finished: bool = False
    orphaned: bool = False


def _retrieve(done: asyncio.Future[Any]) -> None:
    """Mark the outcome of a job nobody waits for any more (its client left) as seen."""
    if not done.cancelled():
        done.exception()
