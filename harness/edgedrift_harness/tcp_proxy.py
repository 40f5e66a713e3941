"""A TCP proxy that can hang: it forwards bytes both ways until :meth:`TcpProxy.hang`, after which it
keeps every connection open and accepts new ones but forwards nothing (a database behind a dead
network path or a stuck load balancer: no error, no reset, just silence) until :meth:`TcpProxy.resume`."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from types import TracebackType
from typing import Self

#: Bytes read per forwarded chunk.
CHUNK = 65536


class TcpProxy:
    """``127.0.0.1:port`` forwards to ``target``; threads only, so a test can use it beside anything."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._forwarding = threading.Event()
        self._forwarding.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="tcp-proxy-accept", daemon=True).start()

    def hang(self) -> None:
        """Stop forwarding; connections stay open and new ones are accepted (and not answered)."""
        self._forwarding.clear()

    def resume(self) -> None:
        self._forwarding.set()

    def close(self) -> None:
        self._closed.set()
        self._forwarding.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in [self._listener, *sockets]:
            with contextlib.suppress(OSError):
                s.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), name="tcp-proxy-conn", daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._forwarding.wait()  # a hung proxy does not even reach the target
        if self._closed.is_set():
            client.close()
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        with self._lock:
            self._sockets += [client, upstream]
        self._pump(client, upstream)

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        """Copy whatever arrives on either side to the other while forwarding; hold it while hung."""
        peers = {a: b, b: a}
        try:
            while not self._closed.is_set():
                ready, _, _ = select.select([a, b], [], [], 0.2)
                for s in ready:
                    self._forwarding.wait()
                    data = s.recv(CHUNK)
                    if not data:
                        return
                    peers[s].sendall(data)
        except OSError:
            return
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()
