"""One I/O thread for any number of MQTT connections, its work per turn in proportion to the connections
that have something to do.

Why. A gateway with a broker session per device (:mod:`edgedrift_edge.transport.sessions`) holds one
connection per device. With a thread per connection, the worker's publishes of one round went to a hundred
threads, and each wake-up handed the GIL to another of them: the restart drain of docs/benchmarks.md §23
ran 4.6 times slower than over one connection, the worker's time spent in those hand-overs. One thread for
all of them is woken at most once per turn, however many connections the worker published on. Asking
every connection at every turn made a turn cost ~7 µs a connection (a third of a core for 2,000 messages a
second over 100 sessions), so a turn asks only the connections that have something to do.

How. The sockets stay registered with a selector (``selectors.DefaultSelector``: epoll on Linux, any
descriptor number). A connection is asked what it waits for (:meth:`IoDriven.io_poll`: its socket, whether
to read or write, how long until a deadline of its own) when another thread woke the loop for it
(:meth:`IoLoop.wake`: a publish, an acknowledgement, a stop, a connect done), when the loop handled it in the
last turn, when its deadline came, and every :data:`LOOP_TIMEOUT_S` for all (keep-alive). A connection
whose socket is ready, or whose deadline came, then does its part (:meth:`IoDriven.io_ready`: read, write,
keep-alive, what paho reported). Connecting blocks (TCP, TLS handshake), so a connection connects in a
short-lived thread of its own and wakes the loop when it is done. The loop's thread ends when it has no
connection left, and starts again with the next one added.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections import deque
from typing import Any, Protocol

#: Seconds between two visits of every connection (its keep-alive, paho's ``loop_misc``; a stop or a
#: deadline missed otherwise is noticed by then at worst).
LOOP_TIMEOUT_S = 0.25
#: The longest a CPU-bound thread waits for the loop's turn to end (:func:`yield_to`), and its naps.
YIELD_S = 0.002
YIELD_NAP_S = 0.00005
_READ, _WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE


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
        #: Connections another thread woke the loop for (appended by any thread, taken by the loop).
        self._dirty: deque[IoDriven] = deque()
        self._open()
        #: Connections whose I/O code raised: told once (:meth:`IoDriven.io_failed`), never asked again.
        self._broken: set[IoDriven] = set()
        #: The loop thread's ident (publishes from it need no wake-up).
        self.ident: int | None = None
        #: Whether the loop is in a turn (doing its connections' I/O), not waiting for one (:func:`yield_to`).
        self.serving = False

    def _open(self) -> None:
        """The wake-up socket pair and the selector of a run of the thread (closed when it ends)."""
        self._woken = False
        self._waker_r, self._waker_w = socket.socketpair()
        self._waker_r.setblocking(False)
        self._waker_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._waker_r, _READ, None)
        #: A connection's registered socket, its descriptor number and the events asked for.
        self._registered: dict[IoDriven, tuple[Any, int, int]] = {}
        #: When a connection's own deadline comes (a reconnect, a CONNACK, bytes already read).
        self._due: dict[IoDriven, float] = {}
        self._closed = False

    def _close(self) -> None:
        self._closed = True
        self._selector.close()
        self._waker_r.close()
        self._waker_w.close()

    def add(self, connection: IoDriven) -> None:
        """Drive ``connection`` from the next turn on (starting the thread if it is not running)."""
        with self._lock:
            self._added.append(connection)
            if self._thread is None:
                if self._closed:
                    self._open()
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
        self.wake(connection)

    def wake(self, connection: IoDriven | None = None) -> None:
        """Break the loop's wait (any thread), and have it ask ``connection`` what it waits for."""
        if connection is not None:
            self._dirty.append(connection)
        if not self._woken:
            self._woken = True
            with contextlib.suppress(OSError):  # a wake-up waiting already, or the thread has ended
                self._waker_w.send(b"\0")

    @property
    def running(self) -> bool:
        return self._thread is not None

    def _run(self) -> None:
        self.ident = threading.get_ident()
        connections: list[IoDriven] = []
        visited_at = 0.0
        again: set[IoDriven] = set()  # handled in the last turn: what they wait for may have changed
        while True:
            now = time.monotonic()
            every = now - visited_at >= LOOP_TIMEOUT_S
            with self._lock:
                for connection in self._added:
                    connection.io_adopt(self.ident)
                connections += self._added
                self._added = []
                if every:
                    visited_at = now
                    for connection in connections:
                        if connection.io_ended:
                            self._interest(connection, None, False, False)
                            self._due.pop(connection, None)
                            self._broken.discard(connection)
                    connections = [c for c in connections if not c.io_ended]
                    if not connections and not self._dirty:
                        self._thread = None
                        self.serving = False
                        self._close()  # nothing left open once the last connection ended
                        return
            dirty = self._take_dirty()
            asked = set(connections) if every else again | dirty | self._came_due(now)
            for connection in asked - self._broken if self._broken else asked:
                try:
                    sock, read, write, wait = connection.io_poll(now)
                except Exception as exc:
                    self._failed(connection, exc)
                    continue
                self._interest(connection, sock, read, write)
                if wait < LOOP_TIMEOUT_S:
                    self._due[connection] = now + wait
                else:
                    self._due.pop(connection, None)
            wait_until = min([visited_at + LOOP_TIMEOUT_S, *self._due.values()])
            ready: dict[IoDriven, int] = {}
            self.serving = False
            events = self._selector.select(max(0.0, wait_until - time.monotonic()))
            self.serving = True
            for key, mask in events:
                if key.data is None:
                    with contextlib.suppress(OSError):
                        self._waker_r.recv(4096)
                    self._woken = False  # after the read: a wake-up from now on sends again
                else:
                    ready[key.data] = mask
            now = time.monotonic()
            again = set(ready) | self._came_due(now)
            handled = (again | set(connections)) if every else again
            for connection in handled - self._broken if self._broken else handled:
                mask = ready.get(connection, 0)
                try:
                    connection.io_ready(bool(mask & _READ), bool(mask & _WRITE), every)
                except Exception as exc:
                    self._failed(connection, exc)

    def _failed(self, connection: IoDriven, exc: Exception) -> None:
        """An exception in a connection's I/O code: it is told (and ends); the loop waits on it no more."""
        self._broken.add(connection)
        connection.io_failed(exc)
        self._interest(connection, None, False, False)
        self._due.pop(connection, None)

    def _take_dirty(self) -> set[IoDriven]:
        dirty = self._dirty
        taken: set[IoDriven] = set()
        while dirty:
            taken.add(dirty.popleft())
        return taken

    def _came_due(self, now: float) -> set[IoDriven]:
        return {c for c, at in self._due.items() if at <= now} if self._due else set()

    def _interest(self, connection: IoDriven, sock: Any, read: bool, write: bool) -> None:
        """Register (or change, or drop) what the loop waits for on ``connection``'s socket."""
        events = (_READ if read else 0) | (_WRITE if write else 0)
        fd = -1
        if sock is not None and events:
            with contextlib.suppress(OSError, ValueError):
                fd = sock.fileno()
        old = self._registered.get(connection)
        if old is not None:
            if old[0] is sock and old[1] == fd >= 0:
                if old[2] != events:
                    self._selector.modify(fd, events, connection)
                    self._registered[connection] = (sock, fd, events)
                return
            self._forget(connection, old[1])
        if fd < 0:
            return
        key = self._selector.get_map().get(fd)
        if key is not None:  # the number of a socket closed meanwhile, taken again by this one
            self._forget(key.data, fd)
        try:
            self._selector.register(fd, events, connection)
        except OSError:  # closed meanwhile: its own read finds out at once
            self._due[connection] = time.monotonic()
            return
        self._registered[connection] = (sock, fd, events)

    def _forget(self, connection: IoDriven, fd: int) -> None:
        if self._registered.get(connection, (None, -1, 0))[1] == fd:
            del self._registered[connection]
        key = self._selector.get_map().get(fd)
        if key is not None and key.data is connection:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.unregister(fd)


def yield_to(loop: IoLoop | None) -> None:
    """Let ``loop``'s turn end before a CPU-bound thread goes on (at most :data:`YIELD_S`). Every system
    call of a turn (a ``recv``, a ``send``, an ``epoll_ctl``) releases the GIL, and taking it back from a
    thread that computes waits up to the switch interval (5 ms): while a gateway's worker drained a
    flood, a turn over the 99 quiet devices' sockets took a tenth of a second and more, on the way in and
    again on the way out (docs/benchmarks.md §23). A thread napping here holds no GIL, so the turn runs
    through."""
    if loop is None or not loop.serving:
        return
    end = time.perf_counter() + YIELD_S
    while loop.serving and time.perf_counter() < end:
        time.sleep(YIELD_NAP_S)
