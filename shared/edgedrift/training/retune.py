"""The cloud's side of a re-tuning recompute: a device's bounded labeled history, the batch window length
chosen by prequential validation on it, and the edge learner's hyper-parameters re-tuned by prequential
replay over its recent part.

A device cannot afford this search (dozens of replays of thousands of labels); the cloud runs it at each
recompute, on labels it has already seen, and ships the model with the parameters
(:class:`~edgedrift.strategies.channel.EdgeTune`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray, Task
from edgedrift.strategies.channel import EdgeTune, TuneChannel
from edgedrift.strategies.retuned import edge_learner, tune_all
from edgedrift.strategies.tuning import prequential_score

__all__ = ["HistoryRetuner", "LabelHistory", "choose_window", "retune_on_history"]

#: Window lengths (labels) the batch refit chooses from, besides the loop's own window.
WINDOW_LENGTHS = (500, 1000, 2000, 5000, 10000)


class LabelHistory:
    """A device's labeled history: the last ``capacity`` labels, kept as chunks (one per forwarded
    batch), not a row per sample.

    Examples
    --------
    >>> h = LabelHistory(2, capacity=5)
    >>> h.extend(np.zeros((3, 2)), np.ones(3))
    >>> h.extend(np.ones((4, 2)), -np.ones(4))
    >>> X, y = h.arrays()
    >>> len(h), y.tolist(), h.nbytes
    (5, [1.0, -1.0, -1.0, -1.0, -1.0], 120)
    """

    def __init__(self, n_features: int, capacity: int = 20000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.n_features = n_features
        self.capacity = capacity
        self._chunks: deque[tuple[FloatArray, FloatArray]] = deque()
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        """Bytes the history holds (float64 features and labels)."""
        return sum(X.nbytes + y.nbytes for X, y in self._chunks)

    def extend(self, X: FloatArray, y: FloatArray) -> None:
        """Append a batch; the oldest labels beyond the capacity are dropped."""
        if len(y) == 0:
            return
        if X.shape != (len(y), self.n_features):
            raise ValueError(f"history batch has shape {X.shape}, expected ({len(y)}, {self.n_features})")
        self._chunks.append((np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)))
        self._n += len(y)
        while self._n > self.capacity:
            X0, y0 = self._chunks[0]
            extra = self._n - self.capacity
            if extra >= len(y0):
                self._chunks.popleft()
                self._n -= len(y0)
            else:
                self._chunks[0] = (X0[extra:], y0[extra:])
                self._n -= extra

    def arrays(self) -> tuple[FloatArray, FloatArray]:
        """The history as two arrays, oldest first."""
        if not self._chunks:
            return np.zeros((0, self.n_features)), np.zeros(0)
        return (
            np.concatenate([X for X, _ in self._chunks]),
            np.concatenate([y for _, y in self._chunks]),
        )


def _score(model: BatchModel, X: FloatArray, y: FloatArray, task: Task) -> float:
    pred = model.predict(X)
    if task == "classification":
        return float(np.mean(pred == y))
    return -float(np.mean((pred - y) ** 2))


def choose_window(
    X: FloatArray,
    y: FloatArray,
    trainer: Callable[[FloatArray, FloatArray], BatchModel | None],
    lengths: Sequence[int],
    task: Task,
    folds: int = 5,
    block: int = 100,
    checkpoint: Callable[[], None] | None = None,
) -> tuple[int, dict[int, float]]:
    """The window length (labels) whose model best predicts the next ``block`` labels, averaged over the
    last ``folds`` blocks of the history (prequential validation); ties go to the shortest.

    A length is a candidate when the history holds it before every validation block; with too short a
    history the shortest length is returned unscored. ``checkpoint`` is called before each fit (raise
    from it to stop).
    """
    n = len(y)
    lengths = sorted(set(int(v) for v in lengths))
    scores: dict[int, float] = {}
    for length in lengths:
        if length + folds * block > n:
            continue
        total = 0.0
        for f in range(1, folds + 1):
            end = n - (f - 1) * block
            start = end - block
            if checkpoint is not None:
                checkpoint()
            model = trainer(X[start - length : start], y[start - length : start])
            if model is None:
                raise RuntimeError("window validation needs a synchronous trainer")
            total += _score(model, X[start:end], y[start:end], task)
        scores[length] = total / folds
    if not scores:
        return lengths[0], scores
    best = max(scores.values())
    return min(length for length, s in scores.items() if s == best), scores


@dataclass
class HistoryRetuner:
    """A re-tuning recompute for one device: ``(X_window, y_window) -> model``, with the parameters left
    in the channel's inbox.

    The labels the edge forwarded are read from the channel into the history first, so the search only
    sees labels the device has already learned.
    """

    channel: TuneChannel
    learner: str
    trainer: Callable[[FloatArray, FloatArray], BatchModel | None]
    loss: str
    task: Task
    capacity: int = 20000
    #: Labels of the most recent history the learner's replay uses.
    recent: int = 2000
    #: Labels the edge's window holds (what the edge warms a re-tuned learner on).
    window_labels: int = 200
    #: Labels at the end of the history that decide whether the edge anchors on the batch model.
    holdout: int = 500
    history: LabelHistory = field(init=False)
    #: CPU seconds of each recompute.
    cpu_s: list[float] = field(default_factory=list)
    tunes: list[EdgeTune] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.history = LabelHistory(self.channel.n_features, self.capacity)

    def __call__(self, X: FloatArray, y: FloatArray, **_: object) -> BatchModel:
        t0 = time.process_time()
        self.history.extend(*self.channel.drain())
        Xh, yh = self.history.arrays()
        model, tune = retune_on_history(
            Xh, yh, X, y, self.trainer, self.learner, self.loss, self.task,
            recent=self.recent, window_labels=self.window_labels, holdout=self.holdout,
            current=self.channel.current,
        )  # fmt: skip
        self.channel.post(tune)
        self.tunes.append(tune)
        self.cpu_s.append(time.process_time() - t0)
        return model

    def for_channel(self, channel: TuneChannel) -> HistoryRetuner:
        """The same cloud state serving another channel: what a restored device (a snapshot of the edge,
        a new channel object) talks to. The history is shared as it is now; later labels go to each."""
        other = HistoryRetuner(
            channel, self.learner, self.trainer, self.loss, self.task, self.capacity, self.recent,
            self.window_labels, self.holdout,
        )  # fmt: skip
        X, y = self.history.arrays()
        other.history.extend(X.copy(), y.copy())
        return other


def retune_on_history(
    Xh: FloatArray,
    yh: FloatArray,
    X: FloatArray,
    y: FloatArray,
    trainer: Callable[[FloatArray, FloatArray], BatchModel | None],
    learner: str,
    loss: str,
    task: Task,
    *,
    recent: int = 2000,
    window_labels: int = 200,
    holdout: int = 500,
    current: Mapping[str, float] | None = None,
    checkpoint: Callable[[], None] | None = None,
) -> tuple[BatchModel, EdgeTune]:
    """One re-tuning recompute over a device's history (Xh, yh; the window X, y when the history is
    shorter): the batch model refitted on the validated window length and the edge parameters, which
    stay the edge's ``current`` ones unless the search finds clearly better (:func:`tune_all`).

    The evaluator (:class:`HistoryRetuner`) and the cloud trainer both call this, so a deployed
    re-tuning recompute equals the offline one given the same history. ``checkpoint`` is called
    between the search's steps (each fit, each grid point's replay): the cloud raises from it to
    cancel a job whose client has gone.
    """
    if len(yh) < len(y):
        Xh, yh = X, y
    lengths = (len(y), *WINDOW_LENGTHS)
    length, _scores = choose_window(Xh, yh, trainer, lengths, task, checkpoint=checkpoint)
    model = trainer(Xh[-length:], yh[-length:])
    if model is None:
        raise RuntimeError("the re-tuning recompute needs a synchronous trainer")
    part = slice(max(0, len(yh) - recent), len(yh))
    params, score = tune_all(
        learner, Xh.shape[1], loss, task, Xh[part], yh[part], current, checkpoint=checkpoint
    )
    if current is not None and params == dict(current):  # the edge keeps its learner and anchors
        return model, EdgeTune(params, float(score), min(length, len(yh)), True)
    if checkpoint is not None:
        checkpoint()
    anchor = _anchor_helps(Xh, yh, trainer, learner, loss, task, length, params, window_labels, holdout)
    return model, EdgeTune(params, float(score), min(length, len(yh)), anchor)


def _anchor_helps(
    X: FloatArray,
    y: FloatArray,
    trainer: Callable[[FloatArray, FloatArray], BatchModel | None],
    name: str,
    loss: str,
    task: Task,
    length: int,
    params: dict[str, float],
    window_labels: int,
    holdout: int,
) -> bool:
    """Whether the edge should continue from the batch model (True) or from the re-tuned learner warmed
    on its window alone: both are replayed as the edge would run them over the last ``holdout`` labels,
    from the state the history had before them. Too short a history: anchor (DRUiD's default)."""
    n = len(y)
    cut = n - holdout
    if cut < window_labels or holdout < 1:
        return True
    Xp, yp = X[:cut], y[:cut]
    model = trainer(Xp[-length:], yp[-length:])
    if model is None:
        raise RuntimeError("the re-tuning recompute needs a synchronous trainer")
    scores = []
    for anchor in (True, False):
        learner = edge_learner(name, X.shape[1], loss, task, params)
        for xi, yi in zip(Xp[-window_labels:], yp[-window_labels:], strict=True):
            learner.learn_one(xi, float(yi))
        if anchor:
            learner.anchor(model)
        scores.append(prequential_score(learner, X[cut:], y[cut:]))
    return bool(scores[0] >= scores[1])
