"""What a session asks the cloud for and what comes back: plain data, no I/O.

A :class:`RecomputeRequest` carries everything one recompute posts (the window, the strategy's learner,
the monitor's evidence) and its ``request_id``: every retry of one request, also after the agent
restarted from a checkpoint, carries the same id, so the cloud never trains or counts it twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray
from edgedrift.strategies import TrainSpec
from edgedrift.wire import RetuneRequest, WindowHeader


@dataclass(frozen=True)
class LabelBatch:
    """Labels a re-tuning strategy's edge learner learned, on their way to the device's history in the
    cloud; ``batch_id`` makes a retried batch count once."""

    batch_id: str
    X: FloatArray
    y: FloatArray


@dataclass(frozen=True)
class RecomputeRequest:
    """One recompute: the window to train on and how."""

    request_id: str
    X: FloatArray
    y: FloatArray
    task: str
    loss: str
    C: float | str
    reason: str
    spec: TrainSpec
    stats: dict[str, Any] = field(default_factory=dict)
    reset_rows: int | None = None
    initial: bool = False
    #: Re-tune the edge learner (``druid-tune``, ``periodic-tune``) on the history, after ``history``: the
    #: label batches not forwarded yet, posted first so the search sees every label learned so far.
    retune: RetuneRequest | None = None
    history: tuple[LabelBatch, ...] = ()
    #: C ≥ 3 classes: the labels are the codes 0..C−1 and the cloud trains one-vs-rest (None: ±1).
    n_classes: int | None = None
    #: The classes' names in code order (a device with ``classes``), written into the model document.
    class_names: tuple[str, ...] | None = None

    @property
    def learner(self) -> str:
        """The training API's learner name: the strategy's, or the linear learner of the loss."""
        return self.spec.learner_for(self.loss)

    def header(self) -> WindowHeader:
        """The wire header the cloud trains this request by (posted with the window; the in-process
        trainer passes it to the same training function)."""
        header = self.spec.header(
            self.task,
            self.loss,
            self.reason,
            C=self.C,
            stats=self.stats,
            request_id=self.request_id,
            reset_rows=self.reset_rows,
            n_classes=self.n_classes,
            class_names=self.class_names,
        )
        return header if self.retune is None else header.model_copy(update={"retune": self.retune})


@dataclass(frozen=True)
class TrainedModel:
    """A model version the cloud stored for this device."""

    request_id: str
    version: int
    model: BatchModel
    document: dict[str, Any]
    train_ms: float
    bytes_up: int
    bytes_down: int
    replayed: bool = False
    #: A re-tuning recompute's edge parameters (``EdgeTune.as_document()``), else None.
    edge: dict[str, Any] | None = None


@dataclass(frozen=True)
class RecomputeFailure:
    """One failed attempt of a request. ``final``: the cloud refused for good (a 4xx other than 401, 403,
    408, 429); ``unauthorized``: the cloud rejected the device's credential (401/403), retried slowly."""

    request_id: str
    attempt: int
    reason: str
    final: bool = False
    unauthorized: bool = False
    retry_in_s: float | None = None


#: A session's trainer: returns the model when it can answer at once (the sync mode's bounded wait),
#: None when the answer will come later through the session's ``install``.
Trainer = Callable[[RecomputeRequest], TrainedModel | None]
