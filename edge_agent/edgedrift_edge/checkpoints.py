"""Where a device's session is kept between runs: one file per device, written atomically.

The file is an :mod:`edgedrift.state` snapshot (JSON and numpy arrays; loading it cannot run code),
versioned by its format string. Writing goes to a temporary file that is fsynced and renamed over the
old one, and the directory is fsynced, so a crash leaves either the old or the new checkpoint. A file
that cannot be read back (truncated, crafted, another device's, another format) is moved aside to
``{device}.ckpt.corrupt-{UTC time}`` and reported; the agent then starts fresh instead of trusting it.

Beside it, ``{device}.counters.json`` holds the device's counters as last reported (written before every
status and heartbeat, and with every checkpoint), so that a process killed between two checkpoints does
not come back reporting smaller counters than it already did: counters only go forward, as the cloud's
and Prometheus' do. It is one page overwritten by one write, not fsynced: it survives a killed process;
after a power loss a torn or stale page is ignored or smaller, and the fsynced checkpoint's counters are
the floor.
"""

from __future__ import annotations

import contextlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from edgedrift import state
from edgedrift.ids import device_id_problem

FORMAT = "edgedrift.agent-checkpoint/2"
#: The counters file's fixed size: one page, written by one ``pwrite`` (whole or not at all when the
#: process is killed), the JSON padded with spaces.
COUNTERS_BYTES = 4096


class CheckpointError(RuntimeError):
    """A checkpoint could not be written (disk full, directory not writable, ...)."""


class CorruptCheckpointError(ValueError):
    """A checkpoint file that cannot be trusted; ``quarantined`` is where it was moved."""

    def __init__(self, reason: str, quarantined: Path | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.quarantined = quarantined


class CheckpointStore:
    """One device's checkpoint file in ``directory``, named by its device id: only a valid id (one path
    segment, :func:`edgedrift.ids.device_id_problem`) names a file, so none lands outside ``directory``."""

    def __init__(self, directory: str | Path, device_id: str) -> None:
        problem = device_id_problem(device_id)
        if problem is not None:
            raise ValueError(f"no checkpoint file for this id: {problem}")
        self.directory = Path(directory)
        self.device_id = device_id
        self.path = self.directory / f"{device_id}.ckpt"
        self.counters_path = self.directory / f"{device_id}.counters.json"

    def encode(self, tree: Any) -> bytes:
        """``tree`` as this device's checkpoint bytes (what :meth:`save` writes; a hand-over carries them
        to another gateway). Raises :class:`CheckpointError`."""
        try:
            return state.dumps(tree, {"format": FORMAT, "device_id": self.device_id})
        except state.StateError as exc:
            raise CheckpointError(f"cannot snapshot the session: {exc}") from None

    def decode(self, blob: bytes) -> Any:
        """The tree of checkpoint bytes of this device; :class:`state.StateError` when they are not."""
        tree, meta = state.loads(blob)
        if meta.get("format") != FORMAT:
            raise state.StateError(f"format {meta.get('format')!r}, expected {FORMAT!r}")
        if meta.get("device_id") != self.device_id:
            raise state.StateError(f"checkpoint of device {meta.get('device_id')!r}")
        return tree

    def save(self, tree: Any, blob: bytes | None = None) -> int:
        """Write ``tree`` (or its bytes ``blob``) atomically and durably; returns the file's size. Raises
        :class:`CheckpointError`."""
        blob = self.encode(tree) if blob is None else blob
        self.write(blob)
        self.sync_directory()
        return len(blob)

    def write(self, blob: bytes) -> None:
        """Put ``blob`` in place atomically: a temporary file, fsynced, renamed over the checkpoint. The
        rename is durable only once :meth:`sync_directory` returned (a writer of many files syncs their
        directory once). Raises :class:`CheckpointError`."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with tmp.open("wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise CheckpointError(f"cannot write {self.path}: {exc.strerror or exc}") from None

    def sync_directory(self) -> None:
        """Make the renames in the directory durable. Raises :class:`CheckpointError`."""
        try:
            fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise CheckpointError(f"cannot sync {self.directory}: {exc.strerror or exc}") from None

    def load(self) -> Any | None:
        """The saved tree, None when there is none; :class:`CorruptCheckpointError` (after quarantining the
        file) when it cannot be trusted."""
        try:
            blob = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CorruptCheckpointError(f"cannot read {self.path}: {exc.strerror or exc}", None) from None
        try:
            return self.decode(blob)
        except state.StateError as exc:
            raise CorruptCheckpointError(str(exc), self.quarantine()) from None

    def quarantine(self) -> Path | None:
        """Move the checkpoint aside with a timestamped name; None if that failed too."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        try:
            os.replace(self.path, target)
        except OSError:
            return None
        return target

    def save_counters(self, counters: dict[str, int]) -> None:
        """Overwrite the counters file in one write of :data:`COUNTERS_BYTES` at offset 0 (no truncation,
        no rename: on ext4 either forces the data out, 1–4 ms a write against 5 µs); OSError when it cannot
        be written."""
        body = json.dumps({"device_id": self.device_id, "counters": counters}, separators=(",", ":"))
        if len(body) > COUNTERS_BYTES:
            raise OSError(f"counters of {len(body)} bytes exceed the file's {COUNTERS_BYTES}")
        try:
            fd = os.open(self.counters_path, os.O_WRONLY | os.O_CREAT, 0o644)
        except FileNotFoundError:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.counters_path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, body.encode().ljust(COUNTERS_BYTES), 0)
        finally:
            os.close(fd)

    def load_counters(self) -> dict[str, int]:
        """The counters last saved ({} when there are none or they are not this device's integers)."""
        try:
            tree = json.loads(self.counters_path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(tree, dict) or tree.get("device_id") != self.device_id:
            return {}
        counters = tree.get("counters")
        if not isinstance(counters, dict):
            return {}
        return {k: v for k, v in counters.items() if isinstance(k, str) and type(v) is int and v >= 0}
