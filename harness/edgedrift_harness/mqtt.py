"""MQTT clients of the harness: what watches the agents and what publishes to them.

* :class:`Subscriber`: a paho client subscribed to some topics (again after every reconnect), its network
  loop in a thread; the one place that connects, subscribes and waits for the SUBACK;
* :class:`DeviceWatcher`: an operator's view of one device (predictions, events, status), for the tests
  and the fault scenarios;
* :class:`PredictionCollector`: every device's predictions by sample id, for the demo's offline check;
* :func:`publish`: publish payloads and wait until the broker acknowledged every one.

URLs are ``mqtt://[user:password@]host:port`` (the credentials log in).
"""

from __future__ import annotations

import json
import math
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, Literal, Self

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edgedrift.models.losses import FloatArray
from edgedrift_edge.transport.mqtt import broker_address, make_client, redact

__all__ = ["DeviceWatcher", "PredictionCollector", "Subscriber", "publish"]

MessageCallback = Callable[[mqtt.Client, Any, mqtt.MQTTMessage], None]


class Subscriber:
    """A client subscribed to ``topics`` ((topic, QoS) pairs); ``on_message`` (default: :meth:`handle`)
    gets every message. A persistent session (``clean_session=False``) keeps what arrives while it
    reconnects (over MQTT 5, ``mqtt_version="5"``: a session that expires an hour after a disconnect).
    Raises TimeoutError when the subscription is not acknowledged within ``timeout``."""

    def __init__(
        self,
        url: str,
        topics: list[tuple[str, int]],
        *,
        client_id: str | None = None,
        clean_session: bool = True,
        on_message: MessageCallback | None = None,
        timeout: float = 15.0,
        reconnect: tuple[int, int] = (1, 2),
        mqtt_version: str = "3.1.1",
    ) -> None:
        self.url = url
        self.topics = topics
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        self.client = make_client(
            url,
            client_id or f"edgedrift-watch-{secrets.token_hex(4)}",
            clean_session=clean_session,
            mqtt_version=mqtt_version,
        )
        self.client.reconnect_delay_set(*reconnect)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *_: self.subscribed.set()
        self.client.on_message = on_message or self._on_message
        host, port, _tls = broker_address(url)
        clean_start: bool | Literal[3] = mqtt.MQTT_CLEAN_START_FIRST_ONLY
        properties = None
        if mqtt_version == "5":
            clean_start = clean_session
            if not clean_session:
                properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
                properties.SessionExpiryInterval = 3600
        self.client.connect_async(host, port, keepalive=30, clean_start=clean_start, properties=properties)
        self.client.loop_start()
        if not self.subscribed.wait(timeout):
            self.close()
            raise TimeoutError(
                f"could not subscribe to {topics[0][0]} at {redact(url)} within {timeout:.0f} s"
            )

    def _on_connect(self, client: mqtt.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        if not reason.is_failure:
            client.subscribe(self.topics)

    def _on_message(self, _c: mqtt.Client, _u: Any, msg: mqtt.MQTTMessage) -> None:
        self.handle(msg.topic, bytes(msg.payload))

    def handle(self, topic: str, payload: bytes) -> None:
        """One message (called on the network thread)."""

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _decode(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except ValueError as exc:
        return {"undecodable": payload.decode(errors="replace"), "error": str(exc)}


class DeviceWatcher(Subscriber):
    """Predictions (a batch's flattened), events and statuses one device publishes, in arrival order."""

    def __init__(
        self,
        url: str,
        device: str,
        *,
        prefix: str = "edgedrift",
        persistent: bool = False,
        timeout: float = 15.0,
    ) -> None:
        self.device = device
        self._predictions: list[dict[str, Any]] = []
        self._events: list[dict[str, Any]] = []
        self._statuses: list[dict[str, Any]] = []
        base = f"{prefix}/{device}"
        super().__init__(
            url,
            [(f"{base}/{kind}", 1) for kind in ("predictions", "events", "status")],
            client_id=f"watch-{device}" if persistent else f"watch-{device}-{time.time_ns()}",
            clean_session=not persistent,
            timeout=timeout,
        )

    def handle(self, topic: str, payload: bytes) -> None:
        if not payload:  # a retained status cleared
            return
        kind = topic.rsplit("/", 1)[1]
        value = _decode(payload)
        with self.lock:
            if kind == "predictions":
                self._predictions.extend(value.get("predictions", [value]))
            elif kind == "events":
                self._events.append(value)
            else:
                self._statuses.append(value)

    def predictions(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self._predictions)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self._events if kind is None or e.get("type") == kind]

    def statuses(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self._statuses)

    def answered(self) -> set[Any]:
        """The sample ids that got a prediction."""
        with self.lock:
            return {p["id"] for p in self._predictions}

    def wait(self, until: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``until`` every 50 ms; TimeoutError naming ``what`` (and recent events) if it stays false."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if until():
                return
            time.sleep(0.05)
        seen = [e.get("type") for e in self.events()][-20:]
        raise TimeoutError(f"{self.device}: {what} not seen within {timeout:.0f} s; events: {seen}")

    def wait_predictions(self, n: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        """At least ``n`` predictions (all of them)."""
        self.wait(
            lambda: len(self.predictions()) >= n, timeout, f"{n} predictions ({len(self.predictions())})"
        )
        return self.predictions()

    def wait_ids(self, ids: Iterable[Any], timeout: float = 60.0) -> None:
        """Until every id in ``ids`` has a prediction."""
        wanted = set(ids)
        self.wait(lambda: wanted <= self.answered(), timeout, f"predictions of {len(wanted)} ids")

    def wait_quiet(
        self, ids: Iterable[Any], idle_s: float, timeout: float, first_s: float | None = None
    ) -> None:
        """Until every id is answered, or no new prediction came for ``idle_s`` (some may be lost);
        ``first_s`` (default ``idle_s``) is the wait for the first new one, e.g. while a restarted broker
        recovers its queues and an agent starts."""
        wanted = set(ids)
        deadline = time.monotonic() + timeout
        start = len(self.answered())
        seen, since = start, time.monotonic()
        while time.monotonic() < deadline:
            answered = self.answered()
            if wanted <= answered:
                return
            if len(answered) != seen:
                seen, since = len(answered), time.monotonic()
            elif time.monotonic() - since >= (idle_s if seen != start else (first_s or idle_s)):
                return
            time.sleep(0.05)

    def wait_events(self, kind: str, n: int = 1, timeout: float = 30.0) -> list[dict[str, Any]]:
        """At least ``n`` events of type ``kind`` (all of them)."""
        self.wait(lambda: len(self.events(kind)) >= n, timeout, f"{n} {kind!r} events")
        return self.events(kind)

    def wait_event(self, kind: str, timeout: float = 30.0) -> dict[str, Any]:
        """The first event of type ``kind``."""
        return self.wait_events(kind, 1, timeout)[0]

    def wait_status(self, state: str, timeout: float = 30.0) -> dict[str, Any]:
        """The first status with ``state``."""

        def found() -> dict[str, Any] | None:
            return next((s for s in self.statuses() if s.get("state") == state), None)

        self.wait(lambda: found() is not None, timeout, f"status {state!r}")
        status = found()
        assert status is not None
        return status


class PredictionCollector(Subscriber):
    """Subscribes to ``edgedrift/+/predictions`` and keeps every device's ``y_hat`` by sample id (ids
    0 … size − 1); duplicates and unknown ids are counted, not kept."""

    def __init__(
        self, url: str, sizes: dict[str, int], prefix: str = "edgedrift", timeout: float = 30.0
    ) -> None:
        self.y_hat: dict[str, FloatArray] = {d: np.full(n, np.nan) for d, n in sizes.items()}
        self.seen = {d: np.zeros(n, dtype=bool) for d, n in sizes.items()}
        self.count = dict.fromkeys(sizes, 0)
        self.duplicates = dict.fromkeys(sizes, 0)
        self.unexpected = 0
        super().__init__(
            url,
            [(f"{prefix}/+/predictions", 1)],
            client_id=f"edgedrift-demo-collector-{secrets.token_hex(4)}",
            timeout=timeout,
            reconnect=(1, 30),
        )

    def handle(self, topic: str, payload: bytes) -> None:
        device = topic.split("/")[-2]
        try:
            body = json.loads(payload)
            preds = body.get("predictions", [body])
        except (ValueError, TypeError, KeyError, AttributeError):
            with self.lock:
                self.unexpected += 1
            return
        with self.lock:
            if device not in self.seen:
                self.unexpected += len(preds)
                return
            seen, y_hat = self.seen[device], self.y_hat[device]
            for p in preds:
                i = p.get("id")
                if not isinstance(i, int) or not 0 <= i < len(seen):
                    self.unexpected += 1
                elif seen[i]:
                    self.duplicates[device] += 1
                else:
                    seen[i] = True
                    y_hat[i] = math.nan if p.get("y_hat") is None else float(p["y_hat"])
                    self.count[device] += 1

    def received(self, device: str) -> int:
        """Distinct sample ids of ``device`` predicted so far."""
        with self.lock:
            return self.count[device]


def publish(
    url: str,
    topic: str,
    payloads: Iterable[bytes | str],
    qos: int = 1,
    timeout: float = 60.0,
    retain: bool = False,
) -> None:
    """Publish raw payloads (at most 1,000 in flight; ``retain``: as retained messages) and wait until
    the broker acknowledged each one."""
    client = make_client(url, f"pub-{time.time_ns()}", clean_session=True)
    client.max_inflight_messages_set(1000)
    host, port, _tls = broker_address(url)
    client.connect(host, port)
    client.loop_start()
    try:
        infos = [client.publish(topic, p, qos=qos, retain=retain) for p in payloads]
        for info in infos:
            info.wait_for_publish(timeout)
            if qos and not info.is_published():
                raise TimeoutError(f"a message to {topic} was not acknowledged within {timeout:.0f} s")
    finally:
        client.disconnect()
        client.loop_stop()
