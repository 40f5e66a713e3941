"""Local TCP ports: a free one to bind a child process to, and whether something accepts connections.

Every process the harness starts listens on ``127.0.0.1`` on a port the OS picked a moment before (a
child binds it itself, so another process may take it in between: the starters retry or check their
child's log)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

__all__ = ["HOST", "can_connect", "free_port", "wait_listening"]

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def can_connect(port: int, host: str = HOST, timeout: float = 0.5) -> bool:
    """Whether a TCP connection to host:port succeeds within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_listening(
    port: int,
    timeout: float,
    *,
    host: str = HOST,
    ready: Callable[[], bool] | None = None,
    alive: Callable[[], bool] | None = None,
) -> bool:
    """Poll until host:port accepts connections and ``ready()`` holds; False when ``alive()`` turns false
    (the child exited) or the timeout passes."""
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None and not alive():
            return False
        if can_connect(port, host, 0.2) and (ready is None or ready()):
            return alive is None or alive()
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
