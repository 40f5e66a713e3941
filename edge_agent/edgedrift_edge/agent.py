"""The edge agent: the composition root that wires devices' sessions to MQTT, the cloud and disk.

One process serves one device (``device_id``) or, as a *gateway* (``gateway_id``), a list of devices
over **one** MQTT connection: from ``devices``/``devices_file``, or from the cloud's list for the
gateway's credential (``gateway_secret``), polled so that devices an operator registers start without a
restart. A single-device agent is the gateway with one device.

Pieces (each in its own module):

* :class:`~edgedrift_edge.device.DeviceRuntime`: one device (its pure
  :class:`~edgedrift_edge.session.DeviceSession`, checkpoint store, topics, secret and schedule);
* :class:`~edgedrift_edge.transport.connection.MqttTransport`: bounded inbox, acknowledgements after
  processing, checked publishes;
* :class:`~edgedrift_edge.cloud.client.CloudClient`: recomputes, label batches, heartbeats and the gateway's
  device list on their own thread, with deadlines and backoff;
* :class:`~edgedrift_edge.handover.steps.Handovers`: the gateway's steps in its devices' hand-overs, given
  what they use (the transport, the cloud client, the devices, their queues) and handing back through
  callbacks what only the agent does (the control queue, forgetting a device, announcing one taken over).

Threads: the transport's I/O thread reads and writes the socket and hands over messages in batches; the
*worker* owns every session and does everything else (handling messages, installing models that arrived,
checkpoint snapshots, heartbeats, status); the checkpoint writer's thread puts the snapshots on disk; the
cloud client's thread runs HTTP; a *watchdog* reports ``degraded``
when work is queued and nothing progresses for ``watchdog_s`` seconds. Isolation: a message that raises
is counted as rejected on its own device; :data:`MAX_CONSECUTIVE_ERRORS` in a row take that device out of
service (status ``error``), never another. Supervision: when no device can work any more, or the worker
dies, the agent publishes ``error`` and :meth:`EdgeAgent.wait` returns, so the command exits non-zero and
a restart policy restarts it; a component that cannot work never keeps reporting ``online``.

The module is about 680 lines, so over 500 lines: it is the one composition root of the edge
process, and what it holds beyond the wiring (the worker's dispatch and fair intake, the control queue,
the status, silence and heartbeat rounds, the calls into hand-overs; the fairness rule itself is
:mod:`~edgedrift_edge.buffers.fair_queue`, a hand-over's steps :mod:`~edgedrift_edge.handover.steps`) is
the glue between the pieces above, which would only move into a module that reaches back into this one.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import math
import queue
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from edgedrift_edge import tracing
from edgedrift_edge.buffers.fair_queue import FairQueues
from edgedrift_edge.buffers.sweep import Sweep
from edgedrift_edge.checkpoint_writer import CheckpointWriter
from edgedrift_edge.cloud.client import CloudClient, GatewayList
from edgedrift_edge.device import SILENT_REASON, DeviceRuntime, session_config, spread
from edgedrift_edge.device_ids import DeviceIds, configured_devices
from edgedrift_edge.handover.moves import HANDOVER_SYNC_S, Incoming, Outgoing
from edgedrift_edge.handover.steps import Handovers
from edgedrift_edge.session.device_session import DeviceSession, Output
from edgedrift_edge.session.messages import Samples, count_items, message_digest
from edgedrift_edge.session.trainer import RecomputeRequest, TrainedModel, Trainer
from edgedrift_edge.settings import AgentSettings
from edgedrift_edge.transport.connection import Bell, Inbound, MqttTransport
from edgedrift_edge.transport.mqtt import session_login
from edgedrift_edge.transport.sessions import DeviceSessions, Transport
from edgedrift_edge.watchdog import watch

if TYPE_CHECKING:
    from edgedrift_edge.metrics import AgentMetrics

__all__ = ["MAX_CONSECUTIVE_ERRORS", "EdgeAgent", "configured_devices", "session_config"]

log = logging.getLogger("edgedrift_edge")

#: Consecutive messages of one device whose handling raised before that device is given up on.
MAX_CONSECUTIVE_ERRORS = 20
BATCH = 256  #: messages the worker takes from the inbox at once (their publishes leave in one write)
#: Messages a gateway's worker handles between two looks at the inbox: a quiet device's message that
#: arrives behind a flood waits for at most this many before it is queued on its device's turn.
ROUND = 32
#: Queued messages of one topic the worker hands a device's session at once (a gateway's device holds at
#: most ``device_share`` of them). A gateway takes a flooding device's messages one a turn: its groups
#: made the quiet devices' p99 worse while its backlog drained (docs/benchmarks.md section 6, "A
#: device's queued single samples"); the other devices' groups drain a restart's queues sooner (§23).
GROUP = 32
#: A gateway's seconds of first models installed a round and of checkpoints written a housekeeping turn
#: (at least one of each): a restart's 100 devices end their warm-up together, and their models, which
#: come back within a second, installed and checkpointed at once held every device's samples for half a
#: second (docs/benchmarks.md section 23); what is left waits for the next round or turn. A turn goes on
#: with its checkpoints past it while no message waits and the writer holds less than
#: ``CHECKPOINTS_AHEAD_BYTES``: an idle gateway's first checkpoints are not spread, and its encoded
#: checkpoints do not pile up in memory ahead of the disk (docs/benchmarks.md section 6).
DEFERRABLE_S = 0.005
#: Encoded checkpoints the writer may hold before an idle turn stops going on with more (the disk's pace).
CHECKPOINTS_AHEAD_BYTES = 4 << 20
#: Seconds between two housekeeping turns, and at most between two visits of one device by them
#: (:class:`~edgedrift_edge.buffers.sweep.Sweep`), and the devices a turn visits at least.
TURN_S, SWEEP_S, SWEEP_MIN = 0.05, 0.5, 32


def _on_topic(kind: str, item: tuple[DeviceRuntime, str, Inbound]) -> bool:
    """Whether a queued message is of the topic ``kind`` (the worker's groups are of one topic)."""
    return item[1] == kind


@dataclass
class _Control:
    """Something another thread hands to the worker."""

    kind: str  # "trained" | "failed" | "heartbeat" | "batch" (a gateway's heartbeats) | "devices"
    value: Any
    device: DeviceRuntime | None = None


class EdgeAgent:
    """A gateway for one or more devices. ``start()`` returns once subscribed; ``stop()`` finishes,
    checkpoints and goes offline; ``wait()`` blocks until it stopped or died."""

    def __init__(
        self,
        settings: AgentSettings,
        cloud: CloudClient | None = None,
        devices: Mapping[str, str | None] | None = None,
    ) -> None:
        self.settings = settings
        self.gateway_id = settings.gateway_id
        #: OpenTelemetry's provider when OTEL_EXPORTER_OTLP_ENDPOINT turned tracing on (module tracing).
        self._tracer_provider = tracing.configure("edgedrift-edge")
        self.traces = tracing.RecomputeTraces()
        self.cloud = cloud or CloudClient(
            settings.cloud_url,
            timeout_s=settings.http_timeout_s,
            deadline_s=settings.http_deadline_s,
            retry_base_s=settings.retry_base_s,
            retry_max_s=settings.retry_max_s,
            unauthorized_retry_s=settings.unauthorized_retry_s,
            encoding=settings.window_encoding,
        )
        self.transport: Transport = self._transport(settings)
        self.devices: dict[str, DeviceRuntime] = {}
        #: Writes the devices' checkpoints off the worker; their outcomes are collected at housekeeping.
        self.checkpoints = CheckpointWriter()
        limit = self.transport.limit if isinstance(self.transport, DeviceSessions) else None
        self.ids = DeviceIds(settings.gateway_id, limit)
        self._routes: dict[str, tuple[DeviceRuntime, str]] = {}
        self.control: queue.SimpleQueue[_Control] = queue.SimpleQueue()
        self.stopping = threading.Event()
        self.finished = threading.Event()
        self.idle = threading.Event()
        self.fatal: str | None = None
        self.degraded: str | None = None
        self.progress = 0
        self.in_hand = 0  # the messages the worker is handling (a device's group)
        #: Messages taken from the inbox, per device, drained round-robin (issue 30 row 1).
        self.queues: FairQueues[str, tuple[DeviceRuntime, str, Inbound]] = FairQueues(
            settings.device_share, max(1, settings.broker_inflight // 2), 2 * settings.device_rate_per_s
        )
        self._threads: list[threading.Thread] = []
        self._next_periodic, self._next_sync, self._syncing = 0.0, 0.0, False
        self._sweep = Sweep(lambda: list(self.devices.values()), TURN_S, SWEEP_S, SWEEP_MIN)
        self._handover_listed = False  # the last sync named a hand-over of this gateway
        self.handovers = Handovers(
            settings.gateway_id,
            settings.gateway_secret,
            self.devices,
            self.transport,
            self.cloud,
            self.queues,
            reply=self._to_worker,
            forget=self._forget,
            serve=self._serve_taken,
        )
        self._connected_at = time.monotonic()
        #: Prometheus metrics (``metrics_port``); None: no server, nothing observed per message (and
        #: prometheus_client not imported).
        self.metrics: AgentMetrics | None = None
        if settings.metrics_port is not None:
            from edgedrift_edge.metrics import AgentMetrics

            self.metrics = AgentMetrics(self, settings.metrics_device_labels)
        self.metrics_port: int | None = None
        listed = configured_devices(settings) if devices is None else devices
        admitted = self.ids.admitted(listed, need_one=settings.gateway_secret is None)
        for device_id, secret in admitted.items():  # a bad id is refused alone (device_ids)
            self._add(device_id, secret)

    def _transport(self, settings: AgentSettings) -> Transport:
        """The agent's MQTT session, or a gateway's one session per device (``broker_sessions``)."""
        client_id = (
            f"edgedrift-gateway-{settings.gateway_id}"
            if settings.gateway_id
            else f"edgedrift-agent-{settings.device_id}"
        )

        def session(device: str | None, doorbell: Bell | None = None) -> MqttTransport:
            url = settings.effective_broker_url
            return MqttTransport(
                url if device is None else session_login(url, device),
                client_id if device is None else f"{client_id}.{device}",
                [],
                settings.status_topic,
                qos=settings.qos,
                inbox_size=settings.queue_size if device is None else max(1, settings.queue_size // 16),
                publish_queue=settings.publish_queue,
                max_inbox_bytes=int(settings.max_inbox_mb * 1024 * 1024) // (1 if device is None else 16),
                tls_ca_file=settings.tls_ca_file,
                tls_cert_file=settings.tls_cert_file,
                tls_key_file=settings.tls_key_file,
                mqtt_version=settings.mqtt_version,
                session_expiry_s=settings.session_expiry_s,
                message_expiry_s=settings.message_expiry_s,
                keepalive=settings.keepalive_s,
                on_connected=self._on_connected if device is None else None,
                on_fatal=self.die,
                will=device is None,
                doorbell=doorbell,
                name=device,
                # with a session per device the gateway's own only publishes: clean, so that the
                # subscriptions a run with one session left under its client id are dropped
                persistent=device is not None or settings.broker_sessions == "gateway",
            )

        if settings.broker_sessions == "gateway":
            return session(None)
        prefix = f"{settings.topic_prefix}/"
        status = settings.status_topic

        def device_of(topic: str) -> str | None:
            if topic == status or not topic.startswith(prefix):
                return None
            return topic[len(prefix) :].rpartition("/")[0]

        return DeviceSessions(session, device_of)

    @property
    def alone(self) -> bool:
        """A single device's agent: no fairness between devices, nothing spread over rounds."""
        return len(self.devices) == 1

    @property
    def waiting(self) -> int:
        """Messages received and not handled yet: in the inbox, in the devices' queues or in hand."""
        return self.transport.queued + len(self.queues) + self.in_hand

    @property
    def _idle(self) -> bool:
        """No message waits and the checkpoint writer keeps up: work that can wait may go on."""
        return not self.waiting and self.checkpoints.held_bytes < CHECKPOINTS_AHEAD_BYTES

    @property
    def session(self) -> DeviceSession:
        """The session of the first device (the only one of a single-device agent)."""
        return next(iter(self.devices.values())).session

    # --- lifecycle -----------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> EdgeAgent:
        """Connect, start the threads, return once subscribed (TimeoutError otherwise). A gateway with
        a credential asks the cloud for its devices first."""
        if self.settings.gateway_secret is not None:
            wait = max(timeout, 2 * self.settings.http_deadline_s)
            self._apply_devices(*self.cloud.first_gateway_devices(*self._sync_request(), wait))
            self._next_sync = time.monotonic() + self.settings.gateway_sync_s
        worker = threading.Thread(target=self._work, name="edgedrift-worker", daemon=True)
        watchdog = threading.Thread(target=watch, args=(self, worker), name="edgedrift-watchdog", daemon=True)
        self._threads += [worker, watchdog]
        for thread in self._threads:
            thread.start()
        if self.metrics is not None and self.settings.metrics_port is not None:
            self.metrics_port = self.metrics.start(self.settings.metrics_port, self.settings.metrics_addr)
        self.transport.start(timeout)
        return self

    def stop(self) -> None:
        """Finish the message at hand, wait for its publishes, checkpoint, publish offline, disconnect.
        Messages still queued stay unacknowledged: the broker delivers them again after a restart."""
        self.stopping.set()
        for thread in self._threads:
            thread.join(timeout=30)
        if self.fatal is None:
            for device in self.devices.values():
                self._publish_output(device, Output(events=device.session.due_events(flush=True)), None)
            self.transport.wait_flushed(5.0)
            for device in self.devices.values():
                if not isinstance(device.handover, Incoming):  # nothing of its own yet
                    device.checkpoint()
        self.checkpoints.close()
        self.publish_all_status("error" if self.fatal else "offline")
        self.transport.stop()
        self.cloud.close()
        if self.metrics is not None:
            self.metrics.stop()
        self.traces.close_all()
        tracing.shutdown(self._tracer_provider)
        self.finished.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the agent stopped or died; True if it finished."""
        return self.finished.wait(timeout)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Block until the inbox is empty and the worker waits (for tests and the demo)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.waiting and self.idle.is_set():
                return True
            time.sleep(0.01)
        return False

    def heartbeat_now(self) -> None:
        """Ask the worker to send every device's heartbeat (and status) at its next turn."""
        for device in list(self.devices.values()):
            device.next_heartbeat = 0.0
        self._next_periodic = 0.0
        self._sweep.everything_next()

    def _on_connected(self) -> None:
        self._connected_at = time.monotonic()  # silence is counted while connected only
        self.publish_all_status(None)

    # --- devices ------------------------------------------------------------------------------------------

    def _add(self, device_id: str, secret: str | None, incoming: bool = False) -> DeviceRuntime:
        """Serve a device (``incoming``: handed over from another gateway, its state comes from there)."""
        device = DeviceRuntime(
            self.settings, device_id, secret, self.transport, self._trainer_for, self.checkpoints
        )
        if incoming:
            device.handover = Incoming()
        else:
            device.resume()
        if self.gateway_id is not None:  # spread the fleet's heartbeats (a gateway's batches) over time
            key = self.gateway_id if self.settings.gateway_secret is not None else device_id
            device.next_heartbeat = time.monotonic() + spread(key) * self.settings.heartbeat_every_s
            device.next_checkpoint += spread(device_id) * self.settings.checkpoint_every_s
        self.devices[device_id] = device
        for kind in ("samples", "labels"):
            self._routes[device.topics[kind]] = (device, kind)
        self.transport.subscribe([device.topics["samples"], device.topics["labels"]])
        return device

    def _remove(self, device: DeviceRuntime) -> None:
        self.transport.unsubscribe([device.topics["samples"], device.topics["labels"]])
        if not isinstance(device.handover, Incoming):  # a move called off: nothing of its own to keep
            device.checkpoint()
            device.publish_status(self.status("offline", device))
        self._forget(device)

    def _forget(self, device: DeviceRuntime) -> None:
        """Stop serving a device: no route to it; its messages still queued are dropped (:meth:`_handle`)."""
        for kind in ("samples", "labels"):
            self._routes.pop(device.topics[kind], None)
        del self.devices[device.device_id]

    def _sync_request(self) -> tuple[str, str, list[str]]:
        """The gateway's id and secret and the devices whose secret it holds (for the cloud's list)."""
        assert self.gateway_id is not None and self.settings.gateway_secret is not None
        known = [d for d, rt in self.devices.items() if rt.secret is not None]
        return self.gateway_id, self.settings.gateway_secret.get_secret_value(), known

    def _apply_devices(
        self, listed: Mapping[str, str | None], flags: Mapping[str, str] | None = None
    ) -> None:
        """The cloud's list: start new devices, stop removed ones, take new secrets, take the steps of
        hand-overs (``flags``: :mod:`~edgedrift_edge.handover.moves`)."""
        listed = self.ids.admitted(listed)
        flags = flags or {}
        self.handovers.handed &= set(listed)
        self._handover_listed = bool(flags)
        if self.ids.news() and self.transport.connected.is_set():
            self.publish_all_status(None)
        for device_id, secret in listed.items():
            device = self.devices.get(device_id)
            flag = flags.get(device_id)
            if device is None:
                if flag == "wait" or (flag in ("record", "release") and device_id in self.handovers.handed):
                    continue  # the source does not record yet; a sync older than this release
                incoming = flag in ("hold", "take")
                log.info(
                    "gateway %s: serving device %s%s", self.gateway_id, device_id, " (hand-over)" * incoming
                )
                device = self._add(device_id, secret, incoming)
                if self.transport.connected.is_set() and not incoming:
                    self._publish_startup(device)
            elif secret is not None:
                device.secret = secret
            if flag is not None:
                self.handovers.on_sync(device, flag)
        releasing = [
            d for d, rt in self.devices.items() if isinstance(rt.handover, Outgoing) and rt.handover.releasing
        ]
        for device_id in [d for d in self.devices if d not in listed and d not in releasing]:
            log.info("gateway %s: device %s is no longer listed", self.gateway_id, device_id)
            self._remove(self.devices[device_id])

    def _sync_done(self, future: concurrent.futures.Future[GatewayList]) -> None:
        self._syncing = False
        if future.cancelled():
            return
        error = future.exception()
        if error is None:
            self.control.put(_Control("devices", future.result()))
        else:
            log.warning("gateway %s: device list not fetched: %s", self.gateway_id, error)

    # --- the worker -----------------------------------------------------------------------------------------

    def _work(self) -> None:
        try:
            while not self.transport.connected.wait(0.1):  # the start's events go out once connected
                if self.stopping.is_set():
                    return
            for device in list(self.devices.values()):
                if not isinstance(device.handover, Incoming):
                    self._publish_startup(device)
            while not self.stopping.is_set():
                self._drain_control(math.inf if self.alone else DEFERRABLE_S)
                self._take_in()
                if not self.queues:
                    self.idle.set()
                    self._periodic()
                    continue
                self.idle.clear()
                alone = self.alone
                for _ in range(BATCH if alone else ROUND):
                    taken = self.queues.take()
                    if taken is None or self.stopping.is_set():  # what stays queued is delivered again
                        break
                    key, (device, kind, message) = taken
                    floods = not alone and self.queues.floods(key, time.monotonic())
                    more = [] if floods else self.queues.take_more(key, GROUP - 1, partial(_on_topic, kind))
                    group = [message, *(m for _, _, m in more)]
                    self.in_hand = len(group)
                    began = time.perf_counter()
                    self._handle_group(device, kind, group)
                    self.queues.charge(key, time.perf_counter() - began)
                    self.progress += len(group)
                    self.in_hand = 0
                    if floods:  # the other devices' messages and predictions pass the I/O thread first
                        self.transport.yield_io()
                self._periodic()
        except Exception as exc:
            self.die(f"worker died: {type(exc).__name__}: {exc}", traceback.format_exc())

    def _take_in(self) -> None:
        """Messages from the inbox into their devices' queues. A single-device agent takes a batch only
        once the last one is handled (the inbox's back-pressure then holds the rest at the broker). A
        gateway takes what arrived after every round, so a quiet device's message is queued soon after it
        came: with a broker session per device it takes a device's messages only while the device holds
        less than its share (the rest waits at the broker in the device's own queue, costing no one else);
        with one session it refuses a device past its share under pressure
        (:mod:`~edgedrift_edge.buffers.fair_queue`), since what waits at the broker waits for everyone."""
        fair = not self.alone
        if self.queues and not fair:
            return
        timeout = 0.0 if self.queues or not self.control.empty() else 0.05
        if fair and isinstance(self.transport, DeviceSessions):
            batch = self.transport.get_batch(timeout, limit=BATCH, room=self._room)
            refuse = False
        else:
            batch = self.transport.get_batch(timeout, limit=BATCH)
            refuse = fair
        unacknowledged = self.transport.unacked if refuse and batch else 0
        now = time.monotonic()
        for message in batch:
            route = self._routes.get(message.topic)
            if route is None:  # a device removed while its message was queued: the broker keeps no copy
                log.warning("message on %s, which no device served any more, dropped", message.topic)
                self.transport.done(message)
                continue
            device, kind = route
            if isinstance(device.handover, Incoming):
                self.handovers.hold(device, kind, message)
                continue
            if device.silent:
                self._set_silent(device, False, now)
            device.heard = now
            if not fair:
                self.queues.put(device.device_id, (device, kind, message))
                continue
            self.queues.arrivals.add(device.device_id, now)
            over = refuse and not message.retain
            if over and self.queues.over_share(device.device_id, unacknowledged, now):
                device.refuse_overloaded(kind, message.payload)
                if isinstance(device.handover, Outgoing):
                    device.handover.note(kind, message.payload)
                self.transport.done(message)  # refused is handled: acknowledged, so the window moves on
                unacknowledged += 1
                continue
            self.queues.put(device.device_id, (device, kind, message))

    def _room(self, device_id: str) -> int:
        """Messages of a device a gateway with a session per device takes now: up to its share."""
        return self.settings.device_share - self.queues.held(device_id)

    def die(self, reason: str, details: str = "") -> None:
        """Report the death (status ``error``, an event) and let :meth:`wait` return (exit non-zero)."""
        if self.fatal is not None:
            return
        self.fatal = reason
        log.error("%s\n%s", reason, details)
        try:
            self.event_all("error", reason)
            self.publish_all_status("error")
        finally:
            self.stopping.set()
            threading.Thread(target=self._finish_after_death, name="edgedrift-shutdown", daemon=True).start()

    def _finish_after_death(self) -> None:
        try:
            self.checkpoints.close(timeout=10.0)  # what was snapshotted before the death still lands
            self.transport.stop()
            self.cloud.close()
        finally:
            self.finished.set()

    def _handle_group(self, device: DeviceRuntime, kind: str, messages: list[Inbound]) -> None:
        """A device's queued messages of one topic, in order. Runs of single samples go through its
        session together (:meth:`DeviceSession.handle_singles`: the outputs of one by one, in one pass),
        each with its own publishes and acknowledgement; the rest one by one. Once the agent
        stops (a death on the way), what is left is neither handled nor acknowledged: the broker delivers
        it again, as what stays queued."""
        start = 0
        while start < len(messages) and not self.stopping.is_set():
            rest = messages[start:]
            together = len(rest) > 1 and self._serves(device, rest)
            singles = self._singles(device, kind, rest) if together else []
            if len(singles) < 2:
                self._handle(device, kind, rest[0])
                start += 1
                continue
            part = rest[: len(singles)]
            try:
                outs = device.session.handle_singles(singles)
                device.errors = 0
            except Exception as exc:
                log.exception("%s: unexpected error while handling %d messages", device.device_id, len(part))
                reason = f"internal error: {type(exc).__name__}: {exc}"[:300]
                outs = [self._rejected_whole(device, kind, m, reason) for m in part]
                outs[0].events.append({"type": "error", "reason": reason})
                device.errors += 1
            for message, out in zip(part, outs, strict=True):
                self._finish(device, kind, message, out)
            start += len(part)

    def _serves(self, device: DeviceRuntime, messages: list[Inbound]) -> bool:
        """Whether the device's session takes these messages as usual (served, in service, not retained)."""
        return (
            self.devices.get(device.device_id) is device
            and device.failed is None
            and not any(m.retain for m in messages)
        )

    @staticmethod
    def _singles(device: DeviceRuntime, kind: str, messages: list[Inbound]) -> list[Samples]:
        """The leading single samples its session may take together; a message it cannot parse is left to
        :meth:`_handle` (which words the rejection)."""
        try:
            return device.session.singles(kind, [m.payload for m in messages])
        except Exception:
            return []

    def _handle(self, device: DeviceRuntime, kind: str, message: Inbound) -> None:
        """One message through its device's session; its publishes and its acknowledgement."""
        if self.devices.get(device.device_id) is not device:  # removed while its message was queued
            log.warning("message on %s, which no device served any more, dropped", message.topic)
            self.transport.done(message)
            return
        if message.retain:
            out = device.retained(kind, message.payload)
        elif device.failed is not None:
            out = self._rejected_whole(device, kind, message, f"device out of service: {device.failed}")
        else:
            try:
                out = device.session.handle(kind, message.payload)
                device.errors = 0
            except Exception as exc:
                log.exception("%s: unexpected error while handling a message", device.device_id)
                reason = f"internal error: {type(exc).__name__}: {exc}"[:300]
                out = self._rejected_whole(device, kind, message, reason)
                out.events.append({"type": "error", "reason": reason})
                device.errors += 1
        self._finish(device, kind, message, out)

    def _finish(self, device: DeviceRuntime, kind: str, message: Inbound, out: Output) -> None:
        """A handled message's publishes, its acknowledgement, the hand-over's note and its latency; a
        device whose messages failed too often in a row is taken out of service."""
        self._publish_output(device, out, message)
        self.transport.done(message)
        if isinstance(device.handover, Outgoing):
            device.handover.note(kind, message.payload)
        if self.metrics is not None:
            self.metrics.observe(device.device_id, time.monotonic() - message.received)
        if device.errors >= MAX_CONSECUTIVE_ERRORS and device.failed is None:
            self._fail(device, f"{device.errors} consecutive messages failed; giving up")

    @staticmethod
    def _rejected_whole(device: DeviceRuntime, kind: str, message: Inbound, reason: str) -> Output:
        count = count_items(message.payload)
        device.session.counters.rejected += count
        if kind == "samples":
            device.session.seq.skipped += count
        digest = message_digest(message.payload)
        rejected = {"type": "rejected", "topic": kind, "count": count, "message": digest}
        return Output(events=[{**rejected, "reasons": [{"id": None, "reason": reason}]}])

    def _fail(self, device: DeviceRuntime, reason: str) -> None:
        """Take one device out of service; the agent dies only when no device is left to serve."""
        device.failed = reason
        log.error("%s: %s", device.device_id, reason)
        if all(d.failed is not None for d in self.devices.values()):
            self.die(reason)
            return
        device.event("error", reason=reason)
        device.publish_status(self.status("error", device))

    def _publish_output(self, device: DeviceRuntime, out: Output, owner: Inbound | None) -> None:
        if out.predictions:
            payload = {"predictions": out.predictions} if out.batch else out.predictions[0]
            self.transport.publish(device.topics["predictions"], payload, owner=owner)
        device.checkpoint_soon(out.events)
        if self.traces.open:
            self.traces.events(device.device_id, out.events)
        for event in out.events:
            device.event(event.pop("type"), owner=owner, **event)
        device.forward_history(self.cloud, out.history)

    def _drain_control(self, budget_s: float) -> None:
        """What the cloud thread handed over (models, failures, heartbeats' answers, the device list), in
        order, for about ``budget_s`` (at least one item); the rest at the next round."""
        until = time.perf_counter() + budget_s
        while True:
            try:
                item = self.control.get_nowait()
            except queue.Empty:
                return
            self._on_control(item)
            if time.perf_counter() >= until:
                return

    def _on_control(self, item: _Control) -> None:
        """One item of :meth:`_drain_control`, for the device it names unless removed since."""
        device = item.device
        if item.kind == "devices":
            self._apply_devices(*item.value)
            return
        if device is None or self.devices.get(device.device_id) is not device:
            return  # a device removed since
        if item.kind.startswith("handover:"):
            self.handovers.on_answer(item.kind.split(":", 1)[1], device, item.value)
            return
        events = []
        if item.kind == "trained" and item.value is not None:
            self.traces.arrived(device.device_id)
            events = device.session.install(item.value)
        elif item.kind == "failed":
            events = device.session.recompute_failed(item.value)
        elif item.kind in ("heartbeat", "batch"):
            device.heartbeat_done(item.value, device_credential=item.kind == "heartbeat")
        self._publish_output(device, Output(events=events), None)

    def _periodic(self) -> None:
        """Housekeeping, at most every ``TURN_S``: publish retries, hand-overs and the device list at every
        turn; each device's counters, events due, heartbeat and checkpoint at least every ``SWEEP_S``."""
        now = time.monotonic()
        if now < self._next_periodic:
            return
        self._next_periodic = now + TURN_S
        self.checkpoints.collect()
        self.transport.retry_failed()
        due: list[DeviceRuntime] = []
        checkpoints_until = math.inf  # a gateway's: DEFERRABLE_S after the turn's first checkpoint began,
        # then only while it is idle (each checkpoint looks: a message arriving waits for one at most)
        cutoff = now - self.settings.silent_after_s  # heard (or connected) before this: silent
        watching = self.transport.connected.is_set() and self._connected_at <= cutoff
        for device in self._sweep.turn():
            if isinstance(device.handover, Incoming) or self.devices.get(device.device_id) is not device:
                continue  # not this gateway's to report yet, or removed since the round began
            if watching and not device.silent and device.heard <= cutoff and device.failed is None:
                self._set_silent(device, True, now)
            device.sync_transport_counters()
            if device.session.events_due:  # summaries held back by their interval, gaps in seq by their grace
                self._publish_output(device, Output(events=device.session.due_events()), None)
            if now >= device.next_heartbeat:
                device.next_heartbeat = now + self.settings.heartbeat_every_s
                due.append(device)
            checkpoint_due = now >= device.next_checkpoint and device.failed is None
            if checkpoint_due and ((began := time.perf_counter()) < checkpoints_until or self._idle):
                device.checkpoint()  # its own cost: charged to its turns as its messages are
                self.queues.charge(device.device_id, time.perf_counter() - began)
                if not self.alone:  # the rest stay due, for their next visit
                    checkpoints_until = min(checkpoints_until, began + DEFERRABLE_S)
        if due:
            self._send_heartbeats(due)
        if self.settings.gateway_secret is None:
            return
        self.handovers.advance()
        if now >= self._next_sync and not self._syncing:
            active = self._handover_listed or any(d.handover is not None for d in self.devices.values())
            self._next_sync = now + min(self.settings.gateway_sync_s, HANDOVER_SYNC_S if active else math.inf)
            self._syncing = True
            self.cloud.gateway_devices(*self._sync_request()).add_done_callback(self._sync_done)

    def _set_silent(self, device: DeviceRuntime, silent: bool, now: float) -> None:
        """A device starts or stops being ``silent`` (issue 30 row 5): an event, its status, the
        gateway's status (and, with its next heartbeat, the cloud's fleet view)."""
        device.silent = silent
        if silent:
            quiet = round(now - max(device.heard, self._connected_at), 1)
            log.warning("%s: silent: nothing received for %.0f s while connected", device.device_id, quiet)
            device.event("silent", silent_s=quiet, reason=SILENT_REASON)
        else:
            device.event("silent_ended", silent_s=round(now - max(device.heard, self._connected_at), 1))
        device.publish_status(self.status(None, device))
        if self.gateway_id is not None:
            self.publish_all_status(None, devices=False)

    # --- recomputes -----------------------------------------------------------------------------------------

    def _trainer_for(self, device: DeviceRuntime) -> Trainer:
        """A device's trainer: the cloud call runs on the cloud thread; in sync mode the worker waits
        for it (bounded by ``sync_wait_s``), else the model comes back through the control queue."""

        def train(request: RecomputeRequest) -> TrainedModel | None:
            future = self._submit(device, request)
            if self.settings.recompute_mode == "sync":
                try:
                    trained = future.result(timeout=self.settings.sync_wait_s)
                except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
                    trained = None
                if trained is not None:
                    self.traces.arrived(device.device_id)
                    return trained
            future.add_done_callback(lambda f: self._deliver(device, f))
            return None

        return train

    def _submit(
        self, device: DeviceRuntime, request: RecomputeRequest
    ) -> concurrent.futures.Future[TrainedModel | None]:
        return self.cloud.submit(
            device.device_id,
            device.secret,
            request,
            lambda f: self.control.put(_Control("failed", f, device)),
            trace_context=self.traces.start(device.device_id, request),
        )

    def _deliver(self, device: DeviceRuntime, future: concurrent.futures.Future[TrainedModel | None]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        self.control.put(_Control("trained", future.result(), device))

    # --- status and heartbeats ------------------------------------------------------------------------------

    def state_name(self, device: DeviceRuntime | None = None) -> str:
        device = device or next(iter(self.devices.values()), None)
        if self.fatal or (device is not None and device.failed):
            return "error"
        if self.degraded:
            return "degraded"
        if device is not None and device.session.recomputes.unauthorized:
            return "unauthorized"
        if device is not None and device.silent:
            return "silent"
        return "online"

    def status(self, state: str | None = None, device: DeviceRuntime | None = None) -> dict[str, Any]:
        """A device's retained status (the first device's when none is named)."""
        device = device or next(iter(self.devices.values()))
        return {
            "state": state or self.state_name(device),
            **device.session.status(),
            "reason": self.fatal
            or device.failed
            or self.degraded
            or (SILENT_REASON if device.silent else None),
            "queue": self.waiting,
            "gateway": self.gateway_id,
            "ts": time.time(),
        }

    def publish_all_status(self, state: str | None, devices: bool = True) -> None:
        """Every device's retained status (unless not ``devices``) and a gateway's own."""
        for device in list(self.devices.values()) if devices else []:
            if not isinstance(device.handover, Incoming):
                device.publish_status(self.status(state, device))
        if self.gateway_id is not None:
            body = {
                "state": state or ("error" if self.fatal else "degraded" if self.degraded else "online"),
                "gateway": self.gateway_id,
                "devices": len(self.devices),
                "failed": sorted(d for d, rt in self.devices.items() if rt.failed),
                "silent": sorted(d for d, rt in self.devices.items() if rt.silent),
                "refused": self.ids.listing(),
                "broker_dropped": sum(d.session.counters.broker_dropped for d in self.devices.values()),
                "reason": self.fatal or self.degraded,
                "ts": time.time(),
            }
            raw = json.dumps(body, separators=(",", ":")).encode()
            self.transport.publish_raw(self.settings.status_topic, raw, retain=True, qos=1)

    def _send_heartbeats(self, devices: list[DeviceRuntime]) -> None:
        """One request per device, or, for a gateway with its own credential, one batch for them all."""
        secret = self.settings.gateway_secret
        for device in devices:
            device.save_counters()  # before they are reported: a restart goes on from here
            if secret is None:
                future = self.cloud.heartbeat(device.device_id, device.secret, device.heartbeat())
                future.add_done_callback(partial(self._to_worker, "heartbeat", device))
            if self.transport.connected.is_set():
                device.publish_status(self.status(None, device), save=False)
        if secret is not None and self.gateway_id is not None:
            beats = [(d.device_id, d.heartbeat()) for d in devices]
            batch = self.cloud.gateway_heartbeats(self.gateway_id, secret.get_secret_value(), beats)
            for device in devices:
                batch.add_done_callback(partial(self._to_worker, "batch", device))

    def event_all(self, kind: str, reason: str) -> None:
        """One event on every device's topic."""
        for device in list(self.devices.values()):
            device.event(kind, reason=reason)

    def _to_worker(self, kind: str, device: DeviceRuntime, future: concurrent.futures.Future[Any]) -> None:
        """A cloud call's answer for the worker, through the control queue (on the cloud client's thread)."""
        self.control.put(_Control(kind, future, device))

    def _serve_taken(self, device: DeviceRuntime) -> None:
        """A device taken over from another gateway is this one's now: its start's events, its status."""
        self._publish_startup(device)
        device.publish_status(self.status(None, device))

    def _publish_startup(self, device: DeviceRuntime) -> None:
        """Events of the start (resume, reset, quarantine) and a resubmitted pending recompute."""
        for event in device.startup_events:
            device.event(event.pop("type"), **event)
        device.startup_events = []
        pending = device.session.resubmit()
        if pending is not None:
            self._submit(device, pending).add_done_callback(lambda f: self._deliver(device, f))
