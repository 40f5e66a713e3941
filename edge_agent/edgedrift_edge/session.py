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

Recomputes go through the injected :data:`~edgedrift_edge.recompute.Trainer`. It answers at once in
sync mode (then the deployed run equals the offline evaluator's) and returns None in async mode: the
model arrives later through :meth:`DeviceSession.install`. A request the cloud refuses for good puts
the session on a cool-down instead of asking again on every sample.

The types and counters live in :mod:`~edgedrift_edge.ledger`, the recompute half of the state machine in
:mod:`~edgedrift_edge.session_recompute`, its reports in :mod:`~edgedrift_edge.session_reports`, the
checkpoint codec in :mod:`~edgedrift_edge.session_codec`. It is over 500 lines because the running
half (samples one by one and batch messages, which must report the same predictions) stays in one place.
"""

from __future__ import annotations

import hashlib
import math
import time
import uuid
from collections import Counter as Tally
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, fields
from typing import Any, Literal

import numpy as np

from edgedrift.guard import RangeGuard, screen_first_window
from edgedrift.loop import EdgeLoop
from edgedrift.models.losses import FloatArray
from edgedrift.strategies import Context, get_strategy
from edgedrift_edge import session_codec as codec
from edgedrift_edge.event_summary import EventSummaries
from edgedrift_edge.id_index import IntArray, id_key
from edgedrift_edge.ledger import Counters, Event, Output, Prediction, SessionConfig
from edgedrift_edge.messages import MessageError, Rejection, SampleId, Samples
from edgedrift_edge.packed_rows import PackedRows
from edgedrift_edge.recent_samples import RecentSamples
from edgedrift_edge.recompute import RecomputeRequest, TrainedModel, Trainer
from edgedrift_edge.score_window import ScoreWindow
from edgedrift_edge.session_classes import ClassesMixin
from edgedrift_edge.session_dedup import DedupMixin
from edgedrift_edge.session_recompute import RecomputesMixin
from edgedrift_edge.session_reports import OUTLIER_REASON, REASONS_PER_EVENT, ReportsMixin
from edgedrift_edge.session_seq import SeqMixin
from edgedrift_edge.session_warmup import MIN_WARMUP_LABELS, WarmupMixin, is_label_rejection

__all__ = ["Counters", "DeviceSession", "Event", "Output", "Prediction", "SessionConfig"]

Phase = Literal["warmup", "awaiting_model", "running"]


class DeviceSession(ClassesMixin, DedupMixin, RecomputesMixin, ReportsMixin, SeqMixin, WarmupMixin):
    """The per-device state machine (see the module docstring)."""

    def __init__(
        self,
        config: SessionConfig,
        trainer: Trainer,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.trainer = trainer
        self.clock = clock
        self.strategy = get_strategy(config.strategy)
        self.counters = Counters()
        self.phase: Phase = "warmup"
        self.n_features: int | None = config.n_features
        self.warm_rows = PackedRows()
        self.warm_y: list[float] = []
        self.warm_ids: list[SampleId | None] = []
        self.loop: EdgeLoop | None = None
        self.C: float | str | None = None
        self.loss = "logistic" if config.task == "classification" else "squared"
        self._init_classes()  # labels and predictions by class name (session_classes)
        self.learner_params: dict[str, dict[str, float]] = {}
        self.model_version: int | None = None
        #: The newest samples' ids with their content digests (redeliveries are told from reused ids) and,
        #: for the unlabeled ones, x and y_hat awaiting a late label (bounded, oldest evicted).
        self.recent_samples = RecentSamples(config.recent_samples, config.n_features, config.recent_bytes)
        #: 1.0/0.0 per recent labeled prediction (classification) or squared error (regression).
        self.recent = ScoreWindow(config.accuracy_window)
        self.recent_sum = 0.0
        self.next_seq = 0
        self.wire_seq: int | None = None  # the publisher's seq expected next (session_seq)
        self.seq_skipped = 0
        self.seq_refused: deque[tuple[int, int]] = deque()
        self.drift_events = 0
        self.width_mismatches = 0
        self.epoch = uuid.uuid4().hex[:12]
        self.request_seq = 0
        self.history_id, self.history_seq = uuid.uuid4().hex[:12], 0  # label batch ids, fresh per process
        self.pending: RecomputeRequest | None = None
        self.guard: RangeGuard | None = None
        self.cooldown_until = -math.inf
        self.unauthorized = False
        self.last_label_rejection: str | None = None
        self._stall: tuple[str, int] | None = None  # the warm-up stall last reported (session_warmup)
        self._events: list[Event] = []
        self._payload = b""
        self.summaries = EventSummaries(clock, REASONS_PER_EVENT)  # label misses, late-label outliers
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
        from edgedrift_edge.in_process import check_in_process, in_process_trainer

        if config.get("classes") is not None:
            config["classes"] = tuple(config["classes"])
        session_config = SessionConfig(device_id, **config)
        check_in_process(session_config.strategy)
        return cls(session_config, in_process_trainer(), clock)

    # --- messages ---------------------------------------------------------------------------------------

    def handle(self, kind: str, payload: bytes) -> Output:
        """One raw MQTT payload from the ``samples`` or ``labels`` topic."""
        self.counters.messages += 1
        self._events = []
        self._payload = payload
        out = Output()
        try:
            if kind == "labels":
                labels, rejected = self._parse_labels(payload)
                self._reject(rejected, "labels", len(rejected))
                for sid, y in labels:
                    self._late_label(sid, y)
            else:
                self._release_cooldown()
                samples = self._parse_samples(payload)
                self._check_seq(samples.seq, len(samples.ids) + len(samples.rejected))
                self._reject(samples.rejected, kind, len(samples.rejected))
                self.next_seq += len(samples.ids) + len(samples.rejected)
                if samples.ids:
                    out.predictions = self._named(self._samples(samples))
                out.batch = samples.batch
        except MessageError as exc:
            self._reject([Rejection(str(exc))], kind, exc.count)
            if kind != "labels":
                self.seq_skipped += exc.count
        self._events.extend(self.summaries.due())
        out.history = self.take_history()
        out.events = self._events
        self._events = []
        self._payload = b""  # a gateway's thousand sessions would each keep their last message
        return out

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
            message=hashlib.blake2b(self._payload, digest_size=8).hexdigest(),
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
        slots = self._dedup_new(s)
        keep, repeats = (None, []) if slots is not None else self._dedup(s)
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
            self.warm_rows.append(row)
            self.warm_y.append(ys[i])
            self.warm_ids.append(sid)
            if math.isnan(ys[i]):
                self._remember(sid, row, math.nan)
            preds.append(self._prediction(sid, None, "warmup"))
            self._bound_warmup()
            if self.phase == "warmup" and len(self.warm_y) >= self.config.warmup_samples:
                self._finish_warmup()
        return preds

    def _bound_warmup(self) -> None:
        """Keep the newest 2·warmup_samples samples while the first model is refused, and the newest
        warmup_samples that arrive while it is awaited."""
        cap = self.config.warmup_samples * (2 if self.phase == "warmup" else 1)
        excess = len(self.warm_y) - cap
        if excess > 0:
            self.warm_rows.drop_oldest(excess)
            del self.warm_y[:excess], self.warm_ids[:excess]

    def _finish_warmup(self) -> None:
        """First window complete: lock the width, fit the guard, ask for the first model (its answer may
        come later)."""
        if self.clock() < self.cooldown_until:
            self._report_stall()
            return
        widths = Tally(len(r) for r in self.warm_rows)
        d = self.n_features or widths.most_common(1)[0][0]
        pairs = [(r, y) for r, y in zip(self.warm_rows, self.warm_y, strict=True) if len(r) == d]
        y0 = np.array([y for _, y in pairs if not math.isnan(y)])
        if len(y0) < MIN_WARMUP_LABELS or (self.config.task == "classification" and np.unique(y0).size < 2):
            self._report_stall()  # and keep collecting until the window can train a model
            return
        if self.n_features is None:
            self.n_features = d
            self._emit("width_locked", n_features=d, from_samples=len(self.warm_rows))
        self._stall = None
        self.counters.join_evictions += self.recent_samples.lock_width(d)
        if len(pairs) < len(self.warm_rows):
            self._emit("width_discarded", n_features=d, discarded=len(self.warm_rows) - len(pairs))
        X0 = np.array([r for r, y in pairs if not math.isnan(y)]).reshape(len(y0), d)
        self.guard, X0c, y0c = screen_first_window(
            X0, y0, self.config.task, RangeGuard(self.config.outlier_threshold)
        )
        self._emit("warmup_done", samples=len(self.warm_y), labels=len(y0), outliers=len(y0) - len(y0c))
        self.warm_rows, self.warm_y, self.warm_ids = PackedRows(), [], []
        self.phase = "awaiting_model"
        trained = self._submit(self._request(X0c, y0c, reason="initial", stats={}, initial=True))
        if trained is not None:
            self._install_initial(trained)

    def _install_initial(self, trained: TrainedModel) -> None:
        """Build the strategy's loop around the first model and replay what arrived while waiting."""
        request = self.pending
        assert request is not None and request.initial
        self.pending = None
        self._count_trained(trained)
        C = getattr(trained.model, "C", self.config.C)
        ctx = Context(
            n_features=request.X.shape[1],
            task=self.config.task,
            loss=self.loss,
            window_labels=self.config.window_labels,
            C=C if isinstance(C, float) else 1.0,
            recompute=self._recompute,
            X0=request.X,
            y0=request.y,
            guard=self.guard,
            retune=lambda _channel, _learner: self._recompute,  # the cloud searches the forwarded history
            n_classes=self.n_classes,
        )
        loop = self.strategy.build(ctx, self.config.strategy_param)
        loop.start(trained.model, request.X, request.y, warm_learner=True)
        self.loop, self.C, self.learner_params = loop, C, ctx.learner_params
        self.model_version = trained.version
        self.phase = "running"
        late_rows, late_y = self.warm_rows, self.warm_y
        self.warm_rows, self.warm_y, self.warm_ids = PackedRows(), [], []
        self._emit("model_installed", version=trained.version, reason="initial", C=C)
        for x, y in zip(late_rows, late_y, strict=True):  # what arrived while the model was awaited
            if not math.isnan(y):
                self._learn(None, x, y, math.nan)

    # --- running --------------------------------------------------------------------------------------------

    def _run(self, s: Samples, slots: IntArray | None = None) -> list[Prediction]:
        """Predict and learn; ``slots``: the samples' slots in the recent samples when :meth:`_dedup_new`
        put them there."""
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
                self._score(y, p)
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
        score, finite = self._score, math.isfinite
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
            self._score(ys[i], predicted[i])
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
        late label: in the slots :meth:`_dedup_new` gave them (-1: pushed out by a later id of the
        batch, counted as evicted), or looked up one by one without them."""
        if slots is None:
            for i in waiting.tolist():
                self._remember(s.ids[i], s.X[i], predicted[i])
        elif waiting.size:
            kept = waiting[slots[waiting] >= 0]
            self.counters.join_evictions += waiting.size - kept.size
            self.recent_samples.remember_many(slots[kept], s.X[kept], y_hat[kept])

    def _remember(self, sid: SampleId, x: FloatArray, y_hat: float) -> None:
        """The unlabeled sample ``sid`` (just put in the recent samples) awaits a late label."""
        recent = self.recent_samples
        slot = recent.index.find(*id_key(sid))
        if slot < 0:  # a later sample of its own message pushed it out of the window
            self.counters.join_evictions += 1
        else:
            recent.remember(slot, x, y_hat)

    def _late_label(self, sid: SampleId, y: float) -> None:
        entry = self.recent_samples.take(sid)
        if entry is None:
            self.counters.label_misses += 1
            self.summaries.add("label_miss", sid, "no unlabeled sample with this id among the recent samples")
            return
        x, y_hat = entry
        self.counters.labeled += 1
        if self.phase != "running":
            for i in range(len(self.warm_ids) - 1, -1, -1):  # still in the first window: label it there
                if self.warm_ids[i] == sid:
                    self.warm_y[i] = y
                    break
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
            self.summaries.add("outlier", sid, OUTLIER_REASON)
        elif not math.isnan(y_hat):
            self._score(y, y_hat)

    # --- checkpoints ----------------------------------------------------------------------------------------

    _SAVED = (
        "phase", "n_features", "warm_y", "warm_ids", "loop", "C", "learner_params", "model_version",
        "recent_sum", "next_seq", "drift_events", "epoch", "request_seq", "guard",
    )  # fmt: skip

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to continue exactly here, as plain data and core objects (for
        :mod:`edgedrift.state`). The large buffers travel as a few arrays (the recent samples' ids as
        64-bit words, rows as one matrix), so a checkpoint costs milliseconds."""
        tree: dict[str, Any] = {name: getattr(self, name) for name in self._SAVED}
        tree["warm_rows"] = codec.pack_rows(list(self.warm_rows))
        tree["recent_samples"] = self.recent_samples.snapshot()
        tree["recent"] = self.recent.values()
        tree["recent_cells"] = None if self.recent_cells is None else self.recent_cells.values()
        tree["counters"] = asdict(self.counters)
        tree["pending"] = None if self.pending is None else codec.request_fields(self.pending)
        tree["wire_seq"] = self.wire_seq
        tree["seq_accounted"] = [self.seq_skipped, [list(r) for r in self.seq_refused]]
        return tree

    def restore(self, tree: dict[str, Any]) -> None:
        """Continue from :meth:`snapshot` (the loop's trainer is re-bound to this session)."""
        for name in self._SAVED:
            setattr(self, name, tree[name])
        self.warm_rows = PackedRows(codec.unpack_rows(tree["warm_rows"]))
        # the newest entries that fit this config (older ones count as evicted)
        size, width, budget = self.config.recent_samples, self.n_features, self.config.recent_bytes
        if "recent_samples" in tree:
            self.recent_samples, dropped = RecentSamples.restore(tree["recent_samples"], size, width, budget)
        else:  # written before the join buffer and the duplicate window became one
            former = tree["joins"], tree["recent_ids"]
            self.recent_samples, dropped = RecentSamples.restore_former(*former, size, width, budget)
        self.recent = ScoreWindow(self.config.accuracy_window, tree["recent"].tolist())
        self._restore_cells(tree)
        self.counters = Counters(**{f.name: tree["counters"].get(f.name, 0) for f in fields(Counters)})
        self.counters.join_evictions += dropped
        pending = tree.get("pending")
        self.pending = None if pending is None else codec.request_from_fields(pending)
        self.wire_seq = tree.get("wire_seq")  # absent in a checkpoint written before issue 30 row 2
        skipped, refused = tree.get("seq_accounted") or (0, [])
        self.seq_skipped, self.seq_refused = int(skipped), deque((int(s), int(c)) for s, c in refused)
        if self.loop is not None:
            self.loop.recompute_fn = self._recompute
