"""HTTP below the client libraries, for the tests of what a server does with a request that has not
fully arrived: a request line and headers without their body, a connection from a given loopback
address, and what a server sent before it closed a connection."""

from __future__ import annotations

import socket

from edgedrift_harness.cloud import CloudProcess
from edgedrift_harness.ports import HOST

__all__ = ["closed_by_server", "connect", "head_only"]


def connect(server: CloudProcess, source: str = HOST) -> socket.socket:
    """A TCP connection to ``server`` from the loopback address ``source``."""
    return socket.create_connection((HOST, server.port), 10, (source, 0))


def head_only(server: CloudProcess, path: str, length: int, token: str | None) -> bytes:
    """The answer to the request line and headers of a ``length``-byte JSON POST whose body is never
    sent (b"" when none came within 5 s: the server waits for the body)."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{auth}\r\n"
    ).encode()
    with connect(server) as sock:
        sock.settimeout(5)
        sock.sendall(request)
        try:
            return sock.recv(4096)
        except TimeoutError:
            return b""


def closed_by_server(sock: socket.socket, within_s: float) -> bytes | None:
    """What the server sent before closing the connection (None: still open after ``within_s``)."""
    sock.settimeout(within_s)
    got = b""
    try:
        while chunk := sock.recv(4096):
            got += chunk
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return got
