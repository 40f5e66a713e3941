"""The recompute half of a device's session: requests to the injected trainer, models that arrive
later, refusals and the cool-down after them. A mixin of :class:`~edgedrift_edge.session.DeviceSession`,
split off so each module holds one concept; it owns no state of its own."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from edgedrift.labels import ClassLabels
from edgedrift.loop import EdgeLoop
from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray
from edgedrift.strategies import Strategy, TrainSpec
from edgedrift.strategies.channel import EdgeTune
from edgedrift.strategies.retuned import RetunedLearner
from edgedrift.wire import RetuneRequest
from edgedrift_edge.buffers.packed_rows import PackedRows
from edgedrift_edge.session.codec import scalar_stats
from edgedrift_edge.session.ledger import Counters, Event, SessionConfig
from edgedrift_edge.session.trainer import (
    LabelBatch,
    RecomputeFailure,
    RecomputeRequest,
    TrainedModel,
    Trainer,
)


class RecomputesMixin:
    """Recompute requests and their answers (see the module docstring)."""

    config: SessionConfig
    trainer: Trainer
    clock: Callable[[], float]
    strategy: Strategy
    counters: Counters
    phase: str
    loop: EdgeLoop | None
    C: float | str | None
    loss: str
    model_version: int | None
    version_marks: list[tuple[int, int | None]] | None
    epoch: str
    request_seq: int
    history_id: str
    history_seq: int
    pending: RecomputeRequest | None
    cooldown_until: float
    unauthorized: bool
    warm_rows: PackedRows
    warm_y: list[float]
    warm_ids: list[Any]
    n_classes: int
    classes: ClassLabels | None
    _events: list[Event]

    if TYPE_CHECKING:

        def _emit(self, kind: str, **values: Any) -> None: ...

        def _install_initial(self, trained: TrainedModel) -> None: ...

    def _request(
        self,
        X: FloatArray,
        y: FloatArray,
        reason: str,
        stats: dict[str, Any],
        initial: bool = False,
        reset_rows: int | None = None,
    ) -> RecomputeRequest:
        self.request_seq += 1
        spec = self.strategy.train
        if initial:  # the first model: the strategy's learner, never rebalanced
            spec = TrainSpec(spec.learner, spec.params)
        return RecomputeRequest(
            request_id=f"{self.config.device_id}-{self.epoch}-{self.request_seq}",
            X=X,
            y=y,
            task=self.config.task,
            loss=self.loss,
            C=self.config.C if initial or self.C is None else self.C,
            reason=reason,
            spec=spec,
            stats=scalar_stats(stats),
            reset_rows=reset_rows,
            initial=initial,
            n_classes=self.n_classes if self.n_classes >= 3 else None,
            class_names=None if self.classes is None else tuple(str(n) for n in self.classes.names),
        )

    def _submit(self, request: RecomputeRequest) -> TrainedModel | None:
        self.pending = request
        self.counters.recomputes_requested += 1
        self._emit(
            "recompute_requested", request_id=request.request_id, n=len(request.y), stats=request.stats
        )
        return self.trainer(request)

    def _recompute(self, X: FloatArray, y: FloatArray, reset_rows: int | None = None) -> BatchModel | None:
        """The loop's trainer: the model when the trainer answers at once (sync), else None."""
        loop = self.loop
        assert loop is not None
        request = self._request(
            X.copy(), y.copy(), self.config.strategy, loop.monitor.stats, reset_rows=reset_rows
        )
        edge = self._retuned()
        if edge is not None:  # every label learned so far reaches the history before the search
            retune = RetuneRequest.model_validate(
                {"learner": edge.name, "window_labels": self.config.window_labels, "current": edge.params}
            )
            request = replace(request, retune=retune, history=tuple(self.take_history(force=True)))
        trained = self._submit(request)
        if trained is None:
            return None
        self.pending = None
        self._count_trained(trained)
        self.counters.history_stored += len(request.history)
        self.model_version = trained.version
        if self.version_marks is not None:
            self.version_marks.append((loop.counters.samples, trained.version))
        self._emit("recompute_finished", version=trained.version, train_ms=trained.train_ms)
        self._apply_edge(trained)
        return trained.model

    # --- re-tuning strategies ---------------------------------------------------------------------------

    def _retuned(self) -> RetunedLearner | None:
        """The edge learner of a re-tuning strategy (``druid-tune``, ``periodic-tune``), else None."""
        learner = None if self.loop is None else self.loop.learner
        return learner if isinstance(learner, RetunedLearner) else None

    def take_history(self, force: bool = False) -> list[LabelBatch]:
        """The labels the edge learner learned, as batches of ``history_batch`` to forward to the cloud:
        once a batch is full, or everything pending when ``force`` (a re-tuning recompute)."""
        edge = self._retuned()
        size = self.config.history_batch
        if edge is None or not edge.channel.pending or (edge.channel.pending < size and not force):
            return []
        X, y = edge.channel.drain()
        batches = []
        for start in range(0, len(y), size):
            self.history_seq += 1
            part = slice(start, start + size)
            batches.append(LabelBatch(f"h{self.history_id}-{self.history_seq}", X[part], y[part]))
        self.counters.history_batches += len(batches)
        self.counters.history_labels += len(y)
        return batches

    def _apply_edge(self, trained: TrainedModel) -> None:
        """Hand a re-tuning recompute's parameters to the edge learner, which applies them when the model
        is installed (as offline: :meth:`RetunedLearner.anchor`)."""
        edge = self._retuned()
        if edge is not None and trained.edge is not None:
            edge.channel.post(EdgeTune.from_document(trained.edge))

    def install(self, trained: TrainedModel) -> list[Event]:
        """A model that arrived for a pending request (async mode): swap it in between two samples."""
        self._events = []
        if self.pending is None or trained.request_id != self.pending.request_id:
            self._emit("stale_model", version=trained.version, reason="no pending request with this id")
        elif self.pending.initial:
            self._install_initial(trained)
        else:
            loop = self.loop
            assert loop is not None
            self.counters.history_stored += len(self.pending.history)
            self.pending = None
            self._apply_edge(trained)
            loop.install(trained.model)
            loop.counters.bytes_down += len(json.dumps(trained.document))
            self._count_trained(trained)
            self.model_version = trained.version
            self._emit("recompute_finished", version=trained.version, train_ms=trained.train_ms)
        events, self._events = self._events, []
        return events

    def _count_trained(self, trained: TrainedModel) -> None:
        c = self.counters
        c.recomputes_completed += 1
        c.http_bytes_up += trained.bytes_up
        c.http_bytes_down += trained.bytes_down
        if self.unauthorized:
            self.unauthorized = False
            self._emit("authorized", reason="the cloud accepted the device's credential again")

    def recompute_failed(self, failure: RecomputeFailure) -> list[Event]:
        """A failed attempt; a final one releases the request after a cool-down."""
        self._events = []
        if self.pending is None or failure.request_id != self.pending.request_id:
            return []
        self.counters.recompute_failures += 1
        self._emit(
            "recompute_failed",
            request_id=failure.request_id,
            attempt=failure.attempt,
            reason=failure.reason[:300],
            retrying=not failure.final,
            retry_in_s=failure.retry_in_s,
        )
        if failure.unauthorized and not self.unauthorized:
            self.unauthorized = True
            self._emit("unauthorized", reason=failure.reason[:300])
        if failure.final:
            request, self.pending = self.pending, None
            self.counters.history_refused += len(request.history)
            self.cooldown_until = self.clock() + self.config.retry_cooldown_s
            if request.initial:  # collect again, starting from the refused window
                self.phase = "warmup"
                self.warm_rows = PackedRows([*request.X, *self.warm_rows])
                self.warm_y = [*request.y.tolist(), *self.warm_y]
                self.warm_ids = [*([None] * len(request.y)), *self.warm_ids]
        events, self._events = self._events, []
        return events

    def _release_cooldown(self) -> None:
        """After a refused recompute, let the loop ask again once the cool-down has passed."""
        loop = self.loop
        if loop is not None and loop.pending_recompute and self.pending is None:
            loop.pending_recompute = self.clock() < self.cooldown_until

    def resubmit(self) -> RecomputeRequest | None:
        """The pending request after a restart (same request id: the cloud answers it at most once)."""
        return self.pending
