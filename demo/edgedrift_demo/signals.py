"""Signal handling of the demo: Ctrl-C and SIGTERM stop it cleanly (exit 130), nothing left listening."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from types import FrameType


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM (like SIGINT) raises KeyboardInterrupt in the main thread while the demo runs."""

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    old_term = signal.signal(signal.SIGTERM, interrupt)
    old_int = signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C / SIGTERM over a short step that starts a process, then raise KeyboardInterrupt (so the
    process is recorded and gets stopped)."""
    caught: list[int] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        caught.append(signum)

    old_term = signal.signal(signal.SIGTERM, hold)
    old_int = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)
    if caught:
        raise KeyboardInterrupt


@contextlib.contextmanager
def signals_deferred(say: Callable[[str], None]) -> Iterator[None]:
    """While shutting down, further Ctrl-C / SIGTERM only print a note (every step has a time limit)."""

    def note(_signum: int, _frame: FrameType | None) -> None:
        say("still stopping (agents checkpoint, then the cloud trainer and the broker stop) ...")

    old_term = signal.signal(signal.SIGTERM, note)
    old_int = signal.signal(signal.SIGINT, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)
