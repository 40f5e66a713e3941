"""MQTT ingest: samples per second through a real Mosquitto -> the edge agent -> predictions published.

Everything runs as separate processes on this machine, as deployed: our own Mosquitto on a free port
(``listener PORT 127.0.0.1``, no persistence), the cloud trainer (``edgedrift-cloud serve``, SQLite, one
worker; the agent needs it for its first model after warm-up and for DRUiD's recomputes), the agent
(``python -m edgedrift_edge.cli run`` with ``EDGEDRIFT_EDGE_*``: strategy druid, warm-up 2000 samples),
and counting subscribers (``--sink`` mode of this script: a bare paho client that json-decodes every
message and counts its samples into a small shared file).

Data: a seeded Sine1+ stream (d = 5 by default, abrupt drift every 100k samples, so DRUiD recomputes
during the runs), encoded once before each phase exactly like ``edgedrift-edge replay`` does
(``{"id": i, "x": [...], "y": ±1}``, every 10th sample labeled inline; a batch is ``{"samples": [...]}``
of 100). Nothing is encoded while the clock runs.

Measurements:

* **publisher alone**: the same messages to a topic nobody subscribes to, until the broker acknowledged
  the last one (QoS 1) or answered a PINGREQ sent after it (QoS 0) -- the rate the publisher can offer.
  The publisher is a minimal MQTT 3.1.1 client on a raw socket writing pre-encoded PUBLISH packets many
  per ``sendall`` (paho's ``publish()`` costs ~100 µs of Python per message: a paho publisher tops out
  near 9k QoS-1 messages/s here and would be the bottleneck);
* **peer**: a bare paho subscriber process that only json-decodes each message (a batch: the whole
  batch) -- from the first publish to its last decode;
* **agent**: from the first publish to the last prediction received by the counting subscriber (which
  decodes the predictions the way the peer decodes the samples). The ratio agent / peer is the agent's
  overhead over "just receiving and decoding". Each agent is warmed up first (2000 samples + its first
  model from the cloud) so the phases measure the running agent.

The publisher is closed-loop: at most ``--window`` single-sample messages (5,000) or ``--batch-window``
batches (200) are outstanding (published but not yet counted by the phase's subscriber), so the agent's
bounded queue (20,000 messages) never overflows and what is measured is the sustained rate, not how many
messages a queue can swallow. Lost messages (an overflow, a QoS-0 drop) would show as fewer samples than
published and are reported. Everything shares the machine's cores: the CPU table has a "rest of the
machine" column (other work running meanwhile) -- check it before trusting a figure.

QoS: the targets are judged at QoS 1 -- the agent's default (``qos=1``), the replay command's default and
what a deployment uses (at-least-once with redelivery de-duplication). QoS 0 is measured alongside.

Memory: a fresh agent (QoS 1, batches of 100) takes ``--memory-samples`` (1,000,000) samples while its
VmRSS (``/proc/PID/status``) is read every 50k samples; start = right after warm-up. Startup: the agent
is spawned ``--startup-runs`` times (fresh device each time); spawn -> its ``ready`` line, -> its retained
``online`` status, -> its first prediction of a probe sample published every 5 ms from the spawn on.

Per agent thread (worker, paho network thread, ...): CPU, run-queue wait and context switches from
``/proc/PID/task/TID/{schedstat,status}`` in every run. ``--profile DIR`` also samples the agent with
py-spy (``record --threads --idle``, raw stacks into DIR; py-spy from PATH or /tmp/pyspy-venv) during each
agent phase and prints the µs per message each thread spends per section (JSON decode, parse, EdgeLoop,
JSON encode, paho publish, paho packet reads/writes, waiting for work), and the share of wall time a
thread is blocked on the GIL (wall - CPU - run queue - waiting for work).

    python bench/mqtt_ingest.py                          # full run (~5 minutes)
    python bench/mqtt_ingest.py --quick                  # smoke run (~1 minute)
    python bench/mqtt_ingest.py --samples 100000 --memory-samples 0 --startup-runs 0 --profile out/pyspy
    python bench/mqtt_ingest.py --qos none --memory-samples 3000000     # memory and startup only
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import mmap
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from edgedrift_harness.cloud_process import CloudProcess, free_port
from edgedrift_harness.profiling import py_spy_record

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
CLK_TCK = os.sysconf("SC_CLK_TCK")
OPERATOR = "bench-operator-" + secrets.token_hex(16)
#: Experiments (--agent-pythonpath, --switch-interval): another edgedrift_edge for a before/after in one
#: run, and the agent process's GIL switch interval.
AGENT_PYTHONPATH = ""
AGENT_SWITCH_INTERVAL = 0.0
#: What a counting subscriber writes into its shared file after every message:
#: messages, samples, monotonic time of the first and the last message, of the first non-warm-up
#: prediction, and 1 once subscribed.
SINK = struct.Struct("<qqdddq")

TARGETS = {
    "single": 8_000.0,  # messages/s (= samples/s) of single-sample messages
    "batch": 80_000.0,  # samples/s in batches of 100
    "rss_mb": 80.0,
    "rss_drift": 0.05,
    "startup_s": 2.0,
}


# ------------------------------------------------------------------------------------ sink (subprocess)


def run_sink(port: int, topic: str, qos: int, shared: str, key: str) -> int:
    """A bare subscriber: json-decode every message, count its samples, write the tally to ``shared``."""
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

    def on_connect(client: mqtt.Client, *_: Any) -> None:
        client.subscribe(topic, qos)

    def on_subscribe(*_: Any) -> None:
        pack(buf, 0, tally[0], tally[1], tally[2], tally[3], tally[4], 1)

    client = mqtt.Client(
        CallbackAPIVersion.VERSION2, client_id=f"bench-sink-{os.getpid()}", clean_session=True
    )
    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = on_message
    signal.signal(signal.SIGTERM, lambda *_: client.disconnect())
    client.connect("127.0.0.1", port, keepalive=60)
    client.loop_forever()
    return 0


@dataclass(frozen=True)
class Tally:
    msgs: int
    samples: int
    t_first: float
    t_last: float
    t_first_model: float
    ready: int


class Sink:
    """A counting subscriber in its own process (see :func:`run_sink`)."""

    def __init__(self, workdir: Path, port: int, topic: str, qos: int, key: str) -> None:
        self.path = workdir / f"sink-{secrets.token_hex(4)}.bin"
        self.path.write_bytes(b"\0" * SINK.size)
        self.topic = topic
        cmd = [sys.executable, __file__, "--sink", str(port), topic, str(qos), str(self.path), key]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=(workdir / "sinks.log").open("ab")
        )
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


# ------------------------------------------------------------------------------------------ processes


def stop_process(proc: subprocess.Popen[bytes] | None, timeout: float = 30.0) -> int | None:
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def cpu_seconds(pid: int | str) -> float:
    """utime + stime of a process (or ``PID/task/TID``) from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return math.nan
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


@dataclass
class ThreadTime:
    """One agent thread over a phase, as fractions of the phase's wall time (and context switches/s)."""

    name: str
    cpu: float  # on a CPU (/proc/PID/task/TID/schedstat)
    runq: float  # runnable, waiting for a CPU (other processes, the other thread)
    voluntary: float
    involuntary: float
    #: From py-spy --idle (profiled runs only): blocked waiting for work (an empty queue, select, a
    #: timer), and the rest of the wall time that is neither CPU nor run queue nor waiting for work:
    #: blocked on the GIL (or another lock) in the middle of Python code.
    waiting: float = math.nan
    gil: float = math.nan


def task_stats(pid: int) -> dict[int, tuple[float, float, int, int]]:
    """Per thread of ``pid``: (CPU s, run-queue wait s, voluntary, involuntary context switches)."""
    out: dict[int, tuple[float, float, int, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
            cpu_ns, runq_ns, _ = (task / "schedstat").read_text().split()
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        switches = dict(re.findall(r"^(\w*ctxt_switches):\s+(\d+)", status, re.M))
        out[int(task.name)] = (
            int(cpu_ns) / 1e9,
            int(runq_ns) / 1e9,
            int(switches.get("voluntary_ctxt_switches", 0)),
            int(switches.get("nonvoluntary_ctxt_switches", 0)),
        )
    return out


class Broker:
    """Our own Mosquitto on a free port (config as tests/support/mqtt.py, without persistence)."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"mqtt://127.0.0.1:{self.port}"
        conf = workdir / "mosquitto.conf"
        conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 100000\n"
            "max_inflight_messages 1000\n" + ("user root\n" if os.geteuid() == 0 else "")
        )
        if not Path(MOSQUITTO).exists():
            raise SystemExit("needs Mosquitto (apt-get install -y mosquitto)")
        log = (workdir / "mosquitto.log").open("ab")
        self.proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"mosquitto did not start on port {self.port}") from None
                time.sleep(0.05)


class Cloud(CloudProcess):
    """``edgedrift-cloud serve`` (uvicorn, one worker, SQLite) with a fresh device per agent."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(
            f"sqlite:///{workdir / 'registry.db'}",
            workdir,
            operator_token=OPERATOR,
            log_path=workdir / "cloud.log",
            env={"EDGEDRIFT_CLOUD_LOG_LEVEL": "WARNING"},
        )
        self.start()

    def device(self, prefix: str) -> tuple[str, str]:
        device, secret = f"{prefix}-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
        self.register(device, secret)
        return device, secret


class Agent:
    """``python -m edgedrift_edge.cli run`` for one fresh device, timed from the spawn."""

    def __init__(self, workdir: Path, broker: Broker, cloud: Cloud, qos: int, **settings: Any) -> None:
        self.device, secret = cloud.device("bench")
        values = {
            "device_id": self.device,
            "device_secret": secret,
            "broker_url": broker.url,
            "cloud_url": cloud.url,
            "strategy": "druid",
            "warmup_samples": 2000,
            "qos": qos,
            "checkpoint_dir": workdir / "state",
            "heartbeat_every_s": 2,
            **settings,
        }
        env = {**os.environ, **{f"EDGEDRIFT_EDGE_{k.upper()}": str(v) for k, v in values.items()}}
        if AGENT_PYTHONPATH:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [AGENT_PYTHONPATH, env.get("PYTHONPATH")]))
        cmd = [sys.executable, "-m", "edgedrift_edge.cli", "run"]
        if AGENT_SWITCH_INTERVAL:
            cmd[1:3] = [
                "-c",
                f"import sys; sys.setswitchinterval({AGENT_SWITCH_INTERVAL}); "
                "from edgedrift_edge.cli import main; sys.exit(main())",
            ]
        self.topics = {
            k: f"edgedrift/{self.device}/{k}" for k in ("samples", "predictions", "status", "events")
        }
        self.log = workdir / f"agent-{self.device}.log"
        self.ready = threading.Event()
        self.t_ready = math.nan
        self.t_spawn = time.monotonic()
        self.proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self.log.open("ab"),
        )
        self.pid = self.proc.pid
        threading.Thread(target=self._read_stdout, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if b"ready" in line and not self.ready.is_set():
                self.t_ready = time.monotonic()
                self.ready.set()

    def wait_ready(self, timeout: float = 30.0) -> float:
        if not self.ready.wait(timeout):
            raise RuntimeError(f"agent not ready after {timeout} s:\n{self.log.read_text()[-3000:]}")
        return self.t_ready - self.t_spawn

    def stop(self) -> int | None:
        return stop_process(self.proc, 60)


def _remaining_length(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def mqtt_publish_packet(topic: bytes, payload: bytes, qos: int, packet_id: int) -> bytes:
    """One MQTT 3.1.1 PUBLISH packet, ready for the socket."""
    var = len(topic).to_bytes(2, "big") + topic + (packet_id.to_bytes(2, "big") if qos else b"")
    return bytes([0x30 | (qos << 1)]) + _remaining_length(len(var) + len(payload)) + var + payload


class Publisher:
    """The sensor side: a minimal MQTT 3.1.1 client on a raw socket that writes pre-encoded PUBLISH packets
    (topic, packet id and payload encoded before the clock starts), many per ``sendall``, and counts the
    broker's PUBACKs on a reader thread. A paho publisher tops out near 9k QoS-1 messages/s on this machine
    (``publish()`` costs ~100 µs of Python per message), which would make the publisher the bottleneck."""

    def __init__(self, port: int, qos: int) -> None:
        self.qos = qos
        self.acked = 0
        self.pongs = 0
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client_id = f"bench-pub-{secrets.token_hex(4)}".encode()
        # CONNECT: protocol MQTT level 4, clean session, keep-alive 0 (off).
        var = b"\x00\x04MQTT\x04\x02\x00\x00" + len(client_id).to_bytes(2, "big") + client_id
        self.sock.sendall(b"\x10" + _remaining_length(len(var)) + var)
        connack = self._recv_exact(4)
        if connack[0] != 0x20 or connack[3] != 0:
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
                if kind == 0x40:
                    self.acked += 1
                elif kind == 0xD0:
                    self.pongs += 1
                pos += 2 + length
            buf = buf[pos:]

    def encode(self, topic: str, payloads: list[bytes]) -> list[bytes]:
        """PUBLISH packets of ``payloads`` (packet ids cycle through 1..65535; at most ``window`` are ever
        outstanding, far fewer than 65535)."""
        t = topic.encode()
        out = []
        for p in payloads:
            out.append(mqtt_publish_packet(t, p, self.qos, self._next_id))
            self._next_id = self._next_id % 65535 + 1
        return out

    def sync(self, timeout: float = 120.0) -> float:
        """PINGREQ -> PINGRESP: the broker has read everything sent before (QoS 0 has no other receipt)."""
        pongs = self.pongs
        self.sock.sendall(b"\xc0\x00")
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
            self.sock.sendall(b"\xe0\x00")  # DISCONNECT
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


# ------------------------------------------------------------------------------------------------ data


class Data:
    """A seeded Sine1+ stream, cut into consecutive id ranges (every sample id is used once)."""

    def __init__(self, n: int, d: int, seed: int) -> None:
        from edgedrift.data import sine1plus

        length = 100_000
        self.stream = sine1plus(
            d=d, n_concepts=max(1, math.ceil(n / length)), concept_length=length, seed=seed
        )
        self.next = 0

    def take(self, n: int, batch: int, label_every: int = 10) -> list[bytes]:
        """``n`` samples as the replay command encodes them: singles or ``{"samples": [...]}`` batches."""
        X = self.stream.X[self.next : self.next + n].tolist()
        y = self.stream.y[self.next : self.next + n].tolist()
        if len(X) < n:
            raise ValueError("the stream is too short")
        base, self.next = self.next, self.next + n
        items: list[dict[str, Any]] = []
        for i in range(n):
            sample: dict[str, Any] = {"id": base + i, "x": X[i]}
            if (base + i) % label_every == 0:
                sample["y"] = y[i]
            items.append(sample)
        dumps = json.JSONEncoder(separators=(",", ":")).encode
        if batch == 1:
            return [dumps(s).encode() for s in items]
        return [dumps({"samples": items[k : k + batch]}).encode() for k in range(0, n, batch)]


# ---------------------------------------------------------------------------------------------- phases


@dataclass
class Result:
    """One timed phase."""

    what: str  # "publisher" | "peer" | "agent"
    kind: str  # "single" | "batch"
    qos: int
    mode: str
    samples: int
    msgs: int
    delivered: int
    seconds: float
    cpu: dict[str, float] = field(default_factory=dict)
    threads: list[ThreadTime] = field(default_factory=list)
    #: Thread kind -> section -> µs of that thread's wall time per message (py-spy --idle).
    profile: dict[str, dict[str, float]] | None = None
    rss_mb: float = math.nan

    @property
    def sps(self) -> float:
        return self.delivered / self.seconds if self.seconds > 0 else math.nan

    @property
    def mps(self) -> float:
        return self.sps * self.msgs / self.samples


def machine_busy() -> float:
    """CPU seconds all cores spent busy since boot (/proc/stat: everything but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / CLK_TCK


class CpuWatch:
    """CPU seconds of named processes over a phase, and of the rest of the machine (anything else that
    runs meanwhile competes for the same cores: check that column before trusting a figure)."""

    def __init__(self, procs: dict[str, int]) -> None:
        self.procs = procs
        self.t0 = time.monotonic()
        self.c0 = {k: cpu_seconds(p) for k, p in procs.items()}
        self.m0 = machine_busy()

    def shares(self) -> dict[str, float]:
        wall = time.monotonic() - self.t0
        out = {k: (cpu_seconds(p) - self.c0[k]) / wall for k, p in self.procs.items()}
        # Clipped at 0: /proc/stat and the per-process ticks are sampled apart (a few % of noise).
        out["rest of the machine"] = max(0.0, (machine_busy() - self.m0) / wall - sum(out.values()))
        return out


def wait_count(
    sink: Sink, target: int, idle: float = 15.0, on_done: Callable[[], None] | None = None
) -> Tally:
    """Until ``sink`` counted ``target`` samples, or nothing arrived for ``idle`` seconds; ``on_done``
    runs at once then (before the short wait that would catch anything beyond the target)."""
    last, since = sink.read(), time.monotonic()
    while last.samples < target:
        time.sleep(0.002)
        now = sink.read()
        if now.samples != last.samples:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > idle:
            break
    if on_done is not None:
        on_done()
    time.sleep(0.2)  # anything beyond the target (duplicates) would show up here
    return sink.read()


def timed_phase(
    what: str,
    kind: str,
    pub: Publisher,
    topic: str,
    payloads: list[bytes],
    n: int,
    sink: Sink | None,
    window: int,
    procs: dict[str, int],
    mode: str = "",
    on_done: Callable[[], None] | None = None,
) -> Result:
    packets = pub.encode(topic, payloads)
    cpu = CpuWatch(procs)
    if sink is None:  # the publisher alone
        t0, _t1, t2 = pub.run(packets)
        return Result(what, kind, pub.qos, mode, n, len(payloads), n, t2 - t0, cpu.shares())
    before = sink.read()
    t0, _t1, _t2 = pub.run(packets, lambda: sink.read().msgs - before.msgs, window)
    shares: dict[str, float] = {}

    def done() -> None:
        shares.update(cpu.shares())
        if on_done is not None:
            on_done()

    after = wait_count(sink, before.samples + n, on_done=done)
    delivered = after.samples - before.samples
    return Result(what, kind, pub.qos, mode, n, len(payloads), delivered, after.t_last - t0, shares)


def warm_up(agent: Agent, pub: Publisher, preds: Sink, data: Data) -> float:
    """2000 warm-up samples + 500 more, then one sample every 20 ms until a prediction comes from the
    first model (samples that arrive while it is trained are answered with null); seconds from the first
    publish to the first model prediction."""
    payloads = data.take(2500, 1)
    before = preds.read().samples
    t0 = time.monotonic()
    pub.run(pub.encode(agent.topics["samples"], payloads))
    tally = wait_count(preds, before + 2500, idle=60)
    sent = 2500
    deadline = time.monotonic() + 60
    while not tally.t_first_model and tally.samples >= before + sent and time.monotonic() < deadline:
        pub.run(pub.encode(agent.topics["samples"], data.take(1, 1)))
        sent += 1
        time.sleep(0.02)
        tally = wait_count(preds, before + sent, idle=60)
    if tally.samples < before + sent or not tally.t_first_model:
        raise RuntimeError(f"warm-up: {tally.samples - before} of {sent} predictions, see {agent.log}")
    return tally.t_first_model - t0


# --------------------------------------------------------------------------------------------- profile

#: Worker-thread sections, in priority order: a stack goes to the first whose substring one frame holds.
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("checkpoint (pickle + fsync)", ("checkpoint (",)),
    ("warm-up / first model", ("_finish_warmup (", "_warmup (")),
    ("JSON decode (json.loads)", ("_load (",)),
    ("parse + validate + numpy rows (parse_samples)", ("parse_samples (", "parse_labels (")),
    ("dedup by id (_seen)", ("_seen (",)),
    ("EdgeLoop (process_one / process_many / learn)", ("edgedrift/loop.py", "learn_one (")),
    ("accuracy + join buffer (_track)", ("_track (", "_score (", "_remember (")),
    ("prediction dicts (_run)", ("_run (",)),
    ("JSON encode of predictions (json.dumps)", ("json/__init__.py", "json/encoder.py")),
    ("paho publish (client.publish, socketpair wake-up)", ("paho/",)),
    ("model installs + events", ("_apply_installs (", "event (", "_report_drops (", "_reject (")),
    ("queue get (inbox)", ("queue.py",)),
)
PAHO_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("on_message (enqueue)", ("_on_message (",)),
    ("read + parse packets", ("_packet_read (", "_handle_publish (", "_handle_pub", "_packet_handle (")),
    ("write packets", ("_packet_write (", "loop_write (")),
    ("loop bookkeeping (misc)", ("",)),
)


def thread_names(py_spy: str, pid: int) -> dict[int, str]:
    """TID -> Python thread name, from ``py-spy dump`` (empty without py-spy)."""
    try:
        out = subprocess.run(
            [py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {int(tid): name for tid, name in re.findall(r'^Thread (\d+) \([^)]*\): "([^"]*)"', out, re.M)}


def thread_kind(name: str) -> str:
    if name.startswith("paho-mqtt-client"):
        return "paho network thread"
    if name.startswith("edgedrift-"):
        return name.removeprefix("edgedrift-") + " thread"
    return name


#: Leaf frames of a thread blocked waiting for work (py-spy --idle records them; they are not CPU):
#: the worker on its empty inbox, paho in select(), the heartbeat and main threads on their events.
WAIT_LEAVES = ("Condition.wait (", "Event.wait (", "Client._loop (", "select (", "sleep (")
WAITING = "waiting for work (empty queue, select, timers)"


def profile_sections(raw: Path) -> tuple[dict[str, Counter[str]], dict[int, str]]:
    """py-spy samples per thread kind and section (``WAITING`` for blocked-waiting stacks), and the
    TID -> thread name map."""
    counts: dict[str, Counter[str]] = {}
    names: dict[int, str] = {}
    if not raw.exists():
        return counts, names
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        head, _, rest = stack.partition(";")
        m = re.match(r"thread \((\d+)\): (.*)", head)
        tid, name = (int(m.group(1)), m.group(2)) if m else (0, head)
        names[tid] = name
        kind = thread_kind(name)
        if rest.rsplit(";", 1)[-1].startswith(WAIT_LEAVES):
            section = WAITING
        else:
            table = SECTIONS if kind == "worker thread" else PAHO_SECTIONS if kind.startswith("paho") else ()
            section = next((s for s, keys in table if any(k in rest for k in keys)), "other")
        counts.setdefault(kind, Counter())[section] += int(n)
    return counts, names


# ------------------------------------------------------------------------------------------------- run


@dataclass
class Memory:
    points: list[tuple[int, float]]
    cpu: float
    delivered: int
    seconds: float


@dataclass
class Startup:
    ready: float
    online: float
    first_prediction: float
    rss_ready: float


class Watch:
    """Status, events and predictions of every device, in this process (startup runs and counters)."""

    def __init__(self, port: int, predictions: bool) -> None:
        self.first: dict[tuple[str, str], float] = {}
        self.status: dict[str, dict[str, Any]] = {}
        self.events: dict[str, Counter[str]] = {}
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=f"bench-watch-{secrets.token_hex(4)}", clean_session=True
        )
        ready = threading.Event()
        kinds = ("status", "events", "predictions") if predictions else ("status", "events")
        self.client.on_connect = lambda c, *_: c.subscribe([(f"edgedrift/+/{k}", 1) for k in kinds])
        self.client.on_subscribe = lambda *_: ready.set()
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port, keepalive=60)
        self.client.loop_start()
        if not ready.wait(10):
            raise RuntimeError("watch not subscribed")

    def _on_message(self, _c: mqtt.Client, _u: Any, msg: mqtt.MQTTMessage) -> None:
        t = time.monotonic()
        _, device, kind = msg.topic.split("/")
        if not msg.payload:
            return
        doc = json.loads(msg.payload)
        if kind == "status":
            self.status[device] = doc
            if doc.get("state") == "online":
                self.first.setdefault((device, "online"), t)
        elif kind == "events":
            self.events.setdefault(device, Counter())[doc.get("type", "?")] += 1
        else:
            self.first.setdefault((device, "prediction"), t)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def run_startup(workdir: Path, broker: Broker, cloud: Cloud, runs: int, d: int) -> list[Startup]:
    watch = Watch(broker.port, predictions=True)
    probe = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"bench-probe-{secrets.token_hex(4)}")
    probe.connect("127.0.0.1", broker.port)
    probe.loop_start()
    out = []
    try:
        for _ in range(runs):
            agent = Agent(workdir, broker, cloud, qos=1)
            k = 0
            while (agent.device, "prediction") not in watch.first:
                if time.monotonic() - agent.t_spawn > 30:
                    raise RuntimeError(f"no prediction 30 s after the spawn, see {agent.log}")
                sample = {"id": k, "x": [0.5] * d}
                probe.publish(agent.topics["samples"], json.dumps(sample), qos=0)
                k += 1
                time.sleep(0.005)
            ready = agent.wait_ready()
            rss = rss_mb(agent.pid)
            out.append(
                Startup(
                    ready,
                    watch.first.get((agent.device, "online"), math.nan) - agent.t_spawn,
                    watch.first[(agent.device, "prediction")] - agent.t_spawn,
                    rss,
                )
            )
            agent.stop()
            time.sleep(0.2)
    finally:
        probe.disconnect()
        probe.loop_stop()
        watch.close()
    return out


def import_seconds(runs: int) -> tuple[float, float]:
    """Median wall time of a bare interpreter, and of one that imports the agent (what startup pays)."""

    def timed(code: str) -> float:
        t = time.monotonic()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.monotonic() - t

    bare = statistics.median(timed("pass") for _ in range(runs))
    agent = statistics.median(
        timed("import edgedrift_edge.cli, edgedrift_edge.agent, edgedrift_edge.settings") for _ in range(runs)
    )
    return bare, agent


@dataclass
class Config:
    samples: int
    memory_samples: int
    window: int
    batch_window: int
    d: int
    seed: int
    startup_runs: int
    exact: bool
    profile: Path | None
    py_spy: list[str]
    qos: list[int]


def snapshot(into: list[tuple[float, dict[int, tuple[float, float, int, int]]]], pid: int) -> None:
    """The moment the last prediction arrived, and the agent's thread times then."""
    into.append((time.monotonic(), task_stats(pid)))


def agent_phases(
    cfg: Config,
    workdir: Path,
    broker: Broker,
    cloud: Cloud,
    data: Data,
    qos: int,
    peer: Sink,
    results: list[Result],
    warmups: list[tuple[int, str, float]],
    mode: str = "vectorised",
    kinds: tuple[str, ...] = ("single", "batch"),
) -> None:
    agent = Agent(workdir, broker, cloud, qos, batch_mode=mode)
    pub = Publisher(broker.port, qos)
    preds = None
    try:
        agent.wait_ready()
        preds = Sink(workdir, broker.port, agent.topics["predictions"], qos, "predictions")
        warmups.append((qos, mode, warm_up(agent, pub, preds, data)))
        procs = {"publisher (this process)": os.getpid(), "broker": broker.proc.pid, "cloud": cloud.pid}
        for kind in kinds:
            batch = 1 if kind == "single" else 100
            window = cfg.window if batch == 1 else cfg.batch_window
            payloads = data.take(cfg.samples, batch)
            if mode == "vectorised":
                alone = timed_phase(
                    "publisher", kind, pub, "bench/void", payloads, cfg.samples, None, 0, procs
                )
                results.append(alone)
                print(f"  {describe(alone)}", flush=True)
                payloads = data.take(cfg.samples, batch)
                bare = timed_phase(
                    "peer", kind, pub, peer.topic, payloads, cfg.samples, peer, window,
                    {**procs, "peer": peer.proc.pid},
                )  # fmt: skip
                results.append(bare)
                print(f"  {describe(bare)}", flush=True)
                payloads = data.take(cfg.samples, batch)
            stop_profiler = None
            raw = None
            if cfg.profile is not None:
                raw = cfg.profile / f"agent-{kind}-qos{qos}-{mode}.txt"
                t_prof = time.monotonic()
                stop_profiler = py_spy_record(cfg.py_spy, agent.pid, raw, "--threads", "--idle")
                time.sleep(1.0)  # py-spy attaches
            tasks0 = task_stats(agent.pid)
            t0 = time.monotonic()
            ends: list[tuple[float, dict[int, tuple[float, float, int, int]]]] = []
            r = timed_phase(
                "agent", kind, pub, agent.topics["samples"], payloads, cfg.samples, preds, window,
                {**procs, "agent": agent.pid, "counting subscriber": preds.proc.pid}, mode,
                partial(snapshot, ends, agent.pid),
            )  # fmt: skip
            wall, tasks1 = ends[0][0] - t0, ends[0][1]
            spied: dict[str, Counter[str]] = {}
            if stop_profiler is not None and raw is not None:
                stop_profiler()
                prof_wall = time.monotonic() - t_prof
                spied, spied_names = profile_sections(raw)
            r.rss_mb = rss_mb(agent.pid)
            names = {**(spied_names if spied else {}), **thread_names(cfg.py_spy[0], agent.pid)}
            names = {**dict.fromkeys(tasks1, "native thread (no Python frames: OpenBLAS pool)"), **names}
            for tid, (c1, q1, v1, i1) in sorted(tasks1.items()):
                c0, q0, v0, i0 = tasks0.get(tid, (0.0, 0.0, 0, 0))
                if c1 - c0 > 0.005 * wall:
                    r.threads.append(
                        ThreadTime(
                            thread_kind(names.get(tid, f"tid {tid}")),
                            (c1 - c0) / wall,
                            (q1 - q0) / wall,
                            (v1 - v0) / wall,
                            (i1 - i0) / wall,
                        )
                    )
            if spied:
                r.profile = {}
                per_msg = 1e6 * wall / len(payloads)
                r.profile["all"] = {"wall time per message": per_msg}
                for t in r.threads:
                    counts = spied.get(t.name)
                    if not counts:
                        continue
                    # The samples outside the phase (attach, tail) are all "waiting": take them off.
                    rate = sum(counts.values()) / prof_wall
                    shares: dict[str, float] = dict(counts.most_common())
                    shares[WAITING] = max(0.0, counts[WAITING] - rate * (prof_wall - wall))
                    total = sum(shares.values())
                    t.waiting = shares[WAITING] / total
                    t.gil = max(0.0, 1 - t.waiting - t.cpu - t.runq)
                    r.profile[t.name] = {sec: per_msg * v / total for sec, v in shares.items()}
            results.append(r)
            print(f"  {describe(r)}", flush=True)
            time.sleep(0.5)
    finally:
        if preds is not None:
            preds.stop()
        pub.close()
        agent.stop()


def run_memory(cfg: Config, workdir: Path, broker: Broker, cloud: Cloud, data: Data) -> Memory:
    agent = Agent(workdir, broker, cloud, 1)
    pub = Publisher(broker.port, 1)
    preds = None
    try:
        agent.wait_ready()
        preds = Sink(workdir, broker.port, agent.topics["predictions"], 1, "predictions")
        warm_up(agent, pub, preds, data)
        print(f"  encoding {cfg.memory_samples:,} samples ...", flush=True)
        packets = pub.encode(agent.topics["samples"], data.take(cfg.memory_samples, 100))
        time.sleep(0.5)
        base = preds.read().samples
        points = [(0, rss_mb(agent.pid))]
        stop = threading.Event()

        def sample_rss() -> None:
            step = 50_000
            nxt = step
            while not stop.is_set():
                done = preds.read().samples - base
                if done >= nxt:
                    points.append((done, rss_mb(agent.pid)))
                    nxt += step
                time.sleep(0.005)

        sampler = threading.Thread(target=sample_rss, daemon=True)
        sampler.start()
        c0 = cpu_seconds(agent.pid)
        before = preds.read()
        t0, _, _ = pub.run(packets, lambda: preds.read().msgs - before.msgs, cfg.batch_window)
        after = wait_count(preds, base + cfg.memory_samples)
        stop.set()
        sampler.join()
        if points[-1][0] < after.samples - base:
            points.append((after.samples - base, rss_mb(agent.pid)))
        seconds = after.t_last - t0
        return Memory(points, (cpu_seconds(agent.pid) - c0) / seconds, after.samples - base, seconds)
    finally:
        if preds is not None:
            preds.stop()
        pub.close()
        agent.stop()


# ---------------------------------------------------------------------------------------------- report


def describe(r: Result) -> str:
    mode = f" {r.mode}" if r.mode and r.mode != "vectorised" else ""
    lost = f", LOST {r.samples - r.delivered}" if r.delivered < r.samples else ""
    return (
        f"{r.what:<9} {r.kind:<6} QoS {r.qos}{mode}: {r.sps:>10,.0f} samples/s {r.mps:>9,.0f} msgs/s "
        f"({r.delivered:,}/{r.samples:,} in {r.seconds:.2f} s{lost})"
    )


def pct(v: float) -> str:
    return "" if math.isnan(v) else f"{100 * v:.0f}%"


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def report(
    cfg: Config,
    results: list[Result],
    warmups: list[tuple[int, str, float]],
    memory: Memory | None,
    startup: list[Startup],
    imports: tuple[float, float] | None,
) -> None:
    agents = [r for r in results if r.what == "agent"]
    if agents or memory is not None:
        report_throughput(cfg, results, memory)
    if results:
        report_cpu(results)
    if agents:
        report_threads(agents)
    if warmups:
        print()
        print(
            "Warm-up (2000 samples, every 10th labeled, then the first model from the cloud), "
            "first publish -> first model prediction: "
            + ", ".join(f"QoS {q} {m}: {s:.2f} s" for q, m, s in warmups)
        )
    if memory is not None:
        report_memory(memory)
    if startup:
        report_startup(startup, imports)


def report_throughput(cfg: Config, results: list[Result], memory: Memory | None) -> None:
    print()
    print(
        f"## MQTT ingest: Mosquitto -> edge agent (druid, d={cfg.d}) -> predictions; "
        f"{cfg.samples:,} samples per phase, at most {cfg.window:,} single / {cfg.batch_window:,} batch "
        f"messages outstanding, {os.cpu_count()} cores; targets judged at QoS 1"
    )
    print()
    print(
        "| messages | QoS | agent samples/s | agent msgs/s | peer samples/s (bare paho + json) "
        "| ratio agent/peer | publisher alone samples/s | agent RSS MB | target | met |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    by = {(r.what, r.kind, r.qos): r for r in results if r.what != "agent"}
    for r in (r for r in results if r.what == "agent"):
        peer, alone = by.get(("peer", r.kind, r.qos)), by.get(("publisher", r.kind, r.qos))
        label = "single samples" if r.kind == "single" else "batches of 100"
        if r.mode != "vectorised":
            label += f" (batch_mode={r.mode})"
        target = TARGETS[r.kind]
        unit = "msgs/s" if r.kind == "single" else "samples/s"
        judged = r.qos == 1 and r.mode == "vectorised"
        ok = r.sps >= target and r.delivered == r.samples
        lost = f" (lost {r.samples - r.delivered:,})" if r.delivered < r.samples else ""
        peer_sps = peer.sps if peer else math.nan
        print(
            f"| {label} | {r.qos} | {r.sps:,.0f}{lost} | {r.mps:,.0f} | {peer_sps:,.0f} | "
            f"{r.sps / peer_sps:.2f} | {alone.sps if alone else math.nan:,.0f} | {r.rss_mb:.1f} | "
            f"≥ {target:,.0f} {unit}{'' if judged else ' (info)'} | "
            f"{verdict(ok) if judged else ('yes' if ok else 'no')} |"
        )
    if memory is not None:
        sps = memory.delivered / memory.seconds
        print(
            f"| batches of 100, the {memory.delivered:,}-sample memory run | 1 | {sps:,.0f} | "
            f"{sps / 100:,.0f} | | | | {memory.points[-1][1]:.1f} | "
            f"≥ {TARGETS['batch']:,.0f} samples/s (info) | {'yes' if sps >= TARGETS['batch'] else 'no'} |"
        )


def report_cpu(results: list[Result]) -> None:
    print()
    print(
        f"CPU per process during each phase (share of one core; {os.cpu_count()} cores; phases under 0.5 s "
        "are too short for /proc's 10 ms ticks):"
    )
    print()
    names = list(dict.fromkeys(k for r in results for k in r.cpu))
    print("| phase | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for r in results:
        short = r.seconds < 0.5
        cells = " | ".join(f"{100 * r.cpu[n]:.0f}%" if n in r.cpu and not short else "" for n in names)
        mode = f" {r.mode}" if r.mode and r.mode != "vectorised" else ""
        print(f"| {r.what} {r.kind} QoS {r.qos}{mode} | {cells} |")


def report_threads(agents: list[Result]) -> None:
    print()
    print(
        "Agent threads during each agent phase, share of the phase's wall time: on a CPU, runnable but "
        "waiting for a CPU (run queue), blocked waiting for work, and the rest = blocked on the GIL (or "
        "another lock) in the middle of Python code (the last two need --profile):"
    )
    print()
    print(
        "| phase | thread | CPU | run queue | waiting for work | GIL / lock wait "
        "| voluntary cs/s | involuntary cs/s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in agents:
        for t in sorted(r.threads, key=lambda t: -t.cpu):
            print(
                f"| {r.kind} QoS {r.qos} {r.mode} | {t.name} | {pct(t.cpu)} | {pct(t.runq)} | "
                f"{pct(t.waiting)} | {pct(t.gil)} | {t.voluntary:,.0f} | {t.involuntary:,.0f} |"
            )
    profiled = [r for r in agents if r.profile]
    if not profiled:
        return
    print()
    print(
        "Where the agent's time goes, µs of each thread's wall time per message (py-spy --idle --threads; "
        "a section's time includes waiting for the GIL inside it; a batch message carries 100 samples):"
    )
    print()
    rows = list(dict.fromkeys((k, s) for r in profiled for k, c in (r.profile or {}).items() for s in c))
    rows.sort(
        key=lambda ks: (
            ks[0] == "all",
            ks[0] != "worker thread",
            not ks[0].startswith("paho"),
            ks[0],
            ks[1] == WAITING,
        )
    )
    print("| thread | section | " + " | ".join(f"{r.kind} QoS {r.qos} {r.mode}" for r in profiled) + " |")
    print("|---|---|" + "---:|" * len(profiled))
    for k, sec in rows:
        cells = " | ".join(f"{(r.profile or {}).get(k, {}).get(sec, 0.0):,.1f}" for r in profiled)
        print(f"| {k} | {sec} | {cells} |")


def report_memory(memory: Memory) -> None:
    rss = [p[1] for p in memory.points]
    start, end, peak = rss[0], rss[-1], max(rss)
    drift = (end - start) / start
    steady = [p for p in memory.points if p[0] >= 200_000]
    steady_drift = (steady[-1][1] - steady[0][1]) / steady[0][1] if len(steady) >= 2 else math.nan
    print()
    print(
        f"## Memory: {memory.delivered:,} samples in batches of 100 (QoS 1) in {memory.seconds:.1f} s "
        f"({memory.delivered / memory.seconds:,.0f} samples/s, agent CPU {100 * memory.cpu:.0f}%)"
    )
    print()
    print("| samples | " + " | ".join(f"{n // 1000}k" for n, _ in memory.points) + " |")
    print("|---|" + "---:|" * len(memory.points))
    print("| agent VmRSS MB | " + " | ".join(f"{v:.1f}" for _, v in memory.points) + " |")
    print()
    print("| memory | value | target | met |")
    print("|---|---:|---|---|")
    print(f"| RSS at start (after warm-up) | {start:.1f} MB | | |")
    print(f"| RSS at end | {end:.1f} MB | | |")
    limit, flat = TARGETS["rss_mb"], TARGETS["rss_drift"]
    print(f"| RSS max | {peak:.1f} MB | ≤ {limit:.0f} MB | {verdict(peak <= limit)} |")
    print(
        f"| drift start -> end | {100 * drift:+.1f}% | within ±{100 * flat:.0f}% | "
        f"{verdict(abs(drift) <= flat)} |"
    )
    if not math.isnan(steady_drift):
        print(
            f"| drift from 200k (join buffer and id window full) -> end | {100 * steady_drift:+.1f}% | "
            f"(info) | {'yes' if abs(steady_drift) <= flat else 'no'} |"
        )


def report_startup(startup: list[Startup], imports: tuple[float, float] | None) -> None:
    keys = ("online", "ready", "first_prediction")
    med = {k: statistics.median(getattr(s, k) for s in startup) for k in keys}
    runs = {k: ", ".join(f"{getattr(s, k):.2f}" for s in startup) for k in keys}
    rss_ready = statistics.median(s.rss_ready for s in startup)
    limit = TARGETS["rss_mb"]
    print()
    print(f"## Startup: {len(startup)} spawns of `python -m edgedrift_edge.cli run` (median, all runs)")
    print()
    print("| from the spawn to | median | runs | target | met |")
    print("|---|---:|---|---|---|")
    print(f"| retained `online` status | {med['online']:.2f} s | {runs['online']} | | |")
    print(
        f"| `ready` line (connected, subscribed) | {med['ready']:.2f} s | {runs['ready']} | "
        f"≤ {TARGETS['startup_s']:.0f} s | {verdict(med['ready'] <= TARGETS['startup_s'])} |"
    )
    print(
        f"| first prediction (a probe sample every 5 ms from the spawn on) | {med['first_prediction']:.2f} s "
        f"| {runs['first_prediction']} | | |"
    )
    print(
        f"| RSS when ready | {rss_ready:.1f} MB | {', '.join(f'{s.rss_ready:.1f}' for s in startup)} | "
        f"≤ {limit:.0f} MB | {verdict(rss_ready <= limit)} |"
    )
    if imports is not None:
        print(
            f"| (a bare `python -c pass`; python importing the agent's modules) | {imports[0]:.2f} s; "
            f"{imports[1]:.2f} s | | | |"
        )


# ------------------------------------------------------------------------------------------------ main


@contextlib.contextmanager
def workspace(keep: bool) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="edgedrift-mqtt-bench-"))
    try:
        yield path
    finally:
        if keep:
            print(f"(logs and state kept in {path})")
        else:
            shutil.rmtree(path, ignore_errors=True)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--sink":
        port, topic, level, shared, key = sys.argv[2:7]
        return run_sink(int(port), topic, int(level), shared, key)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, help="samples per timed phase (default 200,000)")
    parser.add_argument(
        "--memory-samples", type=int, help="samples of the memory run (default 1,000,000; 0: skip)"
    )
    parser.add_argument(
        "--window",
        type=int,
        default=5_000,
        help="single-sample messages outstanding at most (closed loop; the agent's queue holds 20,000)",
    )
    parser.add_argument("--batch-window", type=int, default=200, help="batch messages outstanding at most")
    parser.add_argument("--d", type=int, default=5, help="features per sample")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--startup-runs", type=int, help="agent spawns for the startup figure (default 5; 0: skip)"
    )
    parser.add_argument(
        "--qos", default="1,0", help="QoS levels of the throughput phases (comma-separated; none: skip them)"
    )
    parser.add_argument("--no-exact", action="store_true", help="skip the batch_mode=exact agent")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 20k samples, 100k memory run, 2 spawns"
    )
    parser.add_argument(
        "--agent-pythonpath",
        default="",
        help="experiment: put DIR first on the agent's PYTHONPATH (e.g. a copy of edgedrift_edge from git "
        "HEAD, for a before/after of an agent change on the same machine state)",
    )
    parser.add_argument(
        "--switch-interval",
        type=float,
        default=0.0,
        help="experiment: run the agent with sys.setswitchinterval(S) (the default is 0.005 s)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    parser.add_argument(
        "--profile", type=Path, help="py-spy the agent during its phases, raw stacks into DIR"
    )
    parser.add_argument(
        "--py-spy",
        default=f"{shutil.which('py-spy') or '/tmp/pyspy-venv/bin/py-spy'} record --rate 250",
        help="the py-spy record command",
    )
    args = parser.parse_args()
    global AGENT_PYTHONPATH, AGENT_SWITCH_INTERVAL
    AGENT_PYTHONPATH, AGENT_SWITCH_INTERVAL = args.agent_pythonpath, args.switch_interval
    for name, full, quick in (
        ("samples", 200_000, 20_000),
        ("memory_samples", 1_000_000, 100_000),
        ("startup_runs", 5, 2),
    ):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    cfg = Config(
        args.samples, args.memory_samples, args.window, args.batch_window, args.d, args.seed,
        args.startup_runs, not (args.no_exact or args.quick), args.profile, shlex.split(args.py_spy),
        [int(q) for q in args.qos.split(",") if q.strip() not in ("", "none")],
    )  # fmt: skip
    if cfg.profile is not None:
        cfg.profile.mkdir(parents=True, exist_ok=True)
    if cfg.samples % 100:
        parser.error("--samples must be a multiple of 100")
    phases = len(cfg.qos) * 2 * 3 + (1 if cfg.exact else 0)
    data = Data(phases * cfg.samples + (len(cfg.qos) + 3) * 2500 + cfg.memory_samples, cfg.d, cfg.seed)
    results: list[Result] = []
    warmups: list[tuple[int, str, float]] = []
    memory = None
    startup: list[Startup] = []
    imports = None
    with workspace(args.keep) as workdir:
        broker = Broker(workdir)
        cloud = Cloud(workdir)
        peers: dict[int, Sink] = {}
        try:
            for qos in cfg.qos:
                peers[qos] = Sink(workdir, broker.port, f"bench/peer-q{qos}/samples", qos, "samples")
                print(f"QoS {qos}: publisher alone, peer, agent (vectorised)", flush=True)
                agent_phases(cfg, workdir, broker, cloud, data, qos, peers[qos], results, warmups)
            if cfg.exact and 1 in cfg.qos:
                print("QoS 1: agent with batch_mode=exact", flush=True)
                agent_phases(
                    cfg, workdir, broker, cloud, data, 1, peers[1], results, warmups, "exact", ("batch",)
                )
            if cfg.memory_samples:
                print(f"memory: {cfg.memory_samples:,} samples", flush=True)
                memory = run_memory(cfg, workdir, broker, cloud, data)
            if cfg.startup_runs:
                print(f"startup: {cfg.startup_runs} spawns", flush=True)
                startup = run_startup(workdir, broker, cloud, cfg.startup_runs, cfg.d)
                imports = import_seconds(3)
        finally:
            for sink in peers.values():
                sink.stop()
            cloud.stop()
            stop_process(broker.proc)
        report(cfg, results, warmups, memory, startup, imports)
    return 0


if __name__ == "__main__":
    sys.exit(main())
