"""The checkpoint writer (``edgedrift_edge.checkpoint_writer``): the worker hands a checkpoint over and
goes on while the disk is busy; outcomes come back on the caller's thread; the newest bytes of a file win;
a disk that does not answer is reported by the watchdog."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from edgedrift_edge.checkpoint_writer import CheckpointWriter
from edgedrift_edge.checkpoints import CheckpointError, CheckpointStore
from edgedrift_edge.watchdog import watch


class HeldStore(CheckpointStore):
    """A store whose writes wait until ``disk`` is set: a slow or busy disk."""

    disk = threading.Event()

    def write(self, blob: bytes) -> None:
        assert self.disk.wait(10.0)
        super().write(blob)


@pytest.fixture
def held() -> Iterator[threading.Event]:
    HeldStore.disk.clear()
    yield HeldStore.disk
    HeldStore.disk.set()


def test_a_submit_returns_while_the_disk_is_held_and_the_outcome_comes_with_collect(
    tmp_path: Path, held: threading.Event
) -> None:
    writer = CheckpointWriter()
    store = HeldStore(tmp_path, "dev-1")
    seen: list[CheckpointError | None] = []
    writer.submit(store, b"one", seen.append)  # the disk is busy: the caller does not wait for it
    assert writer.busy and not store.path.exists()
    assert not writer.flush(0.2), "a flush waits for the disk"
    assert seen == []
    assert writer.stalled_s(time.monotonic()) >= 0.2, "the wait shows (the watchdog reports it)"
    held.set()
    assert writer.flush(10.0)
    assert writer.stalled_s(time.monotonic()) == 0.0
    assert store.path.read_bytes() == b"one" and seen == [None]
    assert writer.collect() == 0, "each outcome is handed back once"
    writer.close()


def test_a_newer_checkpoint_replaces_one_not_written_yet(tmp_path: Path, held: threading.Event) -> None:
    writer = CheckpointWriter()
    store = HeldStore(tmp_path, "dev-1")
    seen: list[str] = []
    writer.submit(store, b"old", lambda e: seen.append("old"))
    writer.submit(store, b"new", lambda e: seen.append("new" if e is None else "failed"))
    held.set()
    assert writer.flush(10.0)
    assert store.path.read_bytes() == b"new"
    assert seen in (["new"], ["old", "new"]), "the old one is counted only if it reached the disk"
    writer.close()


def test_the_writer_counts_the_bytes_it_holds_until_they_are_on_disk(
    tmp_path: Path, held: threading.Event
) -> None:
    """What the worker asks before encoding more checkpoints while idle: blobs handed over and in hand,
    a replaced one no longer, written ones no longer."""
    writer = CheckpointWriter()
    one, two = HeldStore(tmp_path, "dev-1"), HeldStore(tmp_path, "dev-2")
    writer.submit(one, b"x" * 100, lambda e: None)
    writer.submit(two, b"y" * 30, lambda e: None)
    assert writer.held_bytes == 130
    writer.submit(two, b"z" * 10, lambda e: None)  # replaces dev-2's, if the thread has not taken it
    assert writer.held_bytes in (110, 140)
    held.set()
    assert writer.flush(10.0)
    assert writer.held_bytes == 0
    writer.write_now(one, b"w" * 50)
    assert writer.held_bytes == 0
    writer.close()


def test_a_batch_of_devices_is_written_whole_with_one_directory_sync(
    tmp_path: Path, held: threading.Event
) -> None:
    synced: list[Path] = []

    class Counted(HeldStore):
        def sync_directory(self) -> None:
            synced.append(self.directory)
            super().sync_directory()

    writer = CheckpointWriter()
    stores = [Counted(tmp_path, f"dev-{i}") for i in range(20)]
    seen: list[CheckpointError | None] = []
    for i, store in enumerate(stores):  # the first may be in hand, the others wait for the next batch
        writer.submit(store, b"x" * i, seen.append)
    held.set()
    assert writer.flush(10.0)
    assert [s.path.read_bytes() for s in stores] == [b"x" * i for i in range(20)]
    assert seen == [None] * 20
    assert len(synced) <= 2, f"{len(synced)} directory syncs for 20 files"
    assert not list(tmp_path.glob("*.tmp"))
    writer.close()


def test_a_failed_write_is_reported_to_its_device_and_the_others_are_written(tmp_path: Path) -> None:
    """A directory that is a file cannot hold a checkpoint (whoever writes, root included)."""
    (tmp_path / "file").write_bytes(b"")
    writer = CheckpointWriter()
    seen: dict[str, CheckpointError | None] = {}
    writer.submit(CheckpointStore(tmp_path / "file", "dev-1"), b"a", lambda e: seen.__setitem__("dev-1", e))
    writer.submit(CheckpointStore(tmp_path, "dev-2"), b"b", lambda e: seen.__setitem__("dev-2", e))
    assert writer.flush(10.0)
    assert isinstance(seen["dev-1"], CheckpointError) and "cannot write" in str(seen["dev-1"])
    assert seen["dev-2"] is None and (tmp_path / "dev-2.ckpt").read_bytes() == b"b"
    writer.close()


def test_write_now_lands_after_what_the_thread_holds_and_instead_of_what_waits(
    tmp_path: Path, held: threading.Event
) -> None:
    writer = CheckpointWriter()
    store = HeldStore(tmp_path, "dev-1")
    seen: list[CheckpointError | None] = []
    writer.submit(store, b"stale", seen.append)
    threading.Timer(0.3, held.set).start()  # the thread holds "stale" (or it waits) while write_now comes
    writer.write_now(store, b"handed over")  # a hand-over's bytes must not be overwritten by an older one
    assert writer.flush(10.0)
    assert store.path.read_bytes() == b"handed over"
    writer.close()
    writer.submit(store, b"late", seen.append)  # after a stop: a failure to report, not an exception
    assert writer.collect() == 1 and isinstance(seen[-1], CheckpointError)
    assert store.path.read_bytes() == b"handed over"


class WatchedAgent:
    """What the watchdog reads of an agent and what it calls (``events`` records them): an agent whose
    messages all moved, with a checkpoint writer."""

    def __init__(self, writer: CheckpointWriter) -> None:
        self.checkpoints = writer
        self.settings = SimpleNamespace(watchdog_s=0.4)
        self.stopping = threading.Event()
        self.progress, self.waiting = 0, 0
        self.fatal: str | None = None
        self.degraded: str | None = None
        self.events: list[tuple[str, str]] = []

    def event_all(self, kind: str, reason: str) -> None:
        self.events.append((kind, reason))

    def publish_all_status(self, state: str | None) -> None:
        self.events.append(("status", str(state)))


def test_the_watchdog_reports_a_disk_that_does_not_answer_and_its_recovery(
    tmp_path: Path, held: threading.Event
) -> None:
    """The worker no longer waits for the disk, so its progress cannot show a hung one: the writer's
    stalled time does (``degraded``, then ``recovered`` once the checkpoints are written)."""
    writer = CheckpointWriter()
    agent = WatchedAgent(writer)
    thread = threading.Thread(target=watch, args=(agent, threading.current_thread()), daemon=True)
    thread.start()
    writer.submit(HeldStore(tmp_path, "dev-1"), b"x", lambda e: None)
    deadline = time.monotonic() + 10.0
    # The watchdog sets ``degraded`` before it reports it: wait for the report itself.
    while ("status", "degraded") not in agent.events and time.monotonic() < deadline:
        time.sleep(0.05)
    assert agent.degraded is not None and "checkpoints not written" in agent.degraded
    assert ("status", "degraded") in agent.events
    held.set()
    assert writer.flush(10.0)
    while ("status", "None") not in agent.events and time.monotonic() < deadline:
        time.sleep(0.05)
    assert agent.degraded is None and agent.events[-2][0] == "recovered"
    agent.stopping.set()
    thread.join(5.0)
    writer.close()
