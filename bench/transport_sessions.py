"""The transport's I/O thread with a broker session per device against one session for all (the peer), in
the same run: CPU of the I/O thread and of the worker thread per message, idle and under a paced stream.

A gateway's transport alone (no agent): ``DeviceSessions`` with N devices, or one ``MqttTransport``
subscribed to the same N topics, on a Mosquitto of its own; a worker thread answers every message (one
prediction published with the message as its owner, then ``done``: acknowledged after the broker's
PUBACK, as the agent does). A paho publisher in this process sends ``--rate`` messages a second over
``--active`` devices for ``--seconds``. CPU is read per thread from ``/proc/self/task`` (utime + stime),
so the publisher's own CPU is not counted.

    .venv/bin/python bench/transport_sessions.py --devices 100,1000 --json out/transport_sessions.json
    .venv/bin/python bench/transport_sessions.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt

from edgedrift_edge.transport.connection import Bell, MqttTransport
from edgedrift_edge.transport.mqtt import broker_address, make_client
from edgedrift_edge.transport.sessions import DeviceSessions
from edgedrift_harness.mosquitto import local_mosquitto
from edgedrift_harness.results import write_json

TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu(name: str) -> float:
    """CPU seconds of this process's thread called ``name`` (0 when there is none)."""
    for thread in threading.enumerate():
        if thread.name == name and thread.native_id is not None:
            with open(f"/proc/self/task/{thread.native_id}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / TICK
    return 0.0


def run(url: str, devices: int, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    status = f"{prefix}/gateways/gw/status"
    topics = [f"{prefix}/d{i}/samples" for i in range(devices)]

    def session(device: str | None, bell: Bell | None = None) -> MqttTransport:
        return MqttTransport(
            url,
            f"gw-{prefix}" if device is None else f"gw-{prefix}.{device}",
            [],
            status,
            will=device is None,
            doorbell=bell,
            name=device,
            persistent=device is not None,
            inbox_size=20_000,
        )

    transport: DeviceSessions | MqttTransport
    if mode == "device":
        transport = DeviceSessions(session, lambda t: None if t == status else t.split("/")[1])
    else:
        transport = session(None)
    transport.subscribe(topics)
    transport.start(120)
    stop = threading.Event()
    answered = [0]

    def work() -> None:
        while not stop.is_set():
            for m in transport.get_batch(0.1):
                transport.publish(m.topic.rpartition("/")[0] + "/predictions", {"y": 1}, owner=m)
                transport.done(m)
                answered[0] += 1

    worker = threading.Thread(target=work, name="bench-worker")
    worker.start()
    time.sleep(1.0)
    io0 = thread_cpu("edgedrift-mqtt")
    time.sleep(args.idle_s)
    idle = (thread_cpu("edgedrift-mqtt") - io0) / args.idle_s
    host, port, _ = broker_address(url)
    publisher = make_client(url, f"pub-{prefix}", clean_session=True)
    publisher.connect(host, port)
    publisher.loop_start()
    active = topics[: args.active]
    io0, w0, start, sent = thread_cpu("edgedrift-mqtt"), thread_cpu("bench-worker"), time.monotonic(), 0
    infos: list[mqtt.MQTTMessageInfo] = []
    while time.monotonic() - start < args.seconds:
        for topic in active:
            infos.append(publisher.publish(topic, json.dumps({"id": sent, "x": [0.0]}), qos=1))
            sent += 1
        time.sleep(max(0.0, start + sent / args.rate - time.monotonic()))
    deadline = time.monotonic() + 60
    while answered[0] < sent and time.monotonic() < deadline:
        time.sleep(0.05)
    elapsed = time.monotonic() - start
    io, wk = thread_cpu("edgedrift-mqtt") - io0, thread_cpu("bench-worker") - w0
    stop.set()
    worker.join()
    publisher.loop_stop()
    publisher.disconnect()
    transport.stop(5)
    return {
        "mode": mode,
        "devices": devices,
        "idle_io_cpu_pct": round(100 * idle, 2),
        "sent": sent,
        "answered": answered[0],
        "io_cpu_pct": round(100 * io / elapsed, 1),
        "io_us_per_msg": round(1e6 * io / max(1, answered[0]), 1),
        "worker_us_per_msg": round(1e6 * wk / max(1, answered[0]), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", default="100,1000", help="comma-separated gateway sizes")
    parser.add_argument("--rate", type=int, default=2000, help="messages a second over the active devices")
    parser.add_argument("--active", type=int, default=20, help="devices the stream goes to")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 devices, 2 s each")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.devices, args.seconds, args.idle_s, args.rate, args.active = "20", 2.0, 1.0, 500, 10
    rows = []
    with local_mosquitto(Path(tempfile.mkdtemp(prefix="edgedrift-transport-sessions-"))) as broker:
        for devices in [int(n) for n in args.devices.split(",")]:
            for mode in ("gateway", "device"):
                rows.append(run(broker.url, devices, mode, args))
                print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.rate} messages/s over {args.active} devices for {args.seconds} s:")
    print("| devices | sessions | I/O thread idle | I/O thread | I/O µs/msg | worker µs/msg | answered |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['devices']} | {r['mode']} | {r['idle_io_cpu_pct']} % | {r['io_cpu_pct']} % | "
            f"{r['io_us_per_msg']} | {r['worker_us_per_msg']} | {r['answered']:,} of {r['sent']:,} |"
        )
    if args.json:
        write_json(args.json, {"rate": args.rate, "active": args.active, "rows": rows})


if __name__ == "__main__":
    main()
