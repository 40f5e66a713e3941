"""Replay a data set to one or many devices over MQTT, the way sensors would publish it.

The label schedule is the evaluator's (:class:`edgedrift.protocol.Protocol`): every k-th sample (or a
random fraction) carries a label, inline (delay 0) or as a late label on ``edgedrift/{dev}/labels``
``delay`` samples later. Samples go out one per message or in batches, at a given rate or as fast as
the broker takes them, with QoS 0 or 1; at the end every QoS-1 message has been acknowledged. Labels of
a multi-class stream go out by class name (what a device configured with ``classes`` takes).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, TextIO

import paho.mqtt.client as mqtt

from edgedrift.data import Stream
from edgedrift.protocol import Protocol
from edgedrift_edge.transport.mqtt import broker_address, make_client, redact


@dataclass(frozen=True)
class ReplayPlan:
    """What to publish: the stream, to which devices, with which labels, how fast."""

    stream: Stream
    devices: tuple[str, ...]
    protocol: Protocol
    offset: int = 0
    batch_size: int = 1
    rate: float = 0.0
    qos: int = 1
    limit: int | None = None
    topic_prefix: str = "edgedrift"
    #: Labels by class name (``Stream.classes``) rather than code; None: by name for C ≥ 3 classes.
    by_name: bool | None = None


class Progress:
    """Progress on stderr: a tqdm bar on a terminal; on a file or a pipe a plain line every ``every_s``
    seconds (no carriage returns in a log), both with the rate and the time left."""

    LINE = (
        "replay: {n_fmt}/{total_fmt} samples ({percentage:.1f}%), {rate_fmt}, "
        "elapsed {elapsed}, ETA {remaining}"
    )

    def __init__(
        self, total: int, enabled: bool, stream: TextIO | None = None, every_s: float = 10.0
    ) -> None:
        from tqdm import tqdm

        self.total, self.enabled, self.every_s = total, enabled, every_s
        self.stream = sys.stderr if stream is None else stream
        self.start = self.last = time.monotonic()
        self.format_meter = tqdm.format_meter
        self.bar = (
            tqdm(total=total, desc="replay", unit="sample", file=self.stream, mininterval=0.5)
            if enabled and self.stream.isatty()
            else None
        )

    def update(self, done: int, force: bool = False) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
            if force:
                self.bar.close()
            return
        now = time.monotonic()
        if force or now - self.last >= self.every_s:
            self.last = now
            line = self.format_meter(done, self.total, now - self.start, unit="sample", bar_format=self.LINE)
            self.stream.write(line + "\n")
            self.stream.flush()


def messages(plan: ReplayPlan) -> list[tuple[str, str, int]]:
    """Every (topic suffix, payload, samples) to publish for one device, in order."""
    X, codes = plan.stream.X, plan.stream.y
    n = len(codes) if plan.limit is None else min(plan.limit, len(codes))
    s = plan.stream
    by_name = plan.by_name if plan.by_name is not None else s.task == "classification" and s.n_classes >= 3
    y: list[Any] = s.labels.decode(codes) if by_name else codes.tolist()
    labeled = plan.protocol.labeled_mask(n, plan.offset)
    delay = plan.protocol.delay
    out: list[tuple[str, str, int]] = []
    pending: deque[int] = deque()
    batch: list[dict[str, Any]] = []

    def flush() -> None:
        if batch:  # seq: the samples published before, so the agent sees what the broker drops
            seq = batch[0]["id"]
            body = {"samples": list(batch), "seq": seq} if plan.batch_size > 1 else {**batch[0], "seq": seq}
            out.append(("samples", json.dumps(body, separators=(",", ":")), len(batch)))
            batch.clear()

    for i in range(n):
        sample: dict[str, Any] = {"id": i, "x": X[i].tolist()}
        if labeled[i] and delay == 0:
            sample["y"] = y[i]
        elif labeled[i]:
            pending.append(i)
        batch.append(sample)
        if len(batch) >= plan.batch_size:
            flush()
        while pending and pending[0] + delay <= i:
            flush()
            j = pending.popleft()
            out.append(("labels", json.dumps({"id": j, "y": y[j]}), 0))
    flush()
    while pending:
        j = pending.popleft()
        out.append(("labels", json.dumps({"id": j, "y": y[j]}), 0))
    return out


def replay(
    plan: ReplayPlan,
    broker_url: str,
    progress: bool = True,
    client_id: str | None = None,
    connect_timeout: float = 30.0,
) -> int:
    """Publish the plan; returns the number of samples published (per device times devices)."""
    per_device = messages(plan)
    samples_each = sum(k for _, _, k in per_device)
    client = make_client(
        broker_url, client_id or f"edgedrift-replay-{int(time.time() * 1000) % 10**9}", clean_session=True
    )
    client.max_inflight_messages_set(1000)
    acked: set[int] = set()
    client.on_publish = lambda _c, _u, mid, _rc, _p: acked.add(mid)
    client.max_queued_messages_set(0)
    host, port, _ = broker_address(broker_url)
    connected = threading.Event()
    client.on_connect = lambda _c, _u, _f, reason, _p: connected.set() if not reason.is_failure else None
    # connect_async + loop_start: if the broker is not up yet (or restarts) paho keeps retrying, and
    # QoS-1 messages published meanwhile are queued and sent once it is back.
    client.connect_async(host, port, keepalive=30)
    client.loop_start()
    if not connected.wait(connect_timeout):
        client.loop_stop()
        raise ConnectionError(f"no MQTT broker at {redact(broker_url)} after {connect_timeout:.0f} s")
    bar = Progress(samples_each * len(plan.devices), progress)
    done = 0
    interval = 0.0 if plan.rate <= 0 else 1.0 / plan.rate
    next_at = time.monotonic()
    infos = []
    try:
        for suffix, payload, k in per_device:
            for device in plan.devices:
                infos.append(client.publish(f"{plan.topic_prefix}/{device}/{suffix}", payload, qos=plan.qos))
            done += k * len(plan.devices)
            if interval and k:
                next_at += interval
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            if len(infos) > 5000:
                _wait_acked(infos, acked, broker_url)
                infos.clear()
            bar.update(done)
        _wait_acked(infos, acked, broker_url)
        bar.update(done, force=True)
    finally:
        client.disconnect()
        client.loop_stop()
    return done


def _wait_acked(
    infos: list[mqtt.MQTTMessageInfo], acked: set[int], broker_url: str, timeout: float = 300.0
) -> None:
    """Wait for the broker's acknowledgements (``on_publish``). A message published while the connection
    was down is queued by paho and sent after the automatic reconnect, so its ``rc`` says "not connected"
    although it will arrive; the acknowledgement is what counts."""
    deadline = time.monotonic() + timeout
    for info in infos:
        while info.mid not in acked and not (info.rc == 0 and info.is_published()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the broker at {redact(broker_url)} did not acknowledge every message")
            time.sleep(0.01)
    acked.clear()
