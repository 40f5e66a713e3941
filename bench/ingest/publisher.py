"""The sensor side of the benchmark: a minimal MQTT 3.1.1 client on a raw socket, because a paho publisher
would be the bottleneck (its ``publish()`` costs too much Python per message; docs/benchmarks.md, §6)."""

from __future__ import annotations

import contextlib
import secrets
import socket
import threading
import time
from collections.abc import Callable

from ingest import packets as mp


class Publisher:
    """Writes pre-encoded PUBLISH packets (topic, packet id and payload encoded before the clock starts), many
    per ``sendall``, and counts the broker's PUBACKs on a reader thread."""

    def __init__(self, port: int, qos: int) -> None:
        self.qos = qos
        self.acked = 0
        self.pongs = 0
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client_id = f"bench-pub-{secrets.token_hex(4)}"
        self.sock.sendall(mp.connect(client_id, clean_session=True, keepalive=0))
        connack = self._recv_exact(4)
        if connack[0] != mp.CONNACK or connack[3] != 0:
            raise RuntimeError(f"broker refused the publisher: {connack!r}")
        self._next_id = 1
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _recv_exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("broker closed the publisher's connection")
            data += chunk
        return data

    def _read(self) -> None:
        """Count PUBACKs (0x40) and PINGRESPs (0xD0) -- the only packets a publisher gets back."""
        buf = b""
        while True:
            try:
                chunk = self.sock.recv(1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            pos = 0
            while len(buf) - pos >= 2:
                kind, length = buf[pos], buf[pos + 1]  # PUBACK and PINGRESP: remaining length < 128
                if len(buf) - pos < 2 + length:
                    break
                if kind == mp.PUBACK:
                    self.acked += 1
                elif kind == mp.PINGRESP:
                    self.pongs += 1
                pos += 2 + length
            buf = buf[pos:]

    def encode(self, topic: str, payloads: list[bytes]) -> list[bytes]:
        """PUBLISH packets of ``payloads`` (packet ids cycle through 1..65535; at most ``window`` are ever
        outstanding, far fewer than 65535)."""
        t = topic.encode()
        out = []
        for p in payloads:
            out.append(mp.publish(t, p, self.qos, self._next_id))
            self._next_id = self._next_id % 65535 + 1
        return out

    def encode_spread(self, topics: list[str], payloads: list[bytes]) -> list[bytes]:
        """PUBLISH packets of ``payloads``, message i to ``topics[i % len(topics)]`` (a gateway's devices)."""
        encoded = [t.encode() for t in topics]
        out = []
        for i, p in enumerate(payloads):
            out.append(mp.publish(encoded[i % len(encoded)], p, self.qos, self._next_id))
            self._next_id = self._next_id % 65535 + 1
        return out

    def sync(self, timeout: float = 120.0) -> float:
        """PINGREQ -> PINGRESP: the broker has read everything sent before (QoS 0 has no other receipt)."""
        pongs = self.pongs
        self.sock.sendall(mp.PINGREQ)
        deadline = time.monotonic() + timeout
        while self.pongs == pongs:
            if time.monotonic() > deadline:
                raise TimeoutError("no PINGRESP")
            time.sleep(0.0002)
        return time.monotonic()

    def run(
        self,
        packets: list[bytes],
        received: Callable[[], int] | None = None,
        window: int = 0,
        stall: float = 30.0,
        chunk_bytes: int = 1 << 16,
    ) -> tuple[float, float, float]:
        """Send all packets; with ``received`` (messages the phase's subscriber counted) keep at most
        ``window`` messages outstanding. Returns (t_first, t_last_sent, t_all_taken_by_broker)."""
        start_acked = self.acked
        sendall = self.sock.sendall
        n = len(packets)
        got = 0
        i = 0
        t0 = time.monotonic()
        while i < n:
            room = n - i
            if received is not None:
                room = min(room, window - (i - got))
                if room <= 0:
                    got = received()
                    since = time.monotonic()
                    while window - (i - got) <= 0:
                        time.sleep(0.0002)
                        got = received()
                        if time.monotonic() - since > stall:
                            raise TimeoutError(f"no progress for {stall} s at message {i}, {got} received")
                    room = min(n - i, window - (i - got))
            j, size = i, 0
            while j < i + room and size < chunk_bytes:
                size += len(packets[j])
                j += 1
            sendall(b"".join(packets[i:j]))
            i = j
        t1 = time.monotonic()
        if self.qos == 0:
            return t0, t1, self.sync()
        deadline = t1 + 120
        while self.acked - start_acked < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.acked - start_acked} of {n} publishes acknowledged")
            time.sleep(0.0002)
        return t0, t1, time.monotonic()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(mp.DISCONNECT)
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
