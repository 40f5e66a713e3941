"""The MQTT clients ``bench/mqtt_clients.py`` compares, each as a consumer process that does what the
agent's transport must: receive a QoS-1 sample, spend ``--work-us`` of Python on it (the session's work),
publish one QoS-1 prediction and acknowledge the sample only once the broker confirmed that prediction.

Run as ``python bench/ingest/clients.py KIND PORT WORK_US``; prints ``ready`` once subscribed.

* ``paho-threaded``: paho's network thread (``loop_start``) queues messages for a worker thread, the agent's
  transport up to 2026-11-27;
* ``paho-loop``: paho driven from one thread through its external-loop API (``loop_read``/``loop_write``),
  nothing to fight for the GIL;
* ``gmqtt``: the asyncio client gmqtt, acknowledging through its non-optimistic callback (a coroutine per
  message); only when ``pip install gmqtt`` was run (it is not a dependency);
* ``edgedrift``: the agent's :class:`~edgedrift_edge.transport.connection.MqttTransport` with a worker
  thread taking
  batches, as the agent runs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import select
import socket
import sys
import threading
import time
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

SAMPLES = "edgedrift/+/samples"
_dumps = json.JSONEncoder(separators=(",", ":")).encode


def work(topic: str, payload: bytes, spin_s: float) -> tuple[str, bytes]:
    """Decode, spin for the session's share (a batch of 100 spins 25x a single: the batch path is
    vectorised), encode the prediction(s)."""
    data = json.loads(payload)
    items = data.get("samples", [data])
    end = time.perf_counter() + spin_s * (1 if len(items) == 1 else len(items) / 4)
    while time.perf_counter() < end:
        pass
    preds = [{"id": s["id"], "y_hat": 1.0} for s in items]
    body = {"predictions": preds} if "samples" in data else preds[0]
    return topic[: -len("samples")] + "predictions", _dumps(body).encode()


def _paho(port: int) -> mqtt.Client:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"bench-{os.getpid()}", clean_session=True)
    client.manual_ack_set(True)
    client.max_inflight_messages_set(0)
    client.max_queued_messages_set(100_000)
    client.on_connect = lambda c, *_a: c.subscribe(SAMPLES, 1)
    client.connect("127.0.0.1", port)
    return client


def paho_threaded(port: int, spin_s: float) -> None:
    inbox: queue.Queue[tuple[str, bytes, int]] = queue.Queue(20_000)
    waiting: dict[int, int] = {}  # prediction mid -> sample mid
    lock = threading.Lock()
    client = _paho(port)
    subscribed = threading.Event()
    client.on_subscribe = lambda *_a: subscribed.set()
    client.on_message = lambda _c, _u, m: inbox.put((m.topic, bytes(m.payload), m.mid))

    def confirmed(_c: Any, _u: Any, mid: int, _rc: Any, _p: Any) -> None:
        with lock:
            sample = waiting.pop(mid, None)
            if sample is None:  # confirmed before the worker noted it
                early.add(mid)
        if sample is not None:
            client.ack(sample, 1)

    early: set[int] = set()
    client.on_publish = confirmed
    client.loop_start()
    subscribed.wait(10)
    print("ready", flush=True)
    while True:
        topic, payload, mid = inbox.get()
        out_topic, body = work(topic, payload, spin_s)
        info = client.publish(out_topic, body, 1)
        with lock:
            now = info.mid in early
            if now:
                early.discard(info.mid)
            else:
                waiting[info.mid] = mid
        if now:
            client.ack(mid, 1)


def paho_loop(port: int, spin_s: float) -> None:
    client = _paho(port)
    received: list[tuple[str, bytes, int]] = []
    waiting: dict[int, int] = {}
    state = {"subscribed": False}
    client.on_subscribe = lambda *_a: state.update(subscribed=True)
    client.on_message = lambda _c, _u, m: received.append((m.topic, bytes(m.payload), m.mid))

    def confirmed(_c: Any, _u: Any, mid: int, _rc: Any, _p: Any) -> None:
        sample = waiting.pop(mid, None)
        if sample is not None:
            client.ack(sample, 1)

    client.on_publish = confirmed
    ready = False
    while True:
        sock = client.socket()
        assert isinstance(sock, socket.socket)
        readable, writable, _ = select.select([sock], [sock] if client.want_write() else [], [], 0.5)
        if readable:
            client.loop_read()
        if writable:
            client.loop_write()
        batch, received[:] = list(received), []
        for topic, payload, mid in batch:
            out_topic, body = work(topic, payload, spin_s)
            waiting[client.publish(out_topic, body, 1).mid] = mid
        client.loop_misc()
        if state["subscribed"] and not ready:
            print("ready", flush=True)
            ready = True


def gmqtt_client(port: int, spin_s: float) -> None:
    import gmqtt  # type: ignore[import-not-found]  # optional: pip install gmqtt
    from gmqtt.mqtt.constants import MQTTv311  # type: ignore[import-not-found]

    async def main() -> None:
        client = gmqtt.Client(f"bench-{os.getpid()}", clean_session=True, optimistic_acknowledgement=False)

        async def on_message(c: Any, topic: str, payload: bytes, _qos: int, _props: Any) -> int:
            out_topic, body = work(topic, payload, spin_s)
            c.publish(out_topic, body, qos=1)
            return 0  # PUBACK after the prediction is written (ordered on the one connection)

        subscribed = asyncio.Event()
        client.on_message = on_message
        client.on_connect = lambda c, *_a: c.subscribe(SAMPLES, qos=1)
        client.on_subscribe = lambda *_a: subscribed.set()
        await client.connect("127.0.0.1", port, version=MQTTv311)
        await subscribed.wait()
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def edgedrift(port: int, spin_s: float) -> None:
    from edgedrift_edge.transport.connection import MqttTransport

    transport = MqttTransport(f"mqtt://127.0.0.1:{port}", f"bench-{os.getpid()}", [SAMPLES], "bench/status")
    transport.start(10)
    print("ready", flush=True)
    while True:
        for m in transport.get_batch(0.5, limit=256):
            out_topic, body = work(m.topic, m.payload, spin_s)
            transport.publish_raw(out_topic, body, owner=m)
            transport.done(m)


KINDS = {
    "paho-threaded": paho_threaded,
    "paho-loop": paho_loop,
    "gmqtt": gmqtt_client,
    "edgedrift": edgedrift,
}

if __name__ == "__main__":
    kind, port_, work_us = sys.argv[1:4]
    KINDS[kind](int(port_), float(work_us) * 1e-6)
