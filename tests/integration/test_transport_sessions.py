"""edgedrift_edge.transport.sessions (a gateway's broker session per device) against a real Mosquitto: each
device's messages come and are acknowledged on its own session, a session's queue at the broker holds
its device's samples while the gateway is away, a run that had one session leaves no duplicate
subscription behind, and a device that leaves ends its session."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgedrift_edge.transport.connection import Bell, MqttTransport
from edgedrift_edge.transport.sessions import DeviceSessions, session_limit
from edgedrift_harness.mosquitto import MosquittoProcess, local_mosquitto
from edgedrift_harness.mqtt import publish

TIMEOUT_S = 15.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoProcess]:
    with local_mosquitto(tmp_path) as running:
        yield running


class Gateway:
    """A gateway's transport: DeviceSessions (or its one MqttTransport) under one client id."""

    def __init__(self, url: str, name: str, prefix: str) -> None:
        self.url, self.name, self.prefix = url, name, prefix
        self.status = f"{prefix}/gateways/{name}/status"

    def device_of(self, topic: str) -> str | None:
        if topic == self.status:
            return None
        return topic[len(self.prefix) + 1 :].rpartition("/")[0]

    def session(
        self, device: str | None, doorbell: Bell | None = None, persistent: bool = True
    ) -> MqttTransport:
        client_id = self.name if device is None else f"{self.name}.{device}"
        return MqttTransport(
            self.url,
            client_id,
            [],
            self.status,
            will=device is None,
            doorbell=doorbell,
            name=device,
            persistent=persistent,
        )

    def sessions(self) -> DeviceSessions:
        """As the agent builds them: the gateway's own session clean, the devices' persistent."""
        return DeviceSessions(lambda d, bell: self.session(d, bell, persistent=d is not None), self.device_of)


def samples(prefix: str, device: str) -> str:
    return f"{prefix}/{device}/samples"


def take(t: DeviceSessions | MqttTransport, n: int, *, answer: bool = True) -> list[tuple[str, int]]:
    """Take ``n`` messages (and no more within a short wait); each answered and acknowledged."""
    got: list[tuple[str, int]] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < n and time.monotonic() < deadline:
        for m in t.get_batch(0.1):
            device = m.topic.split("/")[-2]
            got.append((device, json.loads(m.payload)["id"]))
            if answer:
                t.publish(f"{m.topic.rpartition('/')[0]}/predictions", {"id": got[-1][1]}, owner=m)
            t.done(m)
    time.sleep(0.3)
    for m in t.get_batch(0.0):
        got.append((m.topic.split("/")[-2], json.loads(m.payload)["id"]))
    return got


def send(url: str, topic: str, ids: range) -> None:
    publish(url, topic, [json.dumps({"id": i, "x": [0.0]}) for i in ids])


def started(broker: MosquittoProcess) -> tuple[Gateway, DeviceSessions]:
    """A gateway of devices ``a`` and ``b`` under a fresh prefix, its sessions started."""
    gw = Gateway(broker.url, f"gw-{uuid.uuid4().hex[:6]}", f"edgedrift-{uuid.uuid4().hex[:6]}")
    t = gw.sessions()
    t.subscribe([samples(gw.prefix, "a"), samples(gw.prefix, "b")])
    t.start(TIMEOUT_S)
    return gw, t


def test_each_device_has_its_own_session_and_queue(broker: MosquittoProcess) -> None:
    gw, t = started(broker)
    prefix = gw.prefix
    assert len(t.sessions) == 3  # the gateway's own and one per device
    send(broker.url, samples(prefix, "a"), range(5))
    send(broker.url, samples(prefix, "b"), range(5))
    got = take(t, 10)
    assert sorted(got) == [(d, i) for d in "ab" for i in range(5)]
    assert t.wait_flushed(TIMEOUT_S)
    t.stop()
    # away: each device's samples wait in its own session's queue, then come once, acknowledged before
    send(broker.url, samples(prefix, "a"), range(5, 8))
    send(broker.url, samples(prefix, "b"), range(5, 7))
    again = gw.sessions()
    again.subscribe([samples(prefix, "a"), samples(prefix, "b")])
    again.start(TIMEOUT_S)
    assert sorted(take(again, 5)) == [("a", 5), ("a", 6), ("a", 7), ("b", 5), ("b", 6)]
    assert [s.counters.reconnects for s in again.sessions] == [0, 0, 0]
    again.stop()


def test_a_device_without_room_is_not_taken_from_and_its_messages_wait_for_it(
    broker: MosquittoProcess,
) -> None:
    """Back-pressure per device (``room``): a device the caller has no room for keeps its messages in its
    session (and, past the inbox, at the broker in its own queue) while the others' are taken; once it has
    room again every one of them comes, in order."""
    gw, t = started(broker)
    t.sessions[1].inbox_size = 20  # a small inbox: the rest stays at the broker
    send(broker.url, samples(gw.prefix, "a"), range(200))
    send(broker.url, samples(gw.prefix, "b"), range(5))
    room = {"a": 0, "b": 100}
    got: list[tuple[str, int]] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < 5 and time.monotonic() < deadline:
        for m in t.get_batch(0.1, room=lambda d: room[d]):
            got.append((m.topic.split("/")[-2], json.loads(m.payload)["id"]))
            t.done(m)
    time.sleep(0.5)
    got += [(m.topic.split("/")[-2], -1) for m in t.get_batch(0.0, room=lambda d: room[d])]
    assert got == [("b", i) for i in range(5)], "nothing of the device without room was taken"
    a = next(s for s in t.sessions if s.name == "a")
    assert 0 < a.queued < 200, "its inbox holds a part, the broker the rest"
    room["a"] = 3
    first = t.get_batch(0.0, room=lambda d: room[d])
    taken = [json.loads(m.payload)["id"] for m in first]
    assert taken == [0, 1, 2], "no more than its room"
    for m in first:
        t.done(m)
    ids = list(taken)
    deadline = time.monotonic() + TIMEOUT_S
    while len(ids) < 200 and time.monotonic() < deadline:
        for m in t.get_batch(0.1, room=lambda d: 50):
            ids.append(json.loads(m.payload)["id"])
            t.done(m)
    assert ids == list(range(200)), "every message of the device came once, in order"
    t.stop()


def test_a_run_with_one_session_leaves_no_duplicate_subscription(broker: MosquittoProcess) -> None:
    prefix = f"edgedrift-{uuid.uuid4().hex[:6]}"
    gw = Gateway(broker.url, f"gw-{uuid.uuid4().hex[:6]}", prefix)
    one = gw.session(None)  # the earlier run: one persistent session subscribed to the device
    one.subscribe([samples(prefix, "a")])
    one.start(TIMEOUT_S)
    one.stop()
    t = gw.sessions()
    t.subscribe([samples(prefix, "a")])
    t.start(TIMEOUT_S)
    assert t.own.holds([]) and not t.own.subscriptions
    deadline = time.monotonic() + TIMEOUT_S
    while t.own.unacked or not t.own.unsubscribed:  # its UNSUBSCRIBE acknowledged
        assert time.monotonic() < deadline
        time.sleep(0.05)
    send(broker.url, samples(prefix, "a"), range(4))
    assert sorted(take(t, 4)) == [("a", i) for i in range(4)]  # once each, not once per session
    t.stop()


def test_a_device_that_leaves_ends_its_session(broker: MosquittoProcess) -> None:
    gw, t = started(broker)
    prefix = gw.prefix
    send(broker.url, samples(prefix, "b"), range(3))
    assert len(take(t, 3)) == 3
    leaving = next(s for s in t.sessions if s.name == "b")
    t.unsubscribe([samples(prefix, "b")])
    deadline = time.monotonic() + TIMEOUT_S
    while leaving in t.sessions:  # ended by the worker's next take, once the broker acknowledged
        assert time.monotonic() < deadline
        t.get_batch(0.05)
    leaving.join(TIMEOUT_S)
    assert not leaving.connected.is_set()
    assert t.left([samples(prefix, "b")]) and not t.holds([samples(prefix, "b")])
    assert len(t.sessions) == 2  # asking about a device that left opens no session for it
    send(broker.url, samples(prefix, "b"), range(3, 6))
    send(broker.url, samples(prefix, "a"), range(2))
    assert sorted(take(t, 2)) == [("a", 0), ("a", 1)]  # nothing of b any more
    t.subscribe([samples(prefix, "b")])  # back: a new session, under the same client id
    assert len(t.sessions) == 3
    t.stop()


def test_every_session_is_served_by_one_io_thread(broker: MosquittoProcess) -> None:
    """One ``select`` for all of them: the worker's publishes to many devices wake one thread."""
    gw = Gateway(broker.url, f"gw-{uuid.uuid4().hex[:6]}", f"edgedrift-{uuid.uuid4().hex[:6]}")
    before = {t.ident for t in threading.enumerate()}
    t = gw.sessions()
    devices = [f"d{i}" for i in range(12)]
    t.subscribe([samples(gw.prefix, d) for d in devices])
    t.start(TIMEOUT_S)
    for d in devices:
        send(broker.url, samples(gw.prefix, d), range(3))
    assert sorted(take(t, 36)) == sorted((d, i) for d in devices for i in range(3))
    assert t.wait_flushed(TIMEOUT_S)
    time.sleep(0.2)  # the connector threads have ended
    new = [th.name for th in threading.enumerate() if th.ident not in before]
    assert new == ["edgedrift-mqtt"], new
    assert len(t.sessions) == 13 and all(s.connected.is_set() for s in t.sessions)
    t.stop()
    assert all(s.io_ended for s in t.sessions)


def test_sessions_whose_sockets_are_above_descriptor_1024_are_served(broker: MosquittoProcess) -> None:
    """The loop waits with a selector (epoll): ``select`` refuses descriptors from 1,024 on, which capped a
    process at 300 device sessions."""
    if session_limit(1_200) < 1_200:
        pytest.skip("the hard descriptor limit of this machine is below 1,300")
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1_100)]
    try:
        gw, t = started(broker)
    finally:  # the test's own publisher is paho's loop, which selects: its sockets must stay below
        for fd in filler:
            os.close(fd)
    sockets = [s.client.socket() for s in t.sessions]
    assert min(sock.fileno() for sock in sockets if sock is not None) > 1_024 and None not in sockets
    send(broker.url, samples(gw.prefix, "a"), range(4))
    send(broker.url, samples(gw.prefix, "b"), range(4))
    assert sorted(take(t, 8)) == [(d, i) for d in "ab" for i in range(4)]
    assert t.wait_flushed(TIMEOUT_S)
    assert all(s.counters.reconnects == 0 for s in t.sessions)
    t.stop()
