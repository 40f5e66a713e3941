"""What a strategy is built from: the stream's shape, the batch trainer and the first window."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field

from edgedrift.guard import RangeGuard
from edgedrift.loop import Recompute
from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray, Task
from edgedrift.strategies.channel import TuneChannel

__all__ = ["Context", "RetuneFactory"]

#: The cloud side of a re-tuning strategy: (channel, learner name) -> the recompute the loop calls. It
#: reads the labels the edge forwarded from the channel and posts the parameters it chose back.
RetuneFactory = Callable[[TuneChannel, str], Recompute]


@dataclass
class Context:
    """Everything a strategy may use: the stream's shape and what was learned on the first window.

    Parameters
    ----------
    n_features
        Number of features d.
    task
        ``"classification"`` (labels ±1, or the codes 0..C−1 with ``n_classes`` = C) or ``"regression"``.
    loss
        The loss of Table 1 the linear models and learners use.
    window_labels
        Labeled samples in the window (the DRUiD protocol's 200).
    C
        The batch objective's C, tuned on the first window.
    recompute
        The batch trainer (in process for the evaluator, the cloud over HTTP for the edge agent).
    X0, y0
        The first window's labeled samples.
    learner_params
        Tuned learner hyper-parameters by learner name, filled on first use
        (:func:`edgedrift.strategies.tuning.make_learner`).
    initial
        Trains the first model when it differs from ``recompute`` (e.g. without rebalancing); None:
        ``recompute`` does.
    guard
        Keeps glitched samples out of learning (fitted on X0 by :func:`edgedrift.guard.screen_first_window`).
    retune
        The re-tuning recompute of ``druid-tune`` / ``periodic-tune`` (in process for the evaluator, the
        cloud for the agent); None: those strategies cannot be built.
    n_classes
        The classes of a classification stream: 2 (labels ±1) or C ≥ 3 (labels the codes 0..C−1; the
        linear learners run one-vs-rest and the batch trainer must train C columns). Ignored for regression.
    tuned
        First-window tunings shared by the contexts of the same first window (None: not shared): the
        evaluator builds one context per run, and every strategy and grid point of a label offset would
        otherwise repeat the same searches on the same labels (:meth:`first_window`).

    Examples
    --------
    >>> import numpy as np
    >>> from edgedrift.training.linear import LinearTrainer
    >>> X0 = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, -1.0], [-1.0, 0.0]])
    >>> y0 = np.array([1.0, 1.0, -1.0, -1.0])
    >>> ctx = Context(2, "classification", "logistic", 4, 10.0, LinearTrainer("logistic", 10.0), X0, y0)
    >>> ctx.initial_model().predict(X0).tolist()
    [1.0, 1.0, -1.0, -1.0]
    """

    n_features: int
    task: Task
    loss: str
    window_labels: int
    C: float
    recompute: Recompute
    X0: FloatArray
    y0: FloatArray
    learner_params: dict[str, dict[str, float]] = field(default_factory=dict)
    initial: Recompute | None = None
    guard: RangeGuard | None = None
    retune: RetuneFactory | None = None
    n_classes: int = 2
    tuned: MutableMapping[str, dict[str, float]] | None = None

    def first_window(self, key: str, tune: Callable[[], dict[str, float]]) -> dict[str, float]:
        """``learner_params[key]``, tuned on the first window by ``tune()`` once: taken from (and left in)
        :attr:`tuned` when the contexts of this first window share their tunings. The search depends on
        the first window's labels and the stream's shape only, so a shared result is the one ``tune()``
        would give."""
        if key not in self.learner_params:
            shared = self.tuned
            if shared is not None and key in shared:
                self.learner_params[key] = dict(shared[key])
            else:
                self.learner_params[key] = tune()
                if shared is not None:
                    shared[key] = dict(self.learner_params[key])
        return self.learner_params[key]

    def initial_model(self) -> BatchModel:
        """The first batch model, trained on the first window (not counted as a recompute)."""
        train = self.recompute if self.initial is None else self.initial
        model = train(self.X0, self.y0)
        if model is None:
            raise RuntimeError("the initial model needs a trainer that answers synchronously")
        return model
