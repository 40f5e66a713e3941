"""Broker durability: what a SIGKILLed broker loses of the QoS-1 messages it acknowledged, and what
saving more often costs in publish throughput while an offline agent's queue grows; Mosquitto (each
persistence setting) and RabbitMQ's MQTT plugin (durable sessions on quorum queues) in the same run.

Mosquitto 2.0 persists by rewriting its whole in-memory database (every queued message of every
session) at each autosave. ``autosave_interval 60`` alone saves once a minute; with
``autosave_on_changes true`` it saves after ``autosave_interval`` changes instead. This script runs the
shipped ``deploy/mosquitto/mosquitto.conf`` (``edgedrift_harness.mosquitto.ShippedMosquitto``: the same file
with the listener, auth and data paths moved; the shipped ACL and real passwords) once per configuration: the
peer is the first setting (``autosave_interval 60``, no on-changes), then a save every N seconds for each
of ``--seconds`` (the shipped one: 1), then on-changes with each N of ``--intervals``. With
``--broker rabbitmq`` or ``both`` (the default) one more configuration runs the same windows and the same
throughput run on a RabbitMQ node of its own (``edgedrift_harness.rabbitmq``: deploy/rabbitmq/rabbitmq.conf,
quorum queues, the same users and ACL); its database size is that of its data directory.

Window (per configuration, ``--trials`` kills for each of two streams, each on a fresh broker): ``dev-1``
makes a persistent session (paho 2.x, clean_session=False, QoS-1 subscription to its samples topic) and
disconnects; ``--settle`` seconds later the ``replay`` user publishes sample messages at QoS 1, paced at
``--rate`` per second (a steady sensor stream) or as a burst, as fast as the broker acknowledges them,
with at most ``--inflight`` awaiting their PUBACK (as ``edgedrift-edge replay`` does); after a random
number of PUBACKs between ``--messages``/2 and ``--messages`` the broker gets SIGKILL; it is restarted on
the same port and data directory, ``dev-1`` reconnects with the same session and everything it receives
is counted. Lost = acknowledged by the broker before the kill and never delivered after the restart.

Throughput (per configuration, one run): the same offline session, then the largest of ``--depths``
messages published while its queue grows; the publish rate (PUBACKs per second) is reported over the
last fifth of the messages before each of ``--depths`` queued, with the broker's CPU time per 1,000
messages over the whole run and the size of its database file at the end. A configuration that needs
longer than ``--budget`` seconds stops there; its deeper columns stay empty.

    .venv/bin/python bench/broker_durability.py                      # full run
    .venv/bin/python bench/broker_durability.py --quick              # smoke run (the peer, 1 s, N = 100)
    .venv/bin/python bench/broker_durability.py --json out/broker_durability.json
    .venv/bin/python bench/broker_durability.py --broker rabbitmq --intervals 100   # RabbitMQ beside N = 100
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from edgedrift_harness.mosquitto import ShippedMosquitto
from edgedrift_harness.proc import cpu_seconds
from edgedrift_harness.rabbitmq import RabbitMQProcess
from edgedrift_harness.results import write_json

DEVICE = "dev-1"
TOPIC = f"edgedrift/{DEVICE}/samples"
USERS = {DEVICE: "dev-1-bench-password-0123", "replay": "replay-bench-password-0123"}
PEER = "autosave_interval 60 (previous)"
RABBITMQ = "RabbitMQ 3.10, quorum queues"

Broker = ShippedMosquitto | RabbitMQProcess


@dataclass
class Config:
    """A persistence setting: the options that differ from the shipped file."""

    name: str
    overrides: dict[str, str | None]
    broker: str = "mosquitto"

    def make(self, workdir: Path) -> Broker:
        """This configuration's broker in ``workdir`` (not started)."""
        if self.broker == "rabbitmq":
            return RabbitMQProcess(workdir, USERS)
        return ShippedMosquitto(workdir, USERS, overrides=self.overrides)


@dataclass
class WindowResult:
    """Per kill: messages acknowledged before it and, of those, lost; for a paced stream and a burst."""

    config: str
    paced_acked: list[int] = field(default_factory=list)
    paced_lost: list[int] = field(default_factory=list)
    burst_acked: list[int] = field(default_factory=list)
    burst_lost: list[int] = field(default_factory=list)


@dataclass
class ThroughputResult:
    """Publish rate near each queue depth (None: not reached), broker CPU and database size."""

    config: str
    rates: dict[int, float | None] = field(default_factory=dict)
    reached: int = 0
    seconds: float = 0.0
    cpu_ms_per_1k: float = 0.0
    db_bytes: int = 0


def payload(i: int, rng: random.Random) -> bytes:
    """A sample as the replay command encodes it (5 features, every 10th labeled)."""
    sample: dict[str, Any] = {"id": i, "x": [round(rng.gauss(0, 1), 6) for _ in range(5)]}
    if i % 10 == 0:
        sample["y"] = 1 if rng.random() < 0.5 else -1
    return json.dumps(sample, separators=(",", ":")).encode()


def connect(broker: Broker, user: str, *, clean_session: bool) -> mqtt.Client:
    """A paho 2.x client logged in as ``user``, its network loop running, connected."""
    client = mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id=f"edgedrift-agent-{user}" if user == DEVICE else f"bench-{user}",
        clean_session=clean_session,
    )
    client.username_pw_set(user, USERS[user])
    # No cap inside paho (it rescans its whole queue on every PUBACK when one is set); Publisher keeps
    # its own window instead.
    client.max_inflight_messages_set(0)
    connected = threading.Event()
    client.on_connect = lambda *_a: connected.set()
    client.connect("127.0.0.1", broker.port, keepalive=60)
    client.loop_start()
    if not connected.wait(10):
        raise RuntimeError(f"{user} could not connect:\n{broker.log_tail()}")
    return client


class Publisher:
    """The replay user, closed loop: at most ``window`` messages wait for their PUBACK at any time."""

    def __init__(self, broker: Broker, window: int, on_ack: Callable[[int], None] | None = None) -> None:
        self.window = window
        self.on_ack = on_ack
        self.ack_times: list[float] = []
        self.sent = 0
        self.closed = False
        self.cond = threading.Condition()
        self.client = connect(broker, "replay", clean_session=True)
        self.client.on_publish = self._on_publish

    def _on_publish(self, *_a: Any) -> None:
        with self.cond:
            self.ack_times.append(time.perf_counter())
            acked = len(self.ack_times)
            self.cond.notify_all()
        if self.on_ack is not None:
            self.on_ack(acked)

    def publish(self, data: bytes) -> mqtt.MQTTMessageInfo | None:
        """Publish once the window has room; None when closed meanwhile."""
        with self.cond:
            while not self.closed and self.sent - len(self.ack_times) >= self.window:
                self.cond.wait(1.0)
            if self.closed:
                return None
            self.sent += 1
        return self.client.publish(TOPIC, data, qos=1)

    def close(self) -> None:
        """Stop publishing and stop the network loop (no reconnect to a restarted broker)."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.client.loop_stop()


def make_offline_session(broker: Broker) -> None:
    """dev-1 subscribes at QoS 1 with a persistent session, then goes away."""
    client = connect(broker, DEVICE, clean_session=False)
    subscribed = threading.Event()
    client.on_subscribe = lambda *_a: subscribed.set()
    client.subscribe(TOPIC, 1)
    if not subscribed.wait(10):
        raise RuntimeError("no SUBACK")
    client.disconnect()
    client.loop_stop()


def collect(broker: Broker, expected: set[int], first_s: float, quiet_s: float = 2.0) -> set[int]:
    """Reconnect dev-1's session; the sample ids it receives until all expected arrived or it goes quiet
    (``quiet_s`` without a message; ``first_s`` for the first one: :func:`first_delivery_s`)."""
    received: set[int] = set()
    last = [time.monotonic()]
    lock = threading.Lock()

    def on_message(_c: mqtt.Client, _u: Any, message: mqtt.MQTTMessage) -> None:
        with lock:
            received.add(int(json.loads(message.payload)["id"]))
            last[0] = time.monotonic()

    client = mqtt.Client(
        CallbackAPIVersion.VERSION2, client_id=f"edgedrift-agent-{DEVICE}", clean_session=False
    )
    client.username_pw_set(DEVICE, USERS[DEVICE])
    client.on_message = on_message
    client.connect("127.0.0.1", broker.port, keepalive=60)
    client.loop_start()
    last[0] = time.monotonic()
    while True:
        time.sleep(0.05)
        with lock:
            if expected <= received or time.monotonic() - last[0] > (quiet_s if received else first_s):
                break
    client.disconnect()
    client.loop_stop()
    return received


def first_delivery_s(config: Config) -> float:
    """How long a restarted broker may take to deliver the first message of a session it kept: a
    RabbitMQ node once the session's quorum queue has elected its leader, a few seconds after its
    listener opens; Mosquitto loads its database before it listens and delivers at the CONNACK (a
    configuration that lost everything then costs 5 s a kill instead of 20)."""
    return 20.0 if config.broker == "rabbitmq" else 5.0


def window_trial(
    config: Config,
    workdir: Path,
    messages: int,
    inflight: int,
    rate: float | None,
    rng: random.Random,
    settle_s: float = 3.0,
) -> tuple[int, int]:
    """One kill: (acknowledged, acknowledged but lost). ``rate`` paces the stream (None: a burst);
    ``settle_s``: seconds between the session's subscription and the first publish (a session that
    exists, not one made the moment before the crash)."""
    kill_after = rng.randint(messages // 2, messages)
    payloads = [payload(i, rng) for i in range(messages + inflight)]
    broker = config.make(workdir).start()
    killed = threading.Event()

    def on_ack(acked: int) -> None:
        if acked == kill_after:
            broker.kill()
            killed.set()

    try:
        make_offline_session(broker)
        time.sleep(settle_s)
        publisher = Publisher(broker, inflight, on_ack)
        infos: list[mqtt.MQTTMessageInfo] = []
        start = time.perf_counter()
        for i, data in enumerate(payloads):
            if killed.is_set() or (info := publisher.publish(data)) is None:
                break
            infos.append(info)
            if rate is not None:
                time.sleep(max(0.0, start + (i + 1) / rate - time.perf_counter()))
        if not killed.wait(120):
            raise RuntimeError(f"{config.name}: only {len(publisher.ack_times)} of {kill_after} PUBACKs")
        # What the restarted broker holds must be what it had before the kill: no reconnect, no resend.
        publisher.close()
        acked = {
            i for i, info in enumerate(infos) if info.rc == mqtt.MQTT_ERR_SUCCESS and info.is_published()
        }
        broker.start()
        received = collect(broker, acked, first_delivery_s(config))
    finally:
        broker.stop()
    return len(acked), len(acked - received)


def throughput_run(
    config: Config, workdir: Path, depths: list[int], inflight: int, budget_s: float
) -> ThroughputResult:
    """Publish into an offline session's queue; the rate near each depth."""
    rng = random.Random(1)
    total = max(depths)
    payloads = [payload(i, rng) for i in range(total)]
    result = ThroughputResult(config.name)
    broker = config.make(workdir).start()
    try:
        make_offline_session(broker)
        publisher = Publisher(broker, inflight)
        cpu0 = cpu_seconds(broker.pid)
        start = time.perf_counter()
        for data in payloads:
            if time.perf_counter() - start > budget_s or publisher.publish(data) is None:
                break
        with publisher.cond:
            publisher.cond.wait_for(
                lambda: len(publisher.ack_times) >= publisher.sent,
                max(0.0, start + budget_s - time.perf_counter()),
            )
            acked = list(publisher.ack_times)
        elapsed = time.perf_counter() - start
        cpu = cpu_seconds(broker.pid) - cpu0
        publisher.close()
        result.reached = len(acked)
        result.seconds = elapsed
        result.cpu_ms_per_1k = 1e6 * cpu / max(len(acked), 1)
        for depth in depths:
            low = depth - depth // 5
            result.rates[depth] = (
                (depth - low) / (acked[depth - 1] - acked[low - 1]) if len(acked) >= depth else None
            )
    finally:
        broker.stop()
    if isinstance(broker, RabbitMQProcess):
        result.db_bytes = sum(f.stat().st_size for f in broker.data_dir.rglob("*") if f.is_file())
    else:
        db = broker.data_dir / "mosquitto.db"
        result.db_bytes = db.stat().st_size if db.exists() else 0
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: the peer, 1 s and N = 100, one kill, shallow queues"
    )
    parser.add_argument(
        "--seconds",
        default="1",
        help="autosave_interval values without on-changes: a save every N s (default 1)",
    )
    parser.add_argument(
        "--intervals", default=None, help="autosave_interval values with on-changes (default 1,10,100,1000)"
    )
    parser.add_argument(
        "--trials", type=int, default=None, help="kills per configuration (default 5, quick 1)"
    )
    parser.add_argument(
        "--messages", type=int, default=None, help="messages published before the kill (max; 2000, quick 500)"
    )
    parser.add_argument("--rate", type=float, default=1000.0, help="messages/s of the paced stream")
    parser.add_argument(
        "--settle",
        type=float,
        default=3.0,
        help="seconds from the session's subscription to the first publish (0: a session made the moment "
        "before the kill; RabbitMQ 3.10 then loses it, docs/brokers.md)",
    )
    parser.add_argument("--inflight", type=int, default=1000, help="the publisher's QoS-1 messages in flight")
    parser.add_argument(
        "--depths", default=None, help="queue depths for throughput (default 1000,10000,50000,100000)"
    )
    parser.add_argument("--budget", type=float, default=None, help="seconds per throughput run (default 180)")
    parser.add_argument(
        "--broker",
        choices=["mosquitto", "rabbitmq", "both"],
        default="both",
        help="Mosquitto's settings, RabbitMQ, or both in the same run (default)",
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    trials = args.trials or (1 if args.quick else 5)
    messages = args.messages or (500 if args.quick else 2000)
    intervals = args.intervals or ("100" if args.quick else "1,10,100,1000")
    depths_text = args.depths or ("1000" if args.quick else "1000,10000,50000,100000")
    depths = [int(d) for d in depths_text.split(",")]
    budget = args.budget or (10.0 if args.quick else 180.0)
    configs: list[Config] = []
    if args.broker != "rabbitmq":
        configs.append(Config(PEER, {"autosave_on_changes": None, "autosave_interval": "60"}))
        configs += [
            Config(f"every {n} s", {"autosave_on_changes": None, "autosave_interval": n})
            for n in args.seconds.split(",")
            if n.strip()
        ]
    if args.broker != "rabbitmq" or args.intervals:
        configs += [
            Config(
                f"on changes, autosave_interval {n}", {"autosave_on_changes": "true", "autosave_interval": n}
            )
            for n in intervals.split(",")
        ]
    if args.broker != "mosquitto":
        configs.append(Config(RABBITMQ, {}, broker="rabbitmq"))
    rng = random.Random(0)
    windows: list[WindowResult] = []
    throughputs: list[ThroughputResult] = []
    with tempfile.TemporaryDirectory(prefix="edgedrift-durability-") as tmp:
        for c, config in enumerate(configs):
            w = WindowResult(config.name)
            for t in range(trials):
                work = Path(tmp) / f"w{c}-{t}"
                acked, lost = window_trial(
                    config, work / "paced", messages, args.inflight, args.rate, rng, args.settle
                )
                w.paced_acked.append(acked)
                w.paced_lost.append(lost)
                acked, lost = window_trial(
                    config, work / "burst", messages, args.inflight, None, rng, args.settle
                )
                w.burst_acked.append(acked)
                w.burst_lost.append(lost)
            windows.append(w)
            print(
                f"{config.name:36s} paced: lost {w.paced_lost} of {w.paced_acked}; "
                f"burst: lost {w.burst_lost} of {w.burst_acked}",
                flush=True,
            )
        for c, config in enumerate(configs):
            r = throughput_run(config, Path(tmp) / f"t{c}", depths, args.inflight, budget)
            throughputs.append(r)
            rates = ", ".join(f"{d}: {'-' if v is None else f'{v:,.0f}/s'}" for d, v in r.rates.items())
            print(
                f"{config.name:36s} {rates}; {r.reached} acked in {r.seconds:.1f} s, "
                f"broker CPU {r.cpu_ms_per_1k:.0f} ms per 1k, db {r.db_bytes / 1e6:.1f} MB",
                flush=True,
            )
    print()
    print(table(windows, throughputs, depths))
    if args.json:
        data = {
            "argv": sys.argv[1:],
            "trials": trials,
            "messages": messages,
            "inflight": args.inflight,
            "depths": depths,
            "windows": [asdict(w) for w in windows],
            "throughput": [asdict(r) for r in throughputs],
        }
        write_json(args.json, data)
    return 0


def table(windows: list[WindowResult], throughputs: list[ThroughputResult], depths: list[int]) -> str:
    """The markdown table of docs/benchmarks.md."""
    head = "| configuration | lost after the kill: paced, mean / max | burst, mean / max |"
    head += "".join(f" publish/s at {d:,} queued |" for d in depths) + " broker CPU ms per 1k | db at end |"
    rule = "|---|---:|---:|" + "---:|" * len(depths) + "---:|---:|"
    rows = [head, rule]

    def lost(values: list[int], acked: list[int]) -> str:
        return f"{sum(values) / len(values):,.0f} / {max(values):,} (of {min(acked):,}–{max(acked):,})"

    for w, r in zip(windows, throughputs, strict=True):
        rates = "".join(f" {'—' if r.rates[d] is None else f'{r.rates[d]:,.0f}'} |" for d in depths)
        rows.append(
            f"| {w.config} | {lost(w.paced_lost, w.paced_acked)} | {lost(w.burst_lost, w.burst_acked)} |"
            f"{rates} {r.cpu_ms_per_1k:,.0f} | {r.db_bytes / 1e6:.1f} MB |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
