"""Child processes: waiting until a server answers, stopping one (a signal, then SIGKILL when it does not
exit), the tail of its log, and the base of the broker processes the harness starts (a context manager
around start and stop)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self

import httpx

from edgedrift_harness.ports import wait_listening

__all__ = ["Process", "ServerProcess", "log_tail", "stop_process", "wait_answering"]


class Process(Protocol):
    """What the harness uses of a child process: a :class:`subprocess.Popen`, or a container seen as one
    (:class:`edgedrift_harness.containers.ContainerProcess`)."""

    @property
    def returncode(self) -> int | None: ...

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def wait_answering(url: str, proc: Process, timeout: float) -> bool:
    """:func:`~edgedrift_harness.ports.wait_listening` until ``url`` answers 200 (True), or until ``proc``
    exits or ``timeout`` passes (False). One HTTP client serves the whole wait: creating one loads the CA
    store, about 28 ms of CPU, far more than a poll, and the server starting beside it needs that CPU."""
    with httpx.Client(timeout=1.0) as http:

        def answers() -> bool:
            with contextlib.suppress(httpx.TransportError):
                return http.get(url).status_code == 200
            return False

        port = httpx.URL(url).port
        assert port is not None, f"{url} names no port"
        return wait_listening(port, timeout, ready=answers, alive=lambda: proc.poll() is None)


def stop_process(proc: Process | None, timeout: float = 30.0, sig: int = signal.SIGTERM) -> int | None:
    """Send ``sig`` (SIGTERM: a clean stop) and wait; SIGKILL after ``timeout``. The exit code (None for no
    process); a process that already exited is only reaped."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    return proc.returncode


def log_tail(path: Path, lines: int = 30, empty: str = "(empty log)") -> str:
    """The last ``lines`` lines of a log file (``empty`` when it is missing or empty)."""
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:]) or empty


class ServerProcess:
    """A server the harness runs as a child process with a log file: ``with`` starts it (unless it runs)
    and stops it; subclasses give :meth:`start` and :meth:`stop`."""

    proc: Process | None
    log_path: Path

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)

    def __enter__(self) -> Self:
        return self.start() if self.proc is None else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
