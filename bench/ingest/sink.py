"""A counting subscriber in its own process: a bare paho client that json-decodes every message and counts
its samples into a small shared file (the peer of the benchmark, and the counter of the agent's
predictions). Run as ``python bench/ingest/sink.py URL TOPIC QOS FILE KEY [CLIENT_ID]``: with a client id,
a persistent session (what the broker queues for it while it is away arrives when it comes back)."""

from __future__ import annotations

import json
import mmap
import os
import secrets
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt

from edgedrift_harness.mqtt import Subscriber
from edgedrift_harness.processes import stop_process

#: What a counting subscriber writes into its shared file after every message: messages, samples,
#: monotonic time of the first and the last message, of the first non-warm-up prediction, and 1 once
#: subscribed.
SINK = struct.Struct("<qqdddq")


def run_sink(url: str, topic: str, qos: int, shared: str, key: str, client_id: str | None = None) -> int:
    """Count every message of ``topic`` (and the items under ``key`` of a batch) into ``shared``; with
    ``client_id``, in a persistent session of that id."""
    fd = os.open(shared, os.O_RDWR)
    buf = mmap.mmap(fd, SINK.size)
    pack = SINK.pack_into
    loads = json.loads
    now = time.monotonic
    tally = [0, 0, 0.0, 0.0, 0.0]
    warm = b'"warmup"'

    def on_message(_c: mqtt.Client, _u: Any, msg: mqtt.MQTTMessage) -> None:
        payload = msg.payload
        data = loads(payload)
        items = data.get(key) if type(data) is dict else None
        t = now()
        tally[0] += 1
        tally[1] += len(items) if type(items) is list else 1
        if not tally[2]:
            tally[2] = t
        tally[3] = t
        if not tally[4] and warm not in payload:
            tally[4] = t
        pack(buf, 0, tally[0], tally[1], tally[2], t, tally[4], 1)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    subscriber = Subscriber(
        url,
        [(topic, qos)],
        client_id=client_id or f"bench-sink-{os.getpid()}",
        clean_session=client_id is None,
        on_message=on_message,
    )
    pack(buf, 0, tally[0], tally[1], tally[2], tally[3], tally[4], 1)
    stop.wait()
    subscriber.close()
    return 0


@dataclass(frozen=True)
class Tally:
    """What a sink counted so far."""

    msgs: int
    samples: int
    t_first: float
    t_last: float
    t_first_model: float
    ready: int


class Sink:
    """A counting subscriber process (see :func:`run_sink`) and its tally; ``client_id``: a persistent
    session (a second sink of the same id gets what the broker queued since the first one stopped)."""

    def __init__(
        self, workdir: Path, url: str, topic: str, qos: int, key: str, client_id: str | None = None
    ) -> None:
        self.path = workdir / f"sink-{secrets.token_hex(4)}.bin"
        self.path.write_bytes(b"\0" * SINK.size)
        self.topic = topic
        cmd = [
            sys.executable,
            __file__,
            url,
            topic,
            str(qos),
            str(self.path),
            key,
            *([client_id] if client_id else []),
        ]
        with (workdir / "sinks.log").open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        self._fd = os.open(self.path, os.O_RDONLY)
        self._buf = mmap.mmap(self._fd, SINK.size, access=mmap.ACCESS_READ)
        deadline = time.monotonic() + 20
        while not self.read().ready:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"sink on {topic} did not subscribe (see {workdir / 'sinks.log'})")
            time.sleep(0.01)

    def read(self) -> Tally:
        return Tally(*SINK.unpack_from(self._buf, 0))

    def stop(self) -> None:
        stop_process(self.proc)
        self._buf.close()
        os.close(self._fd)


if __name__ == "__main__":
    url_, topic_, qos_, shared_, key_ = sys.argv[1:6]
    sys.exit(run_sink(url_, topic_, int(qos_), shared_, key_, sys.argv[6] if len(sys.argv) > 6 else None))
