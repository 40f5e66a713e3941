"""A device's recompute bookkeeping: the request ids (an epoch per session, a sequence number per request),
the request in flight, the cool-down after a refusal, whether the cloud refuses the device's credential,
and the label batches a re-tuning strategy forwards to its history. Owned by
:class:`~edgedrift_edge.session.DeviceSession`, which decides when to ask and installs what comes back."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from typing import Any

from edgedrift.models.losses import FloatArray
from edgedrift.strategies import Strategy, TrainSpec
from edgedrift.strategies.retuned import RetunedLearner
from edgedrift_edge.session.classes import ClassNames
from edgedrift_edge.session.codec import scalar_stats
from edgedrift_edge.session.ledger import Counters, SessionConfig
from edgedrift_edge.session.trainer import (
    LabelBatch,
    RecomputeFailure,
    RecomputeRequest,
    TrainedModel,
    Trainer,
)

Emit = Callable[..., None]


class Recomputes:
    """Requests to the injected trainer and the state around them (see the module docstring)."""

    def __init__(
        self,
        config: SessionConfig,
        strategy: Strategy,
        classes: ClassNames,
        trainer: Trainer,
        counters: Counters,
        emit: Emit,
    ) -> None:
        self.config = config
        self.strategy = strategy
        self.classes = classes
        self.trainer = trainer
        self.counters = counters
        self.emit = emit
        self.loss = "logistic" if config.task == "classification" else "squared"
        self.epoch = uuid.uuid4().hex[:12]
        self.request_seq = 0
        self.history_id, self.history_seq = uuid.uuid4().hex[:12], 0  # label batch ids, fresh per process
        self.pending: RecomputeRequest | None = None
        self.cooldown_until = -math.inf
        self.unauthorized = False

    def request(
        self,
        X: FloatArray,
        y: FloatArray,
        reason: str,
        stats: dict[str, Any],
        C: float | str | None,
        initial: bool = False,
        reset_rows: int | None = None,
    ) -> RecomputeRequest:
        """A new request (a new id); ``C``: the current model's, None for the configured one."""
        self.request_seq += 1
        spec = self.strategy.train
        if initial:  # the first model: the strategy's learner, never rebalanced
            spec = TrainSpec(spec.learner, spec.params)
        n_classes = self.classes.n_classes
        return RecomputeRequest(
            request_id=f"{self.config.device_id}-{self.epoch}-{self.request_seq}",
            X=X,
            y=y,
            task=self.config.task,
            loss=self.loss,
            C=self.config.C if initial or C is None else C,
            reason=reason,
            spec=spec,
            stats=scalar_stats(stats),
            reset_rows=reset_rows,
            initial=initial,
            n_classes=n_classes if n_classes >= 3 else None,
            class_names=self.classes.names(),
        )

    def submit(self, request: RecomputeRequest) -> TrainedModel | None:
        """Ask the trainer: the model when it answers at once (sync), else None (it arrives later)."""
        self.pending = request
        self.counters.recomputes_requested += 1
        self.emit("recompute_requested", request_id=request.request_id, n=len(request.y), stats=request.stats)
        return self.trainer(request)

    def answers(self, request_id: str) -> bool:
        """Whether a model or a failure with this id answers the request in flight."""
        return self.pending is not None and self.pending.request_id == request_id

    def trained(self, trained: TrainedModel) -> None:
        """The request in flight got its model: counted, and the credential works again."""
        request, self.pending = self.pending, None
        c = self.counters
        c.recomputes_completed += 1
        c.http_bytes_up += trained.bytes_up
        c.http_bytes_down += trained.bytes_down
        if request is not None:
            c.history_stored += len(request.history)
        if self.unauthorized:
            self.unauthorized = False
            self.emit("authorized", reason="the cloud accepted the device's credential again")

    def failed(self, failure: RecomputeFailure, now: float) -> RecomputeRequest | None:
        """A failed attempt of the request in flight: counted and reported; a final one releases the
        request (returned) and starts a cool-down."""
        self.counters.recompute_failures += 1
        self.emit(
            "recompute_failed",
            request_id=failure.request_id,
            attempt=failure.attempt,
            reason=failure.reason[:300],
            retrying=not failure.final,
            retry_in_s=failure.retry_in_s,
        )
        if failure.unauthorized and not self.unauthorized:
            self.unauthorized = True
            self.emit("unauthorized", reason=failure.reason[:300])
        if not failure.final:
            return None
        request, self.pending = self.pending, None
        assert request is not None
        self.counters.history_refused += len(request.history)
        self.cooldown_until = now + self.config.retry_cooldown_s
        return request

    def take_history(self, edge: RetunedLearner | None, force: bool = False) -> list[LabelBatch]:
        """The labels the edge learner learned, as batches of ``history_batch`` to forward to the cloud:
        once a batch is full, or everything pending when ``force`` (a re-tuning recompute)."""
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
