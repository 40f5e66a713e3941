"""Checkpoints written off the worker thread.

The worker encodes a device's snapshot (the only consistent moment) and hands the bytes here; one thread
writes them, each atomically (:meth:`CheckpointStore.write`: fsync and rename), and fsyncs each directory
once per batch instead of once per file. The worker never waits for a disk: at a gateway's restart 100
devices finish their warm-up and first model within seconds, and two fsyncs each (4 ms apiece while the
broker saves its own database) held every other device's messages for about a second.

Outcomes come back through :meth:`collect`, which runs each job's callback on the caller's thread (the
worker's housekeeping), so a device's counters and events stay the worker's alone. A newer checkpoint
of a file that is not written yet replaces it (its callback is dropped: only what reached the disk is
counted). :meth:`flush` waits until everything handed over is on disk (a stop). :attr:`held_bytes`
is what the writer holds in memory, so that a worker with time to spare does not hand over faster than
the disk takes them (a gateway's first checkpoints, encoded a hundred an idle turn, piled up ahead of the
disk, and the heap kept that memory resident afterwards: docs/benchmarks.md section 6).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgedrift_edge.checkpoints import CheckpointError, CheckpointStore

log = logging.getLogger(__name__)

#: What a job's callback is told: None when the checkpoint is on disk, else why not.
Done = Callable[[CheckpointError | None], None]


@dataclass(frozen=True, slots=True)
class _Job:
    store: CheckpointStore
    blob: bytes
    done: Done


class CheckpointWriter:
    """One thread writing the checkpoints it is handed (started with the first, ended by :meth:`close`)."""

    def __init__(self, name: str = "edgedrift-checkpoints") -> None:
        self.name = name
        self._cond = threading.Condition()
        self._pending: dict[Path, _Job] = {}
        self._writing = 0  # jobs taken by the thread and not finished yet
        self._finished: deque[tuple[Done, CheckpointError | None]] = deque()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._waiting_since: float | None = None  # jobs waited since then with no batch finished
        self._held = 0  # bytes of the blobs pending and in the batch being written

    def submit(self, store: CheckpointStore, blob: bytes, done: Done) -> None:
        """Write ``blob`` as ``store``'s checkpoint soon; ``done`` runs in a later :meth:`collect` (told
        of a failure when the writer was closed: the agent is stopping after a fatal error)."""
        with self._cond:
            if self._closed:
                self._finished.append((done, CheckpointError("not written: the agent is stopping")))
                return
            replaced = self._pending.get(store.path)
            self._held += len(blob) - (len(replaced.blob) if replaced is not None else 0)
            self._pending[store.path] = _Job(store, blob, done)
            if self._waiting_since is None:
                self._waiting_since = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def write_now(self, store: CheckpointStore, blob: bytes) -> None:
        """Write ``blob`` before returning (raises :class:`CheckpointError`), after anything of the same
        file the thread holds already and instead of what waits for it."""
        with self._cond:
            dropped = self._pending.pop(store.path, None)
            self._held -= len(dropped.blob) if dropped is not None else 0
            while self._writing:  # a batch in hand may hold an older one of this file
                self._cond.wait()
            store.save(None, blob)  # under the lock: the thread takes no batch meanwhile

    def collect(self) -> int:
        """Run the callbacks of the jobs finished since the last call (on this thread); how many."""
        count = 0
        while self._finished:
            done, error = self._finished.popleft()
            done(error)
            count += 1
        return count

    @property
    def busy(self) -> bool:
        """Jobs handed over and not written yet."""
        with self._cond:
            return bool(self._pending) or self._writing > 0

    @property
    def held_bytes(self) -> int:
        """Bytes of the checkpoints handed over and not written yet."""
        return self._held

    def stalled_s(self, now: float) -> float:
        """Seconds checkpoints have waited with no batch written (0 when none waits): a disk that does
        not answer shows here (the watchdog reports it), not in the worker's progress."""
        since = self._waiting_since
        return 0.0 if since is None else max(0.0, now - since)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every job handed over is written, then :meth:`collect`; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._writing:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            written = not self._pending and not self._writing
        self.collect()
        return written

    def close(self, timeout: float = 30.0) -> bool:
        """Flush, then end the thread; False when jobs were still unwritten at the timeout."""
        written = self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=max(0.0, timeout))
        if not written:
            log.error("checkpoints still unwritten after %.0f s", timeout)
        return written

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                batch = list(self._pending.values())
                self._pending.clear()
                self._writing = len(batch)
            outcomes = self._write(batch)
            with self._cond:
                self._finished.extend(outcomes)
                self._writing = 0
                self._held -= sum(len(job.blob) for job in batch)
                self._waiting_since = time.monotonic() if self._pending else None
                self._cond.notify_all()

    def _write(self, batch: list[_Job]) -> list[tuple[Done, CheckpointError | None]]:
        """Each file, then each directory once: a checkpoint counts as written once its rename is durable."""
        written: dict[Path, list[_Job]] = {}
        outcomes: list[tuple[Done, CheckpointError | None]] = []
        for job in batch:
            try:
                job.store.write(job.blob)
            except CheckpointError as exc:
                outcomes.append((job.done, exc))
            except Exception as exc:  # a bug must not end the thread that every device relies on
                log.exception("checkpoint of %s not written", job.store.device_id)
                outcomes.append((job.done, CheckpointError(f"cannot write {job.store.path}: {exc}")))
            else:
                written.setdefault(job.store.directory, []).append(job)
        for jobs in written.values():
            try:
                jobs[0].store.sync_directory()
            except CheckpointError as exc:
                outcomes += [(job.done, exc) for job in jobs]
            else:
                outcomes += [(job.done, None) for job in jobs]
        return outcomes
