"""The mailbox between a re-tuning strategy's edge learner and the cloud that re-tunes it.

The edge side appends every label it learns to the outbox; whoever carries labels to the cloud (the
evaluator's in-process trainer, the agent's label forwarder) drains it in batches. A re-tuning recompute
posts the chosen hyper-parameters to the inbox; the learner applies them when the recompute's model is
installed. Pure data: no threads, no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from edgedrift.loop import window_upload_bytes
from edgedrift.models.losses import FloatArray

__all__ = ["EdgeTune", "TuneChannel"]


@dataclass(frozen=True)
class EdgeTune:
    """What a re-tuning recompute ships to the edge besides the batch model.

    Parameters
    ----------
    params
        The edge learner's hyper-parameters (``scale_alpha``, ``lr``, ``forgetting``, ``prior``, ...).
    score
        The chosen configuration's prequential score on the cloud's history.
    window
        Labels the batch model was refitted on (chosen by prequential validation).
    anchor
        Whether the re-tuned learner continues from the batch model (else from its warm-up on the edge's
        window alone); the cloud decides it on the end of the history.
    """

    params: dict[str, float]
    score: float = float("nan")
    window: int = 0
    anchor: bool = True

    def as_document(self) -> dict[str, object]:
        """The JSON form (the training API's ``edge`` field)."""
        return {
            "params": dict(self.params),
            "score": self.score,
            "window": self.window,
            "anchor": self.anchor,
        }

    @classmethod
    def from_document(cls, doc: dict[str, object]) -> EdgeTune:
        """Inverse of :meth:`as_document`.

        Examples
        --------
        >>> t = EdgeTune({"lr": 0.1}, 0.9, 500, anchor=False)
        >>> EdgeTune.from_document(t.as_document()) == t
        True
        """
        raw = doc.get("params")
        if not isinstance(raw, dict):
            raise ValueError("edge.params must be an object of numbers")
        score = doc.get("score")
        window = doc.get("window", 0)
        return cls(
            {str(k): float(v) for k, v in raw.items()},
            float(score) if isinstance(score, int | float) else float("nan"),
            int(window) if isinstance(window, int | float) else 0,
            bool(doc.get("anchor", True)),
        )


@dataclass
class TuneChannel:
    """Labels not yet forwarded (outbox) and the re-tuning result not yet applied (inbox).

    Examples
    --------
    >>> ch = TuneChannel(n_features=2)
    >>> ch.record(np.array([1.0, 2.0]), 1.0)
    >>> ch.record(np.array([3.0, 4.0]), -1.0)
    >>> X, y = ch.drain()
    >>> X.shape, y.tolist(), ch.pending
    ((2, 2), [1.0, -1.0], 0)
    """

    n_features: int
    inbox: EdgeTune | None = None
    #: The edge learner's parameters now (what a re-tuning recompute keeps unless it finds better).
    current: dict[str, float] | None = None
    #: Bytes of the label batches drained so far (the compact binary body of each batch).
    bytes_forwarded: int = 0
    #: Bytes of the re-tuning results posted so far (their JSON form).
    bytes_posted: int = 0
    _X: list[FloatArray] = field(default_factory=list)
    _y: list[float] = field(default_factory=list)

    @property
    def pending(self) -> int:
        """Labels recorded and not yet drained."""
        return len(self._y)

    def record(self, x: FloatArray, y: float) -> None:
        """One label the edge learned."""
        self._X.append(np.array(x, dtype=np.float64))
        self._y.append(float(y))

    def record_many(self, X: FloatArray, y: FloatArray) -> None:
        """A mini-batch of labels the edge learned."""
        for xi, yi in zip(X, y, strict=True):
            self.record(xi, float(yi))

    def drain(self) -> tuple[FloatArray, FloatArray]:
        """Everything recorded since the last drain, oldest first; the outbox is emptied."""
        X = np.array(self._X, dtype=np.float64).reshape(-1, self.n_features)
        y = np.array(self._y, dtype=np.float64)
        self._X, self._y = [], []
        if len(y):
            self.bytes_forwarded += window_upload_bytes(len(y), self.n_features)
        return X, y

    def post(self, tune: EdgeTune) -> None:
        """The cloud's re-tuning result, applied when the recompute's model is installed."""
        self.inbox = tune
        self.bytes_posted += len(json.dumps(tune.as_document()))

    def take(self) -> EdgeTune | None:
        """The re-tuning result to apply now (once)."""
        tune, self.inbox = self.inbox, None
        return tune
