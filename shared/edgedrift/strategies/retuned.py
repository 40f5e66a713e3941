"""Edge learners whose every hyper-parameter is tuned: on the first window (the strong edge-only baseline)
and again by the cloud at each recompute, over the device's labeled history (``druid-tune``,
``periodic-tune``).

The grids are the same for both, so a gain of a re-tuning strategy over the baseline is the cloud's (more
data, later data), not the grid's. The search itself runs in the cloud
(:mod:`edgedrift.training.retune`); the edge only applies what it is sent (:class:`RetunedLearner`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from edgedrift.labels import is_multiclass
from edgedrift.learners import AdaptiveSGD, ForgettingNewton, OneVsRest
from edgedrift.learners.base import OnlineLearner
from edgedrift.loop import EdgeLoop
from edgedrift.models.losses import FloatArray, Task
from edgedrift.monitors import DruidMonitor, Monitor, NeverMonitor, PeriodicMonitor
from edgedrift.strategies.channel import TuneChannel
from edgedrift.strategies.context import Context
from edgedrift.strategies.tuning import TUNE_LEVEL, evidence_choice, prequential_scores, warmup_labels
from edgedrift.window import CountWindow, TimeWindow

__all__ = [
    "EDGE_DEFAULTS",
    "EDGE_GRIDS",
    "RetunedLearner",
    "edge_learner",
    "first_window_params",
    "grid_points",
    "grid_scores",
    "tune_all",
]

#: Every hyper-parameter of each tunable edge learner, the EW scaler's rate included, and its grid.
EDGE_GRIDS: dict[str, dict[str, tuple[float, ...]]] = {
    "rmsprop": {"scale_alpha": (0.01, 0.03, 0.1, 0.3), "lr": (0.03, 0.1, 0.3, 1.0)},
    "newton": {
        "scale_alpha": (0.01, 0.03, 0.1, 0.3),
        "forgetting": (0.9, 0.95, 0.98, 0.995),
        "prior": (0.1, 1.0),
    },
}


#: The value :func:`edge_learner` gives a hyper-parameter the configuration does not name.
EDGE_DEFAULTS: dict[str, dict[str, float]] = {
    "rmsprop": {"scale_alpha": 0.01, "lr": 0.3},
    "newton": {"scale_alpha": 0.01, "forgetting": 0.9, "prior": 0.1},
}


def edge_learner(
    name: str, n_features: int, loss: str, task: Task, params: Mapping[str, float], n_classes: int = 2
) -> OnlineLearner:
    """A fresh tunable edge learner with the given hyper-parameters (missing ones: the grid's default);
    one-vs-rest over ``n_classes`` copies for C ≥ 3 classes.

    Examples
    --------
    >>> newton = edge_learner("newton", 3, "logistic", "classification", {"forgetting": 0.98})
    >>> newton.forgetting, newton.prior, newton.scale_alpha
    (0.98, 0.1, 0.01)
    """
    if name not in EDGE_DEFAULTS:
        raise ValueError(f"no tunable edge learner {name!r}; known: {', '.join(EDGE_GRIDS)}")
    p = {**EDGE_DEFAULTS[name], **params}
    alpha = float(p["scale_alpha"])
    learner: AdaptiveSGD | ForgettingNewton
    if name == "rmsprop":
        learner = AdaptiveSGD(n_features, loss, lr=float(p["lr"]), scale_alpha=alpha, task=task)
    else:
        learner = ForgettingNewton(
            n_features,
            loss,
            forgetting=float(p["forgetting"]),
            prior=float(p["prior"]),
            scale_alpha=alpha,
            task=task,
        )
    return OneVsRest(learner, n_classes) if task == "classification" and is_multiclass(n_classes) else learner


def grid_points(name: str) -> list[dict[str, float]]:
    """Every configuration of the learner's grid, in a fixed order (ties go to the first).

    Examples
    --------
    >>> len(grid_points("rmsprop")), grid_points("rmsprop")[0]
    (16, {'scale_alpha': 0.01, 'lr': 0.03})
    """
    grid = EDGE_GRIDS[name]
    return [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]


def grid_scores(
    name: str,
    n_features: int,
    loss: str,
    task: Task,
    X: FloatArray,
    y: FloatArray,
    n_classes: int = 2,
    checkpoint: Callable[[], None] | None = None,
) -> list[tuple[dict[str, float], FloatArray]]:
    """Every grid point with the per-sample prequential scores of a fresh learner over (X, y).

    ``checkpoint`` is called before each grid point's replay: a caller stops the search by raising
    from it (the cloud cancels a job whose client has gone)."""
    scored = []
    for params in grid_points(name):
        if checkpoint is not None:
            checkpoint()
        learner = edge_learner(name, n_features, loss, task, params, n_classes)
        scored.append((params, prequential_scores(learner, X, y)))
    return scored


def _position(scored: list[tuple[dict[str, float], FloatArray]], params: Mapping[str, float]) -> int | None:
    """Where ``params`` sit in a scored grid (None: not a grid point)."""
    return next((i for i, (p, _) in enumerate(scored) if p == dict(params)), None)


def tune_all(
    name: str,
    n_features: int,
    loss: str,
    task: Task,
    X: FloatArray,
    y: FloatArray,
    current: Mapping[str, float] | None = None,
    level: float = TUNE_LEVEL,
    checkpoint: Callable[[], None] | None = None,
) -> tuple[dict[str, float], float]:
    """The grid point with the best prequential score of a fresh learner over (X, y), and that score.

    With the edge's ``current`` parameters (a grid point), the best replaces them only on clear evidence:
    choosing the best on the other blocks of 20 labels beats ``current`` on the held-out block, by a
    one-sided sign test at ``level`` (:func:`~edgedrift.strategies.tuning.evidence_choice`). A change
    costs the edge its learner's state (rebuilt and warmed on its window), and a choice made on noise
    can do worse than the parameters it replaces. ``checkpoint`` as for :func:`grid_scores`.
    """
    scored = grid_scores(name, n_features, loss, task, X, y, checkpoint=checkpoint)
    means = [float(s.mean()) if len(s) else 0.0 for _, s in scored]
    here = None if current is None else _position(scored, current)
    pick = (
        int(np.argmax(means)) if here is None else evidence_choice([s for _, s in scored], here, level=level)
    )
    return scored[pick][0], means[pick]


def first_window_params(name: str, ctx: Context) -> dict[str, float]:
    """All hyper-parameters tuned on the first window's labels only (remembered in the context): the best
    grid point replaces the learner's defaults (:data:`EDGE_DEFAULTS`) only on clear evidence over
    held-out blocks of the window (:func:`~edgedrift.strategies.tuning.evidence_choice`)."""

    def tune() -> dict[str, float]:
        scored = grid_scores(name, ctx.n_features, ctx.loss, ctx.task, ctx.X0, ctx.y0, ctx.n_classes)
        here = _position(scored, EDGE_DEFAULTS[name])
        assert here is not None, f"{name}'s defaults are a point of its grid"
        warmup = warmup_labels(ctx.n_classes)
        return scored[evidence_choice([s for _, s in scored], here, warmup=warmup)][0]

    return ctx.first_window(f"{name}+all", tune)


class RetunedLearner:
    """The edge side of a re-tuning strategy: a tunable learner that forwards what it learns and, when a
    recompute's model is installed, applies the hyper-parameters the cloud chose.

    On new parameters the learner is rebuilt and warmed on the window the edge holds (a few hundred
    updates), then anchored on the batch model like every DRUiD learner.
    """

    def __init__(
        self,
        name: str,
        ctx: Context,
        params: Mapping[str, float],
        channel: TuneChannel,
        window: CountWindow | TimeWindow,
    ) -> None:
        self.name = name
        self._shape = (ctx.n_features, ctx.loss, ctx.task)
        self.params = dict(params)
        self.channel = channel
        channel.current = dict(self.params)
        self.window = window
        self.inner = edge_learner(name, *self._shape, self.params)
        self.n_learned = 0
        self.retunes = 0

    @property
    def task(self) -> Task:
        return self.inner.task

    @property
    def order(self) -> str:
        """The inner learner's update cost (``O(d)``, ``O(d^2)``)."""
        return str(getattr(self.inner, "order", "other"))

    def predict_one(self, x: FloatArray) -> float:
        return self.inner.predict_one(x)

    def predict_many(self, X: FloatArray) -> FloatArray:
        return self.inner.predict_many(X)

    def predict_rows(self, X: FloatArray) -> FloatArray:
        """The inner learner's :meth:`~edgedrift.learners.IncrementalLearner.predict_rows` (bit for bit
        ``predict_one`` of every row), or ``predict_one`` row by row."""
        rows = getattr(self.inner, "predict_rows", None)
        return rows(X) if rows is not None else np.array([self.inner.predict_one(x) for x in X])

    def learn_one(self, x: FloatArray, y: float) -> None:
        self.inner.learn_one(x, y)
        self.channel.record(x, y)
        self.n_learned += 1

    def learn_many(self, X: FloatArray, y: FloatArray) -> None:
        self.inner.learn_many(X, y)
        self.channel.record_many(X, y)
        self.n_learned += len(y)

    def anchor(self, model: Any) -> None:
        """Apply the cloud's parameters if a recompute sent new ones (rebuild, warm on the window) and
        continue from the batch model unless the cloud found that anchoring does not pay. Parameters
        unchanged: the learner keeps its state and anchors, as ``druid`` does."""
        tune = self.channel.take()
        if tune is not None and tune.params and dict(tune.params) != self.params:
            self.params = dict(tune.params)
            self.channel.current = dict(self.params)
            fresh = edge_learner(self.name, *self._shape, self.params)
            X, y = self.window.contents()
            for xi, yi in zip(X, y, strict=True):
                fresh.learn_one(xi, float(yi))
            self.inner = fresh
            self.retunes += 1
            if not tune.anchor:
                return
        self.inner.anchor(model)

    def clone(self) -> OnlineLearner:
        return self.inner.clone()


def _tuned_loop(ctx: Context, monitor: Monitor, learner: str) -> EdgeLoop:
    """The loop of ``druid-tune`` / ``periodic-tune``: the learner starts from its first-window tuning and
    the cloud re-tunes it at every recompute."""
    if ctx.retune is None:
        raise ValueError("a re-tuning strategy needs a context with a retune factory (the cloud's search)")
    window = CountWindow(ctx.window_labels, ctx.n_features)
    channel = TuneChannel(ctx.n_features)
    edge = RetunedLearner(learner, ctx, first_window_params(learner, ctx), channel, window)
    return EdgeLoop(window, monitor, ctx.retune(channel, learner), edge, "incremental", guard=ctx.guard)


def druid_tune(learner: str) -> Callable[[Context, float | None], EdgeLoop]:
    """DRUiD decides when; each recompute also re-tunes the learner on the device's history."""

    def build(ctx: Context, alpha: float | None) -> EdgeLoop:
        assert alpha is not None
        return _tuned_loop(ctx, DruidMonitor(alpha=float(alpha), t_n=ctx.window_labels), learner)

    return build


def periodic_tune(learner: str) -> Callable[[Context, float | None], EdgeLoop]:
    """A re-tuning recompute every P labels."""

    def build(ctx: Context, period: float | None) -> EdgeLoop:
        assert period is not None
        return _tuned_loop(ctx, PeriodicMonitor(int(period)), learner)

    return build


def strong_baseline(learner: str) -> Callable[[Context, float | None], EdgeLoop]:
    """The learner alone, every hyper-parameter tuned on the first window (0 recomputes)."""

    def build(ctx: Context, _: float | None) -> EdgeLoop:
        params = first_window_params(learner, ctx)
        edge = edge_learner(learner, ctx.n_features, ctx.loss, ctx.task, params, ctx.n_classes)
        window = CountWindow(ctx.window_labels, ctx.n_features)
        return EdgeLoop(window, NeverMonitor(), ctx.recompute, edge, "incremental", guard=ctx.guard)

    return build
