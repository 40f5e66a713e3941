"""One I/O thread for any number of MQTT connections: a ``select`` over all their sockets.

Why. A gateway with a broker session per device (:mod:`edgedrift_edge.transport.sessions`) holds one
connection per device. With a thread per connection, the worker's publishes of one round went to a hundred
threads, and each wake-up handed the GIL to another of them: the restart drain of docs/benchmarks.md §23
ran 4.6 times slower than over one connection, the worker's time spent in those hand-overs. One thread for
all of them is woken at most once per turn, however many connections the worker published on.

How. Each turn asks every connection what it waits for (:meth:`IoDriven.io_poll`: its socket, whether to
read or write, how long until its next deadline), waits on those sockets and the loop's own wake-up
socket pair (``poll``, which takes any descriptor; ``select``, limited to descriptors below 1,024, only
where ``poll`` is missing), then lets each connection do its part (:meth:`IoDriven.io_ready`: read,
write, keep-alive, what paho reported). Connecting blocks (TCP, TLS handshake), so a connection connects
in a short-lived thread of its own and tells the loop when it is done. The loop's thread ends when it has
no connection left, and starts again with the next one added.
"""

from __future__ import annotations

import contextlib
import math
import select
import socket
import threading
import time
from typing import Any, Protocol

#: Longest wait in one ``select``: how late a stop or a deadline can be noticed at worst.
LOOP_TIMEOUT_S = 0.25
#: Seconds between two keep-alive checks of a connection (paho's ``loop_misc``).
MISC_EVERY_S = 0.05
_IN = getattr(select, "POLLIN", 1)
_OUT = getattr(select, "POLLOUT", 4)
#: An error or a hang-up: the connection's own read (or write) then finds out what happened.
_FAULT = getattr(select, "POLLERR", 8) | getattr(select, "POLLHUP", 16) | getattr(select, "POLLNVAL", 32)


def wait_for_sockets(reads: list[Any], writes: list[Any], timeout: float) -> tuple[set[Any], set[Any]]:
    """The sockets of ``reads`` ready to read and of ``writes`` ready to write within ``timeout`` seconds
    (a socket that failed, or was closed meanwhile, counts as ready: its own read or write reports it)."""
    if not hasattr(select, "poll"):
        try:
            r, w, _ = select.select(reads, writes, [], timeout)
        except (OSError, ValueError, TypeError):
            return set(reads), set(writes)
        return set(r), set(w)
    poller = select.poll()
    by_fd: dict[int, Any] = {}
    broken: set[Any] = set()
    masks: dict[int, int] = {}
    for sock, mask in [*((s, _IN) for s in reads), *((s, _OUT) for s in writes)]:
        try:
            fd = sock.fileno()
        except (OSError, ValueError):
            fd = -1
        if fd < 0:
            broken.add(sock)
            continue
        by_fd[fd] = sock
        masks[fd] = masks.get(fd, 0) | mask
    for fd, mask in masks.items():
        poller.register(fd, mask)
    events = poller.poll(0 if broken else math.ceil(max(0.0, timeout) * 1000))
    readable, writable = set(broken & set(reads)), set(broken & set(writes))
    for fd, event in events:
        sock = by_fd[fd]
        if event & (_IN | _FAULT) and masks[fd] & _IN:
            readable.add(sock)
        if event & (_OUT | _FAULT) and masks[fd] & _OUT:
            writable.add(sock)
    return readable, writable


class IoDriven(Protocol):
    """A connection the loop drives (:class:`~edgedrift_edge.transport.connection.MqttTransport`)."""

    @property
    def io_ended(self) -> bool: ...

    def io_adopt(self, ident: int) -> None: ...

    def io_poll(self, now: float) -> tuple[Any, bool, bool, float]: ...

    def io_ready(self, readable: bool, writable: bool, misc: bool) -> None: ...

    def io_failed(self, exc: Exception) -> None: ...


class IoLoop:
    """The I/O thread of one or more connections (module docstring); :meth:`wake` breaks its wait."""

    def __init__(self, name: str = "edgedrift-mqtt") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._added: list[IoDriven] = []
        self._thread: threading.Thread | None = None
        self._woken = False
        self._waker_r, self._waker_w = socket.socketpair()
        self._waker_r.setblocking(False)
        self._waker_w.setblocking(False)
        #: The loop thread's ident (publishes from it need no wake-up).
        self.ident: int | None = None

    def add(self, connection: IoDriven) -> None:
        """Drive ``connection`` from the next turn on (starting the thread if it is not running)."""
        with self._lock:
            self._added.append(connection)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
        self.wake()

    def wake(self) -> None:
        """Break the loop's wait, once until its next turn (any thread)."""
        if not self._woken:
            self._woken = True
            with contextlib.suppress(OSError):  # BlockingIOError: a wake-up is waiting already
                self._waker_w.send(b"\0")

    @property
    def running(self) -> bool:
        return self._thread is not None

    def _run(self) -> None:
        self.ident = threading.get_ident()
        connections: list[IoDriven] = []
        misc_at = 0.0
        while True:
            with self._lock:
                for connection in self._added:
                    connection.io_adopt(self.ident)
                connections += self._added
                self._added = []
                connections = [c for c in connections if not c.io_ended]
                if not connections:
                    self._thread = None
                    return
            now = time.monotonic()
            misc = now - misc_at >= MISC_EVERY_S
            if misc:
                misc_at = now
            polled: list[tuple[IoDriven, Any]] = []
            reads: list[Any] = [self._waker_r]
            writes: list[Any] = []
            timeout = LOOP_TIMEOUT_S
            for connection in connections:
                try:
                    sock, read, write, wait = connection.io_poll(now)
                except Exception as exc:
                    connection.io_failed(exc)
                    continue
                timeout = min(timeout, wait)
                if sock is None:
                    continue
                polled.append((connection, sock))
                if read:
                    reads.append(sock)
                if write:
                    writes.append(sock)
            readable, writable = wait_for_sockets(reads, writes, timeout)
            if self._waker_r in readable:
                with contextlib.suppress(OSError):
                    self._waker_r.recv(4096)
                self._woken = False  # after the read: a wake-up from now on sends again
            for connection, sock in polled:
                try:
                    connection.io_ready(sock in readable, sock in writable, misc)
                except Exception as exc:
                    connection.io_failed(exc)
