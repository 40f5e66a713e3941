"""The edge agent: MQTT in, the evaluator's EdgeLoop in the middle, predictions and events out.

Threads:

* paho's network thread only decodes nothing and blocks on nothing: ``on_message`` puts the raw payload
  into a bounded queue (an overflow is counted and reported, never silent);
* the worker thread owns all learning state: it parses messages, runs the loop, installs models that
  arrived, publishes predictions and writes checkpoints;
* a recompute thread talks to the cloud with retries while the worker keeps predicting (async mode);
* a heartbeat thread posts counters to the cloud and publishes the retained status.

Lifecycle: warm-up (collect the first window; predictions have ``y_hat`` null and source ``warmup``),
then the first model from the cloud (C tuned there on the first window, as the evaluator does), then the
strategy's loop. The worker checkpoints model, monitor, learner and window to disk periodically and on
stop, and a restarted agent resumes from the checkpoint.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pickle
import queue
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import paho.mqtt.client as mqtt

from edgedrift import __version__
from edgedrift.loop import EdgeLoop
from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray
from edgedrift.strategies import STRATEGIES, Context, TrainSpec
from edgedrift.wire import Heartbeat
from edgedrift_edge.cloud import CloudClient, CloudError, TrainedModel, scalar_stats
from edgedrift_edge.messages import MessageError, Rejection, SampleId, Samples, parse_labels, parse_samples
from edgedrift_edge.mqtt import broker_address, make_client, redact
from edgedrift_edge.settings import AgentSettings

log = logging.getLogger("edgedrift_edge")

CHECKPOINT_FORMAT = "edgedrift.agent-checkpoint/1"
MIN_WARMUP_LABELS = 10


@dataclass
class Counters:
    """Everything the agent counts; published in the status, the heartbeat and ``/metrics``-style text."""

    messages: int = 0
    samples: int = 0
    labeled: int = 0
    predictions: int = 0
    rejected: int = 0
    dropped: int = 0
    duplicates: int = 0
    label_misses: int = 0
    join_evictions: int = 0
    recomputes_requested: int = 0
    recomputes_completed: int = 0
    recompute_failures: int = 0
    http_bytes_up: int = 0
    http_bytes_down: int = 0
    heartbeats: int = 0
    heartbeat_failures: int = 0
    checkpoints: int = 0
    reconnects: int = 0


@dataclass
class AgentState:
    """What a checkpoint holds: enough to continue exactly where the agent stopped."""

    n_features: int | None = None
    phase: Literal["warmup", "running"] = "warmup"
    warm_X: list[FloatArray] = field(default_factory=list)
    warm_y: list[float] = field(default_factory=list)
    loop: EdgeLoop | None = None
    C: float | Literal["auto"] | None = None
    loss: str | None = None
    learner_params: dict[str, dict[str, float]] = field(default_factory=dict)
    model_version: int | None = None
    counters: Counters = field(default_factory=Counters)
    #: id -> (x, y_hat) of unlabeled samples waiting for a late label (bounded, oldest evicted).
    joins: OrderedDict[SampleId, tuple[FloatArray, float]] = field(default_factory=OrderedDict)
    #: Recent sample ids, to drop QoS-1 redeliveries (bounded).
    recent_ids: OrderedDict[SampleId, None] = field(default_factory=OrderedDict)
    #: 1.0/0.0 per recent labeled prediction (classification) or squared error (regression).
    recent: deque[float] = field(default_factory=deque)
    recent_sum: float = 0.0
    next_seq: int = 0
    drift_events: int = 0


class EdgeAgent:
    """One device's agent. ``start()`` returns once it is subscribed; ``stop()`` drains and checkpoints."""

    def __init__(self, settings: AgentSettings, cloud: CloudClient | None = None) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.cloud = cloud or CloudClient(
            settings.cloud_url,
            settings.device_id,
            settings.device_secret.get_secret_value() if settings.device_secret else None,
            timeout=settings.http_timeout_s,
            retry_base=settings.retry_base_s,
            retry_max=settings.retry_max_s,
            encoding=settings.window_encoding,
        )
        #: What this device's recomputes ask the cloud for (its strategy's learner, rebalancing).
        self.train_spec = STRATEGIES[settings.strategy].train
        self.checkpoint_path = Path(settings.checkpoint_dir) / f"{settings.device_id}.ckpt"
        self.state = AgentState(n_features=settings.n_features)
        self.state.recent = deque(maxlen=settings.accuracy_window)
        self.inbox: queue.Queue[tuple[str, bytes]] = queue.Queue(maxsize=settings.queue_size)
        self.installs: queue.SimpleQueue[TrainedModel] = queue.SimpleQueue()
        self.stopping = threading.Event()
        self.connected = threading.Event()
        self.subscribed = threading.Event()
        self.idle = threading.Event()
        self._lock = threading.Lock()
        self._dropped_reported = 0
        self._threads: list[threading.Thread] = []
        self._recompute_thread: threading.Thread | None = None
        self._last_checkpoint = time.monotonic()
        self._resumed = False
        self.client = self._make_client()
        self._resume()

    # --- MQTT ------------------------------------------------------------------------------------------

    def _make_client(self) -> mqtt.Client:
        client = make_client(
            self.settings.broker_url,
            f"edgedrift-agent-{self.settings.device_id}",
            clean_session=False,  # the broker keeps our QoS-1 messages while we are away
            tls_ca_file=self.settings.tls_ca_file,
        )
        client.will_set(self.topics["status"], json.dumps({"state": "offline"}), qos=1, retain=True)
        client.max_queued_messages_set(100_000)
        # No client-side cap on QoS-1 messages in flight (paho's default is 20): the cap made predictions
        # wait a broker round trip per 20 messages, and paho rescans every in-flight message on each
        # PUBACK when a cap is set (bench/mqtt_ingest.py: ~1.9k -> ~6k single messages/s at QoS 1).
        # max_queued_messages still bounds what paho holds; the broker acknowledges as it receives.
        client.max_inflight_messages_set(0)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_subscribe = self._on_subscribe
        client.on_message = self._on_message
        return client

    def _on_connect(self, client: mqtt.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        if reason.is_failure:
            log.error("broker refused the connection: %s", reason)
            return
        # Subscribing here renews the subscriptions after every reconnect.
        client.subscribe(
            [(self.topics["samples"], self.settings.qos), (self.topics["labels"], self.settings.qos)]
        )
        self.connected.set()
        self._publish_status("online")
        log.info("connected to %s", redact(self.settings.broker_url))

    def _on_subscribe(self, _c: mqtt.Client, _u: Any, _mid: int, _codes: Any, _p: Any) -> None:
        self.subscribed.set()

    def _on_disconnect(self, _c: mqtt.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        self.connected.clear()
        if not self.stopping.is_set():
            self.state.counters.reconnects += 1
            log.warning("disconnected from the broker (%s); paho reconnects with backoff", reason)

    def _on_message(self, _c: mqtt.Client, _u: Any, message: mqtt.MQTTMessage) -> None:
        """Network thread: enqueue and return at once."""
        kind = "labels" if message.topic == self.topics["labels"] else "samples"
        try:
            self.inbox.put_nowait((kind, bytes(message.payload)))
        except queue.Full:
            with self._lock:
                self.state.counters.dropped += 1

    def publish(self, topic: str, payload: dict[str, Any], retain: bool = False) -> None:
        self.client.publish(
            topic, json.dumps(payload, separators=(",", ":")), qos=self.settings.qos, retain=retain
        )

    def event(self, kind: str, **fields: Any) -> None:
        self.publish(self.topics["events"], {"type": kind, "ts": time.time(), **fields})

    def _publish_status(self, state: str) -> None:
        self.publish(self.topics["status"], self.status(state), retain=True)

    # --- lifecycle ---------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> EdgeAgent:
        """Connect, start the threads, and return once subscribed (raises TimeoutError otherwise)."""
        host, port, _tls = broker_address(self.settings.broker_url)
        self.client.connect_async(host, port, keepalive=30)
        self.client.loop_start()
        for target, name in ((self._work, "worker"), (self._heartbeats, "heartbeat")):
            thread = threading.Thread(target=target, name=f"edgedrift-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        if not self.subscribed.wait(timeout):
            raise TimeoutError(f"not subscribed to {redact(self.settings.broker_url)} after {timeout} s")
        if self._resumed:
            self.event("resumed", samples=self.state.counters.samples, model_version=self.state.model_version)
        if self.state.loop is not None and self.state.loop.pending_recompute:
            self._submit_recompute(self.state.loop, reason="resume")
        return self

    def stop(self) -> None:
        """Stop taking messages, finish the queued ones, checkpoint, publish 'offline', disconnect."""
        self.client.unsubscribe([self.topics["samples"], self.topics["labels"]])
        self.stopping.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self.checkpoint()
        self._publish_status("offline")
        self.client.disconnect()
        self.client.loop_stop()
        self.cloud.close()

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Block until the queue is empty and the worker is waiting (for tests and the demo)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.inbox.empty() and self.idle.is_set():
                return True
            time.sleep(0.01)
        return False

    # --- the worker ----------------------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            self._apply_installs()
            try:
                kind, payload = self.inbox.get(timeout=0.05)
            except queue.Empty:
                self.idle.set()
                if self.stopping.is_set():
                    return
                self._maybe_checkpoint()
                continue
            self.idle.clear()
            try:
                self.handle(kind, payload)
            except Exception:
                log.exception("unexpected error while handling a message; the agent keeps going")
                self.event("error", reason="internal error while handling a message")
            self._maybe_checkpoint()

    def handle(self, kind: str, payload: bytes) -> None:
        """Process one raw message (runs on the worker thread)."""
        st = self.state
        st.counters.messages += 1
        self._report_drops()
        try:
            if kind == "labels":
                labels, rejected = parse_labels(payload, self.settings.task)
                self._reject(rejected, "labels")
                for sid, y in labels:
                    self._late_label(sid, y)
                return
            samples = parse_samples(payload, st.n_features, self.settings.task, st.next_seq)
        except MessageError as exc:
            self._reject([Rejection(str(exc))], kind)
            return
        self._reject(samples.rejected, kind)
        st.next_seq += len(samples.ids) + len(samples.rejected)
        if samples.ids:
            self._samples(samples)

    def _reject(self, rejected: list[Rejection], topic: str) -> None:
        for r in rejected:
            self.state.counters.rejected += 1
            self.event("rejected", topic=topic, id=r.id, reason=r.reason)

    def _report_drops(self) -> None:
        with self._lock:
            dropped = self.state.counters.dropped
        if dropped > self._dropped_reported:
            self.event("dropped", count=dropped - self._dropped_reported, total=dropped, reason="queue full")
            self._dropped_reported = dropped

    def _samples(self, s: Samples) -> None:
        st = self.state
        keep = [i for i, sid in enumerate(s.ids) if not self._seen(sid)]
        if len(keep) < len(s.ids):
            st.counters.duplicates += len(s.ids) - len(keep)
            if not keep:
                return
            s = Samples([s.ids[i] for i in keep], s.X[keep], s.y[keep], s.ts[keep], s.batch)
        if st.n_features is None:
            st.n_features = s.X.shape[1]
        st.counters.samples += len(s.ids)
        st.counters.labeled += int(np.count_nonzero(~np.isnan(s.y)))
        preds = self._warmup(s) if st.phase == "warmup" else self._run(s)
        st.counters.predictions += len(preds)
        if s.batch:
            self.publish(self.topics["predictions"], {"predictions": preds})
        else:
            self.publish(self.topics["predictions"], preds[0])

    def _seen(self, sid: SampleId) -> bool:
        recent = self.state.recent_ids
        if sid in recent:
            return True
        recent[sid] = None
        if len(recent) > 100_000:
            recent.popitem(last=False)
        return False

    def _warmup(self, s: Samples) -> list[dict[str, Any]]:
        st = self.state
        preds = []
        for i, sid in enumerate(s.ids):
            if st.phase == "warmup":
                row = s.X[i]  # one object in both places: a late label finds its row by identity
                st.warm_X.append(row)
                st.warm_y.append(float(s.y[i]))
                if np.isnan(s.y[i]):
                    self._remember(sid, row, math.nan)
                preds.append({"id": sid, "y_hat": None, "model_version": None, "source": "warmup"})
                if len(st.warm_y) >= self.settings.warmup_samples:
                    self._finish_warmup()
            else:
                rest = Samples(s.ids[i:], s.X[i:], s.y[i:], s.ts[i:], s.batch)
                return preds + self._run(rest)
        return preds

    def _finish_warmup(self) -> None:
        """First window complete: ask the cloud for the first model and build the strategy's loop."""
        st = self.state
        y_all = np.asarray(st.warm_y)
        labeled = ~np.isnan(y_all)
        X0, y0 = np.asarray(st.warm_X)[labeled], y_all[labeled]
        classes = np.unique(y0)
        if len(y0) < MIN_WARMUP_LABELS or (self.settings.task == "classification" and classes.size < 2):
            return  # keep collecting until the window can train a model
        loss = "logistic" if self.settings.task == "classification" else "squared"
        self.event("warmup_done", samples=len(y_all), labels=int(labeled.sum()))
        trained = self._train_blocking(X0, y0, loss, self.settings.C, "initial", {})
        # C as tuned by the cloud for a linear first model; other learners keep the configured one.
        C = getattr(trained.model, "C", self.settings.C)
        ctx = Context(
            n_features=X0.shape[1],
            task=self.settings.task,
            loss=loss,
            window_labels=self.settings.window_labels,
            C=C if isinstance(C, float) else 1.0,
            recompute=self._recompute,
            X0=X0,
            y0=y0,
        )
        loop = STRATEGIES[self.settings.strategy].build(ctx, self.settings.strategy_param)
        assert isinstance(loop, EdgeLoop)
        loop.start(trained.model, X0, y0, warm_learner=True)
        st.loop, st.C, st.loss, st.learner_params = loop, C, loss, ctx.learner_params
        st.model_version = trained.version
        st.phase = "running"
        st.warm_X, st.warm_y = [], []
        self.event("model_installed", version=trained.version, reason="initial", C=C)

    def _train_blocking(
        self, X: FloatArray, y: FloatArray, loss: str, C: float | str, reason: str, stats: dict[str, Any]
    ) -> TrainedModel:
        """The first model (the strategy's learner, never rebalanced): retry until the cloud answers (the
        queue buffers meanwhile)."""
        self.state.counters.recomputes_requested += 1
        trained = self.cloud.train_with_retries(
            X,
            y,
            stop=self.stopping,
            task=self.settings.task,
            loss=loss,
            C=C,
            reason=reason,
            monitor=stats,
            on_failure=self._recompute_failed,
            spec=TrainSpec(self.train_spec.learner, self.train_spec.params),
        )
        if trained is None:
            raise RuntimeError("no first model: the cloud refused the window or the agent is stopping")
        self._count_trained(trained)
        return trained

    def _run(self, s: Samples) -> list[dict[str, Any]]:
        loop = self.state.loop
        assert loop is not None
        if s.batch and self.settings.batch_mode == "vectorised":
            source = "incremental" if loop.uses_incremental() else "batch"
            version = self.state.model_version
            y_hat = loop.process_many(s.X, s.y, s.ts)
            self._track(s, y_hat)
            return [
                {"id": sid, "y_hat": float(p), "model_version": version, "source": source}
                for sid, p in zip(s.ids, y_hat.tolist(), strict=True)
            ]
        preds = []
        ys, tss = s.y.tolist(), s.ts.tolist()
        for i, sid in enumerate(s.ids):
            self._apply_installs()
            source = "incremental" if loop.uses_incremental() else "batch"
            version = self.state.model_version
            label = None if math.isnan(ys[i]) else ys[i]
            recomputes = loop.counters.recomputes
            p = loop.process_one(s.X[i], label, tss[i])
            if loop.counters.recomputes > recomputes:
                self.state.drift_events += 1
            # What _track does for this one sample, without building a one-sample Samples.
            if label is None:
                self._remember(sid, s.X[i], float(p))
            else:
                self._score(label, float(p))
            preds.append({"id": sid, "y_hat": p, "model_version": version, "source": source})
        return preds

    def _track(self, s: Samples, y_hat: FloatArray) -> None:
        """Recent accuracy for labeled samples; unlabeled ones wait in the join buffer."""
        # Python floats from tolist() are the values float(s.y[i]) / float(y_hat[i]) gave, at a
        # fraction of the cost of indexing numpy scalars one by one.
        for i, (sid, y, p) in enumerate(zip(s.ids, s.y.tolist(), y_hat.tolist(), strict=True)):
            if math.isnan(y):
                self._remember(sid, s.X[i], float(p))
            else:
                self._score(y, float(p))

    def _score(self, y: float, y_hat: float) -> None:
        hit = (y - y_hat) ** 2 if self.settings.task == "regression" else float(y == y_hat)
        st = self.state
        if len(st.recent) == st.recent.maxlen:
            st.recent_sum -= st.recent[0]
        st.recent.append(hit)
        st.recent_sum += hit

    def _remember(self, sid: SampleId, x: FloatArray, y_hat: float) -> None:
        joins = self.state.joins
        joins[sid] = (x, y_hat)
        if len(joins) > self.settings.join_buffer:
            joins.popitem(last=False)
            self.state.counters.join_evictions += 1

    def _late_label(self, sid: SampleId, y: float) -> None:
        st = self.state
        entry = st.joins.pop(sid, None)
        if entry is None:
            st.counters.label_misses += 1
            self.event("label_miss", id=sid, reason="no unlabeled sample with this id in the join buffer")
            return
        x, y_hat = entry
        st.counters.labeled += 1
        if st.phase == "warmup":
            # The sample is still in the first window: label it there.
            for i in range(len(st.warm_X) - 1, -1, -1):
                if st.warm_X[i] is x:
                    st.warm_y[i] = y
                    break
            return
        assert st.loop is not None
        self._apply_installs()
        recomputes = st.loop.counters.recomputes
        st.loop.learn_one(x, y)
        if st.loop.counters.recomputes > recomputes:
            st.drift_events += 1
        if not math.isnan(y_hat):
            self._score(y, y_hat)

    # --- recomputes ------------------------------------------------------------------------------------

    def _recompute(self, X: FloatArray, y: FloatArray, reset_rows: int | None = None) -> BatchModel | None:
        """The loop's trainer. Sync mode waits for the cloud (bounded attempts); async mode (and a sync
        recompute that ran out of attempts) returns None at once and installs the model when it comes."""
        loop = self.state.loop
        assert loop is not None and self.state.loss is not None and self.state.C is not None
        stats = loop.monitor.stats
        self.event("recompute_requested", n=len(y), stats=scalar_stats(stats))
        self.state.counters.recomputes_requested += 1
        if self.settings.recompute_mode == "sync":
            trained = self.cloud.train_with_retries(
                X,
                y,
                stop=self.stopping,
                attempts=self.settings.sync_attempts,
                task=self.settings.task,
                loss=self.state.loss,
                C=self.state.C,
                reason=self.settings.strategy,
                monitor=stats,
                on_failure=self._recompute_failed,
                spec=self.train_spec,
                reset_rows=reset_rows,
            )
            if trained is not None:
                self._count_trained(trained)
                self.state.model_version = trained.version
                self.event("recompute_finished", version=trained.version, train_ms=trained.train_ms)
                return trained.model
        self._submit_recompute(
            loop, reason=self.settings.strategy, window=(X, y), stats=stats, reset_rows=reset_rows
        )
        return None

    def _submit_recompute(
        self,
        loop: EdgeLoop,
        reason: str,
        window: tuple[FloatArray, FloatArray] | None = None,
        stats: dict[str, Any] | None = None,
        reset_rows: int | None = None,
    ) -> None:
        if self._recompute_thread is not None and self._recompute_thread.is_alive():
            return
        if window is None:
            own = loop.monitor.training_batch()
            window = loop.window.contents() if own is None else own[:2]
            reset_rows = None if own is None else own[2]
        X, y = window[0].copy(), window[1].copy()
        stats = dict(stats if stats is not None else loop.monitor.stats)

        def run() -> None:
            assert self.state.loss is not None and self.state.C is not None
            trained = self.cloud.train_with_retries(
                X,
                y,
                stop=self.stopping,
                task=self.settings.task,
                loss=self.state.loss,
                C=self.state.C,
                reason=reason,
                monitor=stats,
                on_failure=self._recompute_failed,
                spec=self.train_spec,
                reset_rows=reset_rows,
            )
            if trained is not None:
                self.installs.put(trained)

        self._recompute_thread = threading.Thread(target=run, name="edgedrift-recompute", daemon=True)
        self._recompute_thread.start()

    def _apply_installs(self) -> None:
        """Swap in models that arrived (worker thread only, between samples: the swap is atomic)."""
        if self.installs.empty():  # the common case, without raising queue.Empty per sample
            return
        while True:
            try:
                trained = self.installs.get_nowait()
            except queue.Empty:
                return
            loop = self.state.loop
            assert loop is not None
            loop.install(trained.model)
            loop.counters.bytes_down += len(json.dumps(trained.document))
            self._count_trained(trained)
            self.state.model_version = trained.version
            self.event("recompute_finished", version=trained.version, train_ms=trained.train_ms)

    def _count_trained(self, trained: TrainedModel) -> None:
        c = self.state.counters
        c.recomputes_completed += 1
        c.http_bytes_up += trained.bytes_up
        c.http_bytes_down += trained.bytes_down

    def _recompute_failed(self, attempt: int, error: CloudError) -> None:
        self.state.counters.recompute_failures += 1
        self.event("recompute_failed", attempt=attempt, reason=str(error)[:300], retrying=error.retryable)

    # --- status, heartbeats, checkpoints ------------------------------------------------------------------

    def accuracy(self) -> float | None:
        n = len(self.state.recent)
        if n == 0 or self.settings.task != "classification":
            return None
        return min(1.0, max(0.0, self.state.recent_sum / n))

    def status(self, state: str = "online") -> dict[str, Any]:
        st = self.state
        loop = st.loop
        return {
            "state": state,
            "device_id": self.settings.device_id,
            "version": __version__,
            "phase": st.phase,
            "strategy": self.settings.strategy,
            "model_version": st.model_version,
            "accuracy": self.accuracy(),
            "accuracy_window": len(st.recent),
            "warning": bool(loop.monitor.warning_detected) if loop else False,
            "loop": vars(loop.counters).copy() if loop else None,
            "counters": vars(st.counters).copy(),
            "queue": self.inbox.qsize(),
            "ts": time.time(),
        }

    def heartbeat(self) -> Heartbeat:
        st = self.state
        c = st.counters
        loop = st.loop
        return Heartbeat(
            samples=c.samples,
            labeled=c.labeled,
            accuracy=self.accuracy(),
            accuracy_window=len(st.recent),
            warnings=int(bool(loop and loop.monitor.warning_detected)),
            drift_events=st.drift_events,
            recomputes_requested=c.recomputes_requested,
            model_version=st.model_version,
            dropped=c.dropped,
            rejected=c.rejected,
            extra={"phase": st.phase, "label_misses": c.label_misses, "duplicates": c.duplicates},
        )

    def _heartbeats(self) -> None:
        while not self.stopping.wait(self.settings.heartbeat_every_s):
            self.send_heartbeat()

    def send_heartbeat(self) -> None:
        try:
            self.cloud.heartbeat(self.heartbeat())
            self.state.counters.heartbeats += 1
        except CloudError as exc:
            self.state.counters.heartbeat_failures += 1
            log.warning("heartbeat failed: %s", exc)
        if self.connected.is_set():
            self._publish_status("online")

    def _maybe_checkpoint(self) -> None:
        if time.monotonic() - self._last_checkpoint >= self.settings.checkpoint_every_s:
            self.checkpoint()

    def checkpoint(self) -> None:
        """Write the state atomically (temp file + rename); the trainer callback is not pickled."""
        st = self.state
        loop = st.loop
        fn = loop.recompute_fn if loop is not None else None
        try:
            if loop is not None:
                loop.recompute_fn = _no_trainer
            blob = pickle.dumps(
                {"format": CHECKPOINT_FORMAT, "device_id": self.settings.device_id, "state": st}
            )
        finally:
            if loop is not None and fn is not None:
                loop.recompute_fn = fn
        self.checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.checkpoint_path.with_suffix(".tmp")
        with tmp.open("wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.checkpoint_path)
        st.counters.checkpoints += 1
        self._last_checkpoint = time.monotonic()

    def _resume(self) -> None:
        """Load the checkpoint if there is one (a corrupt one is set aside, not trusted)."""
        if not self.checkpoint_path.exists():
            return
        try:
            data = pickle.loads(self.checkpoint_path.read_bytes())
            if data.get("format") != CHECKPOINT_FORMAT or data.get("device_id") != self.settings.device_id:
                raise ValueError("checkpoint of another format or device")
            state: AgentState = data["state"]
        except Exception as exc:
            bad = self.checkpoint_path.with_suffix(".corrupt")
            os.replace(self.checkpoint_path, bad)
            log.error("checkpoint unusable (%s); moved to %s, starting fresh", exc, bad)
            return
        if state.loop is not None:
            state.loop.recompute_fn = self._recompute
        self.state = state
        self._resumed = True
        log.info(
            "resumed from %s: %d samples, model version %s",
            self.checkpoint_path,
            state.counters.samples,
            state.model_version,
        )


def _no_trainer(_X: FloatArray, _y: FloatArray, **_kwargs: Any) -> BatchModel | None:
    return None
