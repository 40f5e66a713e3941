"""edgedrift_edge.transport.io_loop: one thread selects over every connection's socket, a wake-up breaks its
wait at once, a connection whose code fails is told and the others go on, and the thread ends with its
last connection and starts again with the next."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from edgedrift_edge.transport.io_loop import LOOP_TIMEOUT_S, YIELD_NAP_S, YIELD_S, IoLoop, yield_to

TIMEOUT_S = 5.0
_OPENED: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_pipes() -> Iterator[None]:
    yield
    while _OPENED:
        _OPENED.pop().close()


class Pipe:
    """A connection over a socket pair: it reads whatever comes, and fails when told to."""

    def __init__(self, fail_in: str = "") -> None:
        self.ours, self.theirs = socket.socketpair()
        _OPENED.extend((self.ours, self.theirs))
        self.ours.setblocking(False)
        self.got = b""
        self.fail_in = fail_in
        self.failed: list[str] = []
        self.ended = False
        self.adopted_by: int | None = None

    @property
    def io_ended(self) -> bool:
        return self.ended

    def io_adopt(self, ident: int) -> None:
        self.adopted_by = ident

    def io_poll(self, now: float) -> tuple[Any, bool, bool, float]:
        if self.fail_in == "poll":
            raise RuntimeError("poll")
        return self.ours, True, False, LOOP_TIMEOUT_S

    def io_ready(self, readable: bool, writable: bool, misc: bool) -> None:
        if readable:
            if self.fail_in == "ready":
                raise RuntimeError("ready")
            self.got += self.ours.recv(100)

    def io_failed(self, exc: Exception) -> None:
        self.failed.append(str(exc))
        self.ended = True


def wait_for(condition: Any) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_one_thread_reads_every_connection() -> None:
    loop = IoLoop("io-test")
    pipes = [Pipe() for _ in range(20)]
    for p in pipes:
        loop.add(p)
    for i, p in enumerate(pipes):
        p.theirs.send(bytes([i]))
    wait_for(lambda: all(p.got for p in pipes))
    assert [p.got for p in pipes] == [bytes([i]) for i in range(20)]
    assert {p.adopted_by for p in pipes} == {loop.ident}
    assert [t.name for t in threading.enumerate()].count("io-test") == 1
    for p in pipes:
        p.ended = True
    loop.wake()
    wait_for(lambda: not loop.running)


def test_a_wake_up_breaks_the_wait_and_the_thread_comes_back_with_a_new_connection() -> None:
    loop = IoLoop("io-test-2")
    first = Pipe()
    loop.add(first)
    wait_for(lambda: first.adopted_by is not None)
    first.ended = True
    started = time.monotonic()
    loop.wake()
    wait_for(lambda: not loop.running)
    assert time.monotonic() - started < 2 * LOOP_TIMEOUT_S, "ends at the next visit of every connection"
    second = Pipe()
    loop.add(second)
    second.theirs.send(b"x")
    wait_for(lambda: second.got == b"x")
    second.ended = True
    loop.wake()
    wait_for(lambda: not loop.running)


def test_a_connection_that_fails_is_told_and_the_others_go_on() -> None:
    loop = IoLoop("io-test-3")
    bad_poll, bad_ready, good = Pipe("poll"), Pipe("ready"), Pipe()
    for p in (bad_poll, bad_ready, good):
        loop.add(p)
    bad_ready.theirs.send(b"x")
    wait_for(lambda: bad_poll.failed and bad_ready.failed)
    good.theirs.send(b"y")
    wait_for(lambda: good.got == b"y")
    assert bad_poll.failed == ["poll"] and bad_ready.failed == ["ready"] and not good.failed
    good.ended = True
    loop.wake()
    wait_for(lambda: not loop.running)


def test_the_loop_closes_what_it_opened_when_its_last_connection_ends() -> None:
    """Its wake-up socket pair and selector: left open, the garbage collector would warn about them in
    whatever test runs then."""
    loop = IoLoop("io-test-4")
    first = Pipe()
    loop.add(first)
    wait_for(lambda: first.adopted_by is not None)
    waker = loop._waker_r
    first.ended = True
    loop.wake()
    wait_for(lambda: not loop.running)
    assert waker.fileno() == -1, "closed"
    second = Pipe()
    loop.add(second)  # opened again
    second.theirs.send(b"y")
    wait_for(lambda: second.got == b"y")
    second.ended = True
    loop.wake()
    wait_for(lambda: not loop.running)


class Serving(Pipe):
    """A connection whose I/O notes whether the loop said it was in a turn."""

    def __init__(self, loop: IoLoop) -> None:
        super().__init__()
        self.loop = loop
        self.seen: list[bool] = []

    def io_ready(self, readable: bool, writable: bool, misc: bool) -> None:
        self.seen.append(self.loop.serving)
        super().io_ready(readable, writable, misc)


def test_the_loop_serves_in_a_turn_and_not_while_it_waits() -> None:
    loop = IoLoop("io-test")
    pipe = Serving(loop)
    loop.add(pipe)
    pipe.theirs.send(b"x")
    wait_for(lambda: pipe.got == b"x")
    assert pipe.seen and all(pipe.seen)
    wait_for(lambda: not loop.serving)  # back in its wait
    pipe.ended = True
    wait_for(lambda: not loop.running)
    assert not loop.serving


def test_yield_to_naps_until_the_turn_ends_and_no_longer_than_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Loop:
        serving = False

    naps: list[float] = []
    loop: Any = Loop()
    yield_to(loop)
    yield_to(None)

    def nap(seconds: float) -> None:  # the turn ends after the third nap
        naps.append(seconds)
        loop.serving = len(naps) < 3

    monkeypatch.setattr(time, "sleep", nap)
    assert naps == []  # not in a turn: no nap
    loop.serving = True
    yield_to(loop)
    assert naps == [YIELD_NAP_S] * 3

    clock = [0.0]

    def tick() -> float:  # a turn that never ends: each look at the clock a nap later
        clock[0] += YIELD_NAP_S
        return clock[0]

    monkeypatch.setattr(time, "sleep", lambda s: naps.append(s))
    monkeypatch.setattr(time, "perf_counter", tick)
    naps.clear()
    loop.serving = True
    yield_to(loop)
    assert 0 < len(naps) <= YIELD_S / YIELD_NAP_S
