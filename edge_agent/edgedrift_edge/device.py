"""One device inside an agent or a gateway: its session, checkpoint, topics, secret and schedule.

A gateway holds one :class:`DeviceRuntime` per device and shares only the MQTT connection, the cloud
client's thread and the worker between them: a device's bad input, outlier, failed recompute, failed
checkpoint or systematic crash is counted and reported on that device's topics and touches no other
device's state. Everything here runs on the gateway's worker thread.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from edgedrift import state
from edgedrift.window import delay_buffer_size
from edgedrift.wire import Heartbeat
from edgedrift_edge.checkpoint_writer import CheckpointWriter
from edgedrift_edge.checkpoints import CheckpointError, CheckpointStore, CorruptCheckpointError
from edgedrift_edge.cloud.client import CloudClient, CloudError
from edgedrift_edge.handover.moves import Incoming, Outgoing
from edgedrift_edge.session.device_session import DeviceSession
from edgedrift_edge.session.ledger import Counters, Event, Output, SessionConfig
from edgedrift_edge.session.messages import count_items, message_digest, refused_items, single_seq
from edgedrift_edge.session.trainer import LabelBatch, Trainer
from edgedrift_edge.settings import AgentSettings, device_topics
from edgedrift_edge.transport.connection import Inbound
from edgedrift_edge.transport.sessions import Transport

log = logging.getLogger("edgedrift_edge")

#: Transport counters a device reports (the gateway's connection is shared, so these are the gateway's,
#: except ``dropped``, which the transport counts per device).
SHARED_COUNTERS = ("backpressure_waits", "publish_failures", "reconnects")


#: Why a retained message on a samples or labels topic is not handled.
RETAINED_REASON = (
    "retained message ignored: the broker hands it to every new subscription again, so it would be "
    "answered and learned at each reconnect (publish samples and labels with retain=false)"
)

#: Why a gateway refused a device's messages (the ``overloaded`` event).
OVERLOAD_REASON = (
    "device past its share of the gateway's worker queue (device_share) while the broker's window was "
    "full: refused so that the other devices' messages are not delayed behind this one's"
)

#: Why a device is reported ``silent`` (the event's reason and the status's).
SILENT_REASON = (
    "no message received for silent_after_s while connected to the broker: its publisher is down, or the "
    "broker's ACL does not grant this gateway the device's topics (Mosquitto acknowledges the subscription "
    "and delivers nothing; docs/edge-agent.md, 'Gateways and the broker's ACL')"
)

#: How long a device's first window waits for its first model before it is checkpointed alone.
WARMUP_CHECKPOINT_S = 5.0

#: A single-device agent's recent samples when unset (one device can afford them).
SINGLE_DEVICE_RECENT_SAMPLES = 50_000


def recent_samples_size(settings: AgentSettings) -> int:
    """Recent samples of each device: the configured size, else entries for the samples of one longest
    label delay (``delay_buffer_size``); a single-device agent keeps at least its fixed size, while a
    gateway of 1,000 devices does not hold 50k samples per device."""
    if settings.recent_samples is not None:
        return settings.recent_samples
    need = delay_buffer_size(settings.device_rate_per_s, settings.label_delay_s)
    return need if settings.gateway_id is not None else max(SINGLE_DEVICE_RECENT_SAMPLES, need)


def session_config(settings: AgentSettings, device_id: str) -> SessionConfig:
    """The session's part of the agent's settings, for one device."""
    return SessionConfig(
        device_id=device_id,
        task=settings.task,
        classes=None if settings.classes is None else tuple(settings.classes),
        strategy=settings.strategy,
        strategy_param=settings.strategy_param,
        n_features=settings.n_features,
        warmup_samples=settings.warmup_samples,
        window_labels=settings.window_labels,
        C=settings.C,
        batch_mode=settings.batch_mode,
        recent_samples=recent_samples_size(settings),
        recent_bytes=int(settings.recent_samples_mb * 1024 * 1024),
        accuracy_window=settings.accuracy_window,
        max_items=settings.max_items_per_message,
        outlier_threshold=settings.outlier_threshold,
        retry_cooldown_s=settings.retry_cooldown_s,
        history_batch=settings.history_batch,
        check_seq=settings.qos == 1,
        seq_grace_s=settings.seq_grace_s,
    )


def spread(key: str) -> float:
    """A stable fraction in [0, 1) of a name, to spread a device's (or a gateway's) periodic work."""
    return zlib.crc32(key.encode()) % 1000 / 1000


class DeviceRuntime:
    """One device's session with its checkpoint store and its share of the MQTT connection."""

    def __init__(
        self,
        settings: AgentSettings,
        device_id: str,
        secret: str | None,
        transport: Transport,
        trainer_for: Callable[[DeviceRuntime], Trainer],
        writer: CheckpointWriter,
    ) -> None:
        self.settings = settings
        self.device_id = device_id
        self.secret = secret
        self.transport = transport
        self.topics = device_topics(settings.topic_prefix, device_id)
        self.store = CheckpointStore(settings.checkpoint_dir, device_id)
        self.writer = writer
        self._trainer_for = trainer_for
        self.session = DeviceSession(session_config(settings, device_id), trainer_for(self), time.monotonic)
        #: Why this device stopped being served (a systematic error), or None.
        self.failed: str | None = None
        self.errors = 0
        self.startup_events: list[Event] = []
        #: What a restore set the copied counters to (read-only, so that every change is a new one, which
        #: :meth:`sync_transport_counters` sees): the copy adds what was counted since.
        self._base = MappingProxyType(
            dict.fromkeys(("dropped", "overloaded", "broker_dropped", *SHARED_COUNTERS), 0)
        )
        #: What :meth:`sync_transport_counters` read and wrote at its last copy (None: none yet).
        self._synced: tuple[object, ...] | None = None
        self._transport_dropped_reported = 0
        now = time.monotonic()
        self.next_heartbeat = now
        self.next_checkpoint = now + settings.checkpoint_every_s
        self._checkpoint_streak = 0
        #: Wall-clock time of the last checkpoint written (of the start before the first): its age.
        self.checkpointed_at = time.time()
        #: The digest of the retained message last seen on each input topic (the broker keeps one per
        #: topic), so that its copies at later subscribes are not counted as new messages.
        self.retained_seen: dict[str, str] = {}
        self._counters_failing = False
        #: When a message of this device last arrived (its start before the first): silence is measured
        #: from here, or from the connection's start when that is later.
        self.heard = now
        #: Whether the device is reported ``silent`` (nothing received for ``silent_after_s``).
        self.silent = False
        #: Its side of a hand-over between gateways (:mod:`~edgedrift_edge.handover.moves`), or None.
        self.handover: Outgoing | Incoming | None = None

    def heartbeat(self) -> Heartbeat:
        """The session's heartbeat with what only the runtime knows (``silent``)."""
        beat = self.session.heartbeat()
        beat.extra["silent"] = self.silent
        return beat

    def retained(self, kind: str, payload: bytes) -> Output:
        """A retained message on the ``kind`` topic: rejected whole, with an event, the first time; its
        copies at later subscribes (a broker that lost the session) count in ``retained_repeats``."""
        digest = message_digest(payload)
        c = self.session.counters
        if self.retained_seen.get(kind) == digest:
            c.retained_repeats += 1
            return Output()
        self.retained_seen[kind] = digest
        count = count_items(payload)
        c.rejected += count
        c.retained += count
        event = {"type": "rejected", "topic": kind, "count": count, "message": digest}
        return Output(events=[{**event, "reasons": [{"id": None, "reason": RETAINED_REASON}]}])

    def refuse_overloaded(self, kind: str, payload: bytes) -> None:
        """A message refused because this device was past its share of the gateway's worker: its items
        count in ``overloaded`` and ``dropped``, reported in the session's ``overloaded`` summary (at most
        one event a second: what was refused since the last one, per topic). A message whose
        ``seq`` was accounted for already (refused, or handled, before a reconnect) counts only in
        ``refused_repeats``: refusing it again must not count it twice."""
        batch = b'"samples"' in payload or b'"labels"' in payload  # else one item: no parse (a flood)
        count, seq = refused_items(payload) if batch else (1, None)
        if kind == "samples" and not batch:
            seq = single_seq(payload)
        if (
            kind == "samples"
            and seq is not None
            and self.session.seq.accounted(seq, 2 * self.settings.broker_inflight)
        ):
            self.session.counters.refused_repeats += count  # acknowledged again, counted once
            return
        self.session.counters.overloaded += count
        self.session.counters.dropped += count
        if kind == "samples" and seq is not None:
            self.session.seq.refuse(seq, count)
        self.session.summaries.add(
            "overloaded",
            OVERLOAD_REASON,
            count=count,
            sums={"messages": 1, "samples": 0, "labels": 0} | {kind: count},
            latest={"total": self.session.counters.overloaded},
        )

    # --- publishing -------------------------------------------------------------------------------------

    def event(self, kind: str, owner: Inbound | None = None, **values: Any) -> None:
        self.transport.publish(
            self.topics["events"], {"type": kind, "ts": time.time(), **values}, owner=owner
        )

    def save_counters(self) -> None:
        """Keep the counters about to be reported (status, heartbeat), so that a restart after a crash
        never reports smaller ones (:mod:`~edgedrift_edge.checkpoints`); a failure is logged, not fatal."""
        counters = asdict(self.session.counters)
        if self.session.seq.expected is not None:  # a crash resumes it with the counters (session.seq)
            counters["wire_seq"] = self.session.seq.expected
        try:
            self.store.save_counters(counters)
        except OSError as exc:
            if not self._counters_failing:  # once: checkpoints report a failing disk as events
                log.warning("%s: counters not saved: %s", self.device_id, exc.strerror or exc)
            self._counters_failing = True
        else:
            self._counters_failing = False

    def publish_status(self, status: dict[str, Any], save: bool = True) -> None:
        """The retained status, its counters saved first unless the caller just did (``save``)."""
        if save:
            self.save_counters()
        body = json.dumps(status, separators=(",", ":"), allow_nan=False).encode()
        self.transport.publish_raw(self.topics["status"], body, retain=True, qos=1)

    def add_dropped(self, count: int) -> None:
        """Items lost outside the session and the transport (a hand-over's held messages past its bound)."""
        self._base = MappingProxyType({**self._base, "dropped": self._base["dropped"] + count})

    def _own_key(self) -> tuple[int, ...]:
        """What :meth:`sync_transport_counters` reads and writes of the device (the worker's alone)."""
        c = self.session.counters
        return (
            c.overloaded,
            c.broker_dropped,
            c.dropped,
            c.backpressure_waits,
            c.publish_failures,
            c.reconnects,
        )

    def sync_transport_counters(self) -> None:
        """Copy the transport's counters into the session's (plus a restore's base) unless nothing it reads or
        writes changed since its last copy (a gateway calls it for each device at every housekeeping turn)."""
        c, t = self.session.counters, self.transport.counters
        # read once: the I/O thread counts on meanwhile, and a count after this is seen at the next call
        read = (t.dropped, t.backpressure_waits, t.publish_failures, t.reconnects)
        if (read, self._own_key(), self._base) == self._synced:
            return
        lost = sum(self.transport.dropped_for(self.topics[kind]) for kind in ("samples", "labels"))
        gateway = c.overloaded - self._base["overloaded"] + c.broker_dropped - self._base["broker_dropped"]
        c.dropped = self._base["dropped"] + lost + gateway
        for name, value in zip(SHARED_COUNTERS, read[1:], strict=True):
            setattr(c, name, self._base[name] + value)
        if lost > self._transport_dropped_reported:
            self.event(
                "dropped",
                count=lost - self._transport_dropped_reported,
                total=c.dropped,
                reason="inbox full (QoS 0 messages are not delivered again)",
            )
            self._transport_dropped_reported = lost
        self._synced = (read, self._own_key(), self._base)

    def forward_history(self, cloud: CloudClient, batches: list[LabelBatch]) -> None:
        """Hand a re-tuning strategy's label batches to the cloud client (it posts them in order)."""
        for batch in batches:
            future = cloud.post_history(
                self.device_id, self.secret, batch, self.settings.task, self.settings.history_outbox
            )
            future.add_done_callback(self.history_done)

    def history_done(self, future: concurrent.futures.Future[tuple[str, int]]) -> None:
        """Count how a label batch ended and its bytes (on the cloud client's thread, as heartbeats are)."""
        if future.cancelled() or future.exception() is not None:
            return
        outcome, sent = future.result()
        c = self.session.counters
        c.http_bytes_up += sent
        if outcome == "stored":
            c.history_stored += 1
        elif outcome == "refused":
            c.history_refused += 1
        elif outcome == "dropped":
            c.history_dropped += 1

    def heartbeat_done(
        self, future: concurrent.futures.Future[set[str] | None], device_credential: bool = True
    ) -> None:
        """Count a heartbeat's outcome; a refused device credential makes the device ``unauthorized`` (a
        gateway's batch is sent with the gateway's credential, which says nothing about the device's, and
        its result names the devices the cloud says the gateway no longer serves)."""
        c = self.session.counters
        if future.cancelled():
            return
        error = future.exception()
        if error is None:
            unserved = future.result()
            if unserved is not None and self.device_id in unserved:
                c.heartbeat_failures += 1
                log.warning("%s: heartbeat refused: the gateway no longer serves it", self.device_id)
                return
            c.heartbeats += 1
            return
        c.heartbeat_failures += 1
        refused = isinstance(error, CloudError) and error.unauthorized
        if refused and device_credential and not self.session.recomputes.unauthorized:
            self.session.recomputes.unauthorized = True
            self.event("unauthorized", reason=str(error)[:300])
        log.warning("%s: heartbeat failed: %s", self.device_id, error)

    # --- checkpoints ------------------------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Snapshot the session and hand it to the writer (the disk's time is not the worker's); a
        failure is reported and retried with backoff, never fatal."""
        self.next_checkpoint = time.monotonic() + self.settings.checkpoint_every_s
        try:
            self.sync_transport_counters()
            blob = self.store.encode(self.snapshot())
        except CheckpointError as exc:
            self._checkpoint_written(exc)
            return
        self.save_counters()  # the counters file is never behind the checkpoint
        self.writer.submit(self.store, blob, self._checkpoint_written)

    def _checkpoint_written(self, error: CheckpointError | None) -> None:
        """A checkpoint's outcome (on the worker, from :meth:`CheckpointWriter.collect`)."""
        if error is not None:
            self.session.counters.checkpoint_failures += 1
            self._checkpoint_streak += 1
            delay = min(self.settings.checkpoint_every_s, 2.0**self._checkpoint_streak)
            self.next_checkpoint = min(self.next_checkpoint, time.monotonic() + delay)
            self.event("checkpoint_failed", reason=str(error)[:300], retry_in_s=delay)
            log.error("%s: checkpoint failed (retrying in %.0f s): %s", self.device_id, delay, error)
            return
        if self._checkpoint_streak:
            self.event("checkpoint_recovered", failures=self._checkpoint_streak)
        self._checkpoint_streak = 0
        self.checkpointed_at = time.time()
        self.session.counters.checkpoints += 1

    def checkpoint_soon(self, events: list[Event]) -> None:
        """Checkpoint soon when ``events`` end a stage a crash should not redo: at the next housekeeping
        turn for the first model (``model_installed`` initial), within :data:`WARMUP_CHECKPOINT_S` for the
        first window (``warmup_done``): its model usually comes first, and that one checkpoint keeps both
        (a gateway's devices that end their warm-up together then write once each, not twice)."""
        for event in events:
            kind = event.get("type")
            if kind == "model_installed" and event.get("reason") == "initial":
                self.next_checkpoint = 0.0
            elif kind == "warmup_done":
                self.next_checkpoint = min(self.next_checkpoint, time.monotonic() + WARMUP_CHECKPOINT_S)

    def _identity(self) -> dict[str, Any]:
        s = self.settings
        identity: dict[str, Any] = {
            "strategy": s.strategy,
            "task": s.task,
            "strategy_param": s.strategy_param,
        }
        if s.classes is not None:  # other classes: other codes, so another model
            identity["classes"] = list(s.classes)
        return identity

    def snapshot(self) -> dict[str, Any]:
        return {
            "identity": self._identity(),
            "session": self.session.snapshot(),
            "retained": dict(self.retained_seen),
        }

    def resume(self) -> None:
        """Continue from the checkpoint when there is a usable one of this configuration, and the
        counters from where they were last reported in any case; what happened is kept in
        :attr:`startup_events` (published once connected)."""
        resumed = self._resume_session()
        self._continue_counters(resumed)
        if resumed:
            c = self.session.counters
            self.startup_events.append(
                {"type": "resumed", "samples": c.samples, "model_version": self.session.model_version}
            )
            log.info("%s: resumed from %s: %d samples", self.device_id, self.store.path, c.samples)

    def _resume_session(self) -> bool:
        """The session from a usable checkpoint (True), else a fresh one (a reason in the events)."""
        try:
            tree = self.store.load()
        except CorruptCheckpointError as exc:
            log.error(
                "%s: checkpoint unusable (%s); moved to %s", self.device_id, exc.reason, exc.quarantined
            )
            self.startup_events.append(
                {"type": "checkpoint_corrupt", "reason": exc.reason[:300], "moved_to": str(exc.quarantined)}
            )
            return False
        if tree is None:
            return False
        return self._restore(tree, self.store.quarantine)

    def adopt(self, blob: bytes) -> dict[str, Any] | None:
        """Continue from the checkpoint another gateway handed over (``blob``, its bytes), keep it as this
        device's checkpoint here, and return its tree; None (and a fresh session, a reason in the
        events) when it is unusable. The shared transport counters go on from the handed-over values."""
        try:
            tree = self.store.decode(blob)
        except state.StateError as exc:
            self.startup_events.append(
                {"type": "checkpoint_corrupt", "reason": str(exc)[:300], "moved_to": None}
            )
            return None
        if not self._restore(tree, lambda: None):
            return None
        c, t = self.session.counters, self.transport.counters
        self._continue_counters(True)
        shared = {name: getattr(c, name) - getattr(t, name) for name in SHARED_COUNTERS}
        self._base = MappingProxyType({**self._base, **shared})
        try:
            self.writer.write_now(self.store, blob)
            self.save_counters()
        except CheckpointError as exc:
            log.error("%s: handed-over checkpoint not kept: %s", self.device_id, exc)
        c = self.session.counters
        self.startup_events.append(
            {"type": "resumed", "samples": c.samples, "model_version": self.session.model_version}
        )
        return dict(tree)

    def _restore(self, tree: Any, set_aside: Callable[[], Path | None]) -> bool:
        """The session from a checkpoint's tree when it is of this configuration (True); else a fresh
        session, the checkpoint set aside (``set_aside``: where it went) and a reason in the events."""
        identity = self._identity()
        session_tree = tree["session"] if isinstance(tree, dict) and "session" in tree else None
        width = session_tree.get("n_features") if session_tree else None
        n_features = self.settings.n_features
        reason = None
        if tree.get("identity") != identity:
            reason = f"the configuration changed from {tree.get('identity')} to {identity}"
        elif n_features is not None and width is not None and width != n_features:
            reason = f"n_features changed from {width} to {n_features}"
        if reason is not None or session_tree is None:
            moved = set_aside()
            self.startup_events.append({"type": "state_reset", "reason": reason, "moved_to": str(moved)})
            log.warning("%s: not resuming: %s (checkpoint moved to %s)", self.device_id, reason, moved)
            return False
        try:
            self.session.restore(session_tree)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            moved = set_aside()
            config = session_config(self.settings, self.device_id)
            self.session = DeviceSession(config, self._trainer_for(self), time.monotonic)
            self.startup_events.append(
                {
                    "type": "checkpoint_corrupt",
                    "reason": f"{type(exc).__name__}: {exc}"[:300],
                    "moved_to": str(moved),
                }
            )
            return False
        retained = tree.get("retained")
        self.retained_seen = dict(retained) if isinstance(retained, dict) else {}
        return True

    def _continue_counters(self, resumed: bool) -> None:
        """Counters from where the last run reported them: each the larger of the checkpoint's and the
        counters file's (newer than the checkpoint when the process was killed between two). Without a
        checkpoint (killed before the first) the session starts afresh but its counters go on."""
        saved = self.store.load_counters()
        c = self.session.counters
        ahead = {f.name: saved[f.name] for f in fields(Counters) if saved.get(f.name, 0) > getattr(c, f.name)}
        for name, value in ahead.items():
            setattr(c, name, value)
        seq = saved.get("wire_seq")
        if seq is not None and (self.session.seq.expected is None or seq > self.session.seq.expected):
            self.session.seq.expected = seq
        self._base = MappingProxyType({name: getattr(c, name) for name in self._base})
        if ahead and not resumed:
            self.startup_events.append({"type": "counters_resumed", "samples": c.samples})
