"""The edge agent: the composition root that wires one device's session to MQTT, the cloud and disk.

Pieces (each in its own module):

* :class:`~edgedrift_edge.session.DeviceSession`: the pure per-device logic (warm-up, loop, late labels,
  deduplication, outlier guard, counters);
* :class:`~edgedrift_edge.transport.MqttTransport`: bounded inbox, acknowledgements after processing,
  checked publishes;
* :class:`~edgedrift_edge.cloud.CloudClient`: recomputes and heartbeats on their own thread, with
  deadlines and backoff;
* :class:`~edgedrift_edge.checkpoints.CheckpointStore`: the session on disk, in a format that cannot run
  code.

Threads: paho's network thread only enqueues; the *worker* owns the session and does everything else
(handling messages, installing models that arrived, checkpoints, heartbeats, status); the cloud client's
thread runs HTTP; a *watchdog* reports ``degraded`` when work is queued and nothing progresses for
``watchdog_s`` seconds. Supervision: if the worker dies, the agent publishes ``error`` and
:meth:`EdgeAgent.wait` returns, so the command exits non-zero and a restart policy restarts it; a
component that cannot work never keeps reporting ``online``.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import queue
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from edgedrift_edge.checkpoints import CheckpointError, CheckpointStore, CorruptCheckpointError
from edgedrift_edge.cloud import CloudClient, CloudError
from edgedrift_edge.messages import count_items
from edgedrift_edge.recompute import RecomputeRequest, TrainedModel
from edgedrift_edge.session import DeviceSession, Event, Output, SessionConfig
from edgedrift_edge.settings import AgentSettings
from edgedrift_edge.transport import Inbound, MqttTransport

log = logging.getLogger("edgedrift_edge")

#: Consecutive messages whose handling raised before the worker gives up (a systematic bug).
MAX_CONSECUTIVE_ERRORS = 20


@dataclass
class _Control:
    """Something the cloud thread hands to the worker."""

    kind: str  # "trained" | "failed" | "heartbeat"
    value: Any


def session_config(settings: AgentSettings) -> SessionConfig:
    """The session's part of the agent's settings."""
    return SessionConfig(
        device_id=settings.device_id,
        task=settings.task,
        strategy=settings.strategy,
        strategy_param=settings.strategy_param,
        n_features=settings.n_features,
        warmup_samples=settings.warmup_samples,
        window_labels=settings.window_labels,
        C=settings.C,
        batch_mode=settings.batch_mode,
        join_buffer=settings.join_buffer,
        dedup_window=settings.dedup_window,
        accuracy_window=settings.accuracy_window,
        max_items=settings.max_items_per_message,
        outlier_threshold=settings.outlier_threshold,
        retry_cooldown_s=settings.retry_cooldown_s,
    )


class EdgeAgent:
    """One device's agent. ``start()`` returns once subscribed; ``stop()`` finishes, checkpoints and
    goes offline; ``wait()`` blocks until it stopped or died."""

    def __init__(self, settings: AgentSettings, cloud: CloudClient | None = None) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.secret = settings.device_secret.get_secret_value() if settings.device_secret else None
        self.cloud = cloud or CloudClient(
            settings.cloud_url,
            timeout_s=settings.http_timeout_s,
            deadline_s=settings.http_deadline_s,
            retry_base_s=settings.retry_base_s,
            retry_max_s=settings.retry_max_s,
            unauthorized_retry_s=settings.unauthorized_retry_s,
            encoding=settings.window_encoding,
        )
        self.store = CheckpointStore(settings.checkpoint_dir, settings.device_id)
        self.session = DeviceSession(session_config(settings), self._train, time.monotonic)
        self.control: queue.SimpleQueue[_Control] = queue.SimpleQueue()
        self.transport = MqttTransport(
            settings.effective_broker_url,
            f"edgedrift-agent-{settings.device_id}",
            [self.topics["samples"], self.topics["labels"]],
            self.topics["status"],
            qos=settings.qos,
            inbox_size=settings.queue_size,
            publish_queue=settings.publish_queue,
            max_inbox_bytes=int(settings.max_inbox_mb * 1024 * 1024),
            tls_ca_file=settings.tls_ca_file,
            on_connected=self._on_connected,
            on_fatal=lambda reason: self._die(reason),
        )
        self.stopping = threading.Event()
        self.finished = threading.Event()
        self.idle = threading.Event()
        self.fatal: str | None = None
        self.degraded: str | None = None
        self.progress = 0
        self._startup_events: list[Event] = []
        self._threads: list[threading.Thread] = []
        self._base = {"dropped": 0, "backpressure_waits": 0, "publish_failures": 0, "reconnects": 0}
        self._dropped_reported = 0
        self._next_checkpoint = time.monotonic() + settings.checkpoint_every_s
        self._checkpoint_streak = 0
        self._next_heartbeat = time.monotonic()
        self._next_periodic = 0.0
        self._resume()

    # --- lifecycle -----------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> EdgeAgent:
        """Connect, start the threads, return once subscribed (TimeoutError otherwise)."""
        for target, name in ((self._work, "worker"), (self._watch, "watchdog")):
            thread = threading.Thread(target=target, name=f"edgedrift-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self.transport.start(timeout)
        return self

    def stop(self) -> None:
        """Finish the message at hand, wait for its publishes, checkpoint, publish offline, disconnect.
        Messages still queued stay unacknowledged: the broker delivers them again after a restart."""
        self.stopping.set()
        for thread in self._threads:
            thread.join(timeout=30)
        if self.fatal is None:
            self.transport.wait_flushed(5.0)
            self._checkpoint()
        self._publish_status("error" if self.fatal else "offline")
        self.transport.stop()
        self.cloud.close()
        self.finished.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the agent stopped or died; True if it finished."""
        return self.finished.wait(timeout)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Block until the inbox is empty and the worker waits (for tests and the demo)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.transport.inbox.empty() and self.idle.is_set():
                return True
            time.sleep(0.01)
        return False

    def heartbeat_now(self) -> None:
        """Ask the worker to send a heartbeat (and the status) at its next turn."""
        self._next_heartbeat = self._next_periodic = 0.0

    def _on_connected(self) -> None:
        self._publish_status(self.state_name())

    # --- the worker -----------------------------------------------------------------------------------------

    def _work(self) -> None:
        try:
            while not self.transport.connected.wait(0.1):  # the start's events go out once connected
                if self.stopping.is_set():
                    return
            self._publish_startup()
            errors = 0
            while not self.stopping.is_set():
                self._drain_control()
                message = self.transport.get(timeout=0.05)
                if message is None:
                    self.idle.set()
                    self._periodic()
                    continue
                self.idle.clear()
                errors = errors + 1 if not self._handle(message) else 0
                if errors >= MAX_CONSECUTIVE_ERRORS:
                    raise RuntimeError(f"{errors} consecutive messages failed; giving up")
                self.progress += 1
                self._periodic()
        except Exception as exc:
            self._die(f"worker died: {type(exc).__name__}: {exc}", traceback.format_exc())

    def _die(self, reason: str, details: str = "") -> None:
        """Report the death (status ``error``, an event) and let :meth:`wait` return (exit non-zero)."""
        if self.fatal is not None:
            return
        self.fatal = reason
        log.error("%s\n%s", reason, details)
        try:
            self._event("error", reason=reason)
            self._publish_status("error")
        finally:
            self.stopping.set()
            threading.Thread(target=self._finish_after_death, name="edgedrift-shutdown", daemon=True).start()

    def _finish_after_death(self) -> None:
        try:
            self.transport.stop()
            self.cloud.close()
        finally:
            self.finished.set()

    def _handle(self, message: Inbound) -> bool:
        """One message through the session; its publishes and its acknowledgement. False if it raised."""
        kind = "labels" if message.topic == self.topics["labels"] else "samples"
        try:
            out = self.session.handle(kind, message.payload)
        except Exception as exc:
            log.exception("unexpected error while handling a message")
            count = count_items(message.payload)
            self.session.counters.rejected += count
            reason = f"internal error: {type(exc).__name__}: {exc}"[:300]
            digest = hashlib.blake2b(message.payload, digest_size=8).hexdigest()
            rejected = {
                "type": "rejected",
                "topic": kind,
                "count": count,
                "reasons": [{"id": None, "reason": reason}],
            }
            out = Output(events=[{**rejected, "message": digest}, {"type": "error", "reason": reason}])
            ok = False
        else:
            ok = True
        self._publish_output(out, message)
        self.transport.done(message)
        return ok

    def _publish_output(self, out: Output, owner: Inbound | None) -> None:
        if out.predictions:
            payload = {"predictions": out.predictions} if out.batch else out.predictions[0]
            self.transport.publish(self.topics["predictions"], payload, owner=owner)
        for event in out.events:
            self._event(event.pop("type"), owner=owner, **event)

    def _event(self, kind: str, owner: Inbound | None = None, **values: Any) -> None:
        self.transport.publish(
            self.topics["events"], {"type": kind, "ts": time.time(), **values}, owner=owner
        )

    def _drain_control(self) -> None:
        while True:
            try:
                item = self.control.get_nowait()
            except queue.Empty:
                return
            events: list[Event] = []
            if item.kind == "trained":
                if item.value is not None:
                    events = self.session.install(item.value)
            elif item.kind == "failed":
                events = self.session.recompute_failed(item.value)
            elif item.kind == "heartbeat":
                self._heartbeat_done(item.value)
            self._publish_output(Output(events=events), None)

    def _periodic(self) -> None:
        """Housekeeping, at most every 50 ms: publish retries, counters, heartbeat, checkpoint."""
        now = time.monotonic()
        if now < self._next_periodic:
            return
        self._next_periodic = now + 0.05
        self.transport.retry_failed()
        self._sync_transport_counters()
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + self.settings.heartbeat_every_s
            self._send_heartbeat()
        if now >= self._next_checkpoint:
            self._checkpoint()

    def _sync_transport_counters(self) -> None:
        c, t = self.session.counters, self.transport.counters
        c.dropped = self._base["dropped"] + t.dropped
        c.backpressure_waits = self._base["backpressure_waits"] + t.backpressure_waits
        c.publish_failures = self._base["publish_failures"] + t.publish_failures
        c.reconnects = self._base["reconnects"] + t.reconnects
        if c.dropped > self._dropped_reported:
            self._event(
                "dropped",
                count=c.dropped - self._dropped_reported,
                total=c.dropped,
                reason="inbox full (QoS 0 messages are not delivered again)",
            )
            self._dropped_reported = c.dropped

    # --- recomputes -----------------------------------------------------------------------------------------

    def _train(self, request: RecomputeRequest) -> TrainedModel | None:
        """The session's trainer: the cloud call runs on the cloud thread; in sync mode the worker waits
        for it (bounded by ``sync_wait_s``), else the model comes back through the control queue."""
        future = self.cloud.submit(
            self.settings.device_id, self.secret, request, lambda f: self.control.put(_Control("failed", f))
        )
        if self.settings.recompute_mode == "sync":
            try:
                trained = future.result(timeout=self.settings.sync_wait_s)
            except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
                trained = None
            if trained is not None:
                return trained
        future.add_done_callback(self._deliver)
        return None

    def _deliver(self, future: concurrent.futures.Future[TrainedModel | None]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        self.control.put(_Control("trained", future.result()))

    # --- status, heartbeats, checkpoints --------------------------------------------------------------------

    def state_name(self) -> str:
        if self.fatal:
            return "error"
        if self.degraded:
            return "degraded"
        if self.session.unauthorized:
            return "unauthorized"
        return "online"

    def status(self, state: str | None = None) -> dict[str, Any]:
        return {
            "state": state or self.state_name(),
            **self.session.status(),
            "reason": self.fatal or self.degraded,
            "queue": self.transport.inbox.qsize(),
            "ts": time.time(),
        }

    def _publish_status(self, state: str) -> None:
        body = json.dumps(self.status(state), separators=(",", ":"), allow_nan=False).encode()
        self.transport.publish_raw(self.topics["status"], body, retain=True, qos=1)

    def _send_heartbeat(self) -> None:
        beat = self.session.heartbeat()
        future = self.cloud.heartbeat(self.settings.device_id, self.secret, beat)
        future.add_done_callback(lambda f: self.control.put(_Control("heartbeat", f)))
        if self.transport.connected.is_set():
            self._publish_status(self.state_name())

    def _heartbeat_done(self, future: concurrent.futures.Future[None]) -> None:
        c = self.session.counters
        if future.cancelled():
            return
        error = future.exception()
        if error is None:
            c.heartbeats += 1
            return
        c.heartbeat_failures += 1
        if isinstance(error, CloudError) and error.unauthorized and not self.session.unauthorized:
            self.session.unauthorized = True
            self._event("unauthorized", reason=str(error)[:300])
        log.warning("heartbeat failed: %s", error)

    def _checkpoint(self) -> None:
        """Write the session; a failure is reported and retried with backoff, never fatal."""
        try:
            self._sync_transport_counters()
            self.store.save(self._snapshot())
        except CheckpointError as exc:
            self.session.counters.checkpoint_failures += 1
            self._checkpoint_streak += 1
            delay = min(self.settings.checkpoint_every_s, 2.0**self._checkpoint_streak)
            self._next_checkpoint = time.monotonic() + delay
            self._event("checkpoint_failed", reason=str(exc)[:300], retry_in_s=delay)
            log.error("checkpoint failed (retrying in %.0f s): %s", delay, exc)
            return
        if self._checkpoint_streak:
            self._event("checkpoint_recovered", failures=self._checkpoint_streak)
        self._checkpoint_streak = 0
        self.session.counters.checkpoints += 1
        self._next_checkpoint = time.monotonic() + self.settings.checkpoint_every_s

    def _snapshot(self) -> dict[str, Any]:
        s = self.settings
        return {
            "identity": {"strategy": s.strategy, "task": s.task, "strategy_param": s.strategy_param},
            "session": self.session.snapshot(),
        }

    def _resume(self) -> None:
        """Continue from the checkpoint when there is a usable one of this configuration."""
        try:
            tree = self.store.load()
        except CorruptCheckpointError as exc:
            log.error("checkpoint unusable (%s); moved to %s, starting fresh", exc.reason, exc.quarantined)
            self._startup_events.append(
                {"type": "checkpoint_corrupt", "reason": exc.reason[:300], "moved_to": str(exc.quarantined)}
            )
            return
        if tree is None:
            return
        s = self.settings
        identity = {"strategy": s.strategy, "task": s.task, "strategy_param": s.strategy_param}
        session_tree = tree["session"] if isinstance(tree, dict) and "session" in tree else None
        width = session_tree.get("n_features") if session_tree else None
        reason = None
        if tree.get("identity") != identity:
            reason = f"the configuration changed from {tree.get('identity')} to {identity}"
        elif s.n_features is not None and width is not None and width != s.n_features:
            reason = f"n_features changed from {width} to {s.n_features}"
        if reason is not None or session_tree is None:
            moved = self.store.quarantine()
            self._startup_events.append({"type": "state_reset", "reason": reason, "moved_to": str(moved)})
            log.warning("not resuming: %s (checkpoint moved to %s)", reason, moved)
            return
        try:
            self.session.restore(session_tree)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            moved = self.store.quarantine()
            self.session = DeviceSession(session_config(s), self._train, time.monotonic)
            self._startup_events.append(
                {
                    "type": "checkpoint_corrupt",
                    "reason": f"{type(exc).__name__}: {exc}"[:300],
                    "moved_to": str(moved),
                }
            )
            return
        c = self.session.counters
        self._base = {name: getattr(c, name) for name in self._base}
        self._dropped_reported = c.dropped
        self._startup_events.append(
            {"type": "resumed", "samples": c.samples, "model_version": self.session.model_version}
        )
        log.info(
            "resumed from %s: %d samples, model version %s",
            self.store.path,
            c.samples,
            self.session.model_version,
        )

    def _publish_startup(self) -> None:
        """Events of the start (resume, reset, quarantine) and a resubmitted pending recompute."""
        for event in self._startup_events:
            self._event(event.pop("type"), **event)
        self._startup_events = []
        pending = self.session.resubmit()
        if pending is not None:
            future = self.cloud.submit(
                self.settings.device_id,
                self.secret,
                pending,
                lambda f: self.control.put(_Control("failed", f)),
            )
            future.add_done_callback(self._deliver)

    # --- the watchdog ---------------------------------------------------------------------------------------

    def _watch(self) -> None:
        """Degraded when work waits and nothing moves for ``watchdog_s``; error when the worker is gone."""
        last_progress, since = self.progress, time.monotonic()
        worker = self._threads[0] if self._threads else None
        while not self.stopping.wait(min(1.0, self.settings.watchdog_s / 4)):
            if worker is not None and not worker.is_alive() and self.fatal is None:
                self._die("the worker thread is gone")
                return
            now = time.monotonic()
            if self.progress != last_progress or self.transport.inbox.empty():
                last_progress, since = self.progress, now
                if self.degraded:
                    self.degraded = None
                    self._event("recovered", reason="work is progressing again")
                    self._publish_status(self.state_name())
            elif now - since >= self.settings.watchdog_s and not self.degraded:
                self.degraded = (
                    f"{self.transport.inbox.qsize()} messages queued, no progress for {now - since:.0f} s"
                )
                log.error("degraded: %s", self.degraded)
                self._event("degraded", reason=self.degraded)
                self._publish_status("degraded")
