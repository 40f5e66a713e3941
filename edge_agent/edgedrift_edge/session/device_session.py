"""One device's session: raw messages in, predictions and events out. Pure: no threads, no I/O, no clock
of its own (one is injected), so tests drive it directly and the agent and a gateway wrap it.

Lifecycle. *Warm-up*: samples are collected (predictions ``y_hat`` null, source ``warmup``) until the
first window holds ``warmup_samples`` samples with enough labels. The width of a sample is not locked by
the first message: it comes from the configuration, or else from the majority of the warm-up samples
(the minority is set aside and reported). The labeled warm-up samples train the first model (a counted
recompute); the range guard is fitted on them and their own outliers are left out. *Awaiting the first
model*: samples keep being collected the same way. *Running*: the strategy's loop predicts and learns.

Every sample of every message is accounted for: predicted (``predictions``), rejected (``rejected``,
one summary event per message), or it was an exact redelivery of a sample already predicted
(``duplicates``; it is predicted again, not learned again). The transport counts what it drops.

Recomputes go through the injected :data:`~edgedrift_edge.session.trainer.Trainer`. It answers at once in
sync mode (then the deployed run equals the offline evaluator's) and returns None in async mode: the
model arrives later through :meth:`DeviceSession.install`. A request the cloud refuses for good puts
the session on a cool-down instead of asking again on every sample.

The session is one class with collaborators it owns, each in its own module: the class names
(:mod:`~edgedrift_edge.session.classes`), the first window (:mod:`~edgedrift_edge.session.warmup`), the
recent quality (:mod:`~edgedrift_edge.session.quality`), the recompute bookkeeping
(:mod:`~edgedrift_edge.session.recomputes`) and the recent samples
(:mod:`~edgedrift_edge.buffers.recent_samples`, sorted by :mod:`~edgedrift_edge.session.dedup`); the
types and counters live in :mod:`~edgedrift_edge.session.ledger`, the reports in
:mod:`~edgedrift_edge.session.reports`, the checkpoint codec in :mod:`~edgedrift_edge.session.codec`. It
is over 500 lines because it is the state machine: what moves a device from phase to phase (warm-up, the
first model, running, a model that arrives, a refusal) and the running half (samples one by one and
batch messages, which must report the same predictions) stay in one place, while the collaborators hold
the state of each concept.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields, replace
from typing import Any, Literal

import numpy as np

from edgedrift.guard import RangeGuard, screen_first_window
from edgedrift.loop import EdgeLoop
from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray
from edgedrift.strategies import Context, get_strategy
from edgedrift.strategies.channel import EdgeTune
from edgedrift.strategies.retuned import RetunedLearner
from edgedrift.wire import Heartbeat, RetuneRequest
from edgedrift_edge.buffers.id_index import IntArray, id_key
from edgedrift_edge.buffers.recent_samples import RecentSamples
from edgedrift_edge.session import codec, reports
from edgedrift_edge.session.classes import ClassNames
from edgedrift_edge.session.dedup import place_new, sort_samples
from edgedrift_edge.session.event_summary import EventSummaries
from edgedrift_edge.session.ledger import Counters, Event, Output, Prediction, SessionConfig
from edgedrift_edge.session.messages import MessageError, Rejection, SampleId, Samples, message_digest
from edgedrift_edge.session.quality import Quality
from edgedrift_edge.session.recomputes import Recomputes
from edgedrift_edge.session.reports import (
    ID_REUSED_REASON,
    LABEL_MISS_REASON,
    OUTLIER_REASON,
    REASONS_PER_EVENT,
)
from edgedrift_edge.session.seq import SeqCheck
from edgedrift_edge.session.trainer import (
    LabelBatch,
    RecomputeFailure,
    RecomputeRequest,
    TrainedModel,
    Trainer,
)
from edgedrift_edge.session.warmup import Waiting, WarmupWindow, is_label_rejection

__all__ = ["Counters", "DeviceSession", "Event", "Output", "Prediction", "SessionConfig"]

Phase = Literal["warmup", "awaiting_model", "running"]


class DeviceSession:
    """The per-device state machine (see the module docstring)."""

    def __init__(
        self,
        config: SessionConfig,
        trainer: Trainer,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.clock = clock
        self.strategy = get_strategy(config.strategy)
        self.counters = Counters()
        self.phase: Phase = "warmup"
        self.n_features: int | None = config.n_features
        self.loop: EdgeLoop | None = None
        self.C: float | str | None = None
        self.learner_params: dict[str, dict[str, float]] = {}
        self.model_version: int | None = None
        self.class_names = ClassNames(config)
        self.warm = WarmupWindow(config)
        #: The newest samples' ids with their content digests (redeliveries are told from reused ids) and,
        #: for the unlabeled ones, x and y_hat awaiting a late label (bounded, oldest evicted).
        self.recent_samples = RecentSamples(config.recent_samples, config.n_features, config.recent_bytes)
        named = None if self.class_names.labels is None else self.class_names.n_classes
        self.quality = Quality(config.task, config.accuracy_window, named)
        self.recomputes = Recomputes(
            config, self.strategy, self.class_names, trainer, self.counters, self._emit
        )
        #: Per-item outcomes (label misses, late-label outliers, reused ids, the broker's drops, a gateway's
        #: refusals), reported as at most one event per kind a second.
        self.summaries = EventSummaries(clock, REASONS_PER_EVENT)
        self.next_seq = 0
        self.seq = SeqCheck(config, self.counters, self.summaries, clock)
        self.drift_events = 0
        self.width_mismatches = 0
        self.guard: RangeGuard | None = None
        self.last_label_rejection: str | None = None
        self._events: list[Event] = []
        self._payload = b""
        #: While a batch runs through the loop: (samples the loop had processed, version) of every model a
        #: sync recompute installed mid-batch, so each prediction reports the version it was made with.
        self.version_marks: list[tuple[int, int | None]] | None = None

    @classmethod
    def in_process(
        cls, device_id: str = "device", clock: Callable[[], float] = time.monotonic, **config: Any
    ) -> DeviceSession:
        """A session whose recomputes the cloud's training answers in this process, at once, for an
        application that embeds a device (docs/embedding.md). ``config``: fields of :class:`SessionConfig`
        (``strategy``, ``warmup_samples``, ``classes``, ...); needs the core's ``training`` extra."""
        from edgedrift_edge.cloud.in_process import check_in_process, in_process_trainer

        if config.get("classes") is not None:
            config["classes"] = tuple(config["classes"])
        session_config = SessionConfig(device_id, **config)
        check_in_process(session_config.strategy)
        return cls(session_config, in_process_trainer(), clock)

    @property
    def pending(self) -> RecomputeRequest | None:
        """The recompute request in flight (None: none)."""
        return self.recomputes.pending

    # --- messages ---------------------------------------------------------------------------------------

    def handle(self, kind: str, payload: bytes) -> Output:
        """One raw MQTT payload from the ``samples`` or ``labels`` topic."""
        self.counters.messages += 1
        self._events = []
        self._payload = payload
        out = Output()
        try:
            if kind == "labels":
                labels, rejected = self.class_names.parse_labels(payload)
                self._reject(rejected, "labels", len(rejected))
                for sid, y in labels:
                    self._late_label(sid, y)
            else:
                self._release_cooldown()
                samples = self.class_names.parse_samples(payload, self.n_features, self.next_seq)
                self.seq.check(samples.seq, len(samples.ids) + len(samples.rejected))
                self._reject(samples.rejected, kind, len(samples.rejected))
                self.next_seq += len(samples.ids) + len(samples.rejected)
                if samples.ids:
                    out.predictions = self.class_names.named(self._samples(samples))
                out.batch = samples.batch
        except MessageError as exc:
            self._reject([Rejection(str(exc))], kind, exc.count)
            if kind != "labels":
                self.seq.skipped += exc.count
        self._close(out)
        self._payload = b""  # a gateway's thousand sessions would each keep their last message
        return out

    def singles(self, kind: str, payloads: Sequence[bytes]) -> list[Samples]:
        """The leading messages of ``payloads`` that :meth:`handle_singles` may take together: in ``exact``
        mode and once the width is known, single valid samples whose ids are new (not in the recent
        samples) and distinct, in any phase (the warm-up and the wait for the first model take a batch
        sample by sample too, so a restart's queue that ends a warm-up goes through together). Nothing
        changes here: the agent's worker asks it of a device's queued messages."""
        if kind != "samples" or self.config.batch_mode != "exact":
            return []
        group: list[Samples] = []
        taken: set[SampleId] = set()
        for k, payload in enumerate(payloads):
            try:
                s = self.class_names.parse_samples(payload, self.n_features, self.next_seq + k)
            except MessageError:
                break
            if s.batch or s.rejected or s.rows is not None or len(s.ids) != 1:
                break
            sid = s.ids[0]
            if sid in taken or self.recent_samples.lookup(*id_key(sid)) is not None:
                break
            group.append(s)
            taken.add(sid)
        return group

    def handle_singles(self, group: Sequence[Samples]) -> list[Output]:
        """The messages :meth:`singles` found, as :meth:`handle` one by one gives them: one output each,
        in order, with the same predictions and the same state after, in one dedup pass and one call to
        ``EdgeLoop.process_many`` (per-sample semantics: each labeled sample is learned before the next is
        predicted), or to the warm-up's sample-by-sample path before the first model. The group's events
        (an outlier count, a drift, the warm-up's end) come with its last output."""
        if not group:
            return []
        self._events = []
        for s in group:
            self.counters.messages += 1
            self.seq.check(s.seq, 1)
        self.next_seq += len(group)
        self._release_cooldown()
        merged = Samples(
            [s.ids[0] for s in group],
            np.vstack([s.X for s in group]),
            np.concatenate([s.y for s in group]),
            np.concatenate([s.ts for s in group]),
            batch=True,
        )
        predictions = self.class_names.named(self._samples(merged))
        if len(predictions) != len(group):  # every sample is new and of the device's width: one each
            raise RuntimeError(f"{len(predictions)} predictions for {len(group)} single samples")
        outs = [Output(predictions=[p]) for p in predictions]
        self._close(outs[-1])
        return outs

    def _close(self, out: Output) -> None:
        """``out`` gets the events gathered while handling (and the summaries due) and the history."""
        self._events.extend(self.summaries.due())
        out.history = self.take_history()
        out.events, self._events = self._events, []

    def due_events(self, flush: bool = False) -> list[Event]:
        """Events that fall due without a message (the agent's housekeeping asks): summaries past their
        interval (``flush``: all of them, at a stop), gaps in ``seq`` past their grace (the broker's
        drops; a stop checkpoints the open ones)."""
        self.seq.settle()
        return self.summaries.due(flush)

    @property
    def events_due(self) -> bool:
        """Whether :meth:`due_events` may have something (cheap: checked for every device often)."""
        return bool(self.summaries.pending or self.seq.gaps)

    def _emit(self, kind: str, **values: Any) -> None:
        self._events.append({"type": kind, **values})

    def _reject(self, rejected: list[Rejection], topic: str, count: int) -> None:
        """One summary event per message: the count and the first few reasons."""
        if not count:
            return
        self.counters.rejected += count
        labels = [r.reason for r in rejected if is_label_rejection(r.reason)]
        if labels:
            self.counters.rejected_labels += len(labels)
            self.last_label_rejection = labels[-1]
        self._emit(
            "rejected",
            topic=topic,
            count=count,
            reasons=[{"id": r.id, "reason": r.reason} for r in rejected[:REASONS_PER_EVENT]],
            message=message_digest(self._payload),
        )
        widths = [r for r in rejected if r.reason.startswith("x has ")]
        if widths and self.phase == "running":
            self.width_mismatches += len(widths)
            if self.width_mismatches >= 100:
                self._emit(
                    "width_mismatch",
                    count=self.width_mismatches,
                    n_features=self.n_features,
                    hint="set n_features in the configuration and restart to change the width",
                )
                self.width_mismatches = 0

    def _samples(self, s: Samples) -> list[Prediction]:
        """Deduplicate, then warm-up or run; returns the predictions of every sample kept."""
        placed = place_new(self.recent_samples, s)
        slots, keep, repeats = None, None, []
        if placed is not None:
            slots = placed.slots
            self.counters.join_evictions += placed.evicted
        else:
            found = sort_samples(self.recent_samples, s)
            keep, repeats = found.keep, found.repeats
            self.counters.join_evictions += found.evicted
            self.counters.id_reused += len(found.reused)
            for sid in found.reused:
                self.summaries.add("id_reused", ID_REUSED_REASON, item=sid)
        preds: list[Prediction] = []
        if repeats:
            preds.extend(self._repeat(s, repeats))
        if keep is not None:
            s = s.subset(keep)
        if s.ids:
            self.counters.samples += len(s.ids)
            self.counters.labeled += sum(1 for v in s.y.tolist() if v == v)
            fresh = self._run(s, slots) if self.phase == "running" else self._warmup(s)
            self.counters.predictions += len(fresh)
            preds.extend(fresh)
        return preds

    def _repeat(self, s: Samples, positions: list[int]) -> list[Prediction]:
        """Exact redeliveries: predicted again with the current state (nothing is learned twice), so that
        a prediction lost in a crash after the sample was processed is published after all."""
        self.counters.duplicates += len(positions)
        preds = []
        for i in positions:
            x = s.row(i)
            if self.loop is None or len(x) != self.n_features:
                pred = self._prediction(s.ids[i], None, "warmup")
            else:
                pred = self._prediction(s.ids[i], self.loop.predict_one(x), self._source())
            pred["repeat"] = True
            preds.append(pred)
        return preds

    def _prediction(
        self,
        sid: SampleId,
        y_hat: float | None,
        source: str,
        outlier: bool = False,
        version: int | None = None,
    ) -> Prediction:
        """A prediction payload; ``version`` is the model it came from (the current one when None)."""
        value = None if y_hat is None or not math.isfinite(y_hat) else float(y_hat)
        pred: Prediction = {
            "id": sid,
            "y_hat": value,
            "model_version": self.model_version if version is None else version,
            "source": source,
        }
        if outlier:
            pred["outlier"] = True
        return pred

    def _source(self) -> str:
        assert self.loop is not None
        return "incremental" if self.loop.uses_incremental() else "batch"

    # --- warm-up and the first model ------------------------------------------------------------------

    def _warmup(self, s: Samples) -> list[Prediction]:
        preds: list[Prediction] = []
        ys = s.y.tolist()
        for i, sid in enumerate(s.ids):
            if self.phase == "running":
                rest = s.subset(list(range(i, len(s.ids))))
                return preds + self._run(rest)
            row = s.row(i)
            self.warm.add(row, ys[i], sid)
            if math.isnan(ys[i]):
                self._remember(sid, row, math.nan)
            preds.append(self._prediction(sid, None, "warmup"))
            self._bound_warmup()
            if self.phase == "warmup" and self.warm.full():
                self._finish_warmup()
        return preds

    def _bound_warmup(self) -> None:
        """Keep the newest 2·warmup_samples samples while the first model is refused, and the newest
        warmup_samples that arrive while it is awaited."""
        self.warm.bound(self.config.warmup_samples * (2 if self.phase == "warmup" else 1))

    def _finish_warmup(self) -> None:
        """First window complete: lock the width, fit the guard, ask for the first model (its answer may
        come later)."""
        warm = self.warm
        if self.clock() < self.recomputes.cooldown_until:
            self._report_stall()
            return
        d = self.n_features or warm.common_width()
        if not warm.trainable(d, self.config.task):  # checked before any row is read: cheap while stuck
            self._report_stall()  # and keep collecting until the window can train a model
            return
        pairs = [(r, y) for r, y in zip(warm.rows, warm.y, strict=True) if len(r) == d]
        y0 = np.array([y for _, y in pairs if not math.isnan(y)])
        if self.n_features is None:
            self.n_features = d
            self._emit("width_locked", n_features=d, from_samples=len(warm))
        warm.stall = None
        self.counters.join_evictions += self.recent_samples.lock_width(d)
        if len(pairs) < len(warm):
            self._emit("width_discarded", n_features=d, discarded=len(warm) - len(pairs))
        X0 = np.array([r for r, y in pairs if not math.isnan(y)]).reshape(len(y0), d)
        self.guard, X0c, y0c = screen_first_window(
            X0, y0, self.config.task, RangeGuard(self.config.outlier_threshold)
        )
        self._emit("warmup_done", samples=len(warm), labels=len(y0), outliers=len(y0) - len(y0c))
        warm.take()
        self.phase = "awaiting_model"
        request = self.recomputes.request(X0c, y0c, reason="initial", stats={}, C=None, initial=True)
        trained = self.recomputes.submit(request)
        if trained is not None:
            self._install_initial(trained)

    def _install_initial(self, trained: TrainedModel) -> None:
        """Build the strategy's loop around the first model and replay what arrived while waiting."""
        request = self.pending
        assert request is not None and request.initial
        self.recomputes.trained(trained)
        C = getattr(trained.model, "C", self.config.C)
        ctx = Context(
            n_features=request.X.shape[1],
            task=self.config.task,
            loss=self.recomputes.loss,
            window_labels=self.config.window_labels,
            C=C if isinstance(C, float) else 1.0,
            recompute=self._recompute,
            X0=request.X,
            y0=request.y,
            guard=self.guard,
            retune=lambda _channel, _learner: self._recompute,  # the cloud searches the forwarded history
            n_classes=self.class_names.n_classes,
        )
        loop = self.strategy.build(ctx, self.config.strategy_param)
        loop.start(trained.model, request.X, request.y, warm_learner=True)
        self.loop, self.C, self.learner_params = loop, C, ctx.learner_params
        self.model_version = trained.version
        self.phase = "running"
        late_rows, late_y = self.warm.take()
        self._emit("model_installed", version=trained.version, reason="initial", C=C)
        for x, y in zip(late_rows, late_y, strict=True):  # what arrived while the model was awaited
            if not math.isnan(y):
                self._learn(None, x, y, math.nan)

    # --- running --------------------------------------------------------------------------------------------

    def _run(self, s: Samples, slots: IntArray | None = None) -> list[Prediction]:
        """Predict and learn; ``slots``: the samples' slots in the recent samples when
        :func:`~edgedrift_edge.session.dedup.place_new` put them there."""
        loop = self.loop
        assert loop is not None
        if s.rows is not None:  # width decided while this message was parsed: keep the rows that fit
            fits = [i for i, r in enumerate(s.rows) if len(r) == self.n_features]
            if len(fits) < len(s.ids):
                bad = [i for i in range(len(s.ids)) if i not in set(fits)]
                self.counters.samples -= len(bad)
                self._reject(
                    [
                        Rejection(f"x has {len(s.rows[i])} values, expected {self.n_features}", s.ids[i])
                        for i in bad
                    ],
                    "samples",
                    len(bad),
                )
            s = s.subset(fits)
            s.X = np.array(s.rows).reshape(len(fits), self.n_features or 0)
            s.rows = None
        if s.batch:
            return self._run_batch(s, slots)
        preds = []
        outliers = []
        ys, tss = s.y.tolist(), s.ts.tolist()
        for i, sid in enumerate(s.ids):
            source, version = self._source(), self.model_version
            y = ys[i]
            recomputes = loop.counters.recomputes
            x = s.X[i]
            p = loop.process_one(x, None if y != y else y, tss[i])
            self.drift_events += loop.counters.recomputes - recomputes
            if loop.last_outlier:
                outliers.append(sid)
            elif y != y:  # unlabeled (NaN): wait for a late label
                self._remember(sid, x, p)
            else:
                self.quality.score(y, p)
            preds.append(self._prediction(sid, p, source, loop.last_outlier, version))
        self._report_outliers(outliers)
        return preds

    def _run_batch(self, s: Samples, slots: IntArray | None) -> list[Prediction]:
        """:meth:`_run` for a batch message in one call to the loop: ``EdgeLoop.process_many`` (per-sample
        semantics, the predictions of the samples one by one) or, with ``batch_mode=vectorised``,
        ``process_many_vectorised`` (all predicted with the state at the batch's start). Each prediction
        carries the source and model version it was made with (a sync recompute mid-batch changes it)."""
        loop = self.loop
        assert loop is not None
        version, base = self.model_version, loop.counters.samples
        recomputes = loop.counters.recomputes
        if self.config.batch_mode == "vectorised":
            source = self._source()
            y_hat = loop.process_many_vectorised(s.X, s.y, s.ts)
            sources: list[str] | None = None
            marks: list[tuple[int, int | None]] = []
        else:
            self.version_marks = marks = []
            try:
                y_hat = loop.process_many(s.X, s.y, s.ts)
            finally:
                self.version_marks = None
            incremental = loop.last_incremental
            source = "incremental" if incremental.size and incremental[0] else "batch"
            sources = (
                None
                if incremental.all() or not incremental.any()
                else ["incremental" if f else "batch" for f in incremental.tolist()]
            )
        self.drift_events += loop.counters.recomputes - recomputes
        flags = loop.last_outliers
        if sources is None and not marks and not flags.any() and np.isfinite(y_hat).all():
            return self._batch_predictions(s, y_hat, slots, source, version)
        versions = [version] * len(s.ids)
        for count, v in marks:  # the samples after the one whose label made the recompute
            versions[count - base :] = [v] * (len(versions) - (count - base))
        preds = []
        outlier = flags.tolist() if flags.size else [False] * len(s.ids)
        score, finite = self.quality.score, math.isfinite
        predicted = y_hat.tolist()
        waiting: list[int] = []  # unlabeled (NaN) samples: they wait for a late label
        for i, (sid, y, p) in enumerate(zip(s.ids, s.y.tolist(), predicted, strict=True)):
            src = source if sources is None else sources[i]
            if outlier[i]:
                preds.append(self._prediction(sid, p, src, True, versions[i]))
                continue
            if y != y:
                waiting.append(i)
            else:
                score(y, p)
            preds.append(
                {"id": sid, "y_hat": p if finite(p) else None, "model_version": versions[i], "source": src}
            )
        self._await_labels(s, np.array(waiting, dtype=np.int64), predicted, y_hat, slots)
        if any(outlier):
            self._report_outliers([sid for sid, f in zip(s.ids, outlier, strict=True) if f])
        return preds

    def _batch_predictions(
        self, s: Samples, y_hat: FloatArray, slots: IntArray | None, source: str, version: int | None
    ) -> list[Prediction]:
        """:meth:`_run`'s vectorised batch when no sample was an outlier and every prediction is finite
        (the usual case): the labeled samples are scored and the unlabeled ones wait for a late label,
        each in the batch's order, as the general loop does."""
        predicted = y_hat.tolist()
        preds: list[Prediction] = [
            {"id": sid, "y_hat": p, "model_version": version, "source": source}
            for sid, p in zip(s.ids, predicted, strict=True)
        ]
        unlabeled = np.isnan(s.y)
        ys = s.y.tolist()
        for i in np.flatnonzero(~unlabeled).tolist():
            self.quality.score(ys[i], predicted[i])
        self._await_labels(s, np.flatnonzero(unlabeled), predicted, y_hat, slots)
        return preds

    def _await_labels(
        self,
        s: Samples,
        waiting: IntArray,
        predicted: list[float],
        y_hat: FloatArray,
        slots: IntArray | None,
    ) -> None:
        """The unlabeled samples at positions ``waiting`` of a batch wait in the recent samples for a
        late label: in the slots :func:`~edgedrift_edge.session.dedup.place_new` gave them (-1: pushed out
        by a later id of the batch, counted as evicted), or looked up one by one without them."""
        if slots is None:
            for i in waiting.tolist():
                self._remember(s.ids[i], s.X[i], predicted[i])
        elif waiting.size:
            kept = waiting[slots[waiting] >= 0]
            self.counters.join_evictions += waiting.size - kept.size
            evicted = self.recent_samples.remember_many(slots[kept], s.X[kept], y_hat[kept])
            self.counters.join_evictions += evicted

    def _remember(self, sid: SampleId, x: FloatArray, y_hat: float) -> None:
        """The unlabeled sample ``sid`` (just put in the recent samples) awaits a late label."""
        recent = self.recent_samples
        slot = recent.index.find(*id_key(sid))
        if slot < 0:  # a later sample of its own message pushed it out of the window
            self.counters.join_evictions += 1
        else:
            self.counters.join_evictions += recent.remember(slot, x, y_hat)

    def _late_label(self, sid: SampleId, y: float) -> None:
        entry = self.recent_samples.take(sid)
        if entry is None:
            self.counters.label_misses += 1
            self.summaries.add("label_miss", LABEL_MISS_REASON, item=sid)
            return
        x, y_hat = entry
        self.counters.labeled += 1
        if self.phase != "running":  # still in the first window: label it there
            self.warm.label(sid, y)
            return
        if len(x) == self.n_features:
            self._learn(sid, x, y, y_hat)

    def _learn(self, sid: SampleId | None, x: FloatArray, y: float, y_hat: float) -> None:
        loop = self.loop
        assert loop is not None
        recomputes = loop.counters.recomputes
        loop.learn_one(x, y)
        self.drift_events += loop.counters.recomputes - recomputes
        if loop.last_outlier:
            self.counters.outliers += 1
            self.summaries.add("outlier", OUTLIER_REASON, item=sid)
        elif not math.isnan(y_hat):
            self.quality.score(y, y_hat)

    # --- recomputes -----------------------------------------------------------------------------------------

    def _recompute(self, X: FloatArray, y: FloatArray, reset_rows: int | None = None) -> BatchModel | None:
        """The loop's trainer: the model when the trainer answers at once (sync), else None."""
        loop = self.loop
        assert loop is not None
        stats = loop.monitor.stats
        request = self.recomputes.request(
            X.copy(), y.copy(), self.config.strategy, stats, C=self.C, reset_rows=reset_rows
        )
        edge = self._retuned()
        if edge is not None:  # every label learned so far reaches the history before the search
            retune = RetuneRequest.model_validate(
                {"learner": edge.name, "window_labels": self.config.window_labels, "current": edge.params}
            )
            request = replace(request, retune=retune, history=tuple(self.take_history(force=True)))
        trained = self.recomputes.submit(request)
        if trained is None:
            return None
        self.recomputes.trained(trained)
        self.model_version = trained.version
        if self.version_marks is not None:
            self.version_marks.append((loop.counters.samples, trained.version))
        self._emit("recompute_finished", version=trained.version, train_ms=trained.train_ms)
        self._apply_edge(trained)
        return trained.model

    def _retuned(self) -> RetunedLearner | None:
        """The edge learner of a re-tuning strategy (``druid-tune``, ``periodic-tune``), else None."""
        learner = None if self.loop is None else self.loop.learner
        return learner if isinstance(learner, RetunedLearner) else None

    def take_history(self, force: bool = False) -> list[LabelBatch]:
        """The labels a re-tuning strategy's edge learner learned, as batches for the cloud's history."""
        return self.recomputes.take_history(self._retuned(), force)

    def _apply_edge(self, trained: TrainedModel) -> None:
        """Hand a re-tuning recompute's parameters to the edge learner, which applies them when the model
        is installed (as offline: :meth:`RetunedLearner.anchor`)."""
        edge = self._retuned()
        if edge is not None and trained.edge is not None:
            edge.channel.post(EdgeTune.from_document(trained.edge))

    def install(self, trained: TrainedModel) -> list[Event]:
        """A model that arrived for a pending request (async mode): swap it in between two samples."""
        self._events = []
        pending = self.pending
        if pending is None or not self.recomputes.answers(trained.request_id):
            self._emit("stale_model", version=trained.version, reason="no pending request with this id")
        elif pending.initial:
            self._install_initial(trained)
        else:
            loop = self.loop
            assert loop is not None
            self.recomputes.trained(trained)
            self._apply_edge(trained)
            loop.install(trained.model)
            loop.counters.bytes_down += len(json.dumps(trained.document))
            self.model_version = trained.version
            self._emit("recompute_finished", version=trained.version, train_ms=trained.train_ms)
        events, self._events = self._events, []
        return events

    def recompute_failed(self, failure: RecomputeFailure) -> list[Event]:
        """A failed attempt; a final one releases the request after a cool-down, and a refused first
        window goes back to warm-up, to be asked for again with what arrived since."""
        self._events = []
        if not self.recomputes.answers(failure.request_id):
            return []
        released = self.recomputes.failed(failure, self.clock())
        if released is not None and released.initial:
            self.phase = "warmup"
            self.warm.put_back(released.X, released.y)
        events, self._events = self._events, []
        return events

    def _release_cooldown(self) -> None:
        """After a refused recompute, let the loop ask again once the cool-down has passed."""
        loop = self.loop
        if loop is not None and loop.pending_recompute and self.pending is None:
            loop.pending_recompute = self.clock() < self.recomputes.cooldown_until

    def resubmit(self) -> RecomputeRequest | None:
        """The pending request after a restart (same request id: the cloud answers it at most once)."""
        return self.pending

    # --- reports --------------------------------------------------------------------------------------------

    def _waiting(self) -> Waiting:
        wait = self.recomputes.cooldown_until - self.clock()
        return Waiting(self.phase, wait, self.counters.rejected_labels, self.last_label_rejection)

    def warmup_state(self) -> dict[str, Any] | None:
        """The ``warmup`` field of the status: None once running."""
        return self.warm.state(self._waiting())

    def _report_stall(self) -> None:
        """The first window is full and could not train: say why (once per cause, then every
        ``warmup_samples`` samples while it lasts)."""
        event = self.warm.stall_event(self._waiting(), self.counters.samples)
        if event is not None:
            self._emit("warmup_stalled", **event)

    def _report_outliers(self, ids: Sequence[SampleId | None]) -> None:
        if ids:
            self.counters.outliers += len(ids)
            self._emit("outlier", count=len(ids), ids=ids[:REASONS_PER_EVENT], reason=OUTLIER_REASON)

    def status(self) -> dict[str, Any]:
        """The device's part of the retained status message (the agent adds state and queue)."""
        return reports.status(self)

    def heartbeat(self) -> Heartbeat:
        return reports.heartbeat(self)

    # --- checkpoints ----------------------------------------------------------------------------------------

    _SAVED = (
        "phase", "n_features", "loop", "C", "learner_params", "model_version", "next_seq", "drift_events",
        "guard",
    )  # fmt: skip

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to continue exactly here, as plain data and core objects (for
        :mod:`edgedrift.state`). The large buffers travel as a few arrays (the recent samples' ids as
        64-bit words, rows as one matrix), so a checkpoint costs milliseconds."""
        tree: dict[str, Any] = {name: getattr(self, name) for name in self._SAVED}
        self.warm.snapshot(tree)
        tree["epoch"], tree["request_seq"] = self.recomputes.epoch, self.recomputes.request_seq
        tree["recent_samples"] = self.recent_samples.snapshot()
        self.quality.snapshot(tree)
        tree["counters"] = asdict(self.counters)
        tree["pending"] = None if self.pending is None else codec.request_fields(self.pending)
        self.seq.snapshot(tree)
        return tree

    def restore(self, tree: dict[str, Any]) -> None:
        """Continue from :meth:`snapshot` (the loop's trainer is re-bound to this session)."""
        for name in self._SAVED:
            setattr(self, name, tree[name])
        self.warm.restore(tree)
        recomputes = self.recomputes
        recomputes.epoch, recomputes.request_seq = tree["epoch"], tree["request_seq"]
        pending = tree.get("pending")
        recomputes.pending = None if pending is None else codec.request_from_fields(pending)
        # the newest entries that fit this config (older ones count as evicted)
        size, width, budget = self.config.recent_samples, self.n_features, self.config.recent_bytes
        if "recent_samples" in tree:
            self.recent_samples, dropped = RecentSamples.restore(tree["recent_samples"], size, width, budget)
        else:  # written before the join buffer and the duplicate window became one
            former = tree["joins"], tree["recent_ids"]
            self.recent_samples, dropped = RecentSamples.restore_former(*former, size, width, budget)
        self.quality.restore(tree)
        saved = tree["counters"]
        for f in fields(Counters):  # in place: the collaborators count into the same object
            setattr(self.counters, f.name, saved.get(f.name, 0))
        self.counters.join_evictions += dropped
        self.seq.restore(tree)
        if self.loop is not None:
            self.loop.recompute_fn = self._recompute
